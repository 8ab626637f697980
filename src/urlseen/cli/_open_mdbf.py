"""`urlseen dedup --filter mdbf|rotating`: open seed B's multi-dimensional filter (a state file)
or seed C's rotating filter (a state folder) the way a dedup run asked for."""

from __future__ import annotations

from pathlib import Path

import click

from urlseen.cli._state import checked, echoing_warnings
from urlseen.filters.mdbf import MultiDimensionalBloomFilter
from urlseen.filters.rotating import MANIFEST, RotatingBloomFilter


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
        return echoing_warnings(
            lambda: MultiDimensionalBloomFilter(capacity, error_rate, groups=groups, query=query)
        )
    if Path(state).is_dir():
        raise click.UsageError(f"--state {state} is a folder: an mdbf filter's state is a file")
    if not Path(state).exists():
        return echoing_warnings(
            lambda: MultiDimensionalBloomFilter.create(
                state, capacity, error_rate, groups=groups, query=query
            )
        )
    seen = echoing_warnings(lambda: MultiDimensionalBloomFilter.open(state))
    stored = {
        "capacity": seen.capacity,
        "error_rate": seen.error_rate,
        "groups": seen.size.groups,
        "query": seen.query,
    }
    given = {"capacity": capacity, "error_rate": error_rate, "groups": groups, "query": query}
    return checked(ctx, seen, given, stored, "state file")


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
    seen = echoing_warnings(lambda: RotatingBloomFilter.open(folder))
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
    return checked(ctx, seen, given, stored, "state")
