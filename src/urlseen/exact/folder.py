"""An exact filter's folder: library.sqlite (the records, the source of truth) and
counters.urlseen (the memory-mapped counting filter, derived data).

Creating, opening, rebuilding and describing a folder. The counters are trusted only if their
writer closed them and the library recorded that close; otherwise they are rebuilt from the
library when the folder is opened. A folder made by FingerprintLibraryFilter has no counter
file: opening it as an exact filter builds one.
"""

from __future__ import annotations

import errno
import json
import os
import time
import warnings
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

from urlseen import defaults
from urlseen.bloom.counting import CountingBloomFilter, make_params
from urlseen.errors import (
    ConfigError,
    CountersRebuiltWarning,
    DataChecksumError,
    FormatError,
    UncleanShutdownWarning,
)
from urlseen.exact.library_protocol import Changes, FingerprintLibrary
from urlseen.exact.memory_library import MemoryLibrary
from urlseen.exact.sqlite_library import SQLiteLibrary
from urlseen.hashes import FINGERPRINTS, check_fingerprint
from urlseen.state.format import FLAG_OPEN
from urlseen.state.mmapfile import read_header

LIBRARY_FILE = "library.sqlite"
COUNTERS_FILE = "counters.urlseen"
GROWING_FILE = COUNTERS_FILE + ".growing"  # exact/growth.py's new counters before their rename


class Sizing(NamedTuple):
    """The counting filter's sizing, as the constructor takes it and the library records it."""

    capacity: int
    error_rate: float
    counter_bits: int = 4
    k: int | None = None
    counters_per_key: float | None = None
    grows: bool = False  # exact/growth.py: larger counters as the library outgrows these


def new_state(
    sizing: Sizing,
    hash: str,
    path: str | os.PathLike[str] | None,
    library: FingerprintLibrary | None,
    durable: bool,
    library_cache_kib: int,
) -> tuple[CountingBloomFilter, FingerprintLibrary]:
    """The counters and library of a new filter: in memory (the library given, or a
    MemoryLibrary), or in a new folder at path (see new_folder)."""
    if getattr(library, "shared", False):  # one that other processes write too
        raise ConfigError(
            "a shared library decides each URL itself (other processes write it, so local "
            "counters can prove nothing): use FingerprintLibraryFilter(library=...)"
        )
    if path is None:
        params = _params(sizing._asdict(), check_fingerprint(hash))
        library = library if library is not None else MemoryLibrary()
        if sizing.grows:  # recorded as a folder's library records it (exact/growth.py)
            library.apply(
                Changes(time.time(), meta={"counter_sizing": json.dumps(sizing._asdict())})
            )
        return CountingBloomFilter.from_params(params), library
    if library is not None:
        raise ConfigError("a filter made in a folder (path) keeps its own library: not both")
    return new_folder(Path(path), sizing._asdict(), hash, durable, library_cache_kib)


def new_folder(
    folder: Path, sizing: dict[str, Any], hash: str, durable: bool, library_cache_kib: int
) -> tuple[CountingBloomFilter, SQLiteLibrary]:
    """The counters and library of a new filter in `folder` (created; FileExistsError if it
    holds either already); the library records the counters' sizing.

    The library appears whole (built under another name, then linked into place; an empty one
    left by an interrupted creation is made again), then the counters: a creation killed in
    between leaves a library whose missing counters open_folder rebuilds."""
    folder.mkdir(parents=True, exist_ok=True)
    SQLiteLibrary.remove_half_made(folder / LIBRARY_FILE)
    if (folder / COUNTERS_FILE).exists() and not (folder / LIBRARY_FILE).exists():
        raise FormatError(
            f"{folder / COUNTERS_FILE} exists but no {LIBRARY_FILE} beside it: the exact "
            "filter's library is missing (restore it, or remove the folder to start anew)"
        )
    for name in (LIBRARY_FILE, COUNTERS_FILE):
        if (folder / name).exists():
            raise FileExistsError(
                errno.EEXIST, "exists: open it, or choose a new folder", str(folder / name)
            )
    library = SQLiteLibrary(
        folder / LIBRARY_FILE,
        create=True,
        durable=durable,
        cache_kib=library_cache_kib,
        fingerprint=check_fingerprint(hash),
        meta={"counter_sizing": json.dumps(sizing)},
    )
    try:
        counters = _new_counters(folder / COUNTERS_FILE, library, sizing)
    except BaseException:
        library.seal_on_close = False
        library.close()
        (folder / LIBRARY_FILE).unlink(missing_ok=True)
        raise
    return counters, library


