"""A shared library's batch with repeats: each fingerprint sent once, with how many more times
the batch saw it, and the answers spread back to every sighting (shared/library.py)."""

from __future__ import annotations

from collections.abc import Sequence


def once_each(fps: Sequence[bytes], idx: Sequence[int]) -> tuple[list[int], list[int], list[int]]:
    """A claim's positions idx sent once per fingerprint (every 256th sighting again: the
    script counts up to 255 more in a byte): the positions sent, each one's further sightings,
    and for each of idx the index of its sent position. Repeats then cost the script no
    command and no Lua work per sighting (benchmarks/redis/REPORT.md)."""
    first: dict[bytes, int] = {}
    sent: list[int] = []
    extra: list[int] = []
    slot: list[int] = []
    for i in idx:
        j = first.get(fps[i])
        if j is not None and extra[j] < 255:
            extra[j] += 1
        else:
            j = first[fps[i]] = len(sent)
            sent.append(i)
            extra.append(0)
        slot.append(j)
    return sent, extra, slot


def spread_answers(
    idx: Sequence[int], sent: list[int], said: bytes, slot: list[int], pending: int, seen: int
) -> bytes:
    """once_each's answers (said) for every position of idx, as a script answers a repeat in
    one call: the first sighting its answer, a later one `seen`, or `pending` where the first
    is."""
    out = bytearray(len(idx))
    for k, (i, j) in enumerate(zip(idx, slot, strict=True)):
        answer = said[j]
        out[k] = answer if sent[j] == i or answer == pending else seen
    return bytes(out)
