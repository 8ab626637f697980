"""The filter kinds: one row per kind, and the two functions every front end calls.

`urlseen dedup`, `urlseen crawl`, `urlseen info` and the Scrapy dupefilter name a filter by kind
and pass plain values. `open_filter` turns them into an open filter, created with them if its
state is new; `describe` says what a state holds. A value left None takes the stored one when
the filter exists, else the kind's default from this table; a value given that contradicts a
stored one is refused (ParameterConflict), because a filter keeps the parameters it was created
with. Adding a kind is one row here plus its class (and its opener in `_openers`).
"""

from __future__ import annotations

import builtins
import os
from collections.abc import Callable

from urlseen import defaults
from urlseen._frozen import Frozen
from urlseen.errors import ConfigError, OptionError, ParameterConflict
from urlseen.kinds import _describers as describers
from urlseen.kinds import _openers as openers
from urlseen.kinds._generations import holds_generations, open_expiring
from urlseen.kinds._openers import (
    Request,
    Spell,
    plain,
    remote_leaf_store,
    remote_leaf_store_exists,
)

# pathlib is imported where a path is made, not here: `urlseen dedup` in memory makes none, and
# pathlib (with urllib.parse) is ~5% of its start-up (benchmarks/tools/callgrind_startup.py).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any

    from urlseen.protocol import SeenFilter

DEFAULT_CAPACITY = defaults.CAPACITY
SMALL_BATCH = 8192  # lines per batch for in-memory kinds: the most a killed run prints again
LIBRARY_BATCH = 65536  # kinds with a library commit per batch: larger batches amortize it
# the exact filter's: the line worker keys and hashes batches up to 16,384 lines ahead of it
# (US_WORKER_BIG_BATCH), on the other core; a larger batch leaves that work to the main thread
EXACT_BATCH = 16384


class Option(Frozen):
    """A parameter that only some kinds take (a CLI option, a setting).

    type: str, int, float, bool, or os.PathLike for a file's path. low, high: bounds (whole
    numbers for every option so far). default None: the filter chooses (the help says how).
    shared: only for a filter shared through Redis.
    """

    # the fields, in order (not sorted): eq, hash, repr and __init__ follow it
    __slots__ = ("name", "help", "type", "choices", "low", "high", "default", "shared")  # noqa: RUF023
    name: str
    help: str
    type: type
    choices: tuple[str, ...]
    low: int | None
    high: int | None
    default: Any
    shared: bool

    def __init__(
        self,
        name: str,
        help: str,
        type: builtins.type = str,
        choices: tuple[str, ...] = (),
        low: int | None = None,
        high: int | None = None,
        default: Any = None,
        shared: bool = False,
    ) -> None:
        self._init(name, help, type, choices, low, high, default, shared)


class Kind(Frozen):
    """One kind of filter: what it is, where its state lives, its defaults, how it opens.

    state: "file" (one state file), "folder" (a folder of files) or "" (none: in memory, or in
    Redis when shared). marker: the file that says a folder holds this kind's state.
    url_keys: the kind reads URLs' structure, so opaque keys (request fingerprints) will not
    do. shared/describe_shared: None when the kind cannot live in Redis.
    """

    # the fields, in order (not sorted): eq, hash, repr and __init__ follow it
    __slots__ = (  # noqa: RUF023
        "name",
        "summary",
        "state",
        "error_rate",
        "batch_size",
        "options",
        "open_local",
        "open_shared",
        "describe_shared",
        "marker",
        "url_keys",
    )
    name: str
    summary: str
    state: str
    error_rate: float | None
    batch_size: int
    options: tuple[str, ...]
    open_local: Callable[[Request], SeenFilter]
    open_shared: Callable[[Request], SeenFilter] | None
    describe_shared: Callable[[str, str], dict[str, Any] | None] | None
    marker: str
    url_keys: bool

    def __init__(
        self,
        name: str,
        summary: str,
        state: str,
        error_rate: float | None,
        batch_size: int,
        options: tuple[str, ...],
        open_local: Callable[[Request], SeenFilter],
        open_shared: Callable[[Request], SeenFilter] | None = None,
        describe_shared: Callable[[str, str], dict[str, Any] | None] | None = None,
        marker: str = "",
        url_keys: bool = False,
    ) -> None:
        self._init(name, summary, state, error_rate, batch_size, options, open_local,
                   open_shared, describe_shared, marker, url_keys)  # fmt: skip

    def defaults(self) -> dict[str, Any]:
        """The values a new filter of this kind is created with when none is given."""
        own = {name: OPTIONS[name].default for name in self.options}
        return {"capacity": DEFAULT_CAPACITY, "error_rate": self.error_rate, **own}


