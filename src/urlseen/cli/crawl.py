"""`urlseen crawl`: a real Scrapy crawl of one site with a urlseen filter, and the metrics a
URL-seen test is judged by."""

from __future__ import annotations

import contextlib
import json
import sys
from typing import Any
from urllib.parse import urlsplit

import click

from urlseen import kinds
from urlseen.cli._common import cli_errors, flag, human
from urlseen.cli._options import kind_options, sizing_options
from urlseen.errors import MissingDependencyError

# The kinds a crawl can use: those keyed by the request's fingerprint, not by URL features.
CRAWL_KINDS = [k for k in kinds.KINDS.values() if not k.url_keys]
UNFINISHED = 3  # exit status: the crawl stopped with pages left to fetch (run it again)


def _prefix(start_url: str, prefix: str | None) -> str:
    parts = urlsplit(start_url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise click.BadParameter(f"{start_url!r} is not an http(s) URL", param_hint="START_URL")
    if prefix is None:
        return f"{parts.scheme}://{parts.netloc}/"
    if not start_url.startswith(prefix):
        raise click.BadParameter(
            f"{prefix!r} is not a prefix of the start URL {start_url!r}", param_hint="--prefix"
        )
    return prefix


def _report(report: Any, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(report.as_dict()))
        return
    r = report
    if r.unreachable:  # one line, as click's errors: its fetches failed, nothing else did
        click.echo(f"Error: {r.unreachable}", err=True)
        sys.exit(UNFINISHED)
    state = r.finish_reason if r.finished or r.pending is None else "unfinished"
    click.echo(
        f"urlseen crawl: {r.pages:,} pages fetched in {r.seconds:.1f} s ({state}); "
        f"{r.new:,} new URLs ({human(r.new_per_second)} new URLs/s), {r.duplicates:,} "
        f"duplicates ({r.duplicate_rate:.1%} of {r.new + r.duplicates:,} requests); "
        f"{r.filter_kind} filter {r.filter_bits:,} bits ({human(r.filter_bits / 8, 'B')})"
    )
    if r.left:
        click.echo(f"urlseen crawl: {r.left}")
    if r.false_positives is not None:
        click.echo(
            f"urlseen crawl: {r.false_positives:,} new URLs dropped as seen by the filter's "
            "false positives: pages lost, with any pages only they linked to"
        )


@click.command("crawl")
@click.argument("start_url")
@click.option(
    "--filter",
    "filter_name",
    type=click.Choice([*(k.name for k in kinds.KINDS.values() if not k.url_keys), "scrapy"]),
    default=None,
    help="A urlseen filter kind (see urlseen dedup --help; exact never drops a page, bloom is "
    "smallest and drops about --error-rate of new pages, dsbf with --redis keeps its error "
    "rate as the crawl grows), or scrapy: Scrapy's own RFPDupeFilter, to compare "
    f"[default: {kinds.DEFAULT_KIND}].",
)
@click.option(
    "--state",
    type=click.Path(),
    help="Keep the filter here (exact: a folder; bloom: a file) [default: under --jobdir].",
)
@click.option(
    "--redis",
    "redis_url",
    metavar="URL",
    help="Share the filter through Redis: crawls with the same URL and --name fetch each "
    "page once between them.",
)
@click.option("--name", default="crawl", show_default=True, help="With --redis: the filter's name.")
@sizing_options
@click.option(
    "--jobdir",
    type=click.Path(file_okay=False),
    help="Scrapy's JOBDIR: the filter and the frontier persist there; a crawl stopped or "
    "killed at any moment resumes every page when the same command runs again.",
)
@click.option(
    "--prefix",
    metavar="URL",
    help="Follow only links that start with this [default: the start URL's site].",
)
@click.option(
    "--max-pages",
    type=click.IntRange(min=0),
    default=0,
    help="Stop after this many pages (0: crawl to the end).",
)
@click.option(
    "--concurrency",
    type=click.IntRange(1, 1024),
    default=16,
    show_default=True,
    help="Requests in flight.",
)
@click.option(
    "--delay",
    type=click.FloatRange(0, 3600),
    default=0.0,
    show_default=True,
    help="Seconds between requests to the site (Scrapy's DOWNLOAD_DELAY): politeness.",
)
@click.option(
    "--fetched",
    type=click.File("a", lazy=False),
    help="Append each fetched URL to this file (one line per HTTP response).",
)
@click.option(
    "--audit/--no-audit",
    default=None,
    help="Count the filter's false positives against an exact in-memory set [default: on for "
    "bloom without --redis].",
)
@click.option(
    "--progress/--no-progress",
    default=None,
    help="Progress display on stderr [default: when stderr is a terminal].",
)
@click.option("-v", "--verbose", is_flag=True, help="Show Scrapy's log at INFO level.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@kind_options(CRAWL_KINDS)
def crawl_command(
    start_url: str,
    filter_name: str | None,
    state: str | None,
    redis_url: str | None,
    name: str,
    capacity: int | None,
    error_rate: float | None,
    jobdir: str | None,
    prefix: str | None,
    max_pages: int,
    concurrency: int,
    delay: float,
    fetched: Any,
    audit: bool | None,
    progress: bool | None,
    verbose: bool,
    as_json: bool,
    **options: Any,
) -> None:
    """Crawl START_URL's site with Scrapy and a urlseen filter; print how the filter did.

    Follows every link within the site (or --prefix), each page once; prints pages fetched,
    speed (new URLs/s), duplicate rate and the filter's space in bits. Requests to fetch
    are kept in a frontier that commits with the filter (in --jobdir, or in Redis with
    --redis): a crawl killed at any moment resumes every page. Exit status 3: pages are
    left (failed, or the crawl was stopped); run the same command again.

    \b
    Example:
        urlseen crawl https://docs.example.org/ --jobdir crawl-job/   # Ctrl-C, rerun: resumes
        urlseen crawl http://127.0.0.1:8000/ --filter bloom --capacity 1000   # see the loss
        urlseen crawl http://127.0.0.1:8000/ --redis redis://127.0.0.1:6379/0 --name site
    """
    follow = _prefix(start_url, prefix)
    if filter_name == "scrapy" and (redis_url or state or audit or any(options.values())):
        raise click.UsageError("--filter scrapy takes no --redis, --state, --audit or kind option")
    if redis_url is not None and state is not None:
        raise click.UsageError("--redis and --state exclude each other: the state is in Redis")
    kind = filter_name or kinds.DEFAULT_KIND
    with cli_errors():
        if kind != "scrapy":
            options = kinds.given_options(kind, options, shared=bool(redis_url), spell=flag)
        try:
            from urlseen.integrations._crawl import crawl, progress_bar
        except ImportError as exc:
            raise MissingDependencyError(
                f"urlseen crawl needs Scrapy ({exc}): pip install 'urlseen[scrapy]'"
            ) from exc
        dupefilter: dict[str, Any] = {"filter": kind, **options}
        if kind != "scrapy":
            dupefilter |= {
                "capacity": capacity,
                "error_rate": error_rate,
                "state": state,
                "redis_url": redis_url,
                "redis_name": name,
                "audit": (kind == "bloom" and redis_url is None) if audit is None else audit,
            }
        show = sys.stderr.isatty() if progress is None else progress
        with contextlib.ExitStack() as stack:
            report = crawl(
                start_url,
                prefix=follow,
                dupefilter=dupefilter,
                jobdir=jobdir,
                max_pages=max_pages,
                concurrency=concurrency,
                delay=delay,
                fetched=fetched,
                on_page=progress_bar(stack) if show else None,
                log_level="INFO" if verbose else "WARNING",
            )
    _report(report, as_json)
    if report.pending:
        sys.exit(UNFINISHED)
