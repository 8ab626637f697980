"""How `urlseen dedup` opens existing state (cli/_state.py): explicit options that contradict the
stored parameters are usage errors with one wording for every filter, the state is closed again
when refused, defaults never clash, and warnings raised while opening reach stderr."""

from __future__ import annotations

import warnings
from pathlib import Path

import click
import pytest
from click.core import ParameterSource

from cli_helpers import dedup, invoke
from urlseen.cli._state import check_given, checked, echoing_warnings, explicit

URLS = b"".join(b"https://example.com/%d\n" % i for i in range(50))

# filter -> (state path name, what the message calls the state)
STATES = {
    "bloom": ("bloom.urlseen", "state file"),
    "mdbf": ("mdbf.urlseen", "state file"),
    "similar": ("similar.urlseen", "state file"),
    "rotating": ("rotating", "state"),
    "exact": ("exact", "state"),
}


@pytest.mark.parametrize("name", sorted(STATES))
def test_an_explicit_option_that_contradicts_the_state_is_a_usage_error(
    name: str, tmp_path: Path
) -> None:
    state, what = STATES[name]
    path = tmp_path / state
    dedup("--filter", name, "--state", path, "--capacity", "1000", input=URLS)
    clash = invoke("dedup", "--filter", name, "--state", path, "--capacity", "2000", input=URLS)
    assert clash.exit_code == 2, clash.stderr
    assert (
        f"--capacity 2000 differs from the {what}'s 1000; "
        f"a {what} keeps the parameters it was created with"
    ) in clash.stderr
    # Refused state was closed (its writer's lock released); defaults take the stored values.
    again = dedup("--filter", name, "--state", path, input=URLS + b"https://example.com/new\n")
    assert again.stdout == "https://example.com/new\n"


def _context(*given: str) -> click.Context:
    ctx = click.Context(click.Command("t"))
    for name in ("capacity", "error_rate"):
        source = ParameterSource.COMMANDLINE if name in given else ParameterSource.DEFAULT
        ctx.set_parameter_source(name, source)
    return ctx


def test_only_explicit_options_are_checked() -> None:
    stored = {"capacity": 10, "error_rate": 0.5}
    given = {"capacity": 20, "error_rate": 0.1}
    assert explicit(_context("capacity"), "capacity")
    assert not explicit(_context("capacity"), "error_rate")
    check_given(_context(), given, stored, "state")  # defaults never clash
    with pytest.raises(click.UsageError) as info:
        check_given(_context("error_rate"), given, stored, "shared library", keeper="library")
    assert info.value.message == (
        "--error-rate 0.1 differs from the shared library's 0.5; "
        "a library keeps the parameters it was created with"
    )


class _State:
    closed = False

    def close(self) -> None:
        self.closed = True


def test_refused_state_is_closed_and_accepted_state_returned() -> None:
    stored = {"capacity": 10}
    kept = _State()
    assert checked(_context("capacity"), kept, {"capacity": 10}, stored, "state") is kept
    assert not kept.closed
    refused = _State()
    with pytest.raises(click.UsageError):
        checked(_context("capacity"), refused, {"capacity": 11}, stored, "state")
    assert refused.closed


def test_warnings_of_the_category_reach_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    def make() -> int:
        warnings.warn("first", UserWarning, stacklevel=1)
        warnings.warn("second", DeprecationWarning, stacklevel=1)
        return 7

    assert echoing_warnings(make) == 7
    assert capsys.readouterr().err == "warning: first\nwarning: second\n"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the category is shown even where others are not
        assert echoing_warnings(make, UserWarning) == 7
    assert capsys.readouterr().err == "warning: first\n"
