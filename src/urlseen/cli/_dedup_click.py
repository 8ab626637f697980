"""`urlseen dedup` declared for click: its options, help and messages. The run is
cli/dedup.py's; cli/_dedup_args.py reads the same options without click and leaves to click any
command line it is not sure of, so help and errors are always these."""

from __future__ import annotations

from typing import Any

import click

from urlseen import kinds
from urlseen.canonical import DEFAULT_PROFILE, PROFILES
from urlseen.cli import dedup
from urlseen.cli._options import kind_options, sizing_options


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
def dedup_command(**values: Any) -> None:
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
    dedup.run(**values)
