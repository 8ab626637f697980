"""`urlseen dedup`: first occurrences of URLs, in input order, in bounded memory."""

from __future__ import annotations

import contextlib
import functools
import gzip
import json
import math
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import BinaryIO

import click

from urlseen.canonical import DEFAULT_PROFILE, PROFILES
from urlseen.cli._common import cli_errors, human
from urlseen.cli._open_dsbf import open_dsbf
from urlseen.cli._open_mdbf import open_mdbf, open_rotating
from urlseen.cli._open_shared_exact import forget_shared, open_shared_exact
from urlseen.cli._open_similar import open_similar
from urlseen.cli._state import checked, echoing_warnings, explicit
from urlseen.dedup import DEFAULT_BATCH_SIZE, DedupSummary, dedup
from urlseen.filters.base import Key, SeenFilter
from urlseen.filters.bloom import BloomFilter
from urlseen.filters.exact import DEFAULT_CACHE_ENTRIES, LIBRARY_FILE, ExactFilter
from urlseen.filters.library import FingerprintLibraryFilter
from urlseen.filters.redis_bloom import RedisBloomFilter
from urlseen.linekeys import LineKeyer
from urlseen.stores.mmapfile import UncleanShutdownWarning
from urlseen.stores.redis_library import RedisLibrary

DEFAULT_CAPACITY = 10_000_000
DEFAULT_ERROR_RATE = 1e-6
EXACT_ERROR_RATE = 1e-3
MAX_TIMESTAMP = 1e13  # seconds: ~317,000 years; milliseconds of it still fit SQLite's int64
EXACT_BATCH_SIZE = 65536  # a library commit per batch: larger batches amortize it (EXACT.md)


@contextlib.contextmanager
def seen_closed_on_error(seen: SeenFilter | RedisLibrary) -> Iterator[None]:
    try:
        yield
    except BaseException:
        seen.close()
        raise


def _open_input(name: str) -> BinaryIO:
    if name == "-":
        return sys.stdin.buffer
    if name.endswith(".gz"):
        return gzip.open(name, "rb")  # type: ignore[return-value]
    return open(name, "rb")


def _lines(names: tuple[str, ...]) -> Iterator[bytes]:
    for name in names or ("-",):
        with contextlib.ExitStack() as stack:
            stream = _open_input(name)
            if name != "-":
                stack.enter_context(stream)
            yield from stream


def _total_bytes(names: tuple[str, ...]) -> int | None:
    """Input size for the progress bar, when every input is a plain file."""
    if not names or any(n == "-" or n.endswith(".gz") for n in names):
        return None
    return sum(os.path.getsize(n) for n in names)


def _open_output(path: str, append: bool) -> BinaryIO:
    """The output file; when appending, first cut a partial last line left by a killed run.

    That line's key never reached the state (keys go in after their lines are flushed), so the
    resumed run prints it again, whole, on its own line.
    """
    if not append or not os.path.exists(path):
        return open(path, "ab" if append else "wb")
    out = open(path, "r+b")  # noqa: SIM115 (returned to the caller, who closes it)
    size = out.seek(0, os.SEEK_END)
    end = size
    while end > 0:
        start = max(0, end - 65536)
        out.seek(start)
        newline = out.read(end - start).rfind(b"\n")
        if newline >= 0:
            end = start + newline + 1
            break
        end = start
    if end < size:
        out.truncate(end)
        click.echo(
            f"warning: {path}: removed a partial last line ({size - end} bytes) left by an "
            "interrupted run; it is printed again in full",
            err=True,
        )
    out.seek(end)
    return out


def _open_bloom(
    ctx: click.Context, state: str | None, capacity: int, error_rate: float, layout: str
) -> BloomFilter:
    if state is None:
        return BloomFilter(capacity, error_rate, layout=layout)
    if not Path(state).exists():
        return BloomFilter.create(state, capacity, error_rate, layout=layout)
    if Path(state).is_dir():
        raise click.UsageError(f"--state {state} is a folder: a Bloom filter's state is a file")
    seen = echoing_warnings(lambda: BloomFilter.open(state), UncleanShutdownWarning)
    stored = {
        "capacity": seen.capacity,
        "error_rate": seen.error_rate,
        "layout": seen.stats().details["layout"],
    }
    given = {"capacity": capacity, "error_rate": error_rate, "layout": layout}
    return checked(ctx, seen, given, stored, "state file")


