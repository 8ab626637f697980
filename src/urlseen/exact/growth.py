"""Counters that follow what the exact filter holds, when its caller gave no capacity.

A filter made without a capacity starts with counters for START_CAPACITY fingerprints (under a
megabyte) and, once it holds more than they were sized for, is given counters GROWTH times as
large, rebuilt from the library (which holds every fingerprint: the counters are derived data).
Memory and the counter file follow the distinct URLs inserted, not a plan; a rebuild reads each
fingerprint once, so growing from START_CAPACITY to n costs about n / (GROWTH - 1) re-insertions
in all. A filter given a capacity keeps its counters as sized.

Crash safety is the folder's: while a writer has it, the library records no counters in sync,
so a process killed during a growth leaves counters that the next open rebuilds (sized as the
library records, or as the file left behind says). The new counter file is made under a
temporary name and renamed over the old one; one left behind by a kill is removed when the
folder is next opened for writing.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from urlseen.bloom.counting import CountingBloomFilter
from urlseen.exact import folder
from urlseen.exact.library_protocol import FingerprintLibrary
from urlseen.state.mmapfile import MappedFile

START_CAPACITY = 1 << 16
"""Fingerprints the first counters of a growing filter are sized for (~0.5 MB at 4 bits)."""

GROWTH = 8
"""How many times larger each new set of counters is."""


def sizing(
    capacity: int | None,
    error_rate: float,
    counter_bits: int,
    k: int | None,
    counters_per_key: float | None,
) -> folder.Sizing:
    """The constructor's sizing: as given, or (no capacity) the start of a growing one."""
    if capacity is None:
        return folder.Sizing(START_CAPACITY, error_rate, counter_bits, k, counters_per_key, True)
    return folder.Sizing(capacity, error_rate, counter_bits, k, counters_per_key)


def next_capacity(capacity: int, records: int) -> int:
    """The capacity of the counters that replace ones of `capacity` holding `records`."""
    grown = capacity * GROWTH
    while grown < records:
        grown *= GROWTH
    return grown


def grows(library: FingerprintLibrary) -> bool:
    """Whether a folder's filter was made to grow (its library records a growing sizing)."""
    sizing = library.get_meta("counter_sizing")
    return bool(sizing and json.loads(sizing).get("grows"))


def grow(counters: CountingBloomFilter, library: FingerprintLibrary) -> CountingBloomFilter:
    """Counters for next_capacity(), rebuilt from the library (with its overflow table, and the
    new sizing recorded in the same transaction); the old ones are closed. A file-backed
    filter's new counter file takes the old one's place."""
    params: dict[str, Any] = counters.params
    capacity = next_capacity(int(params["capacity"]), library.count())
    sizing = folder.Sizing(
        capacity, params["error_rate"], params["counter_bits"], grows=True
    )._asdict()
    new = dict(folder.sized_params(sizing, library))
    new["hash"] = params["hash"]  # the fingerprint the library's records use (a library in
    # memory or a temporary one may not record it)
    old_path = counters.path
    if old_path is None:
        grown = CountingBloomFilter.from_params(new)
    else:
        new.update(counters_id=os.urandom(16).hex(), library_id=params.get("library_id", ""))
        target = Path(old_path).with_name(folder.COUNTERS_FILE)
        growing = target.with_name(folder.GROWING_FILE)
        grown = CountingBloomFilter.from_params(new, growing, overwrite=True)
    try:
        folder.rebuild_counters(grown, library, {"counter_sizing": json.dumps(sizing)})
        if old_path is not None:
            os.replace(growing, target)
            store = grown._live_store()
            if isinstance(store, MappedFile):  # its messages name the file it now is
                store.path = os.fspath(target)
    except BaseException:
        grown.close()
        raise
    counters.close()
    return grown