def open_folder(
    folder: Path, *, readonly: bool, durable: bool, library_cache_kib: int
) -> tuple[CountingBloomFilter, SQLiteLibrary, str]:
    """The counters and library of the filter in `folder`, and why the counters must be
    rebuilt from the library ("" if they are in sync with it)."""
    if not (folder / LIBRARY_FILE).exists():
        raise FileNotFoundError(f"{folder}: no {LIBRARY_FILE} (not an exact filter's state)")
    library = SQLiteLibrary(
        folder / LIBRARY_FILE, readonly=readonly, durable=durable, cache_kib=library_cache_kib
    )
    if not readonly:  # a growth killed before its rename: the library never relied on it
        (folder / GROWING_FILE).unlink(missing_ok=True)
    try:
        counters, why = _open_counters(folder, library, readonly)
    except BaseException:
        library.close()
        raise
    return counters, library, why


def throwaway_library(folder: Path, fingerprint: str = "md5") -> SQLiteLibrary:
    """A new library in folder that is not sealed on close: a temporary filter's."""
    library = SQLiteLibrary(folder / LIBRARY_FILE, create=True, fingerprint=fingerprint)
    library.seal_on_close = False
    return library


def rebuild_with_warning(folder: Path, why: str, rebuild: Callable[[], int]) -> None:
    """rebuild() the counters of the filter in folder, and say so (CountersRebuiltWarning, to
    the caller of ExactFilter.open)."""
    started = time.perf_counter()
    records = rebuild()
    warnings.warn(
        f"{folder}: counters rebuilt from the library ({why}): {records:,} "
        f"fingerprints in {time.perf_counter() - started:.1f} s; nothing was lost",
        CountersRebuiltWarning,
        stacklevel=3,
    )


def rebuild_counters(
    counters: CountingBloomFilter, library: FingerprintLibrary, meta: dict[str, str] | None = None
) -> int:
    """Counters and overflow table from the library: O(records), the recovery path (and a
    growth's, which records the new sizing in `meta` with the overflow). Returns the number of
    records."""
    counters.clear()
    totals: defaultdict[int, int] = defaultdict(int)
    for chunk in library.fingerprints():
        for index, delta in counters.add_fingerprints(chunk):
            totals[index] += delta
    records = library.count()
    counters.count = records
    if not library.readonly:
        library.replace_overflow(dict(totals), {"counters": "", **(meta or {})})
    return records


def _open_counters(
    folder: Path, library: SQLiteLibrary, readonly: bool
) -> tuple[CountingBloomFilter, str]:
    """The counters and, if they must be rebuilt, why.

    A counter file that is missing, belongs to another library, or whose data fails its
    checksum is replaced by a new one (sized as recorded in the library) and rebuilt; a
    read-only open rebuilds into memory and leaves the file alone. A damaged header is a
    FormatError: nothing can be trusted about that file.
    """
    path = folder / COUNTERS_FILE
    sizing = json.loads(library.get_meta("counter_sizing") or "{}")
    why = ""
    if not path.exists():  # deleted, or a library made by FingerprintLibraryFilter
        why = f"{COUNTERS_FILE} was missing"
        if not sizing:
            sizing = {
                "capacity": max(2 * library.count(), 1_000_000),
                "error_rate": defaults.EXACT_ERROR_RATE,
            }
    else:
        try:  # a clean file's counters are checked (zlib CRC-32) as it opens
            with _open_quietly(path, readonly=True) as probe:
                params, unclean, damaged = probe.params, probe.opened_unclean, False
        except DataChecksumError:
            params, unclean, damaged = read_header(path).params, False, True
        if not sizing:  # a library that records no sizing: the counter file's own
            sizing = {
                "capacity": params["capacity"],
                "error_rate": params["error_rate"],
                "counter_bits": params["counter_bits"],
                "k": params["k"],
                "counters_per_key": params["ncounters"] / params["capacity"],
            }
        why = _foreign_counters(library, params) or (
            "the counter data failed its checksum" if damaged else ""
        )
        if not why:
            counters = _open_quietly(path, readonly=readonly)
            why = _stale_counters(library, params, unclean)
            if why and readonly:  # rebuild into memory, leave the file alone
                counters.close()
                counters = CountingBloomFilter.from_params(params)
            return counters, why
    if readonly:
        return CountingBloomFilter.from_params(sized_params(sizing, library)), why
    return _new_counters(path, library, sizing, overwrite=True), why