def _open_redis_bloom(
    ctx: click.Context,
    url: str,
    name: str,
    capacity: int,
    error_rate: float | None,
    layout: str,
) -> RedisBloomFilter:
    """The shared filter: created with these parameters if it is new, else its own ones (an
    explicit option that differs is an error)."""
    if not RedisBloomFilter.exists(url, name):
        rate = DEFAULT_ERROR_RATE if error_rate is None else error_rate
        return RedisBloomFilter(url, name, capacity, rate, layout=layout)
    return RedisBloomFilter(url, name, capacity if explicit(ctx, "capacity") else None, error_rate)


def _open_exact(
    ctx: click.Context,
    stack: contextlib.ExitStack,
    filter_name: str,
    state: str | None,
    capacity: int,
    error_rate: float,
    cache_entries: int,
) -> ExactFilter | FingerprintLibraryFilter:
    """An exact filter: its state folder, or a temporary one (the library stays on disk, so
    memory stays bounded however many URLs come)."""
    folder = (
        Path(state)
        if state is not None
        else Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="urlseen-")))
    )
    if folder.exists() and not folder.is_dir():
        raise click.UsageError(f"--state {folder} is a file: --filter {filter_name} keeps a folder")
    exists = (folder / LIBRARY_FILE).exists()
    if filter_name == "library":
        if exists:
            return FingerprintLibraryFilter.open(folder)
        return FingerprintLibraryFilter.create(folder)
    if not exists:
        return ExactFilter.create(folder, capacity, error_rate, cache_entries=cache_entries)
    seen = echoing_warnings(lambda: ExactFilter.open(folder, cache_entries=cache_entries))
    stored = {"capacity": seen.counters.capacity, "error_rate": seen.counters.error_rate}
    given = {"capacity": capacity, "error_rate": error_rate}
    return checked(ctx, seen, given, stored, "state")


def _parse_age(text: str) -> float:
    """A cut-off time from "30d", "12h", "90m", "45s" (ago) or Unix seconds or an ISO date."""
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
    cutoff: float | None = None
    if text and text[-1] in units and text[:-1].replace(".", "", 1).isdigit():
        cutoff = time.time() - float(text[:-1]) * units[text[-1]]
    else:
        try:
            cutoff = float(text)
        except ValueError:
            with contextlib.suppress(ValueError, OverflowError):
                cutoff = datetime.fromisoformat(text).timestamp()
    if cutoff is None or not math.isfinite(cutoff) or abs(cutoff) > MAX_TIMESTAMP:
        raise click.BadParameter(
            f"{text!r}: use an age like 30d / 12h / 90m / 45s, Unix seconds, or an ISO date"
            " (within 300,000 years of 1970)",
            param_hint="--forget-older-than",
        )
    return cutoff


def _forget(
    forget_many: Callable[[list[Key]], list[bool]],
    forget_older_than: Callable[[float], int],
    remove: str | None,
    older_than: float | None,
    keyer: LineKeyer,
) -> None:
    """Apply --remove and --forget-older-than before the run (to a local or a shared exact
    filter): those URLs become new again."""
    forgotten = 0
    if remove is not None:
        keys = [k for line in _lines((remove,)) if (k := keyer.key(line.rstrip(b"\n"))) is not None]
        forgotten += sum(forget_many(keys))
    if older_than is not None:
        forgotten += forget_older_than(older_than)
    if remove is not None or older_than is not None:
        click.echo(f"urlseen dedup: forgot {forgotten:,} URLs (they are new again)", err=True)


