"""A SplittableBloomFilter's tree and leaves in Redis, single server or Cluster.

Keys of filter `name` (E: the name escaped, redis_store.escape):
- `urlseen:{E}:kind`: the kind record ("dsbf"), `urlseen:{E}:tree`: the tree hash (params,
  instance, version, nodes, split locks; dsbf_tree.lua);
- per leaf, under its own hash tag `{E:leaf:ID}` so that leaves spread over a Cluster's
  slots while each leaf's script touches one slot: `:meta` (state, count, instance), `:bits`
  (the leaf's Bloom filter, a bitmap string of the size the tree records for the leaf),
  `:fps` (its fingerprints: first the code of those a split or growth gave it, sorted and
  Elias-Fano coded by splittable/coding.py, `code_bytes` long and counting `coded` URLs
  (meta fields), then those it reported new since, raw: fp_bytes per URL; one string grown in
  allocator-sized steps, so the code's allocator slack is the raw tail's room), `:claims`
  (shared/claims.py) and `:records` (claims of whole calls: claims.lua, claims_record;
  format urlseen-dsbf/6).
Check-and-add reuses the Bloom filter's batch script (bloom_batch.lua) in its leaf mode; its
claims answer a call sent again after a lost reply as the first time, and a split's copies
leave receipts. Every call checks the filter's instance id: a leaf or tree that vanished is
an error (FilterLostError), never a leaf made anew.

Server CPU (issue 17, benchmarks/REDIS.md "Part E"): a batch's repeats are answered from a
native snapshot of its leaves (shared/native.py), the rest go in one script call for all
leaves on a single server (dsbf_batch.lua), and a split's copies are computed in the client and
written with one `fill` per child (dsbf_leaf.lua), not a Lua loop per copied URL. As for
RedisBloomFilter, the snapshot also decides each leaf's new keys (blocked layout: the script
checks and takes the answers, redis_native.optimistic_args). A call claims each leaf's new keys
in one record (one field of `:records`), and a young acknowledgement deletes it whole (DROP),
with no claim work per key, as RedisBloomFilter does.

Acknowledgements racing a split (copy_claims). A split seals the leaf, then copies its claims
and records into the children, then swaps. A DROP (or any release) is one script call that
deletes in the leaf and, if the leaf is sealed, answers MOVED: its client then waits for the
swap and releases again in the children. So a release that ran before the seal left nothing
to copy; one that ran after it is repeated in the children once the swap shows them, and the
swap comes after the copy is written there: a copy never outlives its acknowledgement. Records
are copied as records (each child gets, under the same field, the record's keys it routes to),
read with the claims in one MULTI/EXEC: a release on the sealed leaf may expand records into
per-key claims between two separate reads, and a claim read in neither would be lost. A
DROP finding no record (expanded since) deletes its keys' claims one by one.
"""

from __future__ import annotations

import functools
import json
import uuid
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

from urlseen import _core
from urlseen.errors import ConfigError, FilterLostError, FormatError
from urlseen.shared import client as redis_store
from urlseen.shared.claims import record_parts, recorded_claims
from urlseen.shared.client import RECEIPT_SECONDS, retrying
from urlseen.shared.native import (
    BitsRead,
    Optimism,
    fell_back,
    optimistic_args,
    seen_by_claims,
    server_ms,
)
from urlseen.shared.scripts import LEAF_BATCH, lua_text
from urlseen.splittable.tree import (
    MISSING,
    MOVED,
    PENDING,
    LeafAnswer,
    LeafInfo,
    LeafOp,
    LeafReply,
    Split,
    Tree,
    write_limit,
)

_LAYOUTS = {"standard": _core.LAYOUT_STANDARD, "blocked": _core.LAYOUT_BLOCKED}
_MASKED = (LeafOp.CONTAINS, LeafOp.ADD, LeafOp.COPY)  # the operations that read or set bits
_Read = tuple[bytes, "dict[int, int] | None", bytes]  # a leaf's bits as read, placed, its count
NATIVE_FROM = 0.5  # an ADD reads natively first when this share of the last one was seen
# (native_from on a store: 0 always reads first, above 1 never), as RedisBloomFilter does
CLUSTER_THREADS = 8  # per-leaf script calls in flight at once on a Redis Cluster
KIND = "dsbf"
OWN = 0x54  # bloom_batch.lua's b"T": new, claimed by a field of its own (not the call's record)


