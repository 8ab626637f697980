"""RedisBloomFilter: one Bloom filter shared by every crawler process, its bits in Redis.

The bits are a Redis string holding exactly the bytes a local BloomFilter of the same
parameters would hold. The client hashes and computes positions in C (urlseen._core.byte_masks)
and sends a whole batch to a Lua script (stores/lua/bloom_batch.lua) that tests and sets the
bits atomically: among all clients, a URL is reported new exactly once (false positives aside,
as for any Bloom filter). One round trip per batch, against one per bit (GETBIT/SETBIT) or one
per URL.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from urlseen import _core
from urlseen._lifecycle import Closeable
from urlseen.errors import ConfigError, FormatError
from urlseen.filters import _sizing
from urlseen.filters.base import FilterStats, Key, key_batch
from urlseen.filters.bloom import DEFAULT_HASH, HASHES, _params
from urlseen.stores import redis_store
from urlseen.stores.redis_store import RECEIPT_SECONDS

_LAYOUT_CODES = {"standard": _core.LAYOUT_STANDARD, "blocked": _core.LAYOUT_BLOCKED}
MAX_BITS = 1 << 32  # a Redis string holds at most 512 MiB
FORMAT = "urlseen-redis-bloom/1"


class RedisBloomFilter(Closeable):
    """A Bloom filter whose bits live in Redis, shared by any number of processes. close()
    forgets the connection; the bits stay in Redis.

    Args:
        redis: a Redis URL ("redis://host:6379/0") or a redis-py client.
        name: the filter's name; its keys are urlseen:{name}:bits and urlseen:{name}:meta
            (one hash tag: Redis Cluster keeps them in one slot).
        capacity, error_rate, layout, seed, hash: as for BloomFilter; used when the filter
            does not exist yet. An existing filter keeps its own parameters; passing
            different ones raises ConfigError.

    Example:
        >>> seen = RedisBloomFilter("redis://127.0.0.1:6379/0", "crawl", capacity=10**7)
        >>> seen.add_many(["https://a.example/", "https://a.example/"])  # doctest: +SKIP
        [True, False]
    """

    def __init__(
        self,
        redis: Any,
        name: str,
        capacity: int | None = None,
        error_rate: float | None = None,
        *,
        layout: str = "blocked",
        seed: int = 0,
        hash: str = DEFAULT_HASH,
    ) -> None:
        self._client = redis_store.connect(redis)
        self.name = redis_store.check_name(name)
        self._bits = redis_store.key(name, "bits")
        self._meta = redis_store.key(name, "meta")
        self._script = redis_store.load_script(self._client, "bloom_batch.lua")
        stored = self._load_params()
        if stored is None:
            if capacity is None:
                raise ConfigError(f"no filter {name!r} in Redis: give a capacity to create it")
            wanted = _params(
                capacity, 0.001 if error_rate is None else error_rate, layout, seed, hash
            )
            if wanted["nbits"] > MAX_BITS:
                raise ConfigError(
                    f"{wanted['nbits']} bits exceed one Redis string (2**32 bits); lower the "
                    "capacity or raise the error rate"
                )
            stored = self._create(wanted)
        else:
            given = {"capacity": capacity, "error_rate": error_rate}
            redis_store.check_given(stored, given, f"filter {name!r}")
        self._params = stored
        self.nbits, self.k = int(stored["nbits"]), int(stored["k"])
        self._layout = _LAYOUT_CODES[stored["layout"]]
        self._hash = HASHES[stored["hash"]]
        self.seed = int(stored["seed"])

    @staticmethod
    def exists(redis: Any, name: str) -> bool:
        """Whether Redis holds a filter called name."""
        client, meta = (
            redis_store.connect(redis),
            redis_store.key(redis_store.check_name(name), "meta"),
        )
        return redis_store.params_exist(client, meta)

    def _load_params(self) -> dict[str, Any] | None:
        params = redis_store.load_params(self._client, self._meta, FORMAT, "Redis Bloom filter")
        if params is None:
            return None
        if params.get("layout") not in _LAYOUT_CODES or params.get("hash") not in HASHES:
            raise FormatError(f"Redis key {self._meta}: unknown layout or hash")
        return params

    def _create(self, params: dict[str, Any]) -> dict[str, Any]:
        params = {**params, "format": FORMAT}
        nbytes = (params["nbits"] + 7) // 8
        text = json.dumps(params, sort_keys=True)

        def create() -> Any:
            # HSETNX: when two processes create the same filter at once, one wins and both
            # use its parameters. The bits are allocated up front (one SETRANGE of the last
            # byte) so that Redis's memory shows the filter's real size from the start.
            if self._client.hsetnx(self._meta, "params", text):
                self._client.setrange(self._bits, nbytes - 1, b"\0")
            return self._client.hget(self._meta, "params")

        winner: dict[str, Any] = json.loads(redis_store.retrying(create, "create"))
        return winner

    # -- the seen-test ------------------------------------------------------------------

    def _run(self, keys: Iterable[Key], add: bool) -> list[bool]:
        self._usable()
        keys = key_batch(keys)
        if not keys:
            return []
        masks = _core.byte_masks(keys, self.nbits, self.k, self._layout, self.seed, self._hash)
        receipt = redis_store.receipt_key(self.name)
        args = [masks, "1" if add else "0", RECEIPT_SECONDS, self._params["layout"]]
        answer = redis_store.retrying(
            lambda: self._script(keys=[self._bits, self._meta, receipt], args=args),
            "check-and-add" if add else "contains",
        )
        return [c == 0x31 for c in answer]  # b"1": some bit was 0

    def add(self, key: Key) -> bool:
        """Check-and-add one URL (one round trip: use add_many for throughput)."""
        return self._run([key], add=True)[0]

    def add_many(self, keys: Iterable[Key]) -> list[bool]:
        """Check-and-add a batch atomically, in one round trip; True where new."""
        return self._run(keys, add=True)

    def __contains__(self, key: object) -> bool:
        return not self._run([key], add=False)[0]  # type: ignore[list-item]

    def contains_many(self, keys: Iterable[Key]) -> list[bool]:
        return [not absent for absent in self._run(keys, add=False)]

    def __len__(self) -> int:
        self._usable()
        count = redis_store.retrying(lambda: self._client.hget(self._meta, "count"), "count")
        return int(count or 0)

    def stats(self) -> FilterStats:
        count = len(self)
        p = self._params
        return FilterStats(
            kind="redis-bloom",
            capacity=p["capacity"],
            count=count,
            bits=self.nbits,
            error_rate=p["error_rate"],
            estimated_error_rate=_sizing.error_rate_at(p["layout"], self.nbits, self.k, count),
            details={"name": self.name, "k": self.k, "layout": p["layout"], "hash": p["hash"]},
        )

    def popcount(self) -> int:
        """Set bits (BITCOUNT, counted by the server)."""
        self._usable()
        return int(redis_store.retrying(lambda: self._client.bitcount(self._bits), "popcount"))

    def memory_usage(self) -> int:
        """Bytes Redis uses for the bits and the metadata (MEMORY USAGE)."""
        self._usable()

        def usage() -> int:
            return sum(int(self._client.memory_usage(k) or 0) for k in (self._bits, self._meta))

        return redis_store.retrying(usage, "memory usage")

    def destroy(self) -> None:
        """Delete the filter's keys from Redis (its receipts expire on their own)."""
        self._usable()
        redis_store.retrying(lambda: self._client.delete(self._bits, self._meta), "destroy")
        self.close()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r} nbits={self.nbits} k={self.k}>"
