"""Claims with leases: how a shared filter keeps each answer "new" until its caller has it.

The seen-test in Redis records a URL as seen in the same atomic step that answers it new. If
the client dies before its caller has the answer (killed at any instruction, a batch that fails
half way), the URL would be seen forever and never delivered. So the step also writes a *claim*
for each URL it answers new (shared/lua/claims.lua): the client's id, its batch's priority and
a lease deadline, in a hash in the same slot as the URL's data. The client deletes its claims
when the caller acknowledges the answers (`acknowledge()`; by default, just before add_many
returns them). A URL found seen is answered by its claim:

- no claim (acknowledged), or the asker's own: seen;
- another client's claim whose lease ended (that client died or stalled before acknowledging):
  the asker takes the claim over and gets the URL as new;
- another client's live claim from an older batch: *pending*; the asker asks again (a bounded
  poll, about one lease) until it is acknowledged (seen) or its lease ends (taken over, new);
- another client's live claim from a younger batch: seen (its claimer delivers it, or its claim
  outlives it for the next asker). Waiting only on older batches means no two clients ever wait
  on each other.

A pending URL still claimed when the wait ends (its claimer holds a longer lease, or died with
one) is answered seen and counted *unconfirmed* (ClaimCounts): its claimer may never deliver it,
so `urlseen dedup` says how many and exits with its own status. wait_for_claims waits instead
until those claims are acknowledged or their leases end (bounded by the longest lease).

The asker's own claim from an earlier call is seen, even past its lease: this client's caller
has (or gets with this batch) the first answer, so a lease shorter than a batch never makes one
client print a URL twice. Only an *abandoned* own claim (its lease set to 0: a failed batch's,
whose caller never got it) is new again. A claim whose lease ended before its acknowledgement
is counted *lapsed*: another client may have taken it over (acknowledge() counts those).

So a URL answered new reaches a caller: its claimer's, or, if the claimer died or stalled past
its lease before acknowledging, the next client that meets it (a rerun, another member of the
fleet). It is answered new twice only then: at most the claims a client held unacknowledged
when it died or stalled (with explicit acknowledgement after each batch, one batch).
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import math
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from urlseen._lifecycle import Closeable
from urlseen.protocol import ClaimCounts
from urlseen.shared.scripts import Answer, ClaimArgs
from urlseen.splittable.tree import LEASE_SECONDS, MAX_LEASE_SECONDS, check_lease

logger = logging.getLogger(__name__)

RELEASE_CHUNK = 65536  # fingerprints per acknowledging call


class Claims:
    """One client's side of the claims: its id, its lease, and the fingerprints it answered new
    and has not released yet (in the order the filter hands them out).

    auto: acknowledge each batch's answers just before add_many returns them (True, the
    default); False keeps them claimed until the caller calls the filter's acknowledge(), for a
    caller that persists the answers first (`urlseen dedup` writes and flushes its output).
    wait_for_claims: wait for other clients' older claims until their leases end (PendingWait).
    """

    def __init__(self, lease: float | None = None) -> None:
        self.lease = LEASE_SECONDS if lease is None else check_lease(lease)
        self.lease_ms = max(1, round(self.lease * 1000))
        self.owner = uuid.uuid4().hex[:16]
        self.auto = True
        self.wait_for_claims = False
        self.unacked: list[bytes] = []
        self._oldest: int | None = None
        self._calls = itertools.count(1)
        self._renewed = time.monotonic()
        self._started = -math.inf  # the current batch's start (monotonic)
        self._since: float | None = None  # the start of the oldest batch whose claims are held
        self._held_at: list[tuple[float, int]] = []  # (when, how many) claims were last leased
        self._unconfirmed: set[bytes] = set()  # answered seen under another client's claim
        self._lapsed = 0
        self._unabandoned: list[bytes] = []  # a failed batch's claims not abandoned yet

    def counts(self) -> ClaimCounts:
        """The unconfirmed answers and lapsed claims so far (ClaimCounts)."""
        return ClaimCounts(len(self._unconfirmed), self._lapsed)

    def patience(self) -> PendingWait:
        """How long the running batch waits on other clients' claims (PendingWait)."""
        return PendingWait(self.lease, until_leases_end=self.wait_for_claims)

    def unconfirmed(self, fps: Iterable[bytes]) -> None:
        """These keys' answers are "seen" only because another client's claim outlived the
        wait (until one of them is answered new to this client later)."""
        self._unconfirmed.update(fps)

    def waited_out(self, fps: Iterable[bytes]) -> bool:
        """Whether every one of these pending keys outlived a whole wait already: a later batch
        asks about them again (their lease may have ended since) but does not wait again."""
        keys = set(fps)
        return bool(keys) and keys <= self._unconfirmed

    def priority(self) -> int:
        """The priority of a new batch: its start (Unix ms), or that of the oldest batch whose
        claims are still held, so a client's claims are never older than its own waiting."""
        now = int(time.time() * 1000)
        return now if self._oldest is None else min(self._oldest, now)

    def args(self, priority: int) -> ClaimArgs:
        """A script call's claim arguments: owner, priority, a fresh call id, lease (ms)."""
        return ClaimArgs(self.owner, priority, next(self._calls), self.lease_ms)

    def hold(self, fps: list[bytes], priority: int) -> None:
        """Remember fingerprints just answered new (claimed by this client)."""
        if fps:
            self.unacked.extend(fps)
            self._held_at.append((time.monotonic(), len(fps)))
            self._oldest = priority if self._oldest is None else min(self._oldest, priority)
            if self._since is None:
                self._since = self._started
            self.answered_new(fps)

    def answered_new(self, fps: Iterable[bytes]) -> None:
        """These keys were answered new to this client: no longer unconfirmed."""
        if self._unconfirmed:
            self._unconfirmed.difference_update(fps)

    def young(self) -> bool:
        """Whether every claim held was made less than half a lease ago (timed from before its
        batch began): none can have been taken over yet, for a takeover needs its lease to end.
        Then a release need not read them first."""
        return self._since is not None and time.monotonic() - self._since < self.lease / 2

    def take(self) -> list[bytes]:
        """Every fingerprint held, forgotten here (the caller acknowledges them in Redis).
        Those leased more than a lease ago count as lapsed: their lease ended before this
        acknowledgement (each claim's lease starts before its call returned), so another
        client may have taken them over."""
        now = time.monotonic()
        self._lapsed += sum(n for when, n in self._held_at if now - when > self.lease)
        return self._drop_all()

    def _drop_all(self) -> list[bytes]:
        fps, self.unacked, self._oldest, self._since = self.unacked, [], None, None
        self._held_at = []
        return fps

    def renewal(self) -> list[bytes]:
        """While a batch waits on other clients' claims, its own must not run out: every third
        of a lease, the fingerprints whose leases to renew (all held; none if not due yet)."""
        if time.monotonic() - self._renewed < self.lease / 3:
            return []
        self._renewed = time.monotonic()
        self._held_at = [(self._renewed, len(self.unacked))] if self.unacked else []
        return list(self.unacked)

    def close(self, abandon: Callable[[list[bytes]], Any]) -> None:
        """The filter closes: answers never acknowledged are abandoned (best effort), so the
        next client to meet them takes them at once instead of after the lease."""
        fps = [*self._unabandoned, *self._drop_all()]
        self._unabandoned = []
        if fps:
            with contextlib.suppress(Exception):
                abandon(fps)

    def abandon_or_defer(self, abandon: Callable[[list[bytes]], Any], fps: list[bytes]) -> None:
        """Abandon a failed batch's claims now, or if that fails too (Redis unreachable), before
        the next batch: this client answers its own claims seen until they are abandoned."""
        try:
            abandon(fps)
        except Exception:
            self._unabandoned.extend(fps)

    @contextlib.contextmanager
    def batch(
        self, abandon: Callable[[list[bytes]], Any], fps: Sequence[bytes] = ()
    ) -> Iterator[int]:
        """One batch of the fingerprints fps, at its priority. If it fails, the claims it made
        are abandoned (their lease ends now, best effort: else it ends on its own), for its
        caller never got them: those it knows of, and any of fps not held from an earlier
        batch, which a call whose every reply was lost may have claimed unknown to it (an
        abandoned claim is new again to every client, this one included)."""
        if self._unabandoned:  # an earlier failed batch's: abandoned first, or this one fails
            abandon(self._unabandoned)
            self._unabandoned = []
        mark, marks = len(self.unacked), len(self._held_at)
        self._renewed = self._started = time.monotonic()
        try:
            yield self.priority()
        except BaseException:
            failed = self.unacked[mark:]
            del self.unacked[mark:]
            del self._held_at[marks:]
            if not self.unacked:
                self._oldest = self._since = None
                self._held_at = []
            held = set(self.unacked)
            failed = list(dict.fromkeys([*failed, *(fp for fp in fps if fp not in held)]))
            if failed:
                self.abandon_or_defer(abandon, failed)
            raise


