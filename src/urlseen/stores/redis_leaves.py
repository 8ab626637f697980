"""A SplittableBloomFilter's tree and leaves in Redis, single server or Cluster.

Keys of filter `name`:
- `urlseen:{name}:tree`: the tree hash (params, version, nodes, split locks; dsbf_tree.lua);
- per leaf, under its own hash tag `{name:leaf:ID}` so that leaves spread over a Cluster's
  slots while each leaf's script touches one slot: `:meta` (state, count), `:bits` (the leaf's
  Bloom filter, a bitmap string of leaf_bits bits) and `:fps` (its fingerprints, packed: 8 bytes per
  URL in one string grown in allocator-sized steps, against ~70 bytes per member of a SET).
Check-and-add reuses the Bloom filter's batch script (bloom_batch.lua) in its leaf mode, with
a receipt per leaf and batch so that a batch resent after a lost reply gets the same answer.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from urlseen import _core
from urlseen.errors import FormatError
from urlseen.stores import redis_store
from urlseen.stores.redis_store import RECEIPT_SECONDS, retrying
from urlseen.stores.splittable import MOVED, LeafAnswer, LeafInfo, LeafOp, Split, Tree

_LAYOUTS = {"standard": _core.LAYOUT_STANDARD, "blocked": _core.LAYOUT_BLOCKED}
CLUSTER_THREADS = 8  # per-leaf script calls in flight at once on a Redis Cluster


class RedisLeafStore:
    """LeafStore on a redis-py client (redis.Redis or redis.RedisCluster)."""

    def __init__(self, redis: Any, name: str, receipt_seconds: int = RECEIPT_SECONDS) -> None:
        self.client = redis_store.connect(redis)
        self.name = redis_store.check_name(name)
        self.tree_key = redis_store.key(name, "tree")
        self.receipt_seconds = receipt_seconds
        self._cluster = type(self.client).__name__ == "RedisCluster"
        self._tree_script = redis_store.load_script(self.client, "dsbf_tree.lua")
        self._leaf_script = redis_store.load_script(self.client, "dsbf_leaf.lua")
        self._batch_script = redis_store.load_script(self.client, "bloom_batch.lua")
        self._params: dict[str, Any] | None = None
        self._executor: ThreadPoolExecutor | None = None

    def _keys(self, leaf: str) -> tuple[str, str, str]:
        tag = f"{self.name}:leaf:{leaf}"
        return (
            redis_store.key(tag, "meta"),
            redis_store.key(tag, "bits"),
            redis_store.key(tag, "fps"),
        )

    def _tree(self, *args: Any) -> Any:
        return retrying(lambda: self._tree_script(keys=[self.tree_key], args=list(args)), "tree")

    def load(self) -> Tree | None:
        raw: dict[bytes, bytes] = retrying(lambda: self.client.hgetall(self.tree_key), "tree")
        if not raw:
            return None
        try:
            params = json.loads(raw[b"params"])
            splits = {
                k[5:].decode(): Split.parse(v.decode())
                for k, v in raw.items()
                if k.startswith(b"node:") and v != b"leaf"
            }
            version = int(raw[b"version"])
        except (KeyError, ValueError, UnicodeDecodeError) as exc:
            raise FormatError(f"Redis key {self.tree_key}: not a urlseen splittable tree") from exc
        self._params = params
        return Tree(version, params, splits)

    def create(self, params: Mapping[str, Any], root: Split) -> dict[str, Any]:
        text = json.dumps(dict(params), sort_keys=True)
        won: dict[str, Any] = json.loads(
            self._tree("create", text, root.describe(), len(root.children))
        )
        self._params = won
        return won

    def make_leaves(self, leaves: Sequence[str], params: Mapping[str, Any]) -> None:
        nbytes = params["leaf_bits"] // 8
        for leaf in leaves:
            keys = list(self._keys(leaf))
            retrying(functools.partial(self._leaf_script, keys=keys, args=["make", nbytes]), "make")

    def new_leaf_ids(self, count: int) -> list[str]:
        last = int(self._tree("ids", count))
        return [str(i) for i in range(last - count + 1, last + 1)]

    def _leaf_call(self, leaf: str, fps: list[bytes], op: LeafOp) -> tuple[list[str], list[Any]]:
        p = self._params
        assert p is not None, "load or create the tree first"
        masks = _core.byte_masks(
            fps, p["leaf_bits"], p["k"], _LAYOUTS[p["layout"]], p["seed"], p["hash_id"]
        )
        meta, bits, fps_key = self._keys(leaf)
        receipt = redis_store.receipt_key(f"{self.name}:leaf:{leaf}")
        ttl = 0 if op == LeafOp.CONTAINS else self.receipt_seconds
        args = [masks, int(op), ttl, p["layout"], b"".join(fps), p["leaf_write_limit"]]
        return [bits, meta, receipt, fps_key], args

    def check_and_add(
        self, groups: Mapping[str, list[bytes]], op: LeafOp
    ) -> dict[str, LeafAnswer | None]:
        calls = {leaf: self._leaf_call(leaf, fps, op) for leaf, fps in groups.items() if fps}
        what = "contains" if op == LeafOp.CONTAINS else "check-and-add"
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
        out: dict[str, LeafAnswer | None] = {}
        for (leaf, fps), reply in zip(((k, groups[k]) for k in calls), replies, strict=True):
            if reply == b"M":
                out[leaf] = MOVED
                continue
            n = len(fps)
            out[leaf] = LeafAnswer([c == 0x31 for c in reply[:n]], int(reply[n:] or 0))
        return out

    def _pool(self) -> ThreadPoolExecutor:
        """Threads for a Cluster's per-leaf calls (redis-py's cluster client is thread-safe):
        one round trip per batch in wall time instead of one per leaf."""
        if self._executor is None:
            self._executor = ThreadPoolExecutor(CLUSTER_THREADS, thread_name_prefix="urlseen")
        return self._executor

    def fingerprints(self, leaf: str, start: int, end: int) -> bytes:
        meta, _, fps = self._keys(leaf)
        count = retrying(lambda: self.client.hget(meta, "count"), "read leaf")
        end = min(end, 8 * int(count or 0))  # the string's tail is room to grow, not data
        if end <= start:
            return b""
        data: bytes = retrying(lambda: self.client.getrange(fps, start, end - 1), "read leaf")
        return data

    def seal(self, leaf: str) -> int:
        meta, bits, fps = self._keys(leaf)
        return int(
            retrying(lambda: self._leaf_script(keys=[meta, bits, fps], args=["seal"]), "seal")
        )

    def lock(self, leaf: str, token: str, ms: int) -> tuple[str, list[str]]:
        reply = self._tree("lock", leaf, token, ms)
        status = reply[0].decode()
        stale = reply[1].decode().split(",") if len(reply) > 1 and reply[1] else []
        return status, stale

    def refresh(self, leaf: str, token: str, ms: int, children: Sequence[str]) -> bool:
        return bool(self._tree("refresh", leaf, token, ms, ",".join(children)))

    def swap(self, leaf: str, token: str, split: Split) -> int:
        return int(self._tree("swap", leaf, token, split.describe(), *split.children))

    def unlock(self, leaf: str, token: str) -> None:
        self._tree("unlock", leaf, token)

    def _each_leaf(self, leaves: Sequence[str], call: Callable[[Any, str], Any]) -> list[Any]:
        def run() -> list[Any]:
            pipe = self.client.pipeline(transaction=False)
            for leaf in leaves:
                call(pipe, leaf)
            return list(pipe.execute())

        return retrying(run, "leaves") if leaves else []

    def retire(self, leaf: str, grace_seconds: float) -> None:
        ms = max(1, int(grace_seconds * 1000))
        self._each_leaf([leaf], lambda pipe, lf: [pipe.pexpire(k, ms) for k in self._keys(lf)])

    def drop(self, leaves: Sequence[str]) -> None:
        self._each_leaf(leaves, lambda pipe, lf: [pipe.delete(k) for k in self._keys(lf)])

    def leaf_info(self, leaves: Sequence[str]) -> list[LeafInfo | None]:
        def ask(pipe: Any, leaf: str) -> None:
            meta, _, fps = self._keys(leaf)
            pipe.hmget(meta, "state", "count")
            pipe.strlen(fps)

        replies = self._each_leaf(leaves, ask)
        out: list[LeafInfo | None] = []
        for (state, count), length in zip(replies[0::2], replies[1::2], strict=True):
            out.append(None if state is None else LeafInfo(state.decode(), int(count), length))
        return out

    def memory_usage(self, leaves: Sequence[str]) -> int:
        keys = [self.tree_key] + [k for leaf in leaves for k in self._keys(leaf)]

        def usage() -> int:
            return sum(int(self.client.memory_usage(k) or 0) for k in keys)

        return retrying(usage, "memory usage")

    def destroy(self) -> None:
        tree = self.load()
        leaves = [] if tree is None else [leaf for leaf, _ in tree.leaves()]
        self.drop(leaves)
        retrying(lambda: self.client.delete(self.tree_key), "destroy")