def _options() -> dict[str, Option]:
    from urlseen.bloom.sizing import DEFAULT_CACHE_ENTRIES

    return {
        option.name: option
        for option in (
            Option("layout", "Bloom bit layout: blocked is faster, standard smaller.",
                   choices=("blocked", "standard"), default="blocked"),
            Option("cache_entries", "Hot fingerprints kept in memory (32 bytes each); 0 = none.",
                   int, low=0, high=2**32, default=DEFAULT_CACHE_ENTRIES),
            Option("leaf_bits", "Bits of a full-grown leaf Bloom filter, a multiple of 512 "
                   "[default: 2**23, 1 MiB]; leaves start small and grow to it, then a leaf "
                   "that fills splits in two.", int, low=512, high=2**32),
            Option("groups", "S, groups of two bit vectors [default: the least memory for the "
                   "target].", int, low=1, high=64),
            Option("query", "A URL is seen if all groups (or, as the seed paper wrote it, any "
                   "group) have its bits; any has more false positives as --groups grows.",
                   choices=("all", "any"), default="all"),
            Option("generations", "G generations; a URL is forgotten (new again) after G "
                   "rotations.", int, low=1, high=64, default=4),
            Option("window", "Seconds per generation (URLs expire after at most G windows) "
                   "[default: rotate only when a generation holds capacity / G URLs].",
                   float, low=0),
            Option("similarity_mode", "composite drops a URL only if site, depth, first "
                   "directory and last segment all match one kept URL; exact4 and patent "
                   "(CN106407485's rule) if each matches some kept URL, which drops many new "
                   "URLs (benchmarks/papers/REPORT.md).",
                   choices=("composite", "exact4", "patent"), default="composite"),
            Option("similarity_index", "exact4/patent: feature bits mod M, mod the largest "
                   "prime <= M, or one region per feature.",
                   choices=("shared", "prime", "regions"), default="shared"),
            Option("url_db", "Record every decision (URL, features, new or similar) in this "
                   "SQLite file.", os.PathLike),
            Option("lease", "Seconds a URL answered new stays claimed until its output is "
                   "written: if this process dies first, the next process that meets it after "
                   "the lease prints it; at least 1 [default: 10].", float, low=0, high=86400,
                   shared=True),
            Option("allow_eviction", "Use a Redis server whose maxmemory-policy may evict the "
                   "filter's keys (refused by default); a lost key then stops the run with an "
                   "error.", bool, shared=True),
            Option("wait_for_claims", "Wait for URLs another process claimed until it "
                   "acknowledges them or its lease ends (at most a day), then take those it "
                   "never did [default: wait about 1.5 leases of this process's; `dedup` then "
                   "counts what is left in its summary and exits with status 4].", bool,
                   shared=True),
        )
    }  # fmt: skip


OPTIONS: dict[str, Option] = _options()
SHARED = tuple(name for name, option in OPTIONS.items() if option.shared)

_RATE = defaults.ERROR_RATE
KINDS: dict[str, Kind] = {
    kind.name: kind
    for kind in (
        Kind("bloom", "probabilistic: drops about --error-rate of new URLs; smallest",
             "file", _RATE["bloom"], SMALL_BATCH, ("layout", *SHARED), openers.open_bloom,
             openers.shared_bloom, describers.describe_shared_bloom),
        Kind("exact", "IMP-CBFilter: counting filter + fingerprint library on disk; never "
             "drops a new URL", "folder", _RATE["exact"], EXACT_BATCH, ("cache_entries", *SHARED),
             openers.open_exact, openers.shared_library, describers.describe_shared_library,
             marker="library.sqlite"),
        Kind("library", "the fingerprint library alone (the IMP-CBFilter paper's baseline)",
             "folder", _RATE["library"], LIBRARY_BATCH, SHARED, openers.open_library,
             openers.shared_library, describers.describe_shared_library,
             marker="library.sqlite"),
        Kind("dsbf", "splittable Bloom filter: keeps its error rate as the crawl outgrows "
             "capacity; shared through Redis", "", _RATE["dsbf"], LIBRARY_BATCH,
             ("leaf_bits", "layout", *SHARED), openers.open_dsbf, openers.shared_dsbf,
             describers.describe_shared_dsbf),
        Kind("mdbf", "multi-dimensional Bloom filter: groups of two bit vectors", "file",
             _RATE["mdbf"], LIBRARY_BATCH, ("groups", "query"), openers.open_mdbf),
        Kind("rotating", "Bloom filter generations that expire (our reconstruction of a "
             "patent's filter)", "folder", _RATE["rotating"],
             LIBRARY_BATCH, ("generations", "window", "layout"), openers.open_rotating,
             marker="rotating.json"),
        Kind("similar", "lossy: also drops URLs that look like kept ones", "file",
             _RATE["similar"], LIBRARY_BATCH, ("similarity_mode", "similarity_index", "url_db"),
             openers.open_similar, url_keys=True),
    )
}  # fmt: skip
"""Every kind, by name: the one place that says which kinds exist."""

