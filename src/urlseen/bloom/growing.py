"""GrowingBloomFilter: a Bloom filter whose memory follows the distinct keys met, with its error
rate held (a scalable Bloom filter: Almeida, Baquero, Preguiça, Hutchison, 2007).

Layer i holds START_CAPACITY * GROWTH**i keys at error_rate / 2**(i+1); a key is seen if any
layer has it, and new keys go into the newest, which is followed by a larger one once it is
full. The layers' rates sum to less than error_rate however many layers come, and the memory
is within a few bits per key of one filter sized for the keys held. What a filter given no
capacity is in memory (`urlseen dedup` without --state): a persistent state file keeps one
layer of a capacity chosen up front (BloomFilter), since its later runs are unknown.

The dedup job's batches are probed in C: tested in the newest layer, then in each older one
(`bloom_test_also`), and the new keys added to the newest once their lines are out.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from urlseen import _core, defaults
from urlseen._lifecycle import Closeable
from urlseen.bloom.bloom import DEFAULT_HASH, BloomFilter
from urlseen.protocol import Batch, FilterStats, Key, key_batch

START_CAPACITY = 1 << 16
"""Keys the first layer holds (~250 KiB at the default rate)."""

GROWTH = 4
"""How many times larger each layer is than the one before."""


class GrowingBloomFilter(Closeable):
    """A Bloom filter that starts small and grows by layers, its false-positive rate at most
    error_rate however many keys come.

    Args:
        error_rate: the compound false-positive rate the filter holds, in (0, 1).
        layout, seed, hash: as BloomFilter's, for every layer.
        start_capacity: keys the first layer holds.

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
        self._rate = error_rate
        self._start = start_capacity
        self._layers: list[BloomFilter] = []
        self._add_layer()

    def _add_layer(self, keys: int = 0) -> None:
        i = len(self._layers)
        capacity = max(self._start * GROWTH**i, keys)
        rate = self._rate / 2 ** (i + 1)
        layer = BloomFilter(capacity, rate, layout=self._layout, seed=self._seed, hash=self._hash)
        self._layers.append(layer)

    def _room_for(self, n: int) -> BloomFilter:
        """The newest layer, with room for n more keys at its rate: a new one if it is full
        (an empty one too small is replaced by one that holds them)."""
        newest = self._layers[-1]
        if len(newest) + n > newest.capacity:
            if not len(newest):
                self._layers.pop().close()
            self._add_layer(n)
        return self._layers[-1]

    # -- the seen-test --------------------------------------------------------------------

    def add(self, key: Key) -> bool:
        return self.add_many([key])[0]

    def add_many(self, keys: Iterable[Key]) -> list[bool]:
        """Check-and-add a batch, in order; a key repeated in it is new the first time only."""
        self._usable()
        keys = key_batch(keys)
        seen = [False] * len(keys)
        for layer in self._layers:
            seen = [a or b for a, b in zip(seen, layer.contains_many(keys), strict=True)]
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

    # -- the dedup job's batches (protocol.DedupStep) --------------------------------------

    def dedup_hasher(self) -> BloomFilter:
        return self._layers[-1]  # every layer hashes alike: the engine needs the hash only

    def dedup_step(
        self, batch: Batch, write: Callable[[list[bool] | None], object], transactional: bool
    ) -> int | None:
        """Tested in every layer in C, the new lines written, then added to the newest."""
        if not isinstance(batch, _core.LineEngine):
            return None
        self._usable()
        newest = self._room_for(batch.lines)  # at most one new key a line
        new = batch.bloom_test(newest)
        for layer in reversed(self._layers[:-1]):
            if new:
                new = batch.bloom_test_also(layer)
        write(None)
        if new:
            batch.bloom_commit(newest)
        return new

    # -- inspection -------------------------------------------------------------------------

    @property
    def capacity(self) -> int:
        """Keys the layers made so far hold at their rates (the next layer adds more)."""
        return sum(layer.capacity for layer in self._layers)

    @property
    def error_rate(self) -> float:
        return self._rate

    def stats(self) -> FilterStats:
        self._usable()
        layers = [layer.stats() for layer in self._layers]
        clear = 1.0
        for s in layers:
            clear *= 1.0 - s.estimated_error_rate
        return FilterStats(
            kind="bloom",
            capacity=self.capacity,
            count=len(self),
            bits=sum(s.bits for s in layers),
            error_rate=self._rate,
            estimated_error_rate=1.0 - clear,
            details={
                "layout": self._layout,
                "grows": True,
                "layers": len(layers),
                "k": self._layers[-1].k,
            },
        )

    def _close(self) -> None:
        for layer in self._layers:
            layer.close()

    def __repr__(self) -> str:
        if self.closed:
            return f"<{type(self).__name__} closed>"
        return f"<{type(self).__name__} layers={len(self._layers)} count={len(self)}>"