def _open_quietly(path: Path, *, readonly: bool) -> CountingBloomFilter:
    """Open a counter file; an unclean one is not warned about (the caller rebuilds it)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UncleanShutdownWarning)
            return CountingBloomFilter.open(path, readonly=readonly)
    except DataChecksumError:
        raise  # the header is sound: the caller rebuilds the counters
    except FormatError as exc:
        raise FormatError(f"{exc} (delete it to rebuild it from the library)") from exc


def sized_params(sizing: dict[str, Any], library: FingerprintLibrary) -> dict[str, Any]:
    return _params(sizing, library.get_meta("fingerprint") or "md5")


def _params(sizing: dict[str, Any], fingerprint: str) -> dict[str, Any]:
    """The counters' params for a sizing (the exact filter's: layout "auto", seed 0)."""
    return make_params(
        sizing["capacity"],
        sizing["error_rate"],
        sizing.get("counter_bits", 4),
        sizing.get("k"),
        sizing.get("counters_per_key"),
        0,
        fingerprint,
        "auto",
    )


def _new_counters(
    path: Path, library: FingerprintLibrary, sizing: dict[str, Any], *, overwrite: bool = False
) -> CountingBloomFilter:
    """A counter file for this library (empty: the caller adds or rebuilds)."""
    params = sized_params(sizing, library)
    params.update(counters_id=os.urandom(16).hex(), library_id=library.get_meta("library_id") or "")
    return CountingBloomFilter.from_params(params, path, overwrite=overwrite)


def _foreign_counters(library: FingerprintLibrary, params: dict[str, Any]) -> str:
    """Why a counter file cannot describe this library at all, or "" if it may."""
    if params.get("library_id") != library.get_meta("library_id"):
        return "the counter file belongs to another library"
    if params.get("hash") != library.get_meta("fingerprint"):
        return "the counter file uses another fingerprint"
    return ""


def _stale_counters(library: FingerprintLibrary, params: dict[str, Any], unclean: bool) -> str:
    """Why this library's counter file may disagree with it, or "" if it is in sync: it is
    trusted only if its writer closed it and the library recorded that close."""
    if unclean:
        return "the last writer did not close it"
    if library.get_meta("counters") != params.get("counters_id"):
        return "the library changed since the counters were saved"
    return ""


def _check_fingerprint_name(library: SQLiteLibrary) -> None:
    """FormatError unless the library names a fingerprint this version computes (none named:
    MD5, as every library made before the name was recorded)."""
    name = library.get_meta("fingerprint") or "md5"
    if name not in FINGERPRINTS:
        raise FormatError(
            f"{library.path}: its records use the fingerprint {name!r}, which this version of "
            f"urlseen does not compute (it knows {', '.join(FINGERPRINTS)})"
        )


def describe_state(path: str | os.PathLike[str], verify: bool = False) -> dict[str, Any]:
    """What an exact (or library-only) filter's folder holds, read-only: nothing is rebuilt or
    changed, so a crawler may be using it; only headers are read. verify=True also checks the
    library's integrity and its bytes against its seal, and the counters' data against their
    checksum (FormatError if one fails; a check that cannot be made, because a writer has the
    file open or did not close it, is reported as None)."""
    folder = Path(path)
    library = SQLiteLibrary(folder / LIBRARY_FILE, readonly=True, check_seal=verify)
    try:
        counters_path = folder / COUNTERS_FILE
        desc: dict[str, Any] = {
            "path": os.fspath(path),
            "kind": "exact" if counters_path.exists() else "library",
            "records": library.count(),
            "fingerprint": library.get_meta("fingerprint"),
            "library_bytes": sum(os.path.getsize(f) for f in library.files()),
        }
        if verify:
            desc["library_verified"] = library.verify() or None
            _check_fingerprint_name(library)
        if not counters_path.exists():
            return desc
        try:
            header = read_header(counters_path)
        except FormatError as exc:
            raise FormatError(f"{exc} (delete it to rebuild it from the library)") from exc
        params, unclean = header.params, bool(header.flags & FLAG_OPEN)
        why = _foreign_counters(library, params) or _stale_counters(library, params, unclean)
        desc.update(
            {
                "counters_closed_cleanly": not unclean,
                "counters_in_sync": not why,
                **{
                    name: params.get(name)
                    for name in ("capacity", "error_rate", "ncounters", "counter_bits", "k")
                },
                "counter_bytes": header.data_length,
            }
        )
        if verify and unclean:  # a writer has it (or had it): no checksum to compare yet
            desc["counters_verified"] = None
        elif verify:
            try:  # opening a cleanly closed file checks its data
                with _open_quietly(counters_path, readonly=True) as counters:
                    desc["counters_verified"] = counters.verify() or None
            except DataChecksumError as exc:
                raise FormatError(f"{exc} (the next writer rebuilds it from the library)") from exc
        return desc
    finally:
        library.close()
