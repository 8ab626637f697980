"""The fingerprint library in Redis: one exact record per URL, shared by a fleet of crawlers.

With several writers a local filter can prove a URL neither new (another process may have added
it) nor, once URLs can be forgotten, seen; so Redis decides every URL. A Lua script per batch
(shared/lua/library_batch.lua) inserts each 16-byte fingerprint if it is absent and answers
new/seen in the same atomic step, so among all processes each distinct URL is new exactly once.
A claim sends each fingerprint once per batch with its further sightings (references): a URL
repeated within a batch costs the server no command (benchmarks/redis/REPORT.md).
A batch resent after a lost reply gets its first answer (a release or forget from a receipt
kept two minutes, a claim from its write mark and its claims: below).

Layout (the smallest in memory per URL of those benchmarks/redis/library.py compares):
records are fields of bucket hashes small enough to stay listpack-encoded, the field the
whole fingerprint and the value 12 packed bytes (refs, first and last seen, in seconds).
Fingerprints fall into `groups` hash tags (a Redis Cluster spreads the groups over its
masters, and a batch costs one script call per group there; one call in all on a single
server); each group's buckets grow by linear hashing, one bucket split at a time, so that a
library holds about PER_BUCKET records per bucket whatever its size: a small crawl takes few
keys, a large one stays compact. Each URL's claim is atomic; on a Cluster a batch as a whole
is not.

Each URL answered new is also claimed (shared/claims.py) until the caller acknowledges it, so
it reaches a caller even if this client dies first. A call's new URLs in a group are claimed
by one field of a hash per group (shared/lua/library_batch.lua), written before the records
they cover and deleted by the acknowledgement (a native HDEL per call and group): O(1)
commands per call, and a library whose clients acknowledge holds no claim. A claim resent
after a lost reply needs no receipt: its write mark says it ran already, and its answers
come from its claims.
Each group holds the library's instance id, checked by every call, so a library whose keys
vanished fails (FilterLostError) instead of starting again from empty.

Durability is Redis's: a server that fsyncs every write (appendonly yes, appendfsync always)
and is killed comes back with every URL that claim() reported new.
"""

from __future__ import annotations

import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from urlseen.errors import FilterLostError, FormatError
from urlseen.exact.library_protocol import LibraryIO, Record, time_index
from urlseen.exact.library_repeats import once_each, spread_answers
from urlseen.protocol import check_given
from urlseen.shared import client as redis_store
from urlseen.shared import seen_cache
from urlseen.shared.claims import ClaimedAnswers, Claims, ask_until_decided
from urlseen.shared.client import LOST_HELP, RECEIPT_SECONDS, retrying
from urlseen.shared.library_layout import (
    FORMAT,
    FP_BYTES,
    bucket_in,
    bucket_order,
    glob_escape,
    group_of,
    held_claims,
    new_params,
    record_of,
    validator,
)
from urlseen.shared.marks import ForgetsMarks, WriteMarks, meta_number
from urlseen.shared.scripts import LIBRARY_BATCH, Answer, ClaimArgs, claim_fields

KIND = "library"
CALL_KEYS = 8192  # fingerprints per script call: each call holds the server tens of ms at most


