"""How `urlseen dedup` opens existing state (cli/_state.py): explicit options that contradict the
stored parameters are usage errors with one wording for every filter, the state is closed again
when refused, defaults never clash, and warnings raised while opening reach stderr."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from cli_helpers import dedup, invoke
from urlseen.cli._common import flag
from urlseen.errors import ParameterConflict
from urlseen.kinds._openers import Request, checked

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


class _State:
    closed = False

    def close(self) -> None:
        self.closed = True


def _request(**given: object) -> Request:
    top = {name: given.pop(name, None) for name in ("capacity", "error_rate")}
    return Request("bloom", **top, state=None, redis=None, name="", given=given, spell=flag)


def test_only_given_values_are_checked_and_a_refused_state_is_closed() -> None:
    stored = {"capacity": 10, "error_rate": 0.5, "layout": "blocked"}
    kept = _State()
    assert checked(_request(), kept, stored, "state") is kept  # nothing given: no clash
    assert checked(_request(capacity=10, layout="blocked"), kept, stored, "state") is kept
    assert not kept.closed
    refused = _State()
    with pytest.raises(ParameterConflict) as info:
        checked(_request(error_rate=0.1), refused, stored, "shared library", keeper="library")
    assert str(info.value) == (
        "--error-rate 0.1 differs from the shared library's 0.5; "
        "a library keeps the parameters it was created with"
    )
    assert refused.closed
    with pytest.raises(ParameterConflict, match="--layout standard differs"):
        checked(_request(layout="standard"), _State(), stored, "state")


def test_warnings_raised_while_opening_reach_stderr(tmp_path: Path) -> None:
    """A state whose writer did not close it is reported on stderr when it is opened."""
    state = tmp_path / "seen.bloom"
    killed = (  # a writer that dies without closing: the file stays flagged open
        "import os, sys\nfrom urlseen import BloomFilter\n"
        "f = BloomFilter.create(sys.argv[1], capacity=10_000_000, error_rate=1e-6)\n"
        "f.add_many(sys.stdin.read().split())\nos._exit(0)\n"
    )
    subprocess.run([sys.executable, "-c", killed, state], input=URLS, check=True, timeout=60)
    result = dedup("--state", state, input=URLS)
    warning = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    assert len(warning) == 1 and str(state) in warning[0], result.stderr
    assert result.stdout == ""  # its URLs are still seen
