"""What the exact filter's batches change in its library, inside one transaction.

A check-and-add batch leaves undecided the keys whose counters are all set and that the cache
does not hold: one library look-up decides them (resolve_undecided). remove() undoes one add
(the reference count drops by one, and at zero the record goes); forget() drops the record
whatever its count (plan_drop). A counter at its maximum cannot follow its keys, so the
library's overflow table holds the true count of every saturated counter: adds raise it
(overflow_after_adds), and a delete recounts the saturated counters from it instead of
scanning the library (recount_saturated).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable

from urlseen._core import ExactStepResult
from urlseen.bloom.counting import CountingBloomFilter
from urlseen.errors import FormatError
from urlseen.exact.library_protocol import Changes, FingerprintLibrary, Record
from urlseen.exact.pending_refs import Increments, PendingRefs


def resolve_undecided(
    library: FingerprintLibrary,
    counters: CountingBloomFilter,
    pending: PendingRefs,
    step: ExactStepResult,
    increments: Increments,
    stamp: int,
    *,
    batched: bool,
) -> None:
    """Decide the keys the counters and the cache could not (step.undecided), with one library
    look-up: a duplicate gets one more reference, a false positive of the counters is new after
    all (counted in, and added to step's answers, new fingerprints and overflow events)."""
    ask, flags, fresh = step.undecided, step.answers, step.new_fingerprints
    # The asked fingerprints new earlier in this batch (only those are ever looked up in it:
    # a set of the few asked ones, not of the batch's many new ones).
    batch_new = {fp for _, fp in ask}.intersection(fresh)
    unknown = list(dict.fromkeys(fp for _, fp in ask if fp not in batch_new))
    present = library.present(unknown, batched=batched)
    for pos, fp in ask:
        if fp in present or fp in batch_new:
            flags[pos] = False
            pending.duplicate(fp, stamp, increments)
        else:
            flags[pos] = True
            batch_new.add(fp)
            fresh.append(fp)
            step.counter_overflows.extend(counters.add_fingerprints([fp]))
            pending.inserted(fp, stamp, increments)


def plan_drop(
    fps: list[bytes],
    stored: dict[bytes, Record],
    pending: dict[bytes, int],
    *,
    purge: bool,
    now: float,
) -> tuple[list[bool], Changes]:
    """For each of fps, in order, whether it was in (its stored references plus those still
    pending), and the library changes: the records that reach zero references are deleted, the
    others get their new count."""
    refs = {fp: rec.refs + pending.get(fp, 0) for fp, rec in stored.items()}
    result, dropped = [], []
    for fp in fps:
        if refs.get(fp, 0) <= 0:
            result.append(False)
            continue
        result.append(True)
        refs[fp] = 0 if purge else refs[fp] - 1
        if refs[fp] == 0:
            dropped.append(fp)
    gone = set(dropped)
    changes = Changes(
        now,
        deletes=dropped,
        refs={
            fp: refs[fp] - rec.refs
            for fp, rec in stored.items()
            if fp not in gone and refs[fp] != rec.refs
        },
    )
    return result, changes


def recount_saturated(
    counters: CountingBloomFilter, library: FingerprintLibrary, dropped: list[bytes]
) -> tuple[dict[int, int | None], list[tuple[int, int]]]:
    """The overflow-table changes for a batch of dropped records, and the saturated counters
    that fall below their maximum with their new values: each is recounted once, from its true
    count in the overflow table, not by scanning the library. FormatError if the table lacks a
    saturated counter (the counters must then be rebuilt from the library)."""
    maximum = (1 << counters.counter_bits) - 1
    occurrences: Counter[int] = Counter()
    for fp in dropped:
        occurrences.update(counters.counter_indices(fp))
    saturated = [i for i in occurrences if counters.counter(i) == maximum]
    rows = library.overflow(saturated)
    overflow: dict[int, int | None] = {}
    recounted = []
    for index in saturated:
        if index not in rows:
            raise FormatError(
                f"counter {index} is saturated but the library has no true count for it; "
                "the counters will be rebuilt from the library"
            )
        true = rows[index] - occurrences[index]
        overflow[index] = true if true >= maximum else None
        if true < maximum:
            recounted.append((index, true))
    return overflow, recounted


def overflow_after_adds(
    library: FingerprintLibrary, events: Iterable[tuple[int, int]]
) -> dict[int, int | None]:
    """The overflow-table changes for the (counter index, delta) events of a batch's adds:
    the new true count of each counter that saturated."""
    deltas: defaultdict[int, int] = defaultdict(int)
    for index, delta in events:
        deltas[index] += delta
    if not deltas:
        return {}
    rows = library.overflow(deltas)
    return {index: rows.get(index, 0) + delta for index, delta in deltas.items()}
