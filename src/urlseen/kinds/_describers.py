"""What `urlseen info` says about a state, read-only (a crawler may be using it): one describer
per form of state (a state file, a rotating folder, an exact folder, a folder of generations,
a filter in Redis, generations in Redis)."""

from __future__ import annotations

import os
import time

TYPE_CHECKING = False
if TYPE_CHECKING:  # the kinds table names these functions; their imports wait for a call
    from pathlib import Path
    from typing import Any


def describe_file(path: Path, verify: bool) -> dict[str, Any]:
    """A state file (bloom, mdbf, similarity, counting): its header, and with verify its data
    checked against the checksum of its last clean close (None: nothing to check yet)."""
    from urlseen.bloom import sizing
    from urlseen.state.format import FLAG_OPEN
    from urlseen.state.mmapfile import read_header

    header = read_header(path)
    params = header.params
    desc: dict[str, Any] = {
        "path": os.fspath(path),
        "format_version": header.version,
        "file_bytes": os.path.getsize(path),
        "closed_cleanly": not header.flags & FLAG_OPEN,
        "count": header.count,
        **params,
    }
    if params.get("kind") == "bloom":
        desc["bits_per_key"] = params["nbits"] / params["capacity"]
        desc["estimated_error_rate"] = sizing.error_rate_at(
            params["layout"], params["nbits"], params["k"], header.count
        )
    if verify:
        desc["verified"] = _verify_file(path)
    return desc


def _verify_file(path: Path) -> bool | None:
    """True if the data matches its checksum, None if there is none yet (a writer has it open,
    or did not close it); FormatError if not. (Opening a cleanly closed file checks it.)"""
    from urlseen.state.format import FLAG_DATA_CRC
    from urlseen.state.mmapfile import MappedFile, read_header

    if not read_header(path).flags & FLAG_DATA_CRC:
        return None
    with MappedFile.open(path, readonly=True) as store:
        return bool(store.header.flags & FLAG_DATA_CRC) or None


def describe_rotating(path: Path, verify: bool) -> dict[str, Any]:
    """The manifest's configuration and each live generation (with its age: how long ago it
    started, so when its URLs expire); with verify, each generation's data checked too."""
    import time

    from urlseen.bloom import rotating

    desc = rotating.describe_folder(path)
    now = time.time()
    for generation in desc["live_generations"]:
        generation["age_seconds"] = round(now - generation["started"], 1)
    if desc["live_generations"]:
        desc["oldest_generation_age_seconds"] = desc["live_generations"][0]["age_seconds"]
    if verify:
        for generation in desc["live_generations"]:
            generation["verified"] = _verify_file(path / generation["file"])
    return desc


def _aged(desc: dict[str, Any], generations: list[dict[str, Any]], now: float) -> dict[str, Any]:
    """desc with each generation's age (its requests expire when the oldest's reaches
    expire_after) and the oldest's."""
    window, oldest = desc["window"], now // desc["window"] - desc["generations"] + 1
    for generation in generations:
        generation["age_seconds"] = round(now - generation["generation"] * window, 1)
        if generation["generation"] < oldest:  # dropped by the next client that moves on
            generation["expired"] = True
    desc["expire_after"] = window * desc["generations"]
    desc["live_generations"] = generations
    if generations:
        desc["oldest_generation_age_seconds"] = generations[0]["age_seconds"]
    return desc


def describe_generations(path: Path, verify: bool) -> dict[str, Any]:
    """A folder of generations (job/generations.py): the kind, window and generations it was
    made with, and each generation's state file, count and age."""
    import time

    from urlseen.job.generations import check_manifest

    desc = check_manifest(path, {})
    rows = []
    for gen in sorted(path.glob("gen-*.urlseen"), key=lambda p: int(p.name[4:-8])):
        head = describe_file(gen, verify)
        row = {"generation": int(gen.name[4:-8]), "file": gen.name, "count": head["count"]}
        rows.append(row if not verify else {**row, "verified": head["verified"]})
    return _aged({"path": os.fspath(path), **desc}, rows, time.time())