def claim_seen(value: bytes | None, owner: str, priority: int, now_ms: int | None) -> bool:
    """Whether claims.lua's claim_present answers '0' (seen) for a URL present in the data whose
    claim is `value` (None: no claim), to the client `owner` asking in a new call at `priority`,
    at the server's time `now_ms`: the client-side twin for a native read of a snapshot. A new
    call never made the asker's own claim, so an own claim is seen unless abandoned (lease 0);
    without the time (None), no other client's claim is judged live. False means: ask the
    script, which decides."""
    if value is None:
        return True
    parts = value.split(b" ")
    if len(parts) != 4 or not parts[1].isdigit() or not parts[3].isdigit():
        return False  # not a claim this version reads: the script says what it is
    holder, prio, deadline = parts[0].decode("ascii", "replace"), int(parts[1]), int(parts[3])
    if holder == owner:
        return deadline != 0  # abandoned: new again, taken over by the script
    if now_ms is None or deadline <= now_ms:
        return False  # maybe expired: a takeover, made by the script
    return not (prio < priority or (prio == priority and holder < owner))  # older: pending


class HoldsClaims:
    """The claims settings and counts a claiming filter or store shows its caller (from its
    _claims): auto_acknowledge, wait_for_claims and claim_counts."""

    _claims: Claims

    @property
    def auto_acknowledge(self) -> bool:
        """True (default): answers are acknowledged just before they are returned. False: they
        stay claimed until acknowledge() (see urlseen.shared.claims)."""
        return self._claims.auto

    @auto_acknowledge.setter
    def auto_acknowledge(self, value: bool) -> None:
        self._claims.auto = bool(value)

    @property
    def wait_for_claims(self) -> bool:
        """False (default): a URL another client's older batch claimed is waited for about one
        lease of this client's, then answered seen and counted unconfirmed. True: waited for
        until that claim is acknowledged or its lease ends (at most a day, the longest lease)."""
        return self._claims.wait_for_claims

    @wait_for_claims.setter
    def wait_for_claims(self, value: bool) -> None:
        self._claims.wait_for_claims = bool(value)

    @property
    def claim_counts(self) -> ClaimCounts:
        """Since this client opened: URLs left unconfirmed under other clients' claims, and
        answers whose claims lapsed before they were acknowledged (ClaimCounts)."""
        return self._claims.counts()