def _report(summary: DedupSummary, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(summary.as_dict()), err=True)
        return
    s = summary
    line = (
        f"urlseen dedup: {s.lines:,} lines, {s.new:,} new, {s.duplicates:,} duplicates "
        f"({s.duplicate_rate:.1%}), {human(s.new_per_second)} new URLs/s "
        f"({human(s.lines_per_second)} lines/s), "
        f"{s.filter_kind} filter {s.filter_bits / 8 / 2**20:.1f} MiB in memory"
    )
    skipped = s.skipped
    odd = [f"{skipped.empty:,} empty skipped"] if skipped.empty else []
    for count, what in (
        (skipped.invalid_utf8, "invalid UTF-8"),
        (skipped.oversized, "oversized"),
        (skipped.verbatim, "unparsable"),
    ):
        if count:
            odd.append(f"{count:,} {what} kept verbatim")
    click.echo(line + (f"; {', '.join(odd)}" if odd else ""), err=True)
    if s.filter_count > s.filter_capacity and s.filter_kind == "exact":
        click.echo(
            f"note: {s.filter_count:,} URLs in an exact filter sized for {s.filter_capacity:,}: "
            "answers stay exact, but more new URLs now cost a library look-up",
            err=True,
        )
    elif s.filter_count > s.filter_capacity and s.filter_kind in ("bloom", "redis-bloom", "mdbf"):
        click.echo(
            f"warning: {s.filter_count:,} keys in a filter sized for {s.filter_capacity:,}: "
            "the false-positive rate is now above the configured one; use a larger --capacity",
            err=True,
        )