class RedisLibrary(ForgetsMarks, ClaimedAnswers):
    """A fingerprint library in Redis, shared by any number of processes. close() forgets the
    connection; the records stay in Redis.

    Args:
        redis: a Redis URL (redis://, rediss://, unix://, or redis-cluster://host:port for a
            Redis Cluster) or a redis-py client.
        name: the library's name (its keys are urlseen:{name}:kind, :library and
            urlseen:{name#g}:... for each group g, the name escaped in the hash tags);
            non-empty UTF-8, no braces, '#' or control characters.
        capacity: distinct URLs it is planned for (its buckets grow with the URLs it holds,
            whatever this says); kept with the library, default 10,000,000.
        fingerprint: "md5" (default, as in the IMP-CBFilter paper) or "xxh3_128"; an existing
            library keeps its own.
        groups: hash tags (Redis Cluster slots) the buckets spread over: 16 on a Cluster, else 1.
        lease: seconds an answer "new" stays claimed until acknowledged (default 10).
        allow_eviction: use a server whose maxmemory-policy may evict keys (else refused).

    Of the FingerprintLibrary protocol it has present, records, count, fingerprints,
    older_than, get_meta and close; writes go through its own atomic batch operations (claim,
    release, forget, forget_older_than) instead of transaction()/apply(), which several
    writers could not make atomic, and it keeps no counter overflow table (no local counters
    use it). Times have one-second resolution. claim() acknowledges its answers before it
    returns them unless auto_acknowledge is False (then: acknowledge()).

    Example:
        >>> lib = RedisLibrary("redis://127.0.0.1:6379/0", "crawl")  # doctest: +SKIP
        >>> lib.claim([b"0123456789abcdef", b"0123456789abcdef"])  # doctest: +SKIP
        [True, False]
    """

    _noun = "library"

    shared = True  # decides each URL itself: filters must not add a local decision

    def __init__(
        self,
        redis: Any,
        name: str,
        capacity: int | None = None,
        *,
        fingerprint: str | None = None,
        groups: int | None = None,
        lease: float | None = None,
        allow_eviction: bool = False,
    ) -> None:
        self.name = redis_store.check_name(name)
        self._claims = Claims(lease)
        self._client = redis_store.connect(redis)
        self._what = f"library {name!r}"
        self._cluster = redis_store.is_cluster(self._client)
        self._script = redis_store.load_script(self._client, "library_batch.lua")
        self._meta = redis_store.key(name, "library")
        self._prefix = f"urlseen:{{{redis_store.escape(name)}#"
        self.io = LibraryIO()
        self.readonly = False
        redis_store.check_eviction(self._client, allow_eviction, self._what)
        stored = self._load()
        if stored is None:
            # Of two processes creating it at once, one wins; both then use the winner's
            stored = self._load(new_params(capacity, fingerprint, groups, cluster=self._cluster))
            assert stored is not None
        else:
            given = {"capacity": capacity, "fingerprint": fingerprint, "groups": groups}
            check_given(stored, given, f"library {name!r}")
        self.params = stored
        self.fingerprint: str = stored["fingerprint"]
        self.groups: int = stored["groups"]
        self.per_bucket: int = stored["per_bucket"]
        self._instance = stored["instance"]
        self._fields = dict(
            prefix=self._prefix,
            groups=self.groups,
            per_bucket=self.per_bucket,
            receipt_ttl=RECEIPT_SECONDS,
            instance=self._instance,
        )
        self._marks = WriteMarks()  # this client's write mark per group (shared/marks.py)
        # the calls whose claims records this client holds: call id, group -> its fingerprints
        self._record_calls: list[tuple[int, dict[int, list[bytes]]]] = []
        self._mark_groups()

    # -- parameters ---------------------------------------------------------------------

    @staticmethod
    def exists(redis: Any, name: str) -> bool:
        """Whether Redis holds a library called name."""
        return redis_store.holds(redis_store.connect(redis), redis_store.check_name(name), KIND)

    def _load(self, create: dict[str, Any] | None = None) -> dict[str, Any] | None:
        meta, noun = self._meta, "fingerprint library"
        return redis_store.record(
            self._client, self.name, KIND, meta, FORMAT, noun, validator(meta, noun), create
        )

    def _mark_groups(self) -> None:
        """Write the instance id into every group (once, by whoever opens the library first:
        until the library is marked ready no client has written to a group, so a group marked
        later is a group whose data vanished)."""

        def ready() -> bool:
            return bool(self._client.hexists(self._meta, "ready"))

        if retrying(ready, f"{self._what}: open"):
            return

        def mark() -> None:
            pipe = self._client.pipeline(transaction=False)
            for g in range(self.groups):
                pipe.hsetnx(f"{self._prefix}{g}}}:n", "instance", self._instance)
            pipe.execute()
            self._client.hset(self._meta, "ready", 1)

        retrying(mark, f"{self._what}: create")

    # -- where a fingerprint lives ------------------------------------------------------

    def _levels(self) -> list[tuple[int, int]]:
        """Each group's (level, split): where its buckets stand."""
        rows = self._counters("level", "split")
        return [(int(level or 0), int(split or 0)) for level, split in rows]

    def _where(self, fp: bytes, levels: list[tuple[int, int]] | None = None) -> tuple[str, bytes]:
        """The bucket key and field of a fingerprint (levels: _levels(), read if not given)."""
        g = group_of(fp, self.groups)
        level, split = (levels or self._levels())[g]
        return f"{self._prefix}{g}}}:f:{bucket_in(fp, level, split)}", fp

    def _bucket_keys(self) -> list[str]:
        """Every bucket's key, group by group."""
        return [
            f"{self._prefix}{g}}}:f:{b}"
            for g, (level, split) in enumerate(self._levels())
            for b in range((1 << level) + split)
        ]  # group by group: a split adds its group's next bucket

    # -- the batch script ----------------------------------------------------------------

    def _check(self, fps: Sequence[bytes]) -> list[bytes]:
        self._usable()
        if isinstance(fps, (bytes, bytearray, str)):
            raise TypeError("expected a sequence of 16-byte fingerprints, not a single value")
        fps = list(fps)
        for fp in fps:
            if not isinstance(fp, bytes) or len(fp) != FP_BYTES:
                raise TypeError(f"a fingerprint is 16 bytes, not {fp!r:.40}")
        return fps

    def _calls(
        self, fps: Sequence[bytes], idx: Sequence[int], most: int = CALL_KEYS
    ) -> list[tuple[str, list[int]]]:
        """The script calls for fingerprints fps[i], i in idx: (receipt prefix, positions in
        idx), `most` at most each, one group per call on a cluster."""
        if self._cluster:
            parts: defaultdict[int, list[int]] = defaultdict(list)
            for pos, i in enumerate(idx):
                parts[group_of(fps[i], self.groups)].append(pos)
            groups = [(f"{self._prefix}{g}}}:receipt:", p) for g, p in sorted(parts.items())]
        else:
            groups = [(redis_store.key(self.name, "receipt:"), list(range(len(idx))))]
        return [
            (prefix, positions[start : start + most])
            for prefix, positions in groups
            for start in range(0, len(positions), most)
        ]

    def _send(
        self,
        mode: str,
        fps: Sequence[bytes],
        idx: Sequence[int],
        stamp: str,
        claim: Callable[[], ClaimArgs],
        hold: Callable[[list[bytes]], None] | None = None,
        extra: Sequence[int] = (),
    ) -> bytes:
        """One script call per part of _calls: one answer byte per fps[i], i in idx, in order
        (OWN as NEW). hold gets the fingerprints each call answered new, as soon as it answers.
        extra: a claim's further sightings of each fps[idx[p]] (0-255), or none."""
        answers = bytearray(len(idx))
        for receipt_prefix, positions in self._calls(fps, idx):
            if mode in ("claim", "contains"):  # one command per bucket's run (bucket_order)
                groups = self.groups
                positions.sort(key=lambda p: bucket_order(fps[idx[p]], groups))
            receipt = receipt_prefix + uuid.uuid4().hex
            chunk = b"".join(fps[idx[p]] for p in positions)
            touched = sorted({group_of(fps[idx[p]], self.groups) for p in positions})
            markers = [f"{self._prefix}{g}}}:n" for g in touched]
            more = bytes(extra[p] for p in positions) if extra else b""
            fields = {**self._fields, "mode": mode, "fps": chunk, "now": stamp, "extra": more}
            fields["marks"] = " ".join(
                f"{g}:{self._marks.expected(m)}" for g, m in zip(touched, markers, strict=True)
            )
            claimed = claim()
            keys, args = LIBRARY_BATCH.call(
                {"receipt": receipt}, {**fields, **claim_fields(claimed)}
            )

            def call(keys: list[str] = keys, args: list[Any] = args) -> Any:
                return self._script(keys=keys, args=args)

            answer = retrying(call, f"{self._what}: {mode}")
            for marker in markers:
                self._marks.advanced(marker)
            if len(answer) != len(positions):
                raise FormatError(f"library script answered {len(answer)} of {len(positions)}")
            if mode == "claim" and Answer.NEW in answer:  # its new URLs' records, by group
                recorded: defaultdict[int, list[bytes]] = defaultdict(list)
                for p, c in zip(positions, answer, strict=True):
                    if c == Answer.NEW:
                        recorded[group_of(fps[idx[p]], self.groups)].append(fps[idx[p]])
                self._record_calls.append((claimed.call, recorded))
            answer = answer.replace(bytes([Answer.OWN]), bytes([Answer.NEW]))
            for p, c in zip(positions, answer, strict=True):
                answers[p] = c
            if hold is not None:
                hold(
                    [fps[idx[p]] for p, c in zip(positions, answer, strict=True) if c == Answer.NEW]
                )
            self.io.round_trips += 1
        return bytes(answers)

    def _run(self, mode: str, fps: Sequence[bytes]) -> list[bool]:
        """A batch that claims nothing (contains, release, forget): True where "1"."""
        fps = self._check(fps)
        answer = self._send(mode, fps, range(len(fps)), "0", lambda: self._claims.args(0))
        self.io.lookups += len(fps)
        if mode != "contains":
            self.io.writes += len(fps)
        return [c == Answer.NEW for c in answer]

    def claim(self, fps: Sequence[bytes], now: float | None = None) -> list[bool]:
        """Insert each fingerprint if absent, in order: True where it was new (refs = 1,
        first and last seen = now); a present one gets one more reference and last seen = now.
        Atomic per fingerprint among all clients: exactly one caller gets True for it (until
        it is forgotten), unless its claimer died or stalled past its lease before
        acknowledging (see shared/claims.py). Waits (about one lease at most) for
        fingerprints another client claimed and has not acknowledged."""
        fps = self._check(fps)
        if not fps:
            return []
        stamp = str(min(max(int(time.time() if now is None else now), 0), 2**32 - 1))
        claims = self._claims
        with claims.batch(self._abandon, fps) as priority:
            args = lambda: claims.args(priority)  # noqa: E731
            hold = lambda new: claims.hold(new, priority)  # noqa: E731

            def ask(idx: list[int]) -> bytes:
                sent, extra, slot = once_each(fps, idx)
                said = self._send("claim", fps, sent, stamp, args, hold, extra)
                return spread_answers(idx, sent, said, slot, Answer.PENDING, Answer.SEEN)

            answers = ask_until_decided(ask, fps, claims, self._renew)
        self.io.lookups += len(fps)
        self.io.writes += len(fps)
        if claims.auto:
            self.acknowledge()
        return answers

    def _release(self, fps: list[bytes], how: str) -> int:
        """Release this client's claims of fps (ClaimedAnswers): an ack deletes its calls'
        records natively (_drop_records), the rest goes per key (records expanded)."""
        records, self._record_calls = self._record_calls, []
        if how == "ack" and records and fps:
            fps = _drop_records(self, fps, records)
        if not fps:
            return 0
        args = lambda: self._claims.args(0)  # noqa: E731
        answer = self._send(how, fps, range(len(fps)), "0", args)
        return answer.count(Answer.SEEN)

    def contains(self, fps: Sequence[bytes]) -> list[bool]:
        """Whether each fingerprint is in the library (read only)."""
        return self._run("contains", fps)

    def present(self, fps: Sequence[bytes], *, batched: bool = True) -> set[bytes]:
        """The FingerprintLibrary look-up: which of fps are in the library."""
        return {fp for fp, hit in zip(fps, self.contains(fps), strict=True) if hit}

    def release(self, fps: Sequence[bytes]) -> list[bool]:
        """Drop one reference of each; a record at zero references is removed.
        True where the fingerprint was present."""
        answers = self._run("release", fps)
        if any(answers):  # records went: the clients' memories of "seen" drop
            seen_cache.bump_epoch(self._client, self.name)
        return answers

    def forget(self, fps: Sequence[bytes]) -> list[bool]:
        """Remove each fingerprint whatever its references (it is new again). True where it was
        present."""
        answers = self._run("forget", fps)
        if any(answers):  # records went: the clients' memories of "seen" drop
            seen_cache.bump_epoch(self._client, self.name)
        return answers

    # -- reading the records ---------------------------------------------------------------

    def records(self, fps: Iterable[bytes]) -> dict[bytes, Record]:
        """The record of each fingerprint present (times in whole seconds)."""
        self._usable()
        wanted = list(dict.fromkeys(fps))

        def read() -> list[Any]:
            while True:  # a split between reading the levels and the records: read again
                levels = self._levels()
                pipe = self._client.pipeline(transaction=False)
                for fp in wanted:
                    pipe.hget(*self._where(fp, levels))
                values = list(pipe.execute())
                if self._levels() == levels:
                    return values

        values = retrying(read, "records") if wanted else []
        self.io.lookups += len(wanted)
        self.io.round_trips += 1
        return {fp: record_of(v) for fp, v in zip(wanted, values, strict=True) if v is not None}

    def fingerprints(self, chunk: int = 65536) -> Iterator[list[bytes]]:
        """Every fingerprint, in chunks (O(library); a record moved by a split meanwhile may
        come twice, none is missed)."""
        self._usable()
        out: list[bytes] = []
        for buckets in _read_buckets(self):
            for fields in buckets:
                out.extend(fields)
            while len(out) >= chunk:
                yield out[:chunk]
                out = out[chunk:]
        if out:
            yield out

    def older_than(self, timestamp: float, *, by: str = "first_seen") -> list[bytes]:
        """Fingerprints first reported new (or last seen) before timestamp (O(library))."""
        column = time_index(by)
        self._usable()
        return [
            fp
            for buckets in _read_buckets(self)
            for fields in buckets
            for fp, value in fields.items()
            if record_of(value)[column] < timestamp
        ]

    def forget_older_than(self, timestamp: float, *, by: str = "first_seen") -> int:
        """Forget every URL first reported new (or last seen) before timestamp; how many."""
        return sum(self.forget(self.older_than(timestamp, by=by)))

    def _counters(self, *fields: str) -> list[list[Any]]:
        """Each group's counter hash's `fields` (one pipeline)."""
        self._usable()

        def read() -> list[Any]:
            pipe = self._client.pipeline(transaction=False)
            for g in range(self.groups):
                pipe.hmget(f"{self._prefix}{g}}}:n", *fields)
            return list(pipe.execute())

        return retrying(read, f"{self._what}: {fields[0]}")

    def count(self) -> int:
        """Records in the library (one counter per group)."""
        total = 0
        for g, (count, instance) in enumerate(self._counters("count", "instance")):
            marker = f"{self._prefix}{g}}}:n"
            if instance is None or instance.decode() != self._instance:
                raise FilterLostError(f"{self._what}: {marker} is gone or replaced; {LOST_HELP}")
            total += meta_number(self._what, marker, "count", count)
        return total

    def claims_held(self) -> int:
        self._usable()
        read = lambda: held_claims(self._client, self._prefix, self.groups)  # noqa: E731
        return int(retrying(read, f"{self._what}: claims"))

    def get_meta(self, name: str) -> str | None:
        value = self.params.get(name)
        return None if value is None else str(value)

    def memory_usage(self, sample: int | None = None) -> int:
        """Bytes Redis reports for the library's keys (MEMORY USAGE). Exact by default (a SCAN:
        O(buckets)); with sample=n, estimated from n evenly spaced buckets (receipts and
        counters left out)."""
        self._usable()
        return _memory_usage(self, sample)

    def destroy(self) -> None:
        """Delete every key of the library, its groups first, its record last (a destroy
        that stops part way leaves a library that says it lost data, never one that looks
        whole)."""
        self._usable()
        retrying(lambda: _delete_keys(self), f"{self._what}: destroy")
        self._claims.take()  # nothing left to release
        self.close()

    @property
    def path(self) -> str:
        return f"redis library {self.name!r}"

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r} groups={self.groups}>"


