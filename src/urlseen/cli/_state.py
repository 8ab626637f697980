"""How `urlseen dedup` opens existing state: the warnings it raises shown on stderr, and
explicit options that contradict the parameters it was created with refused as usage errors."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from typing import Protocol, TypeVar

import click


class _Closable(Protocol):
    def close(self) -> None: ...


T = TypeVar("T")
C = TypeVar("C", bound=_Closable)


def explicit(ctx: click.Context, name: str) -> bool:
    """Whether the option was given on the command line (not a default)."""
    return ctx.get_parameter_source(name) is click.core.ParameterSource.COMMANDLINE


def echoing_warnings(make: Callable[[], T], category: type[Warning] = Warning) -> T:
    """Run make() and print the warnings of `category` it raised (QueryAnyWarning, an unclean
    shutdown, rebuilt counters) on stderr, each time, as `warning: ...`."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", category)
        made = make()
    for warning in caught:
        click.echo(f"warning: {warning.message}", err=True)
    return made


def check_given(
    ctx: click.Context,
    given: Mapping[str, object],
    stored: Mapping[str, object],
    what: str,
    keeper: str | None = None,
) -> None:
    """An explicit option that contradicts the state's own parameters is a usage error.

    `what` names the state ("the {what}'s"), `keeper` what keeps its parameters (default: what).
    """
    for name, value in given.items():
        if explicit(ctx, name) and value != stored[name]:
            raise click.UsageError(
                f"--{name.replace('_', '-')} {value} differs from the {what}'s "
                f"{stored[name]}; a {keeper or what} keeps the parameters it was created with"
            )


def checked(
    ctx: click.Context,
    seen: C,
    given: Mapping[str, object],
    stored: Mapping[str, object],
    what: str,
) -> C:
    """`seen` if the explicit options agree with its stored parameters; else it is closed and
    the usage error raised (check_given)."""
    try:
        check_given(ctx, given, stored, what)
    except click.UsageError:
        seen.close()
        raise
    return seen