DEFAULT_KIND = "exact"  # for integrations: never drops a page, local or shared alike


def kind(name: object, spell: Spell = plain) -> Kind:
    """The row of kind `name`; OptionError naming the kinds that exist if there is none."""
    if not isinstance(name, str) or name not in KINDS:
        shared = [k.name for k in KINDS.values() if k.open_shared is not None]
        raise OptionError(
            f"unknown filter {name!r} ({spell('filter')}): choose one of {', '.join(KINDS)}; "
            f"shared through Redis: {', '.join(shared)}"
        )
    return KINDS[name]


def open_filter(
    kind_name: str,
    *,
    capacity: int | None = None,
    error_rate: float | None = None,
    state: str | os.PathLike[str] | None = None,
    redis: str | None = None,
    name: str | None = None,
    spell: Spell = plain,
    **options: Any,
) -> SeenFilter:
    """Open the filter of this kind, creating it if its state is new: shared through Redis
    under `name` when `redis` is given, else kept at `state`, else for this process only.

    Values left None take the stored ones (an existing filter) or the kind's defaults. Options
    are the kind's own (OPTIONS); one that is given to a kind that does not take it is an
    OptionError, and so is a given value that contradicts a stored one (ParameterConflict).
    `spell` writes parameter names in messages the way the caller's user wrote them.
    """
    row = kind(kind_name, spell)
    if capacity is not None and (
        not isinstance(capacity, int) or isinstance(capacity, bool) or capacity < 1
    ):
        raise ConfigError(
            f"the capacity ({spell('capacity')}) must be a positive int, not {capacity!r}"
        )
    given = given_options(row.name, options, shared=redis is not None, spell=spell)
    if redis is not None and state is not None:
        raise OptionError(
            f"{spell('redis')} and {spell('state')} exclude each other: a filter is either "
            "shared through Redis or kept in a state, not both"
        )
    if redis is not None and row.open_shared is None:
        shared = [k.name for k in KINDS.values() if k.open_shared is not None]
        raise OptionError(
            f"{spell('redis')} works with {spell('filter')} {', '.join(shared)}, not {row.name}"
        )
    if redis is not None and name is None:
        raise OptionError(f"{spell('redis')} needs a {spell('name')} for the shared filter")
    if state is not None:
        from pathlib import Path

        state = Path(state)
    request = Request(
        kind=row.name,
        capacity=capacity,
        error_rate=error_rate,
        state=state,
        redis=redis,
        name=name or "",
        given=given,
        defaults=row.defaults(),
        spell=spell,
    )
    if redis is not None:
        assert row.open_shared is not None
        openers.refuse_short_lease(given.get("lease"), spell)
        seen = row.open_shared(request)
        if given.get("wait_for_claims"):  # a setting of the client, not of the filter
            from urlseen.protocol import WaitsOnClaims

            if isinstance(seen, WaitsOnClaims):
                seen.wait_for_claims = True
        return seen
    return row.open_local(request)