def _drop_records(
    library: RedisLibrary, fps: list[bytes], records: list[tuple[int, dict[int, list[bytes]]]]
) -> list[bytes]:
    """RedisLibrary's acknowledgement of these calls' claims records (deleted natively: one
    intact holds only claims still the caller's, for a record is expanded before anyone looks
    a claim up or takes one over): fps less what they covered, left to release per key. A
    reply lost and resent finds them gone: counted as taken over (nothing else changes)."""
    owner = library._claims.owner
    fields = [
        (f"{library._prefix}{g}}}:r", f"{owner} {call}", part)
        for call, groups in records
        for g, part in groups.items()
    ]

    def drop() -> list[Any]:
        pipe = library._client.pipeline(transaction=False)
        for key, field, _ in fields:
            pipe.hdel(key, field)
        return list(pipe.execute())

    gone = retrying(drop, f"{library._what}: ack")
    library.io.round_trips += 1
    done = {fp for (_, _, part), n in zip(fields, gone, strict=True) if n for fp in part}
    return [fp for fp in fps if fp not in done]


def _delete_keys(library: RedisLibrary) -> None:
    """RedisLibrary.destroy: the groups' keys, then the record, its kind and its epoch."""
    client = library._client
    keys = list(client.scan_iter(match=f"{glob_escape(library._prefix)}*", count=1000))
    pipe = client.pipeline(transaction=False)
    for key in keys:
        pipe.delete(key)
    pipe.execute()
    kind, epoch = redis_store.key(library.name, "kind"), seen_cache.epoch_key(library.name)
    client.delete(library._meta, kind, epoch)