@click.command("dedup")
@click.argument("inputs", nargs=-1, type=click.Path(dir_okay=False, allow_dash=True))
@click.option(
    "-o",
    "--output",
    default="-",
    type=click.Path(dir_okay=False, allow_dash=True),
    help="Write new lines here instead of stdout.",
)
@click.option(
    "-a",
    "--append",
    is_flag=True,
    help="Append to --output (resume a run with --state without losing its output).",
)
@click.option(
    "--state",
    type=click.Path(),
    help="State to resume (created if missing; seen URLs stay seen): a file for bloom, a "
    "folder for exact and library.",
)
@click.option(
    "--redis",
    "redis_url",
    metavar="URL",
    help="Share the filter through Redis (redis://host:6379/0): processes that use the same "
    "URL and --name print each distinct URL once between them (bloom, dsbf, exact, library).",
)
@click.option(
    "--name",
    default="dedup",
    show_default=True,
    help="With --redis: the shared filter's name.",
)
@click.option(
    "--filter",
    "filter_name",
    type=click.Choice(["bloom", "exact", "library", "similar", "dsbf", "mdbf", "rotating"]),
    default="bloom",
    show_default=True,
    help="Seen-test: bloom (probabilistic, in memory), exact (IMP-CBFilter: counting filter + "
    "fingerprint library on disk, never drops a new URL), library (fingerprint library alone), "
    "similar (lossy: also drops URLs that look like kept ones, see --similarity-mode), "
    "mdbf (seed B's multi-dimensional filter, see --groups), rotating (seed C's filter as we "
    "reconstruct it: generations that expire, see --generations).",
)
@click.option(
    "--capacity",
    type=click.IntRange(min=1),
    default=DEFAULT_CAPACITY,
    show_default=True,
    help="Distinct URLs the filter is sized for.",
)
@click.option(
    "--error-rate",
    type=click.FloatRange(0, 1, min_open=True, max_open=True),
    default=None,
    help="bloom: false-positive rate at capacity, the share of new URLs dropped as seen "
    f"[default: {DEFAULT_ERROR_RATE}]. exact: the counting filter's rate, the share of new URLs "
    f"that cost a library look-up (never a wrong answer) [default: {EXACT_ERROR_RATE}].",
)
@click.option(
    "--cache-entries",
    type=click.IntRange(0, 2**32),
    default=DEFAULT_CACHE_ENTRIES,
    show_default=True,
    help="exact: hot fingerprints kept in memory (32 bytes each); 0 = none.",
)
@click.option(
    "--remove",
    type=click.Path(dir_okay=False, allow_dash=True),
    help="exact: forget the URLs listed in this file before the run (they are new again).",
)
@click.option(
    "--forget-older-than",
    metavar="AGE",
    help="exact: before the run, forget URLs first seen before AGE (30d, 12h, Unix seconds "
    "or an ISO date): expiry for re-crawl.",
)
@click.option(
    "--leaf-bits",
    type=click.IntRange(512, 2**32),
    default=None,
    help="dsbf: bits per leaf Bloom filter, a multiple of 512 [default: 2**23, 1 MiB]; a "
    "leaf that fills splits in two.",
)
@click.option(
    "--layout",
    type=click.Choice(["blocked", "standard"]),
    default="blocked",
    show_default=True,
    help="Bloom bit layout: blocked is faster, standard smaller.",
)
@click.option(
    "--canonicalize",
    "profile",
    type=click.Choice([*PROFILES, "none"]),
    default=DEFAULT_PROFILE,
    show_default=True,
    help="URL canonicalization before hashing (none = exact lines).",
)
@click.option("--no-canonicalize", is_flag=True, help="Same as --canonicalize none.")
@click.option(
    "--batch-size",
    type=click.IntRange(1, 1_000_000),
    default=None,
    help="Lines per batch; with --state, the most a killed run may print again when rerun "
    f"[default: {DEFAULT_BATCH_SIZE} for bloom; {EXACT_BATCH_SIZE} for exact and library, "
    "whose library commits once per batch].",
)
@click.option(
    "--progress/--no-progress",
    default=None,
    help="Progress bar on stderr [default: when stderr is a terminal].",
)
@click.option(
    "--similarity-mode",
    type=click.Choice(["composite", "exact4", "patent"]),
    default="composite",
    show_default=True,
    help="similar: composite drops a URL only if site, depth, first directory and last segment "
    "all match one kept URL; exact4 and patent (CN106407485's rule) if each matches some kept "
    "URL, which drops many new URLs (benchmarks/SIMILARITY.md).",
)
@click.option(
    "--similarity-index",
    type=click.Choice(["shared", "prime", "regions"]),
    default="shared",
    show_default=True,
    help="similar, exact4/patent: feature bits mod M, mod the largest prime <= M, or one region "
    "per feature.",
)
@click.option(
    "--url-db",
    type=click.Path(dir_okay=False),
    help="similar: record every decision (URL, features, new or similar) in this SQLite file.",
)
@click.option(
    "--groups",
    type=click.IntRange(1, 64),
    default=None,
    help="mdbf: S, groups of two bit vectors [default: the least memory for the target].",
)
@click.option(
    "--query",
    type=click.Choice(["all", "any"]),
    default="all",
    show_default=True,
    help="mdbf: a URL is seen if all groups (or, as the seed paper wrote it, any group) have "
    "its bits; any has more false positives as --groups grows.",
)
@click.option(
    "--generations",
    type=click.IntRange(1, 64),
    default=4,
    show_default=True,
    help="rotating: G generations; a URL is forgotten (new again) after G rotations.",
)
@click.option(
    "--window",
    type=click.FloatRange(0, min_open=True),
    default=None,
    help="rotating: seconds per generation (URLs expire after at most G windows) [default: "
    "rotate only when a generation holds capacity / G URLs].",
)
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON (on stderr).")
@click.pass_context
def dedup_command(
    ctx: click.Context,
    inputs: tuple[str, ...],
    output: str,
    append: bool,
    state: str | None,
    redis_url: str | None,
    name: str,
    filter_name: str,
    capacity: int,
    error_rate: float | None,
    cache_entries: int,
    remove: str | None,
    forget_older_than: str | None,
    leaf_bits: int | None,
    layout: str,
    profile: str,
    no_canonicalize: bool,
    batch_size: int | None,
    progress: bool | None,
    similarity_mode: str,
    similarity_index: str,
    url_db: str | None,
    groups: int | None,
    query: str,
    generations: int,
    window: float | None,
    as_json: bool,
) -> None:
    """Print each URL of INPUTS (files, .gz files or - for stdin) the first time it is seen.

    URLs are canonicalized (Scrapy's rule) before the seen-test, so spelling variants of one
    URL count as one; each first occurrence is printed exactly as it was read. Empty lines are
    skipped; lines that are not UTF-8 or longer than 64 KiB are compared byte for byte. The
    summary goes to stderr.

    \b
    Example:
        urlseen dedup crawl-log.txt.gz -o unique.txt
        urlseen dedup --state seen.bloom new-links.txt   # URLs seen in earlier runs stay seen
        urlseen dedup --filter exact --state seen/ new-links.txt   # exact, on disk
    """
    profile = "none" if no_canonicalize else profile
    keyer = LineKeyer(profile=profile)
    show = sys.stderr.isatty() if progress is None else progress
    if filter_name != "exact" and (remove is not None or forget_older_than is not None):
        raise click.UsageError("--remove and --forget-older-than need --filter exact")
    cutoff = (
        None if forget_older_than is None else _parse_age(forget_older_than)
    )  # before any change
    with cli_errors(), contextlib.ExitStack() as outer:
        seen: SeenFilter
        if filter_name == "dsbf":
            seen = open_dsbf(ctx, redis_url, name, state, capacity, error_rate, leaf_bits, layout)
        elif redis_url is not None and filter_name in ("exact", "library") and state is None:
            library = open_shared_exact(ctx, redis_url, name, capacity)
            with seen_closed_on_error(library):  # before the filter counts the library's records
                forget = functools.partial(forget_shared, library)
                _forget(
                    forget, library.forget_older_than, remove, cutoff, LineKeyer(profile=profile)
                )
            seen = FingerprintLibraryFilter(library=library)
        elif redis_url is not None:
            if filter_name != "bloom" or state is not None:
                raise click.UsageError(
                    "--redis works with --filter bloom, exact or library, and without --state"
                )
            seen = _open_redis_bloom(ctx, redis_url, name, capacity, error_rate, layout)
        elif filter_name == "bloom":
            rate = DEFAULT_ERROR_RATE if error_rate is None else error_rate
            seen = _open_bloom(ctx, state, capacity, rate, layout)
        elif filter_name in ("mdbf", "rotating"):
            rate = DEFAULT_ERROR_RATE if error_rate is None else error_rate
            seen = (
                open_mdbf(ctx, state, capacity, rate, groups, query)
                if filter_name == "mdbf"
                else open_rotating(ctx, state, capacity, rate, generations, window, layout)
            )
        elif filter_name == "similar":
            seen = open_similar(
                ctx, state, capacity, error_rate, similarity_mode, similarity_index, url_db
            )
        else:
            rate = EXACT_ERROR_RATE if error_rate is None else error_rate
            seen = _open_exact(ctx, outer, filter_name, state, capacity, rate, cache_entries)
            if isinstance(seen, ExactFilter):
                with seen_closed_on_error(seen):
                    _forget(
                        seen.forget_many,
                        seen.forget_older_than,
                        remove,
                        cutoff,
                        LineKeyer(profile=profile),  # --remove's lines are not the run's
                    )
        with seen, contextlib.ExitStack() as stack:
            out = (
                sys.stdout.buffer
                if output == "-"
                else stack.enter_context(_open_output(output, append))
            )
            bar = None
            if show:
                from tqdm import tqdm  # type: ignore[import-untyped]

                bar = stack.enter_context(
                    tqdm(
                        total=_total_bytes(inputs),
                        unit="B",
                        unit_scale=True,
                        file=sys.stderr,
                        leave=False,
                    )
                )
            summary = dedup(
                _lines(inputs),
                seen,
                out,
                keyer=keyer,
                transactional=state is not None,
                batch_size=batch_size
                or (DEFAULT_BATCH_SIZE if filter_name == "bloom" else EXACT_BATCH_SIZE),
                progress=bar.update if bar is not None else None,
            )
        _report(summary, as_json)
