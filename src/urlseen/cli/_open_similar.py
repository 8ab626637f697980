"""`urlseen dedup --filter similar`: open the similarity filter a dedup run asked for."""

from __future__ import annotations

from pathlib import Path

import click

from urlseen.cli._state import checked, echoing_warnings
from urlseen.similarity.filter import SimilarityFilter
from urlseen.stores.mmapfile import UncleanShutdownWarning

DEFAULT_SIMILAR_ERROR_RATE = 0.01


def open_similar(
    ctx: click.Context,
    state: str | None,
    capacity: int,
    error_rate: float | None,
    mode: str,
    index: str,
    url_db: str | None,
) -> SimilarityFilter:
    """The filter: in memory, or the state file (created with these parameters if missing).

    Keys reach it canonicalized by the dedup job already (or raw, with --canonicalize none),
    so it does not canonicalize again. An explicit option that differs from an existing state
    file's own parameter is a usage error.
    """
    rate = DEFAULT_SIMILAR_ERROR_RATE if error_rate is None else error_rate
    if mode == "composite" and index != "shared":
        raise click.UsageError("--similarity-index applies to the patent and exact4 modes")
    if state is None:
        return SimilarityFilter(
            capacity, rate, mode=mode, index=index, canonicalize="none", url_db=url_db
        )
    if Path(state).is_dir():
        raise click.UsageError(f"--state {state} is a folder: a similar filter's state is a file")
    if not Path(state).exists():
        return SimilarityFilter.create(
            state, capacity, rate, mode=mode, index=index, canonicalize="none", url_db=url_db
        )
    seen = echoing_warnings(
        lambda: SimilarityFilter.open(state, url_db=url_db), UncleanShutdownWarning
    )
    stats = seen.stats()
    stored = {
        "capacity": stats.capacity,
        "error_rate": stats.error_rate,
        "similarity_mode": stats.details["mode"],
        "similarity_index": stats.details["index"],
    }
    given = {
        "capacity": capacity,
        "error_rate": rate,
        "similarity_mode": mode,
        "similarity_index": index,
    }
    return checked(ctx, seen, given, stored, "state file")