class ClaimedAnswers(HoldsClaims, Closeable):
    """A filter (or store) that claims its answers: auto_acknowledge, acknowledge(), and a
    close that abandons answers never acknowledged. A subclass sets _claims and _instance (once
    it is open) and releases claims in Redis in _release."""

    _instance: str = ""

    def _release(self, fps: list[bytes], how: str) -> int:
        """Release this client's claims of fps, how: "ack" (delete), "abandon" (end the lease
        now) or "renew" (start a new lease); how many were no longer its."""
        raise NotImplementedError

    def claims_held(self) -> int:
        """Claims in Redis, of every client: URLs answered new whose delivery no caller has
        acknowledged yet (a live client's, or a dead one's waiting for the next asker)."""
        raise NotImplementedError

    def acknowledge(self) -> int:
        """Every answer given so far has reached the caller (and is persisted, if the caller
        persists them): release their claims. Returns how many another client had taken over
        meanwhile (their lease had ended: those URLs were answered new twice)."""
        self._usable()
        return self._release(self._claims.take(), "ack")

    def _acknowledge_by(self, drop: Callable[[list[bytes]], int]) -> int:
        """acknowledge() for a filter that deletes claims younger than half a lease unread
        (the batch scripts' DROP; none can have been taken over): drop(fps), at most
        RELEASE_CHUNK at a time, returns how many of fps it did not find."""
        self._usable()
        if not self._claims.young():
            return self._release(self._claims.take(), "ack")
        fps = list(dict.fromkeys(self._claims.take()))
        return sum(drop(fps[s : s + RELEASE_CHUNK]) for s in range(0, len(fps), RELEASE_CHUNK))

    def _abandon(self, fps: list[bytes]) -> None:
        self._release(fps, "abandon")

    def _renew(self) -> None:
        """Renew the held claims' leases if due (called while a batch waits)."""
        fps = self._claims.renewal()
        if fps:
            self._release(fps, "renew")

    def _close(self) -> None:
        if self._instance:  # else it never opened: nothing claimed
            self._claims.close(self._abandon)


