"""RotatingBloomFilter: a Bloom filter for a content-management crawler that forgets, our
reconstruction of the CMS Bloom filter paper's improvement (its text is lost; this is our
design, not the authors' method).

Two modes that compose:

- counting: generations are CountingBloomFilters, so `remove(uri)`, called when an
  editor deletes content, makes the URI collectable again. Precondition: remove only URIs that
  are in the filter (the CMS database knows); removing a false positive takes counts from other
  keys and can make them look new. Without that knowledge use ExactFilter, which is exact.
- generational: G generations, each sized for ceil(capacity / G) keys at
  p_g = 1 - (1 - error_rate)^(1/G), so the whole filter errs at most at error_rate. New keys go
  into the newest generation; a query asks all. When the newest is full, or `window` seconds
  have passed since it started, the oldest is dropped and an empty one started: memory stays
  G * m_g however long the crawl, and a URI is forgotten (collectable again, a re-crawl) after
  G rotations, i.e. between (G - 1) * window and G * window after it was first seen.

A duplicate does not refresh a URI (expiry counts from its first sighting), so each key lives
in exactly one generation: the oldest one that contains it, since older generations never
change except by removal. `remove` therefore decrements there and nowhere else. G = 1 with no
window is the plain counting filter.

Persistence: a folder with one state file per generation and `rotating.json`, a manifest under a
CRC of its exact bytes (state/sealed.py) naming the filter's id and the live generations in
order (written atomically; files it does not name are leftovers of an interrupted rotation and
are deleted on open). Each generation file carries the filter's id and its sequence number in
its params, so a generation file of another filter, or a stray state file, is refused.

Threads: one writer at a time (the generations are C filters, but a batch here is several C
calls); share it between threads behind a lock.
"""

from __future__ import annotations

import json
import math
import os
import time
import uuid
import zlib
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeAlias

from urlseen import defaults
from urlseen._lifecycle import Closeable
from urlseen.bloom import sizing
from urlseen.bloom.bloom import BloomFilter
from urlseen.bloom.bloom import _params as bloom_params
from urlseen.bloom.counting import CountingBloomFilter, make_params
from urlseen.errors import ConfigError, FormatError
from urlseen.hashes import DEFAULT_HASH, check_hash, check_seed
from urlseen.protocol import FilterStats, Key, creator, key_batch
from urlseen.state import sealed
from urlseen.state.mmapfile import read_header

MANIFEST = "rotating.json"
FORMAT = "urlseen-rotating"
VERSION = 2  # 1: the manifest's CRC covered its body re-encoded, generations had no id
MAX_GENERATIONS = 64

Generation: TypeAlias = BloomFilter | CountingBloomFilter


def generation_error_rate(error_rate: float, generations: int) -> float:
    """p_g such that G generations at p_g err at most at error_rate: 1 - (1 - p)^(1/G)."""
    return -math.expm1(math.log1p(-error_rate) / generations)