def _read_buckets(library: RedisLibrary) -> Iterator[list[dict[bytes, bytes]]]:
    """RedisLibrary._buckets: the buckets the groups' levels name, in order. A split meanwhile
    moves records into a bucket not read yet (it did not exist), which is read too: a record
    is never missed, and one moved during the read may come twice."""
    levels = library._levels()
    todo, done = library._bucket_keys(), set()
    while todo:
        part, todo = todo[:512], todo[512:]

        def read(part: list[str] = part) -> list[Any]:
            pipe = library._client.pipeline(transaction=False)
            for key in part:
                pipe.hgetall(key)
            return list(pipe.execute())

        contents = retrying(read, "scan")
        done.update(part)
        yield contents
        if library._levels() != levels:
            levels = library._levels()
            todo = [key for key in library._bucket_keys() if key not in done]


def _memory_usage(library: RedisLibrary, sample: int | None) -> int:
    """RedisLibrary.memory_usage."""
    client, prefix = library._client, library._prefix
    buckets = library._bucket_keys()
    if sample is not None and sample < len(buckets):
        step = len(buckets) / max(sample, 1)
        keys = [buckets[i] for i in sorted({int(i * step) for i in range(max(sample, 1))})]
        scale = len(buckets) / len(keys)
    else:
        pattern = f"{glob_escape(prefix)}*"
        keys = retrying(lambda: list(client.scan_iter(match=pattern, count=1000)), "scan")
        scale = 1.0

    def usage() -> int:
        pipe = client.pipeline(transaction=False)
        for key in [library._meta, *keys]:
            pipe.memory_usage(key, samples=0)
        meta, *rest = (int(v or 0) for v in pipe.execute())
        return meta + round(sum(rest) * scale)

    return retrying(usage, "memory usage")


def describe_redis_library(url: str, name: str) -> dict[str, object]:
    """What `urlseen info --redis URL --name NAME` prints for a shared library; the memory is
    exact up to 4096 buckets, an estimate from 1024 of them beyond."""
    library = RedisLibrary(url, name, allow_eviction=True)  # read only: nothing to lose
    count = library.count()
    buckets = len(library._bucket_keys())
    used = library.memory_usage(sample=None if buckets <= 4096 else 1024)
    return {
        "redis": url,
        "name": name,
        "kind": "redis-library",
        "count": count,
        "capacity": library.params["capacity"],
        "fingerprint": library.fingerprint,
        "groups": library.groups,
        "buckets": buckets,
        "redis_bytes": used,
        "bytes_per_url": used / count if count else None,
        "claims": library.claims_held(),
    }
