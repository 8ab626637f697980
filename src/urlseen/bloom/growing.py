"""GrowingBloomFilter: a Bloom filter whose memory follows the keys met, its error rate held
(a scalable Bloom filter, Almeida et al. 2007): what a filter given no capacity is in memory.

Layer i holds START_CAPACITY * GROWTH**i keys at error_rate / 2**(i+1); a key is seen if any
layer has it, new keys go into the newest, and a full newest layer is followed by a larger one.
The layers' rates sum to less than error_rate however many come. A state file keeps one layer
of a capacity chosen up front (BloomFilter): its later runs are unknown. The dedup job's
batches are probed in C (LineEngine.bloom_add_layers, or bloom_test ... bloom_commit).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

from urlseen import _core, defaults
from urlseen._lifecycle import Closeable
from urlseen.bloom.bloom import DEFAULT_HASH, BloomFilter
from urlseen.protocol import Batch, FilterStats, Key, key_batch

START_CAPACITY = 1 << 18  # keys of the first layer (~1 MiB at the default rate)
GROWTH = 8  # each layer holds this many times the keys of the one before


class GrowingBloomFilter(Closeable):
    """A Bloom filter that starts small and grows by layers, its false-positive rate at most
    error_rate however many keys come; layout, seed and hash as BloomFilter's.

    Example:
        >>> seen = GrowingBloomFilter(1e-6)
        >>> seen.add_many(["https://a.example/", "https://a.example/"])
        [True, False]
    """

    def __init__(
        self,
        error_rate: float = defaults.BLOOM_ERROR_RATE,
        *,
        layout: str = "blocked",
        seed: int = 0,
        hash: str = DEFAULT_HASH,
        start_capacity: int = START_CAPACITY,
    ) -> None:
        self._layout, self._seed, self._hash = layout, seed, hash
        self._rate, self._start = error_rate, start_capacity
        self._layers: list[BloomFilter] = []
        self._add_layer()

    def _add_layer(self, keys: int = 0) -> None:
        i = len(self._layers)
        capacity, rate = max(self._start * GROWTH**i, keys), self._rate / 2 ** (i + 1)
        layer = BloomFilter(capacity, rate, layout=self._layout, seed=self._seed, hash=self._hash)
        self._layers.append(layer)

    def _room_for(self, n: int) -> BloomFilter:
        """The newest layer with room for n more keys: a new one if it is full, or too small."""
        newest = self._layers[-1]
        if len(newest) + n > newest.capacity:
            if not len(newest):
                self._layers.pop().close()
            self._add_layer(n)
        return self._layers[-1]

    def add(self, key: Key) -> bool:
        return self.add_many([key])[0]

    def add_many(self, keys: Iterable[Key]) -> list[bool]:
        """Check-and-add a batch, in order; a key repeated in it is new the first time only."""
        seen = self.contains_many(keys := key_batch(keys))
        fresh = [k for k, s in zip(keys, seen, strict=True) if not s]
        added = iter(self._room_for(len(fresh)).add_many(fresh))
        return [False if s else next(added) for s in seen]

    def __contains__(self, key: object) -> bool:
        return self.contains_many([key])[0]  # type: ignore[list-item]

    def contains_many(self, keys: Iterable[Key]) -> list[bool]:
        self._usable()
        keys = key_batch(keys)
        seen = [False] * len(keys)
        for layer in self._layers:
            seen = [a or b for a, b in zip(seen, layer.contains_many(keys), strict=True)]
        return seen

    def __len__(self) -> int:
        return sum(len(layer) for layer in self._layers)

    def dedup_hasher(self) -> BloomFilter:
        return self._layers[-1]  # every layer hashes alike: the engine needs the hash only

    def dedup_step(
        self, batch: Batch, write: Callable[[list[bool] | None], object], transactional: bool
    ) -> int | None:
        """protocol.DedupStep in C: every layer tested, new keys added to the newest."""
        if not isinstance(batch, _core.LineEngine):
            return None
        self._usable()
        newest = self._room_for(batch.lines)  # at most one new key a line
        if not transactional:
            new = batch.bloom_add_layers(newest, tuple(self._layers[:-1]))
            write(None)
            return new
        new = batch.bloom_test(newest)
        for layer in reversed(self._layers[:-1]):
            new = batch.bloom_test_also(layer) if new else 0
        write(None)
        if new:
            batch.bloom_commit(newest)
        return new

    @property
    def capacity(self) -> int:
        """Keys the layers made so far hold at their rates (the next layer adds more)."""
        return sum(layer.capacity for layer in self._layers)

    def stats(self) -> FilterStats:
        self._usable()
        layers = [layer.stats() for layer in self._layers]
        clear = math.prod(1.0 - s.estimated_error_rate for s in layers)
        details = {"layout": self._layout, "grows": True, "layers": len(layers), "k": None}
        details["k"] = layers[-1].details["k"]  # the newest layer's
        return FilterStats("bloom", self.capacity, len(self), sum(s.bits for s in layers),
                           self._rate, 1.0 - clear, details)  # fmt: skip

    def _close(self) -> None:
        for layer in self._layers:
            layer.close()
