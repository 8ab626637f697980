"""A splittable filter's tree and leaves in Redis: the keys, the tree (its hash and split
locks, dsbf_tree.lua), each leaf's life (made, sealed, retired, dropped) and what it holds.
The batches of check-and-add are shared/leaf_batch.py; the claims, shared/leaves.py.

Keys of filter `name` (E: the name escaped, client.escape):
- `urlseen:{E}:kind`: the kind record ("dsbf"), `urlseen:{E}:tree`: the tree hash (params,
  instance, version, nodes, split locks, retired leaves), `urlseen:{E}:readers`: the tree
  version each client last loaded (dsbf_tree.lua);
- per leaf, under its own hash tag `{E:leaf:ID}` so that leaves spread over a Cluster's
  slots while each leaf's script touches one slot: `:meta` (state, count, instance), `:bits`
  (the leaf's Bloom filter, a bitmap string of the size the tree records for the leaf),
  `:fps` (its fingerprints: first the code of those a split or growth gave it, sorted and
  Elias-Fano coded by splittable/coding.py, `code_bytes` long and counting `coded` URLs
  (meta fields), then those it reported new since, raw: fp_bytes per URL; one string grown in
  allocator-sized steps, so the code's allocator slack is the raw tail's room), `:claims`
  (shared/claims.py) and `:records` (claims of whole calls: claims.lua, claims_record).
Every call checks the filter's instance id: a leaf or tree that vanished is an error
(FilterLostError), never a leaf made anew.

Retired leaves. A split's swap records the leaf it replaced as retired at the new version;
each load announces the version the client routes by (for `reader_ms`, renewed by loading
again) and answers the retired leaves that no live reader's version still routes to, whose
keys the loader deletes. A client whose announcement lapsed may still send a key to a leaf
deleted since: the leaf answers MISSING, and the client reloads the tree and routes the key
below it (rounds.py), so freeing a leaf early costs a reload, never an answer.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

from urlseen.errors import ConfigError, FilterLostError, FormatError
from urlseen.shared import client as redis_store
from urlseen.shared.claims import record_size
from urlseen.shared.client import retrying
from urlseen.shared.marks import WriteMarks, meta_number, rolled_back
from urlseen.splittable.tree import LeafInfo, Split, Tree

CLUSTER_THREADS = 8  # per-leaf script calls in flight at once on a Redis Cluster
KIND = "dsbf"
MIN_READER_MS = 2000  # a client's announcement of the tree it reads lasts this long at least
ANNOUNCE_SECONDS = 1.0  # and a client loads the tree again this often while it works


class LeafTree:
    """A splittable filter's tree and leaves on a redis-py client (redis.Redis or
    redis.RedisCluster): everything but the batches and the claims."""

    def __init__(self, redis: Any, name: str) -> None:
        self.name = redis_store.check_name(name)
        self.client = redis_store.connect(redis)
        self.tree_key = redis_store.key(name, "tree")
        self.kind_key = redis_store.key(name, "kind")
        self.readers_key = redis_store.key(name, "readers")
        self._what = f"splittable filter {name!r}"
        self._escaped = redis_store.escape(name)
        self._cluster = redis_store.is_cluster(self.client)
        self._tree_script = redis_store.load_script(self.client, "dsbf_tree.lua")
        self._leaf_script = redis_store.load_script(self.client, "dsbf_leaf.lua")
        self._params: dict[str, Any] | None = None
        self._instance = ""
        self._sizes: dict[str, int] = {}  # leaf -> bits (a leaf id never changes size)
        self._executor: ThreadPoolExecutor | None = None
        self.owner = ""  # the client whose write marks the tree and leaves keep (marks.py)
        self._tree_marks = WriteMarks()
        self._version = 0  # the highest tree version this client read: it never goes down
        self.reader_ms = MIN_READER_MS  # how long a load's announcement lasts
        self._loaded_at = -float("inf")  # time.monotonic() of the last load

    def lost(self, what: str) -> FilterLostError:
        """The error for data of the filter that vanished from Redis."""
        return FilterLostError(f"{what}; {redis_store.LOST_HELP}")

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
        mark = self._tree_marks.expected(self.tree_key)
        who = f"{self._instance} {self.owner} {mark}" if self.owner else self._instance
        argv = [op, who, *args]
        reply = retrying(
            lambda: self._tree_script(keys=self._tree_keys(), args=argv), f"{self._what}: {op}"
        )
        if self.owner:
            self._tree_marks.advanced(self.tree_key)
        return reply

    def _tree_keys(self) -> list[str]:
        return [self.tree_key, self.kind_key, self.readers_key]

    def holds_kind(self) -> bool:
        """Whether the name holds a splittable filter (its kind record says so)."""
        return redis_store.holds(self.client, self.name, KIND)

    def load(self) -> Tree | None:
        """The tree, announced as the version this client reads (see the module docstring);
        the retired leaves no reader needs any more are deleted."""
        argv = ["load", self.owner, self.reader_ms, self._instance]
        started = time.monotonic()
        kind, flat, free = retrying(
            lambda: self._tree_script(keys=self._tree_keys(), args=argv), f"{self._what}: load"
        )
        kind = kind or None
        raw: dict[bytes, bytes] = dict(zip(flat[0::2], flat[1::2], strict=True))
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
                f"Redis key {self.tree_key}: a splittable filter without a kind record, which "
                "this version does not read: destroy it or use a new name"
            )
        _check_tree_shape(splits, self.tree_key)
        if instance != self._instance:  # another filter of the name: its own leaf ids
            self._sizes, self._version = {}, 0
        if version < self._version or b"rolled_back" in raw:
            raise rolled_back(
                self._what,
                f"its tree {self.tree_key} went back in time (version {version}, this client "
                f"read {self._version})",
            )
        self._version = version
        self._params, self._instance = params, instance
        self._sizes.update(sizes)
        self._loaded_at = started
        if free:
            self._free([leaf.decode() for leaf in free])
        return Tree(version, params, splits, ready=b"ready" in raw, sizes=sizes)

    def withdraw(self) -> None:
        """Take back this client's announcement (it closes): a load announced for no time
        drops it, and frees the retired leaves that only this client still held."""
        reader_ms, self.reader_ms = self.reader_ms, 0
        try:
            self.load()
        finally:
            self.reader_ms = reader_ms

    def _free(self, leaves: Sequence[str]) -> None:
        """Delete retired leaves' keys, then forget them (a client that dies between the two
        leaves them to the next load)."""
        self.drop(leaves)
        self._tree("forget", *leaves)

    def tree_due(self) -> bool:
        """Whether this client's next batch loads the tree again (ANNOUNCE_SECONDS after the
        last load, half its announcement at most): that renews its announcement, and frees
        the leaves that splits retired since once no client reads an older tree."""
        due = min(ANNOUNCE_SECONDS, self.reader_ms / 2000)
        return time.monotonic() - self._loaded_at >= due

    def create(self, params: Mapping[str, Any], root: Split, bits: int) -> dict[str, Any]:
        text = json.dumps(dict(params), sort_keys=True)
        argv = ["create", params["instance"], text, root.describe(), len(root.children), bits]
        kind, won = retrying(
            lambda: self._tree_script(keys=self._tree_keys(), args=argv),
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
        width, at = self._fp_bytes(), meta_number(self._what, meta, "code_bytes", code_bytes)
        raw = meta_number(self._what, meta, "count", count)
        raw -= meta_number(self._what, meta, "coded", coded)
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
        size = meta_number(
            self._what,
            meta,
            "code_bytes",
            retrying(lambda: self.client.hget(meta, "code_bytes"), what),
        )
        code: bytes = b""
        if size:
            code = retrying(lambda: self.client.getrange(fps, 0, size - 1), what)
        if len(code) != size:
            raise FilterLostError(
                f"{self._what}: leaf {leaf} lost its coded fingerprints; {redis_store.LOST_HELP}"
            )
        return code

    def seal(self, leaf: str, coded: int | None = None) -> int:
        meta, bits, fps, _ = self._keys(leaf)
        args = ["seal", self._instance, self._fp_bytes(), *([] if coded is None else [coded])]
        return int(
            retrying(
                lambda: self._leaf_script(keys=[meta, bits, fps], args=args), f"{self._what}: seal"
            )
        )

    def compact(self, leaf: str, code: bytes, coded: int, raw_bytes: int) -> bool:
        meta, bits, fps, _ = self._keys(leaf)
        args = ["compact", self._instance, self._fp_bytes(), coded, raw_bytes, code]
        reply = retrying(
            lambda: self._leaf_script(keys=[meta, bits, fps], args=args), f"{self._what}: compact"
        )
        return bool(reply == 1)

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

    def _pipelined(self, leaves: Sequence[str], call: Callable[[Any, str], Any]) -> list[Any]:
        """The replies of the commands call(pipe, leaf) queues for each leaf, in one pipeline."""

        def run() -> list[Any]:
            pipe = self.client.pipeline(transaction=False)
            for leaf in leaves:
                call(pipe, leaf)
            return list(pipe.execute())

        return retrying(run, f"{self._what}: leaves") if leaves else []

    def drop(self, leaves: Sequence[str]) -> None:
        self._pipelined(leaves, lambda pipe, lf: [pipe.delete(k) for k in self._all_keys(lf)])

    def leaf_info(self, leaves: Sequence[str]) -> list[LeafInfo | None]:
        def ask(pipe: Any, leaf: str) -> None:
            meta, _, fps, claims = self._keys(leaf)
            pipe.hmget(meta, "state", "count", "instance", "coded", "code_bytes")
            pipe.strlen(fps)
            pipe.hlen(claims)
            pipe.hvals(self._records(leaf))

        replies = self._pipelined(leaves, ask)
        out: list[LeafInfo | None] = []
        width = self._fp_bytes()
        for (state, count, instance, coded, code), length, claims, records in zip(
            replies[0::4], replies[1::4], replies[2::4], replies[3::4], strict=True
        ):
            mine = state is not None and instance is not None
            mine = mine and instance.decode() == self._instance
            claims += sum(record_size(v, width) for v in records)
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
        retired = retrying(lambda: self.client.hkeys(self.tree_key), f"{self._what}: destroy")
        leaves += [k[8:].decode() for k in retired if k.startswith(b"retired:")]
        self.drop(leaves)
        retrying(
            lambda: self.client.delete(self.tree_key, self.kind_key, self.readers_key),
            f"{self._what}: destroy",
        )


def _check_tree_shape(splits: Mapping[str, Split], tree_key: str) -> None:
    """Every node below the root once: a tree whose nodes loop or share a child (damaged)
    would route a key forever (FormatError instead)."""
    seen, stack = {"root"}, ["root"]
    while stack:
        split = splits.get(stack.pop())
        for child in split.children if split is not None else ():
            if child in seen:
                raise FormatError(f"Redis key {tree_key}: a damaged tree (node {child} twice)")
            seen.add(child)
            stack.append(child)
