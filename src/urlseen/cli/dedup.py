"""`urlseen dedup`: first occurrences of URLs, in input order, in bounded memory. The run and
its summary; the options are declared for click in cli/_dedup_click.py and read without click
in cli/_dedup_args.py, and this module imports click only to raise an error."""

from __future__ import annotations

import contextlib
import errno
import math
import sys
import time
from collections.abc import Iterator

from urlseen import canonical, kinds
from urlseen.cli._common import cli_errors, echo, human, open_filter
from urlseen.errors import UrlseenError
from urlseen.job.dedup import dedup
from urlseen.job.linekeys import LineKeyer
from urlseen.job.streams import Inputs, open_output, refuse_clobbering, total_bytes

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

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
            from datetime import datetime  # here: only an ISO date pays for its import

            with contextlib.suppress(ValueError, OverflowError):
                cutoff = datetime.fromisoformat(text).timestamp()
    if cutoff is None or not math.isfinite(cutoff) or abs(cutoff) > MAX_TIMESTAMP:
        import click

        raise click.BadParameter(
            f"{text!r}: use an age like 30d / 12h / 90m / 45s, Unix seconds, or an ISO date"
            " (within 300,000 years of 1970)",
            param_hint="--forget-older-than",
        )
    return cutoff


def _report(summary: DedupSummary, as_json: bool, where: str) -> None:
    if as_json:
        import json  # here: a run without --json does not pay for its import

        echo(json.dumps(summary.as_dict()))
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
    echo(line + (f"; {', '.join(odd)}" if odd else "") + s.claim_warnings())
    if s.filter_count > s.filter_capacity and s.filter_kind == "exact":
        echo(
            f"note: {s.filter_count:,} URLs in an exact filter sized for {s.filter_capacity:,}: "
            "answers stay exact, but more new URLs now cost a library look-up"
        )
    elif s.filter_count > s.filter_capacity and (lost := s.filter_likely_dropped) is not None:
        echo(
            f"warning: ~{lost:,.0f} new URLs likely dropped as seen: {s.filter_count:,} keys in a "
            f"filter sized for {s.filter_capacity:,}; use a larger --capacity"
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


def run(
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
    """`urlseen dedup` with its options read (by click or cli/_dedup_args.py)."""
    profile = "none" if no_canonicalize else profile
    canonical.LEAN_W3LIB = True  # this command's Python code runs in one thread
    show = sys.stderr.isatty() if progress is None else progress
    if kind != "exact" and (remove is not None or forget_older_than is not None):
        import click

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
                from urlseen.job.forget import forget

                forgotten = forget(seen, remove, cutoff, profile)
                echo(f"urlseen dedup: forgot {forgotten:,} URLs (they are new again)")
            out = sys.stdout.buffer
            if output != "-":
                out, cut = open_output(output, append)
                stack.enter_context(out)
                if cut:
                    echo(
                        f"warning: {output}: removed a partial last line ({cut} bytes) left "
                        "by an interrupted run; it is printed again in full"
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
        import click

        raise click.ClickException(str(error))
    if summary.exit_status:
        sys.exit(summary.exit_status)  # 4: URLs left under another process's claims (--help)