def describe_exact(path: Path, verify: bool) -> dict[str, Any]:
    """The folder's library and counters, and its URLs' first-seen ages (first_seen_ages)."""
    from urlseen.errors import UrlseenError
    from urlseen.exact.folder import LIBRARY_FILE, describe_state
    from urlseen.exact.sqlite_library import SQLiteLibrary

    desc = describe_state(path, verify)
    library = SQLiteLibrary(path / LIBRARY_FILE, readonly=True, check_seal=False)
    try:
        return {**desc, **first_seen_ages(library.older_than)}
    except UrlseenError as exc:  # damage past the headers: info --verify names it
        return {**desc, "first_seen_ages": f"unreadable ({exc})"}
    finally:
        library.close()


AGES = (("1h", 3600), ("1d", 86400), ("7d", 7 * 86400), ("30d", 30 * 86400))


def first_seen_ages(older_than: Any, now: float | None = None) -> dict[str, int]:
    """How many URLs an exact library holds that were first seen more than each of AGES ago
    (what an expiry age would forget), by its older_than: one read of the library per age."""
    now = time.time() if now is None else now
    return {f"first_seen_over_{label}_ago": len(older_than(now - age)) for label, age in AGES}


# -- shared through Redis -------------------------------------------------------------------


def _head(url: str, name: str, stats: Any) -> dict[str, Any]:
    return {
        "redis": url,
        "name": name,
        "kind": stats.kind,
        "count": stats.count,
        "capacity": stats.capacity,
        "error_rate": stats.error_rate,
    }


def describe_shared_bloom(url: str, name: str) -> dict[str, Any] | None:
    """Parameters, count and fill (BITCOUNT reads the bits on the server); None if Redis holds
    no such filter."""
    from urlseen.shared.bloom import RedisBloomFilter

    if not RedisBloomFilter.exists(url, name):
        return None
    with RedisBloomFilter(url, name, allow_eviction=True) as seen:  # read only
        stats = seen.stats()
        return {
            **_head(url, name, stats),
            "estimated_error_rate": stats.estimated_error_rate,
            "nbits": seen.nbits,
            "k": seen.k,
            "layout": stats.details["layout"],
            "hash": stats.details["hash"],
            "fill": seen.popcount() / seen.nbits,
            "redis_bytes": seen.memory_usage(),
            "claims": seen.claims_held(),
        }


def describe_shared_dsbf(url: str, name: str) -> dict[str, Any] | None:
    """Parameters, totals, and every live leaf (id, depth, URLs, fill of its capacity, state)
    as "tree"; None if Redis holds no such filter."""
    from urlseen.splittable.filter import SplittableBloomFilter

    if not SplittableBloomFilter.exists(url, name):
        return None
    with SplittableBloomFilter(redis=url, name=name, allow_eviction=True) as seen:  # read only
        stats = seen.stats()
        leaves = seen.leaves()
        d = stats.details
        return {
            **_head(url, name, stats),
            "worst_leaf_error_rate": stats.estimated_error_rate,
            **{
                key: d[key]
                for key in ("leaf_bits", "k", "leaf_capacity", "fanout", "layout", "first_leaves")
            },
            **{key: d[key] for key in ("leaves", "depth", "tree_version")},
            "mean_fill": sum(leaf["fill"] for leaf in leaves) / max(1, len(leaves)),
            "redis_bytes": seen.memory_usage(),
            "claims": sum(leaf["claims"] for leaf in leaves),
            "tree": leaves,
        }


def describe_shared_generations(url: str, name: str) -> dict[str, Any] | None:
    """An expiring filter in Redis: its shape, and each recorded generation described as
    its kind's filter is (without the tree), aged by the server's clock; None if none."""
    from urlseen.kinds import KINDS
    from urlseen.shared.generations import read_generations

    found = read_generations(url, name)
    if found is None:
        return None
    describe = KINDS[found["kind"]].describe_shared
    rows = []
    for number, generation in found.pop("recorded"):
        desc = describe(url, generation) if describe is not None else None
        if desc is not None:
            desc.pop("tree", None)
            rows.append({"generation": number, **desc})
    now = found.pop("server_time")
    return _aged({"redis": url, "name": name, **found}, rows, now)


def describe_shared_library(url: str, name: str) -> dict[str, Any] | None:
    from urlseen.shared.library import RedisLibrary, describe_redis_library

    if not RedisLibrary.exists(url, name):
        return None
    library = RedisLibrary(url, name, allow_eviction=True)  # read only: nothing to lose
    try:
        return {**describe_redis_library(url, name), **first_seen_ages(library.older_than)}
    finally:
        library.close()