class RedisLeafStore:
    """LeafStore on a redis-py client (redis.Redis or redis.RedisCluster)."""

    claims = True

    def __init__(self, redis: Any, name: str, receipt_seconds: int = RECEIPT_SECONDS) -> None:
        self.name = redis_store.check_name(name)
        self.client = redis_store.connect(redis)
        self.tree_key = redis_store.key(name, "tree")
        self.kind_key = redis_store.key(name, "kind")
        self.receipt_seconds = receipt_seconds
        self._what = f"splittable filter {name!r}"
        self._escaped = redis_store.escape(name)
        self._cluster = redis_store.is_cluster(self.client)
        self._tree_script = redis_store.load_script(self.client, "dsbf_tree.lua")
        self._leaf_script = redis_store.load_script(self.client, "dsbf_leaf.lua")
        self._batch_script = redis_store.load_script(self.client, "leaf_batch.lua")
        self._multi_script = self.client.register_script(_multi_source())
        self.native_from = NATIVE_FROM
        self.native_copy = True  # a split's copies set the bits in the client (_fill)
        self.optimistic = True  # (blocked layout) the snapshot decides new keys too
        self._optimism = Optimism()
        self._seen_share = 1.0
        self._params: dict[str, Any] | None = None
        self._instance = ""
        self._sizes: dict[str, int] = {}  # leaf -> bits (a leaf id never changes size)
        self._executor: ThreadPoolExecutor | None = None

    def check_eviction(self, allow: bool) -> None:
        redis_store.check_eviction(self.client, allow, self._what)

    def _keys(self, leaf: str) -> tuple[str, str, str, str]:
        tag = f"{self._escaped}:leaf:{leaf}"
        return (
            redis_store.tagged(tag, "meta"),
            redis_store.tagged(tag, "bits"),
            redis_store.tagged(tag, "fps"),
            redis_store.tagged(tag, "claims"),
        )

    def _records(self, leaf: str) -> str:
        """The leaf's claims of whole calls (claims.lua, claims_record), beside its claims."""
        return redis_store.tagged(f"{self._escaped}:leaf:{leaf}", "records")

    def _all_keys(self, leaf: str) -> tuple[str, ...]:
        return (*self._keys(leaf), self._records(leaf))

    def _tree(self, op: str, *args: Any) -> Any:
        argv = [op, self._instance, *args]
        return retrying(
            lambda: self._tree_script(keys=[self.tree_key, self.kind_key], args=argv),
            f"{self._what}: {op}",
        )

    def holds_kind(self) -> bool:
        """Whether the name holds a splittable filter (its kind record says so)."""
        return redis_store.holds(self.client, self.name, KIND)

    def load(self) -> Tree | None:
        def read() -> tuple[Any, dict[bytes, bytes]]:
            pipe = self.client.pipeline(transaction=False)
            pipe.get(self.kind_key)
            pipe.hgetall(self.tree_key)
            kind, raw = pipe.execute()
            return kind, raw

        kind, raw = retrying(read, f"{self._what}: load")
        if kind is not None and kind.decode() != KIND:
            raise ConfigError(
                f"Redis holds a {kind.decode()} filter named {self.name!r}, not a dsbf: a name "
                "holds one kind of filter (choose another name, or the kind it holds)"
            )
        if not raw:
            return None
        try:
            params = json.loads(raw[b"params"])
            nodes = {k[5:].decode(): v.decode() for k, v in raw.items() if k.startswith(b"node:")}
            splits = {node: Split.parse(v) for node, v in nodes.items() if Split.describes(v)}
            sizes = {node: int(v[5:]) for node, v in nodes.items() if v.startswith("leaf ")}
            version = int(raw[b"version"])
            instance = raw[b"instance"].decode()
        except (KeyError, ValueError, UnicodeDecodeError) as exc:
            raise FormatError(f"Redis key {self.tree_key}: not a urlseen splittable tree") from exc
        if kind is None:
            raise FormatError(
                f"Redis key {self.tree_key}: a splittable filter without a kind record, made "
                "by an older urlseen: destroy it or use a new name"
            )
        if instance != self._instance:  # another filter of the name: its own leaf ids
            self._sizes = {}
        self._params, self._instance = params, instance
        self._sizes.update(sizes)
        return Tree(version, params, splits, ready=b"ready" in raw, sizes=sizes)

    def create(self, params: Mapping[str, Any], root: Split, bits: int) -> dict[str, Any]:
        text = json.dumps(dict(params), sort_keys=True)
        argv = ["create", params["instance"], text, root.describe(), len(root.children), bits]
        kind, won = retrying(
            lambda: self._tree_script(keys=[self.tree_key, self.kind_key], args=argv),
            f"{self._what}: create",
        )
        if kind.decode() != KIND:
            raise ConfigError(
                f"Redis holds a {kind.decode() or 'foreign'} filter named {self.name!r}, not "
                "a dsbf: a name holds one kind of filter"
            )
        self._params = json.loads(won)
        self._instance = self._params["instance"]
        return self._params

    def mark_ready(self) -> None:
        self._tree("ready")

    def make_leaves(self, leaves: Sequence[str], bits: int, params: Mapping[str, Any]) -> None:
        nbytes = bits // 8
        for leaf in leaves:
            self._sizes[leaf] = bits
            keys, args = list(self._all_keys(leaf)), ["make", nbytes, params["instance"]]
            retrying(
                functools.partial(self._leaf_script, keys=keys, args=args), f"{self._what}: make"
            )

    def new_leaf_ids(self, count: int) -> list[str]:
        last = int(self._tree("ids", count))
        return [str(i) for i in range(last - count + 1, last + 1)]

    def _masks(self, leaf: str, fps: list[bytes]) -> bytes:
        p = self._params
        assert p is not None, "load or create the tree first"
        nbits = self._sizes.get(leaf, p["leaf_bits"])
        return _core.byte_masks(fps, nbits, p["k"], _LAYOUTS[p["layout"]], p["seed"], p["hash_id"])

    def _leaf_call(
        self, leaf: str, fps: list[bytes], op: LeafOp, masks: bytes | None, extra: list[Any]
    ) -> tuple[list[str], list[Any]]:
        """One leaf's KEYS and its own ARGV of bloom_batch.lua (masks, fingerprints, write
        limit, length of the bits, and its ARGV[14..] `extra`: DROP's are its pairs,
        _drop_pairs, with no fingerprints); the ARGV every leaf shares are _shared_args."""
        p = self._params
        assert p is not None, "load or create the tree first"
        nbits = self._sizes.get(leaf, p["leaf_bits"])
        if masks is None:
            masks = self._masks(leaf, fps) if op in _MASKED else b""
        meta, bits, fps_key, claims = self._keys(leaf)
        # A receipt only for COPY: claims answer a resent ADD; the others write nothing to keep
        receipt = redis_store.tagged(f"{self._escaped}:leaf:{leaf}", f"receipt:{uuid.uuid4().hex}")
        args = [masks, b"".join(fps), write_limit(p, nbits), nbits // 8, extra]
        return [bits, meta, receipt, claims, fps_key, self._records(leaf)], args

    def _shared_args(self, op: LeafOp, claim: Sequence[Any]) -> list[Any]:
        p = self._params
        assert p is not None, "load or create the tree first"
        ttl = self.receipt_seconds if op == LeafOp.COPY else 0
        return [int(op), ttl, p["layout"], p["fp_bytes"], self._instance, *claim]

    def check_and_add(
        self,
        groups: Mapping[str, list[bytes]],
        op: LeafOp,
        claim: Sequence[Any] = ("", 0, 0, 1),
        records: Mapping[str, Sequence[int]] | None = None,
        room: Mapping[str, int] | None = None,
    ) -> dict[str, LeafReply]:
        """The op on each leaf's fingerprints. An ADD first answers, from one native snapshot,
        the keys found seen (_native); the rest, up to the leaf's room (the rest deferred), go
        to the scripts: on a single server one call for all leaves (dsbf_batch.lua), on a
        Cluster one per leaf, side by side. With the blocked layout each leaf's call carries
        the snapshot's answers and blocks (optimistic_args), unless most leaves of a recent
        batch fell back (Optimism)."""
        groups = {leaf: fps for leaf, fps in groups.items() if fps}
        filled: dict[str, LeafReply] = {}
        if op == LeafOp.COPY and self.native_copy:
            filled = self._fill(groups)
            groups = {leaf: fps for leaf, fps in groups.items() if leaf not in filled}
        masks = {}
        if op in _MASKED:
            masks = {leaf: self._masks(leaf, fps) for leaf, fps in groups.items()}
        seen: dict[str, LeafAnswer] = {}
        reads: dict[str, _Read] = {}
        ask = {leaf: list(range(len(fps))) for leaf, fps in groups.items()}
        p = self._params
        assert p is not None, "load or create the tree first"
        hopeful = op == LeafOp.ADD and self.optimistic and p["layout"] == "blocked"
        hopeful = hopeful and self._optimism.now()
        if op == LeafOp.ADD and (hopeful or self._seen_share >= self.native_from):
            seen, reads = self._native(groups, masks, str(claim[0]), int(claim[1]))
            for leaf, answer in seen.items():
                ask[leaf] = [j for j, new in enumerate(answer.new) if new]
        follow: dict[str, dict[int, int]] = {}
        deferred: dict[str, list[int]] = {}
        if op == LeafOp.ADD:
            for leaf, idx in ask.items():
                ask[leaf], follow[leaf] = _first_of_each(groups[leaf], idx)
            for leaf, limit in (room or {}).items():
                idx = ask.get(leaf, [])
                if len(idx) > max(1, limit):
                    ask[leaf], held = idx[: max(1, limit)], set(idx[max(1, limit) :])
                    held |= {j for j, first in follow[leaf].items() if first in held}
                    deferred[leaf] = sorted(held)
        calls = {}
        for leaf, idx in ask.items():
            if not idx:
                continue
            whole = len(idx) == len(groups[leaf])
            fps = groups[leaf] if whole else [groups[leaf][j] for j in idx]
            part = masks.get(leaf) if whole else None
            extra: list[Any] = []
            if hopeful and leaf in reads:
                part = part or self._masks(leaf, fps)
                extra = optimistic_args(part, *reads[leaf])
            if op == LeafOp.DROP:
                extra = _drop_pairs(str(claim[0]), fps, (records or {}).get(leaf))
                fps = []
            calls[leaf] = self._leaf_call(leaf, fps, op, part, extra)
        replies = dict(zip(calls, self._run(calls, op, claim), strict=True))
        out: dict[str, LeafReply] = dict(filled)
        tried = fell = 0
        for leaf, fps in groups.items():
            if leaf not in replies:  # every key answered seen by the snapshot
                out[leaf] = seen[leaf]
                continue
            reply = replies[leaf]
            if reply in (b"M", b"X"):
                out[leaf] = MOVED if reply == b"M" else MISSING
                continue
            if op == LeafOp.DROP:  # how many claims it deleted: the rest were not there
                deleted = int(reply)
                out[leaf] = LeafAnswer([j < deleted for j in range(len(fps))], 0)
                continue
            if calls[leaf][1][4] and op == LeafOp.ADD:
                reply, back = fell_back(reply)
                tried, fell = tried + 1, fell + back
            idx, n = ask[leaf], len(ask[leaf])
            new = [False] * len(fps)
            for j, c in zip(idx, reply[:n], strict=True):
                new[j] = c in (0x31, OWN)
            pending = [idx[j] for j, c in enumerate(reply[:n]) if c == PENDING]
            loose = [idx[j] for j, c in enumerate(reply[:n]) if c == OWN]
            later = deferred.get(leaf, [])
            if follow.get(leaf):  # a repeat within the call: seen, or pending as its first is
                waits = set(pending)
                pending = sorted(pending + [j for j, a in follow[leaf].items() if a in waits])
            out[leaf] = LeafAnswer(new, int(reply[n:] or 0), pending, loose, later)
        if op == LeafOp.ADD:
            self._optimism.heard(tried, fell)
            answers = [a for a in out.values() if isinstance(a, LeafAnswer)]
            total = sum(len(a.new) - len(a.deferred) for a in answers)
            seen_keys = sum(a.new.count(False) - len(a.deferred) for a in answers)
            self._seen_share = seen_keys / total if total else 1.0
        return out

    def _run(
        self, calls: Mapping[str, tuple[list[str], list[Any]]], op: LeafOp, claim: Sequence[Any]
    ) -> list[Any]:
        """The scripts' answers for each leaf's call, in order."""
        if not calls:
            return []
        what = f"{self._what}: {op.name.lower()}"
        shared = self._shared_args(op, claim)
        if not self._cluster:
            keys = [k for leaf_keys, _ in calls.values() for k in leaf_keys]
            args = list(shared)
            for _, (*own, extra) in calls.values():
                args += [*own, len(extra), *extra]
            return list(retrying(functools.partial(self._multi_script, keys=keys, args=args), what))

        def one(call: tuple[list[str], list[Any]]) -> Any:
            keys, (masks, fps, limit, nbytes, extra) = call
            args = [masks, shared[0], shared[1], shared[2], fps, shared[3], limit, shared[4],
                    nbytes, *shared[5:], *extra]  # fmt: skip
            return retrying(functools.partial(self._batch_script, keys=keys, args=args), what)

        if len(calls) == 1:
            return [one(next(iter(calls.values())))]
        # one script per leaf on its own node: the calls run side by side
        return list(self._pool().map(one, calls.values()))

    def _fill(self, groups: Mapping[str, list[bytes]]) -> dict[str, LeafReply]:
        """A split's COPY without a loop in Lua (it cost ~3.4 us of server CPU per copied URL,
        a third of all on a growing filter): one snapshot reads each child's state, count and
        bits, the client sets the copied fingerprints' bits (the same bytes bloom_batch.lua
        would set) and dsbf_leaf.lua's fill writes them back with the fingerprints, if the
        child has not changed since (a child is written only by its splitter until the swap;
        else, and for a child whose bits are not as made, the script copies). A resent fill
        is answered by its token, as a COPY by its receipt."""
        p = self._params
        assert p is not None, "load or create the tree first"

        def queue(pipe: Any, leaf: str) -> int:
            meta, bits, _, _ = self._keys(leaf)
            pipe.hmget(meta, "instance", "state", "count")
            pipe.get(bits)
            return 2

        out: dict[str, LeafReply] = {}
        for leaf, ((instance, state, count), bits) in self._snapshot(
            list(groups), queue, "read child"
        ).items():
            nbits = self._sizes.get(leaf, p["leaf_bits"])
            if instance is None or instance.decode() != self._instance:
                out[leaf] = MISSING
                continue
            if state != b"active" or count is None or bits is None or len(bits) != nbits // 8:
                continue  # the script answers it (moved, or lost)
            buffer = bytearray(bits)
            layout = _LAYOUTS[p["layout"]]
            _core.BitFilter(
                buffer, 0, nbits, p["k"], layout, p["seed"], 0, -1, p["hash_id"]
            ).update(groups[leaf])
            meta, bits_key, fps_key, _ = self._keys(leaf)
            fps = b"".join(groups[leaf])
            args = ["fill", self._instance, int(count), uuid.uuid4().hex, bytes(buffer), fps,
                    p["fp_bytes"]]  # fmt: skip
            reply = retrying(
                functools.partial(self._leaf_script, keys=[meta, bits_key, fps_key], args=args),
                f"{self._what}: copy",
            )
            if reply == b"X":
                out[leaf] = MISSING
            elif reply == 1:
                out[leaf] = LeafAnswer([True] * len(groups[leaf]), int(count) + len(groups[leaf]))
        return out

    def _native(
        self,
        groups: Mapping[str, list[bytes]],
        masks: Mapping[str, bytes],
        owner: str,
        priority: int,
    ) -> tuple[dict[str, LeafAnswer], dict[str, _Read]]:
        """The leaves whose keys a snapshot can answer: per leaf, its answer with the keys
        found seen False and the others True (still to ask), and what it read (the bits, where
        each block sits in them, the count: what optimistic_args decides from). One MULTI/EXEC
        reads every leaf (on a Cluster one per leaf, each in its own slot), the same checks as
        the script first: a leaf missing, of another instance, sealed, at its write limit or
        damaged is left to the script, which answers it as before (FilterLostError, or ask the
        tree). A key found set is seen unless its claim says otherwise (claim_seen): then a second
        snapshot reads those claims (and the leaf's instance again, so that a leaf gone
        meanwhile is not read as one without claims)."""
        p = self._params
        assert p is not None, "load or create the tree first"
        plans: dict[str, BitsRead] = {}
        for leaf, fps in groups.items():
            nbits = self._sizes.get(leaf, p["leaf_bits"])
            plan = BitsRead(masks[leaf], nbits // 8, _LAYOUTS[p["layout"]], len(fps))
            if plan.possible:
                plans[leaf] = plan

        def queue(pipe: Any, leaf: str) -> int:
            meta, bits, fps_key, claims = self._keys(leaf)
            pipe.hmget(meta, "instance", "state", "count", "coded", "code_bytes")
            pipe.strlen(bits)
            pipe.strlen(fps_key)
            pipe.exists(claims, self._records(leaf))  # any claims: per key or in records
            plans[leaf].queue(pipe, bits)
            return 4 + plans[leaf].replies

        replies = self._snapshot(list(plans), queue, "read")
        found: dict[str, list[int]] = {}
        counts: dict[str, int] = {}
        reads: dict[str, _Read] = {}
        claimed: list[str] = []
        for leaf, reply in replies.items():
            (instance, state, count, coded, code_bytes), length, fps_length, held, *data = reply
            nbits = self._sizes.get(leaf, p["leaf_bits"])
            ok = instance is not None and instance.decode() == self._instance
            ok = ok and state == b"active" and length == nbits // 8 and count is not None
            ok = ok and int(count) < write_limit(p, nbits)
            if not ok:
                continue
            raw = (int(count) - int(coded or 0)) * p["fp_bytes"]
            if int(code_bytes or 0) + raw > fps_length:
                continue
            plan = plans[leaf]
            bits = plan.bits(data)
            present = plan.present(bits)
            found[leaf] = [j for j, bit in enumerate(present) if bit]
            counts[leaf] = int(count)
            reads[leaf] = (bits, plan.number, count)
            if held and found[leaf]:
                claimed.append(leaf)
        if claimed:
            self._judge_claims(claimed, groups, found, owner, priority)
        out = {}
        for leaf, keys in found.items():
            new = [True] * len(groups[leaf])
            for j in keys:
                new[j] = False
            out[leaf] = LeafAnswer(new, counts[leaf])
        return out, reads

    def _judge_claims(
        self,
        leaves: list[str],
        groups: Mapping[str, list[bytes]],
        found: dict[str, list[int]],
        owner: str,
        priority: int,
    ) -> None:
        """Keep in found[leaf] only the keys whose claims answer them seen (claim_seen), from
        one more snapshot of the leaves' claims, records and instances and the server's clock
        (none on a Cluster, whose transactions take keyed commands only: a claim then goes to
        the script)."""
        clock = not self._cluster

        def queue(pipe: Any, leaf: str) -> int:
            meta, _, _, claims = self._keys(leaf)
            if clock:
                pipe.time()
            pipe.hget(meta, "instance")
            pipe.hmget(claims, [groups[leaf][j] for j in found[leaf]])
            pipe.hgetall(self._records(leaf))
            return 4 if clock else 3

        width = self._fp_bytes()
        replies = self._snapshot(leaves, queue, "read claims")
        for leaf, reply in replies.items():
            now = server_ms(reply[0]) if clock else None
            instance, values, held = reply[-3:]
            if instance is None or instance.decode() != self._instance:
                found[leaf] = []
                continue
            if held:
                fps = [groups[leaf][j] for j in found[leaf]]
                recorded = recorded_claims(held.values(), set(fps), width)
                values = [
                    v if v is not None else recorded.get(fp)
                    for v, fp in zip(values, fps, strict=True)
                ]
            found[leaf] = seen_by_claims(found[leaf], values, owner, priority, now)

    def _snapshot(
        self, leaves: list[str], queue: Callable[[Any, str], int], what: str
    ) -> dict[str, list[Any]]:
        """Each leaf's replies to the commands queue(pipe, leaf) adds (it returns how many),
        all read in one MULTI/EXEC on a single server, in one per leaf (its slot) on a
        Cluster."""

        def read(part: list[str]) -> dict[str, list[Any]]:
            pipe = self.client.pipeline(transaction=True)
            counts = [queue(pipe, leaf) for leaf in part]
            flat, out, at = pipe.execute(), {}, 0
            for leaf, n in zip(part, counts, strict=True):
                out[leaf] = flat[at : at + n]
                at += n
            return out

        label = f"{self._what}: {what}"
        if not leaves:
            return {}
        if not self._cluster:
            return retrying(lambda: read(leaves), label)
        out: dict[str, list[Any]] = {}
        for part in self._pool().map(lambda leaf: retrying(lambda: read([leaf]), label), leaves):
            out.update(part)
        return out

    def _pool(self) -> ThreadPoolExecutor:
        """Threads for a Cluster's per-leaf calls (redis-py's cluster client is thread-safe):
        one round trip per batch in wall time instead of one per leaf."""
        if self._executor is None:
            self._executor = ThreadPoolExecutor(CLUSTER_THREADS, thread_name_prefix="urlseen")
        return self._executor

    def fingerprints(self, leaf: str, start: int, end: int) -> bytes:
        """The leaf's raw fingerprints (its tail), bytes [start, end)."""
        meta, _, fps, _ = self._keys(leaf)
        count, coded, code_bytes = retrying(
            lambda: self.client.hmget(meta, "count", "coded", "code_bytes"),
            f"{self._what}: read leaf",
        )
        width, at = self._fp_bytes(), int(code_bytes or 0)
        raw = int(count or 0) - int(coded or 0)
        end = min(end, width * raw)  # the string's tail is room to grow, not data
        if end <= start:
            return b""
        data: bytes = retrying(
            lambda: self.client.getrange(fps, at + start, at + end - 1), f"{self._what}: read leaf"
        )
        return data

    def code(self, leaf: str) -> bytes:
        """The leaf's coded fingerprints, the start of its `:fps` (b"" if it has none; written
        once, by fill, before the leaf is in the tree). Shorter than the meta says: lost
        (FilterLostError)."""
        meta, _, fps, _ = self._keys(leaf)
        what = f"{self._what}: read leaf"
        size = int(retrying(lambda: self.client.hget(meta, "code_bytes"), what) or 0)
        code: bytes = b""
        if size:
            code = retrying(lambda: self.client.getrange(fps, 0, size - 1), what)
        if len(code) != size:
            raise FilterLostError(
                f"{self._what}: leaf {leaf} lost its coded fingerprints; {redis_store.LOST_HELP}"
            )
        return code

    def fill_coded(self, leaf: str, fps: list[bytes], code: bytes) -> LeafReply:
        """Into a fresh child: its bits set in the client (as _fill), written with the code
        by one fill (resent safely: its token). MOVED when the child is not fresh."""
        p = self._params
        assert p is not None, "load or create the tree first"
        meta, bits_key, fps_key, _ = self._keys(leaf)

        def read() -> list[Any]:
            pipe = self.client.pipeline(transaction=True)
            pipe.hmget(meta, "instance", "state", "count")
            pipe.get(bits_key)
            return list(pipe.execute())

        (instance, state, count), bits = retrying(read, f"{self._what}: read child")
        if instance is None or instance.decode() != self._instance:
            return MISSING
        nbits = self._sizes.get(leaf, p["leaf_bits"])
        if state != b"active" or count != b"0" or bits is None or len(bits) != nbits // 8:
            return MOVED
        buffer = bytearray(bits)
        layout = _LAYOUTS[p["layout"]]
        _core.BitFilter(buffer, 0, nbits, p["k"], layout, p["seed"], 0, -1, p["hash_id"]).update(
            fps
        )
        args = ["fill", self._instance, 0, uuid.uuid4().hex, bytes(buffer), b"", p["fp_bytes"],
                code, len(fps)]  # fmt: skip
        keys = [meta, bits_key, fps_key]
        reply = retrying(
            functools.partial(self._leaf_script, keys=keys, args=args), f"{self._what}: copy"
        )
        if reply == b"X":
            return MISSING
        if reply != 1:
            return MOVED
        return LeafAnswer([True] * len(fps), len(fps))

    def copy_claims(self, leaf: str, split: Split) -> None:
        """Copy the sealed leaf's claims into the split's children (before the swap), so
        that claims not yet acknowledged, and those of clients that died, stay claims: per-key
        claims as they are, each record as a record of the same field in every child its keys
        route to, holding those keys. Both read in one MULTI/EXEC, and why a copy never
        outlives an acknowledgement: the module's docstring."""
        parts, kept = self._claims_to_copy(leaf, split)

        def write(pipe: Any, child: str) -> None:
            if child in parts:
                pipe.hset(self._keys(child)[3], mapping=parts[child])
            if child in kept:
                pipe.hset(self._records(child), mapping=kept[child])

        self._each_leaf(list({**parts, **kept}), write)

    def _claims_to_copy(
        self, leaf: str, split: Split
    ) -> tuple[dict[str, dict[bytes, bytes]], dict[str, dict[bytes, bytes]]]:
        """copy_claims's read: per child, the per-key claims and the records it gets."""
        width = self._fp_bytes()

        def read() -> tuple[dict[bytes, bytes], dict[bytes, bytes]]:
            pipe = self.client.pipeline(transaction=True)
            pipe.hgetall(self._keys(leaf)[3])
            pipe.hgetall(self._records(leaf))
            held, records = pipe.execute()
            return held, records

        held, records = retrying(read, f"{self._what}: copy claims")
        parts: dict[str, dict[bytes, bytes]] = {}
        for fp, value in held.items():
            parts.setdefault(split.child(int.from_bytes(fp, "little")), {})[fp] = value
        kept: dict[str, dict[bytes, bytes]] = {}
        for call, value in records.items():
            claim, body = record_parts(value)
            routed: dict[str, list[bytes]] = {}
            for s in range(0, len(body), width):
                fp = body[s : s + width]
                routed.setdefault(split.child(int.from_bytes(fp, "little")), []).append(fp)
            for child, fps in routed.items():
                kept.setdefault(child, {})[call] = claim + b"\n" + b"".join(fps)
        return parts, kept

    def seal(self, leaf: str) -> int:
        meta, bits, fps, _ = self._keys(leaf)
        return int(
            retrying(
                lambda: self._leaf_script(
                    keys=[meta, bits, fps], args=["seal", self._instance, self._fp_bytes()]
                ),
                f"{self._what}: seal",
            )
        )

    def _fp_bytes(self) -> int:
        assert self._params is not None, "load or create the tree first"
        return int(self._params["fp_bytes"])

    def lock(self, leaf: str, token: str, ms: int) -> tuple[str, list[str]]:
        reply = self._tree("lock", leaf, token, ms)
        status = reply[0].decode()
        stale = reply[1].decode().split(",") if len(reply) > 1 and reply[1] else []
        return status, stale

    def refresh(self, leaf: str, token: str, ms: int, children: Sequence[str]) -> bool:
        return bool(self._tree("refresh", leaf, token, ms, ",".join(children)))

    def swap(self, leaf: str, token: str, split: Split, bits: int) -> int:
        return int(self._tree("swap", leaf, token, split.describe(), bits, *split.children))

    def unlock(self, leaf: str, token: str) -> None:
        self._tree("unlock", leaf, token)

    def _each_leaf(self, leaves: Sequence[str], call: Callable[[Any, str], Any]) -> list[Any]:
        def run() -> list[Any]:
            pipe = self.client.pipeline(transaction=False)
            for leaf in leaves:
                call(pipe, leaf)
            return list(pipe.execute())

        return retrying(run, f"{self._what}: leaves") if leaves else []

    def retire(self, leaf: str, grace_seconds: float) -> None:
        ms = max(1, int(grace_seconds * 1000))
        self._each_leaf([leaf], lambda pipe, lf: [pipe.pexpire(k, ms) for k in self._all_keys(lf)])

    def drop(self, leaves: Sequence[str]) -> None:
        self._each_leaf(leaves, lambda pipe, lf: [pipe.delete(k) for k in self._all_keys(lf)])

    def leaf_info(self, leaves: Sequence[str]) -> list[LeafInfo | None]:
        def ask(pipe: Any, leaf: str) -> None:
            meta, _, fps, claims = self._keys(leaf)
            pipe.hmget(meta, "state", "count", "instance", "coded", "code_bytes")
            pipe.strlen(fps)
            pipe.hlen(claims)
            pipe.hvals(self._records(leaf))

        replies = self._each_leaf(leaves, ask)
        out: list[LeafInfo | None] = []
        width = self._fp_bytes()
        for (state, count, instance, coded, code), length, claims, records in zip(
            replies[0::4], replies[1::4], replies[2::4], replies[3::4], strict=True
        ):
            mine = state is not None and instance is not None
            mine = mine and instance.decode() == self._instance
            claims += sum(len(record_parts(v)[1]) // width for v in records)
            info = LeafInfo(state.decode(), int(count), length, claims) if mine else None
            out.append(info and replace(info, coded=int(coded or 0), code_bytes=int(code or 0)))
        return out

    def memory_usage(self, leaves: Sequence[str]) -> int:
        keys = [self.tree_key] + [k for leaf in leaves for k in self._all_keys(leaf)]

        def usage() -> int:
            return sum(int(self.client.memory_usage(k) or 0) for k in keys)

        return retrying(usage, f"{self._what}: memory usage")

    def destroy(self) -> None:
        tree = self.load()
        leaves = [] if tree is None else [leaf for leaf, _ in tree.leaves()]
        self.drop(leaves)
        retrying(lambda: self.client.delete(self.tree_key, self.kind_key), f"{self._what}: destroy")


def _first_of_each(fps: list[bytes], idx: list[int]) -> tuple[list[int], dict[int, int]]:
    """The positions idx with each fingerprint's first only, and each later one's first: a
    repeat sent to the script made its call decide keys found present, which turned the
    leaf's records into claims one by one (2x the server CPU of a batch of repeats)."""
    firsts: dict[bytes, int] = {}
    keep: list[int] = []
    later: dict[int, int] = {}
    for j in idx:
        first = firsts.setdefault(fps[j], j)
        if first == j:
            keep.append(j)
        else:
            later[j] = first
    return keep, later


def _drop_pairs(owner: str, fps: list[bytes], calls: Sequence[int] | None) -> list[Any]:
    """A leaf's DROP arguments (bloom_batch.lua): per call whose record holds some of fps
    (calls: per key its call id, 0 or None for a key claimed one by one), the record's field
    and those keys packed; the keys claimed one by one after "" the same way."""
    groups: dict[int, list[bytes]] = {}
    for fp, call in zip(fps, calls or [0] * len(fps), strict=True):
        groups.setdefault(call, []).append(fp)
    out: list[Any] = []
    for call, part in groups.items():
        out += [f"{owner} {call}" if call else "", b"".join(part)]
    return out


def _multi_source() -> str:
    """dsbf_batch.lua's source: what leaf_batch.lua needs in front, leaf_batch.lua as the
    function leaf_batch, then the loop over the leaves (one leaf's rules stay in
    leaf_batch.lua alone)."""
    needs = "\n".join(lua_text(name) for name in LEAF_BATCH.needs)
    batch, multi = lua_text("leaf_batch.lua"), lua_text("dsbf_batch.lua")
    return f"{needs}\nlocal function leaf_batch(KEYS, ARGV)\n{batch}\nend\n{multi}"