def given_options(
    kind_name: str, options: dict[str, Any], *, shared: bool, spell: Spell = plain
) -> dict[str, Any]:
    """The options given (not None), each checked to be one the kind takes, and a shared-only
    one to come with a shared filter: an OptionError otherwise, before anything is opened."""
    row = kind(kind_name, spell)
    given = {key: value for key, value in options.items() if value is not None}
    for key in given:
        if key not in row.options:
            takers = [k.name for k in KINDS.values() if key in k.options] or ["no kind"]
            raise OptionError(
                f"{spell(key)} applies to {spell('filter')} {' or '.join(takers)}, not {row.name}"
            )
        if OPTIONS[key].shared and not shared:
            raise OptionError(f"{spell(key)} applies to a filter shared through {spell('redis')}")
        _check_range(OPTIONS[key], given[key], spell)
    return given


def _check_range(option: Option, value: Any, spell: Spell) -> None:
    """A number option within its bounds (a float's low bound excluded: seconds > 0)."""
    if option.type not in (int, float) or isinstance(value, bool):
        return
    if not isinstance(value, (int, float)):
        return  # the filter's own check names the type it takes
    low, high = option.low, option.high
    too_low = low is not None and (value <= low if option.type is float else value < low)
    if too_low or (high is not None and value > high) or value != value:
        lower = "" if low is None else (f"> {low}" if option.type is float else f">= {low}")
        upper = "" if high is None else f"<= {high}"
        bounds = " and ".join(b for b in (lower, upper) if b)
        raise OptionError(f"{spell(option.name)} must be {bounds}, not {value!r}")


def shared_client(url: str) -> Any:
    """A redis-py client for a shared filter's Redis URL, checked as open_filter checks it."""
    from urlseen.shared import client as redis_store

    return redis_store.connect(url)


def shared_key(name: str, part: str) -> str:
    """The Redis key of `part`, kept beside the keys of the shared filter `name` (same hash
    slot, the name escaped as in the filter's own keys): what a front end keeps with a filter,
    such as its fleet's members."""
    from urlseen.shared import client as redis_store

    return redis_store.key(name, part)


def state_in(folder: str | os.PathLike[str], kind_name: str) -> Path:
    """Where a kind keeps its state inside a folder of the caller's (Scrapy's JOBDIR/urlseen):
    the folder itself for folder kinds, a file named after the kind in it for file kinds."""
    from pathlib import Path

    return Path(folder) if kind(kind_name).state != "file" else Path(folder, f"seen.{kind_name}")


def describe(
    path: str | os.PathLike[str] | None = None,
    *,
    redis: str | None = None,
    name: str | None = None,
    verify: bool = False,
) -> dict[str, Any]:
    """What a state holds, read-only (a crawler may be using it): a state file, a rotating or
    exact filter's folder, a folder holding one state file named by state_in, or with `redis`
    the filter called `name` there. verify=True also checks every checksum the state has
    (FormatError if one fails). OptionError if there is no urlseen state there."""
    if redis is not None:
        expiring = describers.describe_shared_generations(redis, name or "")
        if expiring is not None:
            return expiring
        for row in KINDS.values():
            found = row.describe_shared(redis, name or "") if row.describe_shared else None
            if found is not None:
                return found
        from urlseen.shared.client import redacted

        raise OptionError(f"no urlseen filter named {name!r} in {redacted(redis)}")
    if path is None:
        raise OptionError("give a state's path, or a Redis URL and a name")
    from pathlib import Path

    where = Path(path)
    if not where.is_dir():
        return describers.describe_file(where, verify)
    for row in KINDS.values():
        inner = where / f"seen.{row.name}"
        if row.state == "file" and inner.is_file():
            return describers.describe_file(inner, verify)
        if holds_generations(inner):
            return describers.describe_generations(inner, verify)
    if holds_generations(where):
        return describers.describe_generations(where, verify)
    if (where / KINDS["rotating"].marker).exists():
        return describers.describe_rotating(where, verify)
    if (where / KINDS["exact"].marker).exists():
        return describers.describe_exact(where, verify)
    markers = sorted({row.marker for row in KINDS.values() if row.marker})
    raise OptionError(f"{where} is a folder without {' or '.join(markers)}: not a urlseen state")


__all__ = [
    "DEFAULT_CAPACITY",
    "DEFAULT_KIND",
    "KINDS",
    "OPTIONS",
    "SHARED",
    "Kind",
    "Option",
    "OptionError",
    "ParameterConflict",
    "describe",
    "given_options",
    "holds_generations",
    "kind",
    "open_expiring",
    "open_filter",
    "remote_leaf_store",
    "remote_leaf_store_exists",
    "shared_client",
    "shared_key",
    "state_in",
]