class PendingWait:
    """How long a batch asks again about pending URLs: a little over one lease (by then every
    claim it waits on was acknowledged or expired, unless its claimer has a longer lease: those
    keys are then answered seen and counted unconfirmed, their claim outliving them for the
    next asker). until_leases_end: as long as any claim can last (the longest lease, a day,
    more), asking about once a second past the first lease."""

    def __init__(self, lease: float, *, until_leases_end: bool = False) -> None:
        now = time.monotonic()
        self._usual = now + 1.5 * lease + 0.5
        self._until = self._usual + (MAX_LEASE_SECONDS if until_leases_end else 0.0)
        self._delay = 0.002
        self._told = False

    def wait(self) -> bool:
        """Sleep a little before the next ask; False once the wait is over."""
        now = time.monotonic()
        left = self._until - now
        if left <= 0:
            return False
        longest = 0.1
        if now > self._usual:
            longest = 1.0
            if not self._told:
                self._told = True
                logger.warning(
                    "urlseen: waiting for URLs another client claimed and has not acknowledged, "
                    "until it does or its lease ends (wait for claims)"
                )
        time.sleep(min(self._delay, left))
        self._delay = min(self._delay * 2, longest)
        return True


PENDING = Answer.PENDING


def first_of_each(fps: Sequence[bytes], idx: Iterable[int]) -> tuple[list[int], dict[int, int]]:
    """The positions idx with each fingerprint's first only, and each repeat's first: a
    script asked each key once answers its repeats as a call would (ask_each_once)."""
    firsts: dict[bytes, int] = {}
    keep: list[int] = []
    repeats: dict[int, int] = {}
    for i in idx:
        first = firsts.setdefault(fps[i], i)
        if first == i:
            keep.append(i)
        else:
            repeats[i] = first
    return keep, repeats


def ask_each_once(idx: list[int], fps: list[bytes], ask: Callable[[list[int]], bytes]) -> bytes:
    """ask(indices) for the first index of each distinct fingerprint among idx only, the
    answers (one byte per index of idx) spread to the repeats as a script call answers them
    (claims.lua): a repeat of a key answered new or seen in the same call is seen ("0"), one of
    a pending key is pending too. Repeats inside a batch then cost the script nothing."""
    keep, repeats = first_of_each(fps, idx)
    if not repeats:
        return ask(idx)
    said = dict(zip(keep, ask(keep), strict=True))
    out = bytearray()
    for i in idx:
        j = repeats.get(i, i)
        out.append(said[i] if j == i else PENDING if said[j] == PENDING else Answer.SEEN)
    return bytes(out)


def ask_until_decided(
    ask: Callable[[list[int]], bytes],
    fps: Sequence[bytes],
    claims: Claims,
    renew: Callable[[], None],
) -> list[bool]:
    """Answers for the keys whose fingerprints are fps: ask(indices) returns one byte per index
    (b"1" new, b"0" seen, b"P" pending); pending ones are asked again until decided or the
    wait (claims.patience()) ends (then: seen, and counted unconfirmed), renewing the asker's
    own claims meanwhile. Keys that outlived an earlier batch's wait are not waited for again."""
    answers = [False] * len(fps)
    todo = list(range(len(fps)))
    wait: PendingWait | None = None
    while todo:
        pending = []
        for i, c in zip(todo, ask(todo), strict=True):
            if c == PENDING:
                pending.append(i)
            else:
                answers[i] = c == Answer.NEW
        todo = pending
        if todo:
            wait = wait or claims.patience()
            if claims.waited_out(fps[i] for i in todo) or not wait.wait():
                claims.unconfirmed(fps[i] for i in todo)
                break
            renew()
    return answers


def record_size(value: bytes, width: int) -> int:
    """How many claims a record holds (record_parts), of fingerprints `width` bytes wide."""
    return len(record_parts(value)[1]) // width


def record_parts(value: bytes) -> tuple[bytes, bytes]:
    """A record's claim and its fingerprints, packed (claims.lua, claims_record: the claim, a
    newline, the fingerprints)."""
    cut = value.index(b"\n")
    return value[:cut], value[cut + 1 :]


def recorded_claims(records: Iterable[bytes], wanted: set[bytes], width: int) -> dict[bytes, bytes]:
    """The claims that records (their values) hold of the fingerprints `wanted`, `width` bytes
    each: fingerprint -> claim."""
    out: dict[bytes, bytes] = {}
    for value in records:
        claim, body = record_parts(value)
        for s in range(0, len(body), width):
            fp = body[s : s + width]
            if fp in wanted:
                out[fp] = claim
    return out
