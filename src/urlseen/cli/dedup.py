"""`urlseen dedup`: first occurrences of URLs, in input order, in bounded memory."""

from __future__ import annotations

import contextlib
import errno
import math
import sys
import time
from collections.abc import Iterator
from datetime import datetime
from typing import TYPE_CHECKING, Any

import click

from urlseen import kinds
from urlseen.canonical import DEFAULT_PROFILE, PROFILES
from urlseen.cli._common import cli_errors, human, kind_options, open_filter, sizing_options
from urlseen.errors import UrlseenError
from urlseen.job.dedup import dedup
from urlseen.job.forget import forget
from urlseen.job.linekeys import LineKeyer
from urlseen.job.streams import Inputs, open_output, refuse_clobbering, total_bytes

if TYPE_CHECKING:
    from urlseen.job.dedup import DedupSummary

MAX_TIMESTAMP = 1e13  # seconds: ~317,000 years; milliseconds of it still fit SQLite's int64


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


def _report(summary: DedupSummary, as_json: bool, where: str) -> None:
    if as_json:
        import json  # here: a run without --json does not pay for its import

        click.echo(json.dumps(summary.as_dict()), err=True)
        return
    s, skipped = summary, summary.skipped
    line = (
        f"urlseen dedup: {s.lines:,} lines, {s.new:,} new, {s.duplicates:,} duplicates "
        f"({s.duplicate_rate:.1%}), {human(s.new_per_second)} new URLs/s "
        f"({human(s.lines_per_second)} lines/s), "
        f"{s.filter_kind} filter {human(s.filter_bits / 8, 'B')} {where}"
    )
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
    elif s.filter_count > s.filter_capacity and (lost := s.filter_likely_dropped) is not None:
        click.echo(
            f"warning: ~{lost:,.0f} new URLs likely dropped as seen: {s.filter_count:,} keys in a "
            f"filter sized for {s.filter_capacity:,}; use a larger --capacity",
            err=True,
        )


@contextlib.contextmanager
def _naming_output(output: str) -> Iterator[None]:
    """An OSError that names no file comes from writing or closing the output (inputs, states
    and libraries name themselves): it names the output."""
    try:
        yield
    except OSError as exc:
        mute = exc.filename is None and not isinstance(exc, UrlseenError)  # not RemoteError
        if mute and output != "-" and exc.errno != errno.EPIPE:
            exc.filename = output
        raise


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
    help="State to resume (created if missing; seen URLs stay seen): a file for "
    "bloom, mdbf and similar, a folder for exact, library and rotating.",
)
@click.option(
    "--redis",
    "redis_url",
    metavar="URL",
    help="Share the filter through Redis (redis://host:6379/0): processes that use "
    "the same URL and --name print each distinct URL once between them (bloom, "
    "dsbf, exact, library).",
)
@click.option(
    "--name", default="dedup", show_default=True, help="With --redis: the shared filter's name."
)
@click.option(
    "--filter",
    "kind",
    type=click.Choice(list(kinds.KINDS)),
    default="bloom",
    show_default=True,
    help="Seen-test: " + "; ".join(f"{k.name}: {k.summary}" for k in kinds.KINDS.values()),
)
@sizing_options
@click.option(
    "--remove",
    type=click.Path(dir_okay=False, allow_dash=True),
    help="exact: forget the URLs listed in this file before the run (new again).",
)
@click.option(
    "--forget-older-than",
    metavar="AGE",
    help="exact: before the run, forget URLs first seen before AGE (30d, 12h, Unix "
    "seconds or an ISO date): expiry for re-crawl.",
)
@kind_options(list(kinds.KINDS.values()))
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
    help="Lines per batch; with --state, the most a killed run may print again when "
    "rerun [default: " + ", ".join(f"{k.name} {k.batch_size}" for k in kinds.KINDS.values()) + "].",
)
@click.option(
    "--progress/--no-progress",
    default=None,
    help="Progress bar on stderr [default: when stderr is a terminal].",
)
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON (on stderr).")
def dedup_command(
    inputs: tuple[str, ...],
    output: str,
    append: bool,
    state: str | None,
    redis_url: str | None,
    name: str,
    kind: str,
    capacity: int | None,
    error_rate: float | None,
    remove: str | None,
    forget_older_than: str | None,
    profile: str,
    no_canonicalize: bool,
    batch_size: int | None,
    progress: bool | None,
    as_json: bool,
    **options: Any,
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
    show = sys.stderr.isatty() if progress is None else progress
    if kind != "exact" and (remove is not None or forget_older_than is not None):
        raise click.UsageError("--remove and --forget-older-than need --filter exact")
    cutoff = None if forget_older_than is None else _parse_age(forget_older_than)
    lines = Inputs(inputs, stop_on_error=True)
    with cli_errors(), _naming_output(output):
        read = (*inputs, remove) if remove is not None else inputs
        refuse_clobbering(read, output, state, kinds.KINDS[kind].state == "folder")
        seen = open_filter(kind, capacity=capacity, error_rate=error_rate, state=state,
                           redis=redis_url, name=name, **options)  # fmt: skip
        with seen, contextlib.ExitStack() as stack:
            if remove is not None or cutoff is not None:
                forgotten = forget(seen, remove, cutoff, profile)
                click.echo(
                    f"urlseen dedup: forgot {forgotten:,} URLs (they are new again)", err=True
                )
            out = sys.stdout.buffer
            if output != "-":
                out, cut = open_output(output, append)
                stack.enter_context(out)
                if cut:
                    click.echo(
                        f"warning: {output}: removed a partial last line ({cut} bytes) left "
                        "by an interrupted run; it is printed again in full",
                        err=True,
                    )
            bar = None
            if show:
                from tqdm import tqdm  # type: ignore[import-untyped]

                size = total_bytes(inputs)
                bar = tqdm(total=size, unit="B", unit_scale=True, file=sys.stderr, leave=False)
                stack.enter_context(bar)
            summary = dedup(
                lines,
                seen,
                out,
                keyer=LineKeyer(profile=profile),
                transactional=state is not None,
                batch_size=batch_size or kinds.KINDS[kind].batch_size,
                progress=bar.update if bar is not None else None,
            )
    _report(summary, as_json, "in Redis" if redis_url is not None else "in memory")
    if (error := lines.failed()) is not None:  # the summary above says what came before it
        raise click.ClickException(str(error))