class RotatingBloomFilter(Closeable):
    """A Bloom filter in G generations, with expiry by rotation and, optionally, removal.

    Args:
        capacity: distinct keys held at error_rate, all generations together; each generation
            takes ceil(capacity / generations) before the filter rotates.
        error_rate: false-positive rate with every generation full, in (0, 1).
        generations: G, in [1, 64].
        window: seconds a generation stays newest before a rotation (None: rotate by count
            only). URIs expire between (G - 1) * window and G * window after first seen.
        counting: generations are counting filters (4-bit counters) and `remove` works.
        layout: bit generations' layout, "blocked" (default) or "standard".
        seed, hash: as for BloomFilter; every generation uses them.
        clock: seconds since the epoch (time.time); tests pass a fake one.
        path: keep the filter in this folder (created; it must not hold a rotating filter yet),
            as create() does: a state file per generation and a manifest. None: in memory.

    Example:
        >>> seen = RotatingBloomFilter(capacity=3000, generations=3, counting=True)
        >>> seen.add("https://cms.example/a"), seen.add("https://cms.example/a")
        (True, False)
        >>> seen.remove("https://cms.example/a"), seen.add("https://cms.example/a")
        (True, True)
    """

    def __init__(
        self,
        capacity: int,
        error_rate: float = defaults.BLOOM_ERROR_RATE,
        *,
        generations: int = 4,
        window: float | None = None,
        counting: bool = False,
        layout: str = "blocked",
        seed: int = 0,
        hash: str = DEFAULT_HASH,
        clock: Callable[[], float] = time.time,
        path: str | os.PathLike[str] | None = None,
    ) -> None:
        config = _config(capacity, error_rate, generations, window, counting, layout, seed, hash)
        folder = None if path is None else Path(path)
        if folder is not None:
            folder.mkdir(parents=True, exist_ok=True)
            if (folder / MANIFEST).exists():
                raise FileExistsError(f"{folder} already holds a rotating filter; use open()")
        self._setup(config, clock, folder)
        self._start_generation()

    # -- construction and persistence ----------------------------------------------------

    def _setup(
        self, config: dict[str, Any], clock: Callable[[], float], folder: Path | None
    ) -> None:
        self._config = config
        self._clock = clock
        self._folder = folder
        self._id: str | None = uuid.uuid4().hex  # open() puts the manifest's (None: version 1)
        self._gens: list[Generation] = []  # oldest first
        self._started: list[float] = []
        self._seqs: list[int] = []
        self._next_seq = 0

    create = creator(
        __init__,
        """A new filter kept in the folder `path` (created; it must not hold a rotating filter
        yet): the constructor with path=path.""",
    )

    @classmethod
    def open(
        cls, folder: str | os.PathLike[str], *, clock: Callable[[], float] = time.time
    ) -> RotatingBloomFilter:
        """Open a filter made by create().

        Raises:
            FormatError: the manifest or a generation file is missing, damaged or foreign.
        """
        path = Path(folder)
        config, live, next_seq, filter_id = _read_manifest(path / MANIFEST)
        self = cls.__new__(cls)
        self._setup(config, clock, path)
        self._id = filter_id
        self._next_seq = next_seq
        kind = CountingBloomFilter if config["counting"] else BloomFilter
        try:
            for seq, started in live:
                gen = kind.open(path / _gen_name(seq))
                self._gens.append(gen)
                _check_generation(gen, config, path / _gen_name(seq), filter_id, seq)
                self._seqs.append(seq)
                self._started.append(started)
        except FileNotFoundError as exc:
            self.close()
            raise FormatError(f"{path}: generation file missing ({exc.filename})") from None
        except BaseException:
            self.close()
            raise
        named = {_gen_name(s) for s in self._seqs}
        for leftover in path.glob("gen-*.urlseen"):
            if leftover.name not in named:
                leftover.unlink()
        return self

    def _new_generation(self, seq: int) -> Generation:
        c = self._config
        n_g, p_g = _generation_target(c)
        kind: type[Generation] = CountingBloomFilter if c["counting"] else BloomFilter
        options: dict[str, Any] = {"seed": c["seed"], "hash": c["hash"]}
        if not c["counting"]:
            options["layout"] = c["layout"]
        if self._folder is None:
            return kind(n_g, p_g, **options)
        if c["counting"]:
            params = make_params(n_g, p_g, 4, None, None, c["seed"], c["hash"])
        else:
            params = bloom_params(n_g, p_g, c["layout"], c["seed"], c["hash"])
        if self._id is not None:  # whose generation, and which: a stray file is refused
            params.update(rotating_id=self._id, generation=seq)
        return kind._create_file(self._folder / _gen_name(seq), params, False)

    def _start_generation(self, started: float | None = None) -> None:
        """Append an empty newest generation; drop the oldest if that makes G + 1."""
        seq = self._next_seq
        self._gens.append(self._new_generation(seq))
        self._seqs.append(seq)
        self._started.append(self._clock() if started is None else started)
        self._next_seq += 1
        dropped: list[Generation] = []
        dropped_seqs: list[int] = []
        while len(self._gens) > self._config["generations"]:
            dropped.append(self._gens.pop(0))
            dropped_seqs.append(self._seqs.pop(0))
            self._started.pop(0)
        self._write_manifest()
        for gen, old in zip(dropped, dropped_seqs, strict=True):
            gen.close()
            if self._folder is not None:
                (self._folder / _gen_name(old)).unlink(missing_ok=True)

    def _write_manifest(self) -> None:
        if self._folder is None:
            return
        body = {
            "format": FORMAT,
            "version": VERSION if self._id is not None else 1,
            "config": self._config,
            "live": [[s, t] for s, t in zip(self._seqs, self._started, strict=True)],
            "next_seq": self._next_seq,
        }
        if self._id is not None:
            body["id"] = self._id
        sealed.write(self._folder / MANIFEST, body)

    # -- rotation --------------------------------------------------------------------------

    def rotate(self) -> None:
        """Start a new generation now, dropping the oldest once there are G (keys only it held
        are forgotten: new again)."""
        self._usable()
        self._start_generation()

    def _rotate_due(self) -> None:
        """Rotate for every window that has passed (at most G times: then all is forgotten)."""
        window = self._config["window"]
        if window is None:
            return
        now = self._clock()
        elapsed = now - self._started[-1]
        due = int(elapsed // window) if elapsed >= 0 else 0
        if due > self._config["generations"]:  # everything expired: start afresh, aligned
            start = self._started[-1] + (due - self._config["generations"]) * window
            due = self._config["generations"]
        else:
            start = self._started[-1]
        for i in range(1, due + 1):  # windows stay aligned: a late call does not stretch one
            self._start_generation(start + i * window)

    # -- the seen-test -----------------------------------------------------------------------

    def add(self, key: Key) -> bool:
        """Check-and-add: True if key was new (it goes into the newest generation)."""
        return self.add_many([key])[0]

    def __contains__(self, key: object) -> bool:
        self._usable()
        self._rotate_due()
        return any(key in gen for gen in self._gens)

    def contains_many(self, keys: Iterable[Key]) -> list[bool]:
        """Test every key without writing; True if some generation holds it."""
        self._usable()
        batch = key_batch(keys)
        self._rotate_due()
        hits = [False] * len(batch)
        for gen in self._gens:
            hits = [h or g for h, g in zip(hits, gen.contains_many(batch), strict=True)]
        return hits

    def add_many(self, keys: Iterable[Key]) -> list[bool]:
        """Check-and-add every key, in order; element i is True if key i was new. The newest
        generation never takes more than its share: a batch that fills it rotates mid-way."""
        self._usable()
        batch = key_batch(keys)
        self._rotate_due()
        n_g = _generation_target(self._config)[0]
        if len(batch) > n_g - len(self._gens[-1]):
            self._gens[-1].contains_many(batch)  # a bad key raises before any chunk is applied
        flags: list[bool] = []
        pos = 0
        while pos < len(batch):
            room = n_g - len(self._gens[-1])
            if room <= 0:
                self._start_generation()
                continue
            chunk = batch[pos : pos + room]
            pos += len(chunk)
            old = [False] * len(chunk)
            for gen in self._gens[:-1]:
                old = [o or g for o, g in zip(old, gen.contains_many(chunk), strict=True)]
            fresh_keys = [k for k, o in zip(chunk, old, strict=True) if not o]
            fresh = iter(self._gens[-1].add_many(fresh_keys))
            flags.extend(False if o else next(fresh) for o in old)
        return flags

    def remove(self, key: Key) -> bool:
        """Make key collectable again (counting mode): decrement it in the oldest generation
        that holds it, the one it was added to. False, changing nothing, if none holds it.
        Precondition: key is in the filter (see the module docstring)."""
        self._usable()
        if not self._config["counting"]:
            raise ConfigError(
                "remove() needs a counting filter: RotatingBloomFilter(counting=True)"
            )
        self._rotate_due()
        for gen in self._gens:
            if key in gen:
                return bool(gen.remove(key))  # type: ignore[union-attr]
        return False

    def __len__(self) -> int:
        self._usable()
        return sum(len(gen) for gen in self._gens)

    # -- inspection and lifecycle --------------------------------------------------------------

    @property
    def capacity(self) -> int:
        return int(self._config["capacity"])

    @property
    def error_rate(self) -> float:
        return float(self._config["error_rate"])

    @property
    def generations(self) -> list[Generation]:
        """The live generations, oldest first (read them, do not add to them)."""
        return list(self._gens)

    def stats(self) -> FilterStats:
        """Bits are the bound G * m_g (every generation allocated), whatever is live now."""
        self._usable()
        c = self._config
        n_g, p_g = _generation_target(c)
        first = self._gens[-1].stats()
        miss = 1.0
        for gen in self._gens:
            miss *= 1.0 - gen.stats().estimated_error_rate
        return FilterStats(
            kind="rotating",
            capacity=c["capacity"],
            count=len(self),
            bits=first.bits * c["generations"],
            error_rate=c["error_rate"],
            estimated_error_rate=1.0 - miss,
            details={
                "generations": c["generations"],
                "live_generations": len(self._gens),
                "window": c["window"],
                "counting": c["counting"],
                "generation_capacity": n_g,
                "generation_error_rate": p_g,
                "generation_counts": [len(g) for g in self._gens],
                "path": None if self._folder is None else str(self._folder),
            },
        )

    def flush(self) -> None:
        for gen in self._gens:
            gen.flush()

    def _close(self) -> None:
        for gen in getattr(self, "_gens", ()):  # none if the parameters were refused
            gen.close()

    def __repr__(self) -> str:
        if self.closed:
            return f"<{type(self).__name__} closed>"
        c = self._config
        return (
            f"<{type(self).__name__} capacity={c['capacity']} error_rate={c['error_rate']} "
            f"generations={len(self._gens)}/{c['generations']} counting={c['counting']} "
            f"count={len(self)}>"
        )

    def __reduce__(self) -> Any:
        raise TypeError("RotatingBloomFilter cannot be pickled; use create() and open()")


def _gen_name(seq: int) -> str:
    return f"gen-{seq:08d}.urlseen"


def _config(
    capacity: object,
    error_rate: object,
    generations: object,
    window: object,
    counting: object,
    layout: object,
    seed: object,
    hash: object,
) -> dict[str, Any]:
    capacity, rate = sizing.check_target(capacity, error_rate)
    if isinstance(generations, bool) or not isinstance(generations, int):
        raise ConfigError(
            f"generations must be an int in [1, {MAX_GENERATIONS}], not {generations!r}"
        )
    if not 1 <= generations <= MAX_GENERATIONS:
        raise ConfigError(f"generations must be in [1, {MAX_GENERATIONS}], not {generations}")
    if window is not None:
        if (
            isinstance(window, bool)
            or not isinstance(window, (int, float))
            or not (window > 0 and math.isfinite(window))
        ):
            raise ConfigError(f"window must be seconds > 0 or None, not {window!r}")
        window = float(window)
    if not isinstance(counting, bool):
        raise ConfigError(f"counting must be True or False, not {counting!r}")
    if layout not in sizing.LAYOUTS:
        raise ConfigError(f"layout must be 'blocked' or 'standard', not {layout!r}")
    check_hash(hash)
    config = {
        "capacity": capacity,
        "error_rate": rate,
        "generations": generations,
        "window": window,
        "counting": counting,
        "layout": layout,
        "seed": check_seed(seed),
        "hash": hash,
    }
    sizing.check_target(*_generation_target(config))
    return config


def _generation_target(config: dict[str, Any]) -> tuple[int, float]:
    """Each generation's capacity and error rate: ceil(capacity / G) keys at p_g."""
    g = config["generations"]
    return -(-config["capacity"] // g), generation_error_rate(config["error_rate"], g)


def describe_folder(folder: str | os.PathLike[str]) -> dict[str, Any]:
    """What a rotating filter's folder holds, read without opening it for writing (a crawler
    may be using it): the configuration and, per live generation, its file, start time and
    count (from the file's header). FormatError if it is not one."""
    path = Path(folder)
    config, live, _, _ = _read_manifest(path / MANIFEST)
    generations = []
    for seq, started in live:
        header = read_header(path / _gen_name(seq))
        generations.append({"file": _gen_name(seq), "started": started, "count": header.count})
    return {"kind": "rotating", **config, "live_generations": generations}


def _read_manifest(path: Path) -> tuple[dict[str, Any], list[tuple[int, float]], int, str | None]:
    """The configuration, the live generations (sequence number, start), the next sequence
    number and the filter's id (None for a version 1 manifest)."""
    where = str(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise FormatError(f"{where}: no rotating filter here (manifest missing)") from None
    except IsADirectoryError:
        raise FormatError(f"{where}: not a rotating-filter manifest (a folder)") from None
    body = sealed.decode(raw, where, "manifest") if sealed.is_sealed(raw) else _legacy(raw, where)
    if body.get("format") != FORMAT:
        raise FormatError(f"{where}: not a rotating-filter manifest")
    version = body.get("version")
    if version not in (1, VERSION) or (version == 1) == ("id" in body):
        raise FormatError(f"{where}: unsupported version {version!r}")
    try:
        c = body["config"]
        config = _config(
            c["capacity"],
            c["error_rate"],
            c["generations"],
            c["window"],
            c["counting"],
            c["layout"],
            c["seed"],
            c["hash"],
        )
        live = [(int(s), float(t)) for s, t in body["live"]]
        next_seq = body["next_seq"]
        filter_id = body.get("id")
        if (
            not isinstance(next_seq, int)
            or not 1 <= len(live) <= config["generations"]
            or any(not 0 <= s < next_seq for s, _ in live)
            or [s for s, _ in live] != sorted({s for s, _ in live})
            or not (filter_id is None or isinstance(filter_id, str))
        ):
            raise ValueError("live generations")
    except (ConfigError, ValueError, TypeError, KeyError) as exc:
        raise FormatError(f"{where}: invalid manifest ({exc})") from None
    return config, live, next_seq, filter_id


def _legacy(raw: bytes, where: str) -> dict[str, Any]:
    """A version 1 manifest: {"body": ..., "crc": CRC32 of the body re-encoded}."""
    try:
        outer = json.loads(raw)
        body = outer["body"]
        text = json.dumps(body, sort_keys=True, separators=(",", ":"))
        crc_ok = outer["crc"] == zlib.crc32(text.encode())
    except (ValueError, TypeError, KeyError):
        raise FormatError(f"{where}: not a rotating-filter manifest") from None
    if not crc_ok:
        raise FormatError(f"{where}: corrupted manifest (checksum mismatch)")
    if not isinstance(body, dict) or body.get("version") != 1:
        raise FormatError(f"{where}: not a rotating-filter manifest")
    return body


def _check_generation(
    gen: Generation, config: dict[str, Any], path: Path, filter_id: str | None, seq: int
) -> None:
    n_g, p_g = _generation_target(config)
    params = gen._live_store().params()
    owner = (params.get("rotating_id"), params.get("generation"))
    if (
        gen.capacity != n_g
        or not math.isclose(gen.error_rate, p_g, rel_tol=1e-12)
        or (filter_id is not None and owner != (filter_id, seq))
    ):
        raise FormatError(f"{path}: generation does not belong to this rotating filter")
