"""SimilarityFilter: drop URLs that look like ones already kept (patent CN106407485).

A lossy near-duplicate filter, opt-in, never the default seen-test. Each URL becomes feature
values (similarity/features.py); a URL whose feature bits are all set already is SIMILAR and
dropped, otherwise it is NEW and its bits are set. Three modes:

- ``patent``: the patent's rule exactly: one M-bit array, bit = MD5(value) as a 128-bit
  big-endian integer mod N for site, dir1 and tail, and the depth n itself mod N (raw, as the
  patent has it); M from the patent's formula (sizing.py). Features are tested independently,
  so a URL is dropped once each of its values has appeared in *some* earlier URL.
- ``exact4``: the same test with every feature hashed (depth too) by its own seeded MD5
  family (independent across features), M sized exactly for t probes per URL (the patent's M
  assumes log2(1/P) probes).
- ``composite``: one key = all feature values together, in a standard Bloom filter (the C
  core's BitFilter, MD5, k_opt probes): drops only URLs that match an earlier one on every
  feature at once, at the configured error rate (our addition, not the patent's).

N, for the per-feature modes: ``shared`` (N = M), ``prime`` (largest prime <= M) or
``regions`` (t regions of ⌊M/t⌋ bits, one per feature).

Hashing runs in C (``_core.digests``, ``BitFilter``); the per-feature modes reduce the 128-bit
digests mod N and test bits in Python, because the patent's rule (a 128-bit integer mod N, a
raw depth) is not the core's double hashing. benchmarks/papers/similarity.py measures each mode on
the development URLs: what they drop, how much of it is new, and the memory.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from urlseen import _core, defaults
from urlseen._lifecycle import Closeable
from urlseen.bloom import sizing as _sizing
from urlseen.errors import ConfigError, FormatError, ReadOnlyError
from urlseen.protocol import CommitAfterWrite, FilterStats, Key, creator
from urlseen.similarity import sizing
from urlseen.similarity.features import DEFAULT_FEATURES, EXTRA_FEATURES, FeatureExtractor
from urlseen.similarity.url_db import Decision, SQLiteUrlDB, UrlDB
from urlseen.state import format
from urlseen.state.memory import MemoryStore
from urlseen.state.mmapfile import MappedFile, save_copy
from urlseen.state.store import BufferStore

MODES = ("patent", "exact4", "composite")
DEFAULT_MODE = "composite"
RULES_VERSION = 1  # the feature-extraction rules of features.py; a change needs a new number
_KNOWN_FEATURES = frozenset(DEFAULT_FEATURES) | frozenset(EXTRA_FEATURES)


def _composite_key(values: Sequence[str]) -> str:
    """All feature values as one unambiguous key (length-prefixed: no separator can clash)."""
    return "".join(f"{len(v)}:{v}" for v in values)


class SimilarityFilter(CommitAfterWrite, Closeable):
    """The patent's similarity filter: NEW or SIMILAR by URL features, with an audit log.

    Args:
        capacity: URLs to de-duplicate (the patent's k).
        error_rate: the desired rate P, in (0, 1). For patent and exact4 it sizes the bits
            as if features were random; real features repeat, so far more new URLs are
            dropped (measured by benchmarks/papers/similarity.py). For composite it is the
            false-positive rate of whole-pattern matches.
        mode: "composite" (default), "exact4" or "patent" (module docstring).
        index: "shared" (default), "prime" or "regions": how per-feature values map to bits.
        features: feature names in probe order (features.DEFAULT_FEATURES, EXTRA_FEATURES).
        query_in_tail: whether the query string is part of the tail feature.
        canonicalize: "w3lib" (default) or "none" when keys are canonical already.
        url_db: where decisions are recorded: None (nowhere), a path (opened, or created if
            missing), or a UrlDB.
        record: "all" decisions (default) or only "new" ones (the patent's URL_DB).
        path: keep the bits in a new state file there (memory-mapped), as create() does;
            None (default): in memory.
        overwrite: with path, replace an existing file (else FileExistsError).

    Raises:
        ConfigError: a bad parameter; the message names it.

    Example:
        >>> f = SimilarityFilter(1000, 0.01, mode="patent")
        >>> f.add("http://x.com/a/y/p.html")
        True
        >>> f.add("http://x.com/a/z/p.html")  # same site, depth, dir1 and tail
        False
    """

    _noun = "similarity filter"

    def __init__(
        self,
        capacity: int,
        error_rate: float = defaults.SIMILAR_ERROR_RATE,
        *,
        mode: str = DEFAULT_MODE,
        index: str = "shared",
        features: Sequence[str] = DEFAULT_FEATURES,
        query_in_tail: bool = True,
        canonicalize: str = "w3lib",
        url_db: str | os.PathLike[str] | UrlDB | None = None,
        record: str = "all",
        path: str | os.PathLike[str] | None = None,
        overwrite: bool = False,
    ) -> None:
        params = make_params(
            capacity, error_rate, mode, index, features, query_in_tail, canonicalize
        )
        self._store: BufferStore | None = None
        if path is None:
            store: BufferStore = MemoryStore(_nbytes(params), params)
        else:
            store = MappedFile.create(path, params, _nbytes(params), overwrite=overwrite)
        self._attach(store, url_db, record)

    # -- construction -------------------------------------------------------------------

    create = creator(
        __init__, """A new filter whose bits live in a state file at path (memory-mapped)."""
    )

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        *,
        readonly: bool = False,
        url_db: str | os.PathLike[str] | UrlDB | None = None,
        record: str = "all",
    ) -> SimilarityFilter:
        """Open a state file made by create() or save().

        Raises:
            FormatError: not a similarity filter's state file, or a damaged one.
            StateInUseError: another process has it open for writing.
        """
        store = MappedFile.open(path, readonly=readonly, check=check_header)
        return cls._from_store(store, url_db, record)

    @classmethod
    def _from_store(
        cls, store: BufferStore, url_db: str | os.PathLike[str] | UrlDB | None, record: str
    ) -> SimilarityFilter:
        self = cls.__new__(cls)
        self._store = None
        self._attach(store, url_db, record)
        return self

    def _attach(
        self, store: BufferStore, url_db: str | os.PathLike[str] | UrlDB | None, record: str
    ) -> None:
        if record not in ("all", "new"):
            store.close()
            raise ConfigError(f"record must be 'all' or 'new', not {record!r}")
        params = store.params()
        self._params = params
        self._mode: str = params["mode"]
        self._index: str = params["index"]
        self._nbits: int = params["nbits"]
        self._modulus: int = params["modulus"]
        self._record_all = record == "all"
        self._extractor = FeatureExtractor(
            params["features"],
            query_in_tail=params["query_in_tail"],
            canonicalize=params["canonicalize"],
        )
        self._names = self._extractor.names
        self._bits: _core.BitFilter | None = None
        self._count = store.stored_count()
        self._url_db: UrlDB | None = None
        self._owns_url_db = False
        self._store = store
        try:
            if self._mode == "composite":
                self._bits = _core.BitFilter(
                    store.buffer,
                    store.data_offset,
                    self._nbits,
                    params["k"],
                    _core.LAYOUT_STANDARD,
                    0,
                    self._count,
                    store.count_offset if not store.readonly else -1,
                    _core.HASH_MD5,
                )
            if isinstance(url_db, (str, os.PathLike)):
                create = not store.readonly and (  # (an empty one: an interrupted creation)
                    not os.path.exists(url_db) or SQLiteUrlDB.remove_half_made(url_db)
                )
                self._url_db = SQLiteUrlDB(url_db, create=create, readonly=store.readonly)
                self._owns_url_db = True
            elif url_db is not None:
                self._url_db = url_db
        except BaseException:
            self.close()
            raise

    # -- the filter protocol ------------------------------------------------------------

    def add(self, key: Key) -> bool:
        """Check-and-add one URL: True if NEW (keep it), False if SIMILAR (dropped)."""
        return self.add_many([key])[0]

    def __contains__(self, key: object) -> bool:
        """True if the URL would be dropped as SIMILAR (writes nothing)."""
        return self.contains_many([key])[0]  # type: ignore[list-item]

    def contains_many(self, keys: Iterable[Key]) -> list[bool]:
        """For each URL, whether it would be dropped now (each judged alone; writes nothing)."""
        self._live()
        values = [self._extractor.values(k) for k in keys]
        if self._bits is not None:
            return self._bits.contains_many([_composite_key(v) for v in values])
        return [all(self._test(p) for p in pos) for pos in self._positions(values)]

    def add_many(
        self,
        keys: Iterable[Key],
        *,
        before_commit: Callable[[list[bool]], None] | None = None,
    ) -> list[bool]:
        """Check-and-add a batch in order: True for each NEW URL, False for each SIMILAR one.

        Every key is parsed before anything changes, so a bad key leaves the filter as it was.
        before_commit(flags), if given, runs once the answers are known and before any bit
        or URL_DB row is written (urlseen.job.dedup writes its output there).

        Raises:
            InvalidKeyError: a key is not str or bytes, is empty, or has lone surrogates.
            ReadOnlyError: the filter was opened read-only.
        """
        store = self._live()
        if store.readonly:
            raise ReadOnlyError("the similarity filter is open read-only")
        keys = list(keys)
        values = [self._extractor.values(k) for k in keys]
        if self._bits is not None:
            flags, matched = self._decide_composite(values, before_commit)
        else:
            flags, matched = self._decide_features(values, before_commit)
        if self._url_db is not None:
            at = time.time()
            self._url_db.record(
                [
                    Decision(key, dict(zip(self._names, v, strict=True)), new, m, at)
                    for key, v, new, m in zip(keys, values, flags, matched, strict=True)
                    if new or self._record_all
                ]
            )
        return flags

    def _decide_composite(
        self, values: list[tuple[str, ...]], before_commit: Callable[[list[bool]], None] | None
    ) -> tuple[list[bool], list[tuple[str, ...]]]:
        assert self._bits is not None
        ckeys = [_composite_key(v) for v in values]
        if before_commit is None:
            flags = self._bits.add_many(ckeys)
        else:  # answers first, bits after the caller's commit; repeats in the batch by key
            present = self._bits.contains_many(ckeys)
            firsts: set[str] = set()
            flags = []
            for ckey, hit in zip(ckeys, present, strict=True):
                flags.append(not hit and ckey not in firsts)
                firsts.add(ckey)
            before_commit(flags)
            count = self._bits.count
            self._bits.update([c for c, new in zip(ckeys, flags, strict=True) if new])
            self._bits.count = count + sum(flags)  # what the caller was told, FP or not
        return flags, [() if new else self._names for new in flags]

    def _decide_features(
        self, values: list[tuple[str, ...]], before_commit: Callable[[list[bool]], None] | None
    ) -> tuple[list[bool], list[tuple[str, ...]]]:
        store = self._live()
        buf, base = store.buffer, store.data_offset
        added: set[int] = set()  # bits this batch sets: later URLs of the batch see them
        flags: list[bool] = []
        matched: list[tuple[str, ...]] = []
        names, audit = self._names, self._url_db is not None
        for pos in self._positions(values):
            hits = [p in added or buf[base + (p >> 3)] >> (p & 7) & 1 for p in pos]
            new = not all(hits)
            if new:
                added.update(pos)
            flags.append(new)
            if audit:  # the reasons cost as much as the test: only for the audit log
                matched.append(tuple(n for n, hit in zip(names, hits, strict=True) if hit))
        if before_commit is not None:
            before_commit(flags)
        for p in added:
            buf[base + (p >> 3)] |= 1 << (p & 7)
        self._count += sum(flags)
        if store.count_offset >= 0:
            at = store.count_offset
            buf[at : at + 8] = self._count.to_bytes(8, "little")
        return flags, matched

    def _positions(self, values: list[tuple[str, ...]]) -> list[tuple[int, ...]]:
        """The bit of each feature of each URL (the patent's one bit per feature)."""
        n, regions = self._modulus, self._index == "regions"
        columns = []
        for i, name in enumerate(self._names):
            column = [v[i] for v in values]
            offset = i * n if regions else 0
            if self._mode == "patent" and name == "depth":
                columns.append([offset + int(d) % n for d in column])  # raw depth
                continue
            seed = 0 if self._mode == "patent" else i + 1  # plain MD5, or a family per feature
            digests = _core.digests(column, _core.HASH_MD5, seed)
            columns.append([offset + int.from_bytes(d, "big") % n for d in digests])
        return list(zip(*columns, strict=True))

    def _test(self, p: int) -> bool:
        store = self._store
        assert store is not None
        return bool(store.buffer[store.data_offset + (p >> 3)] >> (p & 7) & 1)

    def __len__(self) -> int:
        """URLs reported NEW so far."""
        self._live()
        return self._bits.count if self._bits is not None else self._count

    # -- inspection ---------------------------------------------------------------------

    def features(self, key: Key) -> dict[str, str]:
        """The feature values of key, by name (depth as decimal text)."""
        return self._extractor.extract(key)

    def positions(self, key: Key) -> list[int]:
        """The bits key probes: one per feature, or the composite key's k bits."""
        self._live()
        values = self._extractor.values(key)
        if self._bits is not None:
            return self._bits.positions(_composite_key(values))
        return list(self._positions([values])[0])

    @property
    def mode(self) -> str:
        return self._mode

    @property
    def url_db(self) -> UrlDB | None:
        """Where decisions are recorded (None: nowhere)."""
        return self._url_db

    @property
    def path(self) -> str | None:
        store = self._store
        return store.path if store is not None else None

    def stats(self) -> FilterStats:
        """Capacity, count, bits, error rates and the mode's parameters."""
        self._live()
        p = self._params
        count = len(self)
        probes = len(self._names)
        if self._mode == "composite":
            estimated = _sizing.standard_error_rate(count, self._nbits, p["k"])
        else:
            estimated = sizing.random_feature_rate(
                count, self._nbits, self._modulus, probes, self._index
            )
        return FilterStats(
            kind="similarity",
            capacity=p["capacity"],
            count=count,
            bits=self._nbits,
            error_rate=p["error_rate"],
            estimated_error_rate=estimated,
            details={
                "mode": self._mode,
                "index": self._index,
                "modulus": self._modulus,
                "k": p["k"],
                "features": list(self._names),
                "query_in_tail": p["query_in_tail"],
                "canonicalize": p["canonicalize"],
                "hash": "md5",
                "path": self.path,
                "url_db": getattr(self._url_db, "path", None),
            },
        )

    # -- persistence and lifecycle ------------------------------------------------------

    def save(self, path: str | os.PathLike[str], *, overwrite: bool = False) -> None:
        """Write the bits and count to a new state file (the URL_DB is not copied)."""
        save_copy(self._live(), _nbytes(self._params), len(self), path, overwrite)

    def flush(self) -> None:
        """Push a file-backed filter's bits and count to disk."""
        self._live().flush()

    def _close(self) -> None:
        """Release the bits (a file is sealed) and close a URL_DB this filter opened."""
        store = getattr(self, "_store", None)
        if store is None:  # refused before it held anything
            return
        try:
            if self._bits is not None:
                self._bits._release()
            if self._owns_url_db and self._url_db is not None:
                self._url_db.close()
        finally:
            store.close()

    def _live(self) -> BufferStore:
        self._usable()
        store = self._store
        assert store is not None  # set before the filter is usable
        store.check()  # a state file cut short underneath: FormatError, not SIGBUS
        return store

    def __repr__(self) -> str:
        if self.closed:
            return f"<{type(self).__name__} closed>"
        return (
            f"<{type(self).__name__} mode={self._mode} index={self._index} "
            f"bits={self._nbits} count={len(self)}>"
        )

    def __reduce__(self) -> Any:
        raise TypeError("SimilarityFilter cannot be pickled; use save() and open()")


def make_params(
    capacity: object,
    error_rate: object,
    mode: object,
    index: object,
    features: Sequence[str],
    query_in_tail: object,
    canonicalize: object,
) -> dict[str, Any]:
    """Validate the parameters and size the filter; ConfigError names any bad value."""
    n, p = _sizing.check_target(capacity, error_rate)
    if mode not in MODES:
        raise ConfigError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")
    if not isinstance(query_in_tail, bool):
        raise ConfigError(f"query_in_tail must be a bool, not {query_in_tail!r}")
    if not isinstance(canonicalize, str):
        raise ConfigError(f"canonicalize must be 'w3lib' or 'none', not {canonicalize!r}")
    names = FeatureExtractor(features, query_in_tail=query_in_tail, canonicalize=canonicalize).names
    if mode == "composite":
        if index != "shared":
            raise ConfigError(f"index applies to the per-feature modes, not composite: {index!r}")
        size = _sizing.size_filter(n, p, "standard")
        nbits, modulus, k = size.nbits, size.nbits, size.k
    else:
        sizing_rule = "patent" if mode == "patent" else "exact4"
        nbits, modulus = sizing.size_features(n, p, len(names), sizing_rule, str(index))
        k = len(names)
    return {
        "kind": "similarity",
        "rules": RULES_VERSION,
        "mode": mode,
        "index": index,
        "features": list(names),
        "query_in_tail": query_in_tail,
        "canonicalize": canonicalize,
        "nbits": nbits,
        "modulus": modulus,
        "k": k,
        "hash": "md5",
        "capacity": n,
        "error_rate": p,
    }


def _nbytes(params: dict[str, Any]) -> int:
    return (int(params["nbits"]) + 7) // 8


def check_header(header: format.Header, where: str) -> None:
    """Refuse a state file that is not a similarity filter this code reads exactly."""
    params = header.params
    if params.get("kind") != "similarity":
        raise FormatError(f"{where}: holds a {params.get('kind')!r} filter, not a similarity one")
    format.require(params, where, rules=int, mode=str, index=str, features=list, canonicalize=str)
    format.require(params, where, query_in_tail=bool, nbits=int, modulus=int, k=int)
    format.require(params, where, capacity=int, error_rate=float, hash=str)
    if params["rules"] != RULES_VERSION:
        raise FormatError(f"{where}: feature rules version {params['rules']} is not supported")
    features = params["features"]
    if not all(isinstance(f, str) and f in _KNOWN_FEATURES for f in features):
        raise FormatError(f"{where}: unknown features {features!r}")
    try:
        expected = make_params(
            params["capacity"],
            params["error_rate"],
            params["mode"],
            params["index"],
            features,
            params["query_in_tail"],
            params["canonicalize"],
        )
    except ConfigError as exc:
        raise FormatError(f"{where}: invalid parameters ({exc})") from None
    if expected != params:
        raise FormatError(f"{where}: parameters do not match their sizing (damaged file?)")
    if header.data_length != _nbytes(params):
        raise FormatError(f"{where}: data length {header.data_length} does not match")
    if header.count > params["nbits"]:  # every NEW URL sets at least one bit
        raise FormatError(f"{where}: corrupted count {header.count}")
