"""Write marks: how a running client notices that a shared filter went back in time (Redis
restored from an earlier snapshot, or failed over to a replica that had not received the last
writes), the client's side of shared/lua/mark.lua.

Each client keeps, in every hash that holds a part's instance (a Bloom filter's meta, a library
group's counters, a splittable leaf's meta, a frontier's marks), a field "w:OWNER": how many of
its calls reached that part. Only that client advances it, so it always knows the number it
should find; a part restored from before the client's last call holds a smaller one (or none),
and the call stops before writing anything, marking the part so that every other client stops
at its next call too. A rollback to a moment after a client's last call loses none of that
client's writes; the clients whose writes it lost notice at their next call. A client that
opens a filter after the restore cannot know (it has no expectation yet).

Why a mark per client and per call: a counter every client advances (the filter's count, a
shared sequence) can climb back past what one client last read before that client looks again,
hiding the restore; a client's own mark moves only when it calls. Every call advances it in
the same atomic step as its writes, so a snapshot holds both or neither; advancing every Nth
call would leave up to N-1 calls' loss unseen. A splittable filter's tree also keeps its
version, which a client never sees go down (shared/leaf_tree.py).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any

from urlseen.errors import FilterRolledBackError, FormatError

ROLLBACK = "URLSEEN-ROLLBACK "
DAMAGED = "URLSEEN-DAMAGED "

ROLLBACK_HELP = (
    "Redis holds an earlier state of the filter than its clients wrote (restored from a "
    "snapshot, or failed over to a replica that lagged), so URLs answered new since then may "
    "be answered new again: the client stops; make Redis durable (appendonly yes, appendfsync "
    "always: README, 'Redis is restored from a snapshot / fails over'), then destroy the "
    "filter or use a new name (or delete the field rolled_back of that key to go on with it "
    "as it is)"
)


def field(owner: str) -> str:
    """The hash field of a client's write mark."""
    return f"w:{owner}"


class WriteMarks:
    """The write marks a client expects to find, per hash key (0: it never wrote there)."""

    def __init__(self) -> None:
        self._expected: dict[str, int] = {}

    def expected(self, key: str) -> int:
        """The mark a call to the part of `key` sends (mark.lua checks and advances it)."""
        return self._expected.get(key, 0)

    def advanced(self, key: str) -> None:
        """A call to `key`'s part was answered: its mark went one up."""
        self._expected[key] = self._expected.get(key, 0) + 1

    def forget(self, client: object, owner: str) -> None:
        """Delete this client's marks (a clean close: it expects nothing any more), best effort:
        a killed client's marks stay, one small field per part it wrote to."""
        keys, self._expected = list(self._expected), {}
        if not keys:
            return
        with contextlib.suppress(Exception):
            pipe = client.pipeline(transaction=False)  # type: ignore[attr-defined]
            for key in keys:
                pipe.hdel(key, field(owner))
            pipe.execute()

    def acked(
        self,
        what: str,
        client: Any,
        key: str,
        owner: str,
        replies: Sequence[Any],
        alive: Callable[[Any], None] | None = None,
    ) -> None:
        """Check the replies of marked_ack (queued last in a native MULTI that wrote): `alive`
        (given the instance read) raises when the part is gone or another filter's; the mark
        that made a vanished hash anew is deleted first (the hash then goes with it)."""
        mark, instance, marked = replies
        if alive is not None:
            if instance is None and int(mark) == 1:
                with contextlib.suppress(Exception):
                    client.hdel(key, field(owner))
            alive(instance)
        self.counted(what, key, mark, marked)

    def counted(self, what: str, key: str, found: object, marked: object) -> None:
        """After a native MULTI that advanced the mark of `key` (HINCRBY, found its reply) and
        read its rolled_back field (marked): FilterRolledBackError when the part went back
        (the reply is not above what was expected: a MULTI sent again may have run twice)."""
        if marked is not None:
            raise rolled_back(what, f"{key} went back in time (another client noticed)")
        number = int(found)  # type: ignore[call-overload]
        if number <= self.expected(key):
            raise rolled_back(
                what,
                f"{key} went back in time (write mark {number}, expected above "
                f"{self.expected(key)})",
            )
        self._expected[key] = number


def rolled_back(what: str, detail: str) -> FilterRolledBackError:
    return FilterRolledBackError(f"{what}: {detail}; {ROLLBACK_HELP}")


def script_error(what: str, text: str) -> Exception | None:
    """The error for a script's error reply about marks or damaged metadata, or None."""
    if ROLLBACK in text:
        return rolled_back(what, text[text.index(ROLLBACK) + len(ROLLBACK) :])
    if DAMAGED in text:
        detail = text[text.index(DAMAGED) + len(DAMAGED) :]
        return FormatError(
            f"{what}: {detail} (damaged metadata: destroy the filter or use a new name)"
        )
    return None


def marked_ack(pipe: object, key: str, owner: str) -> None:
    """Queue, in a native MULTI that writes (an acknowledgement), the advance of the owner's
    write mark in `key`, the instance and the rolled_back field: WriteMarks.counted checks
    the three replies."""
    pipe.hincrby(key, field(owner), 1)  # type: ignore[attr-defined]
    pipe.hget(key, "instance")  # type: ignore[attr-defined]
    pipe.hget(key, "rolled_back")  # type: ignore[attr-defined]


def meta_number(what: str, key: str, name: str, raw: object) -> int:
    """A whole-number field of a filter's Redis metadata (0 when absent); FormatError naming
    the key and the field when it is not one (damaged, or written by something else)."""
    if raw is None:
        return 0
    try:
        return int(raw)  # type: ignore[call-overload,no-any-return]
    except (TypeError, ValueError):
        raise FormatError(
            f"{what}: Redis key {key}: field {name!r} is not a whole number ({raw!r:.40}): "
            "damaged metadata; destroy the filter or use a new name"
        ) from None


def check_read(what: str, key: str, marked: object, count: object) -> None:
    """A native read of `key`'s rolled_back field and count: the part was not marked rolled
    back by another client, and its count is a number."""
    if marked is not None:
        raise rolled_back(what, f"{key} went back in time (another client noticed)")
    meta_number(what, key, "count", count)


class ForgetsMarks:
    """A filter whose clean close also forgets its write marks (after its claims' close)."""

    _marks: WriteMarks
    _client: Any
    _claims: Any

    def _close(self) -> None:
        super()._close()  # type: ignore[misc]
        if hasattr(self, "_marks"):  # else it never opened
            self._marks.forget(self._client, self._claims.owner)
