"""A SplittableBloomFilter's tree and leaves in Redis, single server or Cluster.

Keys of filter `name` (E: the name escaped, redis_store.escape):
- `urlseen:{E}:kind`: the kind record ("dsbf"), `urlseen:{E}:tree`: the tree hash (params,
  instance, version, nodes, split locks; dsbf_tree.lua);
- per leaf, under its own hash tag `{E:leaf:ID}` so that leaves spread over a Cluster's
  slots while each leaf's script touches one slot: `:meta` (state, count, instance), `:bits`
  (the leaf's Bloom filter, a bitmap string of the size the tree records for the leaf),
  `:fps` (its fingerprints, packed: fp_bytes (4 to 8) per URL in one string grown in
  allocator-sized steps, against ~70 bytes per member of a SET) and `:claims`
  (stores/redis_claims.py).
Check-and-add reuses the Bloom filter's batch script (bloom_batch.lua) in its leaf mode; its
claims answer a call sent again after a lost reply as the first time, and a split's copies
leave receipts. Every call checks the filter's instance id: a leaf or tree that vanished is
an error (FilterLostError), never a leaf made anew.
"""

from __future__ import annotations

import functools
import json
import uuid
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from urlseen import _core
from urlseen.errors import ConfigError, FormatError
from urlseen.stores import redis_store
from urlseen.stores.redis_store import RECEIPT_SECONDS, retrying
from urlseen.stores.splittable import (
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
CLUSTER_THREADS = 8  # per-leaf script calls in flight at once on a Redis Cluster
KIND = "dsbf"


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
        self._batch_script = redis_store.load_script(self.client, "bloom_batch.lua", claims=True)
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
            splits = {node: Split.parse(v) for node, v in nodes.items() if v.startswith("split ")}
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
            keys, args = list(self._keys(leaf)), ["make", nbytes, params["instance"]]
            retrying(
                functools.partial(self._leaf_script, keys=keys, args=args), f"{self._what}: make"
            )

    def new_leaf_ids(self, count: int) -> list[str]:
        last = int(self._tree("ids", count))
        return [str(i) for i in range(last - count + 1, last + 1)]

    def _leaf_call(
        self, leaf: str, fps: list[bytes], op: LeafOp, claim: Sequence[Any]
    ) -> tuple[list[str], list[Any]]:
        p = self._params
        assert p is not None, "load or create the tree first"
        nbits = self._sizes.get(leaf, p["leaf_bits"])
        masks = b""
        if op in (LeafOp.CONTAINS, LeafOp.ADD, LeafOp.COPY):
            masks = _core.byte_masks(
                fps, nbits, p["k"], _LAYOUTS[p["layout"]], p["seed"], p["hash_id"]
            )
        meta, bits, fps_key, claims = self._keys(leaf)
        # A receipt only for COPY: claims answer a resent ADD; the others write nothing to keep
        receipt = redis_store.tagged(f"{self._escaped}:leaf:{leaf}", f"receipt:{uuid.uuid4().hex}")
        ttl = self.receipt_seconds if op == LeafOp.COPY else 0
        args = [masks, int(op), ttl, p["layout"], b"".join(fps), p["fp_bytes"],
                write_limit(p, nbits), self._instance, nbits // 8, *claim]  # fmt: skip
        return [bits, meta, receipt, claims, fps_key], args

    def check_and_add(
        self, groups: Mapping[str, list[bytes]], op: LeafOp, claim: Sequence[Any] = ("", 0, 0, 1)
    ) -> dict[str, LeafReply]:
        calls = {leaf: self._leaf_call(leaf, fps, op, claim) for leaf, fps in groups.items() if fps}
        what = f"{self._what}: {op.name.lower()}"
        if len(calls) == 1:
            ((keys, args),) = calls.values()
            replies = [retrying(functools.partial(self._batch_script, keys=keys, args=args), what)]
        elif self._cluster:  # one script per leaf on its own node: the calls run side by side
            replies = list(
                self._pool().map(
                    lambda call: retrying(
                        functools.partial(self._batch_script, keys=call[0], args=call[1]), what
                    ),
                    calls.values(),
                )
            )
        else:

            def pipelined() -> list[Any]:
                pipe = self.client.pipeline(transaction=False)
                for keys, args in calls.values():
                    self._batch_script(keys=keys, args=args, client=pipe)
                return list(pipe.execute())

            replies = retrying(pipelined, what)
        out: dict[str, LeafReply] = {}
        for (leaf, fps), reply in zip(((k, groups[k]) for k in calls), replies, strict=True):
            if reply in (b"M", b"X"):
                out[leaf] = MOVED if reply == b"M" else MISSING
                continue
            n = len(fps)
            answers = reply[:n]
            pending = [j for j, c in enumerate(answers) if c == PENDING]
            out[leaf] = LeafAnswer([c == 0x31 for c in answers], int(reply[n:] or 0), pending)
        return out

    def _pool(self) -> ThreadPoolExecutor:
        """Threads for a Cluster's per-leaf calls (redis-py's cluster client is thread-safe):
        one round trip per batch in wall time instead of one per leaf."""
        if self._executor is None:
            self._executor = ThreadPoolExecutor(CLUSTER_THREADS, thread_name_prefix="urlseen")
        return self._executor

    def fingerprints(self, leaf: str, start: int, end: int) -> bytes:
        meta, _, fps, _ = self._keys(leaf)
        count = retrying(lambda: self.client.hget(meta, "count"), f"{self._what}: read leaf")
        width = self._fp_bytes()
        end = min(end, width * int(count or 0))  # the string's tail is room to grow, not data
        if end <= start:
            return b""
        data: bytes = retrying(
            lambda: self.client.getrange(fps, start, end - 1), f"{self._what}: read leaf"
        )
        return data

    def copy_claims(self, leaf: str, split: Split) -> None:
        """Copy the sealed leaf's claims into the split's children (before the swap), so
        that claims not yet acknowledged, and those of clients that died, stay claims."""
        claims = self._keys(leaf)[3]
        held = retrying(lambda: self.client.hgetall(claims), f"{self._what}: copy claims")
        parts: dict[str, dict[bytes, bytes]] = {}
        for fp, value in held.items():
            parts.setdefault(split.child(int.from_bytes(fp, "little")), {})[fp] = value
        self._each_leaf(
            list(parts), lambda pipe, child: pipe.hset(self._keys(child)[3], mapping=parts[child])
        )

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
        self._each_leaf([leaf], lambda pipe, lf: [pipe.pexpire(k, ms) for k in self._keys(lf)])

    def drop(self, leaves: Sequence[str]) -> None:
        self._each_leaf(leaves, lambda pipe, lf: [pipe.delete(k) for k in self._keys(lf)])

    def leaf_info(self, leaves: Sequence[str]) -> list[LeafInfo | None]:
        def ask(pipe: Any, leaf: str) -> None:
            meta, _, fps, claims = self._keys(leaf)
            pipe.hmget(meta, "state", "count", "instance")
            pipe.strlen(fps)
            pipe.hlen(claims)

        replies = self._each_leaf(leaves, ask)
        out: list[LeafInfo | None] = []
        for (state, count, instance), length, claims in zip(
            replies[0::3], replies[1::3], replies[2::3], strict=True
        ):
            mine = state is not None and instance is not None
            mine = mine and instance.decode() == self._instance
            out.append(LeafInfo(state.decode(), int(count), length, claims) if mine else None)
        return out

    def memory_usage(self, leaves: Sequence[str]) -> int:
        keys = [self.tree_key] + [k for leaf in leaves for k in self._keys(leaf)]

        def usage() -> int:
            return sum(int(self.client.memory_usage(k) or 0) for k in keys)

        return retrying(usage, f"{self._what}: memory usage")

    def destroy(self) -> None:
        tree = self.load()
        leaves = [] if tree is None else [leaf for leaf, _ in tree.leaves()]
        self.drop(leaves)
        retrying(lambda: self.client.delete(self.tree_key, self.kind_key), f"{self._what}: destroy")
