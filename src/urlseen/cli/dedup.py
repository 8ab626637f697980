"""`urlseen dedup`: first occurrences of URLs, in input order, in bounded memory."""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

import click

from urlseen.canonical import DEFAULT_PROFILE, PROFILES
from urlseen.cli._common import cli_errors, human
from urlseen.dedup import DEFAULT_BATCH_SIZE, DedupSummary, dedup
from urlseen.filters.bloom import BloomFilter
from urlseen.linekeys import LineKeyer
from urlseen.stores.mmapfile import UncleanShutdownWarning

DEFAULT_CAPACITY = 10_000_000
DEFAULT_ERROR_RATE = 1e-6


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


def _open_filter(
    ctx: click.Context, state: str | None, capacity: int, error_rate: float, layout: str
) -> BloomFilter:
    if state is None:
        return BloomFilter(capacity, error_rate, layout=layout)
    if not Path(state).exists():
        return BloomFilter.create(state, capacity, error_rate, layout=layout)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", UncleanShutdownWarning)
        seen = BloomFilter.open(state)
    for warning in caught:
        click.echo(f"warning: {warning.message}", err=True)
    given = {"capacity": capacity, "error_rate": error_rate, "layout": layout}
    stored = {
        "capacity": seen.capacity,
        "error_rate": seen.error_rate,
        "layout": seen.stats().details["layout"],
    }
    for name, value in given.items():
        explicit = ctx.get_parameter_source(name) is click.core.ParameterSource.COMMANDLINE
        if explicit and value != stored[name]:
            seen.close()
            raise click.UsageError(
                f"--{name.replace('_', '-')} {value} differs from the state file's "
                f"{stored[name]}; a state file keeps the parameters it was created with"
            )
    return seen


def _report(summary: DedupSummary, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(summary.as_dict()), err=True)
        return
    s = summary
    line = (
        f"urlseen dedup: {s.lines:,} lines, {s.new:,} new, {s.duplicates:,} duplicates "
        f"({s.duplicate_rate:.1%}), {human(s.new_per_second)} new URLs/s "
        f"({human(s.lines_per_second)} lines/s), "
        f"filter {s.filter_bits:,} bits ({s.filter_bits / 8 / 2**20:.1f} MiB)"
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
    if s.filter_count > s.filter_capacity:
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
    type=click.Path(dir_okay=False),
    help="State file: created if missing, resumed if present (seen URLs stay seen).",
)
@click.option(
    "--filter",
    "filter_name",
    type=click.Choice(["bloom"]),
    default="bloom",
    show_default=True,
    help="Seen-test algorithm.",
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
    default=DEFAULT_ERROR_RATE,
    show_default=True,
    help="False-positive rate at capacity: the share of new URLs dropped as seen.",
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
    default=DEFAULT_BATCH_SIZE,
    show_default=True,
    help="Lines per batch; with --state, the most a killed run may print again when rerun.",
)
@click.option(
    "--progress/--no-progress",
    default=None,
    help="Progress bar on stderr [default: when stderr is a terminal].",
)
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON (on stderr).")
@click.pass_context
def dedup_command(
    ctx: click.Context,
    inputs: tuple[str, ...],
    output: str,
    append: bool,
    state: str | None,
    filter_name: str,
    capacity: int,
    error_rate: float,
    layout: str,
    profile: str,
    no_canonicalize: bool,
    batch_size: int,
    progress: bool | None,
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
    """
    keyer = LineKeyer(profile="none" if no_canonicalize else profile)
    show = sys.stderr.isatty() if progress is None else progress
    with cli_errors():
        seen = _open_filter(ctx, state, capacity, error_rate, layout)
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
                batch_size=batch_size,
                progress=bar.update if bar is not None else None,
            )
        _report(summary, as_json)
