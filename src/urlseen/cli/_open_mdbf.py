"""`urlseen dedup --filter mdbf|rotating`: open seed B's multi-dimensional filter (a state file)
or seed C's rotating filter (a state folder) the way a dedup run asked for."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TypeVar

import click

from urlseen.filters.mdbf import MultiDimensionalBloomFilter
from urlseen.filters.rotating import MANIFEST, RotatingBloomFilter

T = TypeVar("T")


def _echoing_warnings(make: Callable[[], T]) -> T:
    """Run make() and print its warnings (QueryAnyWarning, unclean shutdown) on stderr."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        made = make()
    for warning in caught:
        click.echo(f"warning: {warning.message}", err=True)
    return made


def _check_given(
    ctx: click.Context, given: Mapping[str, object], stored: Mapping[str, object], what: str
) -> None:
    """An explicit option that contradicts an existing state's parameters is a usage error."""
    for name, value in given.items():
        explicit = ctx.get_parameter_source(name) is click.core.ParameterSource.COMMANDLINE
        if explicit and value != stored[name]:
            raise click.UsageError(
                f"--{name.replace('_', '-')} {value} differs from the {what}'s {stored[name]}; "
                f"a {what} keeps the parameters it was created with"
            )


def open_mdbf(
    ctx: click.Context,
    state: str | None,
    capacity: int,
    error_rate: float,
    groups: int | None,
    query: str,
) -> MultiDimensionalBloomFilter:
    """In memory, or the state file (created with these parameters if it is missing)."""
    if state is None:
        return _echoing_warnings(
            lambda: MultiDimensionalBloomFilter(capacity, error_rate, groups=groups, query=query)
        )
    if Path(state).is_dir():
        raise click.UsageError(f"--state {state} is a folder: an mdbf filter's state is a file")
    if not Path(state).exists():
        return _echoing_warnings(
            lambda: MultiDimensionalBloomFilter.create(
                state, capacity, error_rate, groups=groups, query=query
            )
        )
    seen = _echoing_warnings(lambda: MultiDimensionalBloomFilter.open(state))
    stored = {
        "capacity": seen.capacity,
        "error_rate": seen.error_rate,
        "groups": seen.size.groups,
        "query": seen.query,
    }
    given = {"capacity": capacity, "error_rate": error_rate, "groups": groups, "query": query}
    try:
        _check_given(ctx, given, stored, "state file")
    except click.UsageError:
        seen.close()
        raise
    return seen


def open_rotating(
    ctx: click.Context,
    state: str | None,
    capacity: int,
    error_rate: float,
    generations: int,
    window: float | None,
    layout: str,
) -> RotatingBloomFilter:
    """In memory, or the state folder (created with these parameters if it holds none)."""
    if state is None:
        return RotatingBloomFilter(
            capacity, error_rate, generations=generations, window=window, layout=layout
        )
    folder = Path(state)
    if folder.exists() and not folder.is_dir():
        raise click.UsageError(f"--state {state} is a file: --filter rotating keeps a folder")
    if not (folder / MANIFEST).exists():
        return RotatingBloomFilter.create(
            folder, capacity, error_rate, generations=generations, window=window, layout=layout
        )
    seen = _echoing_warnings(lambda: RotatingBloomFilter.open(folder))
    details = seen.stats().details
    stored = {
        "capacity": seen.capacity,
        "error_rate": seen.error_rate,
        "generations": details["generations"],
        "window": details["window"],
    }
    given = {
        "capacity": capacity,
        "error_rate": error_rate,
        "generations": generations,
        "window": window,
    }
    try:
        _check_given(ctx, given, stored, "state")
    except click.UsageError:
        seen.close()
        raise
    return seen
