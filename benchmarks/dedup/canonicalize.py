#!/usr/bin/env python3
"""What canonicalization costs per URL, and how far an ada-url based rule strays from w3lib.

Compares, on real URLs, the throughput of:

* the "none" profile (the text as is) and a bare decode loop (the baseline);
* ``w3lib.url.canonicalize_url`` as Scrapy calls it;
* urlseen's "w3lib" profile (``urlseen.canonical.canonicalize``: w3lib plus a shortcut
  for URLs that are already canonical);
* a candidate "fast" rule built on the ``ada-url`` WHATWG parser (defined below, not
  shipped: see REPORT.md beside this script for why);

each of the last three with and without the memo (an LRU cache keyed by the raw line), on
(a) the distinct URLs, (b) the first lines of the raw stream, a polled feed full of exact
repeats, and (c) the whole file. Then it counts, on the distinct URLs, how often urlseen's
profile, the ada candidate and a naive ada rule give a different key than
``canonicalize_url``. It prints a markdown report.

Usage (from the repository root):

    python3 benchmarks/dedup/canonicalize.py                   # ~2 min on 2 cores
    python3 benchmarks/dedup/canonicalize.py --repeat 2        # best of 2 runs per cell, ~4 min
    python3 benchmarks/dedup/canonicalize.py --data PATH.txt.gz --stream-lines 500000

The default data file is ``../shared/data/urls-dev.txt.gz`` relative to the repository root
(gzip, one URL per line). It is read in place, never copied. Every timed run decodes its
URLs anew from bytes and starts with empty caches (w3lib's internal ones included), so no
run profits from an earlier one. Times are the process's CPU time, which other jobs on a
shared machine disturb far less than wall-clock time.
"""

from __future__ import annotations

import argparse
import gc
import gzip
import importlib.util
import os
import platform
import re
import sys
import time
from collections import Counter
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path
from urllib.parse import quote_from_bytes, unquote_to_bytes, urlsplit

from w3lib.url import canonicalize_url

from urlseen import canonical
from urlseen.canonical import DEFAULT_MEMO_SIZE, canonicalize, get_canonicalizer

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_DATA = REPO_ROOT.parent / "shared" / "data" / "urls-dev.txt.gz"

Canonicalizer = Callable[[str], str]


# --- the ada-url candidate ---------------------------------------------------------------

# Path escapes as canonicalize_url leaves them: a byte w3lib never escapes in a path comes
# back as the character, except "%", "/", ";" and "?", which keep their meaning only while
# escaped; every other byte is an upper-case escape.
_PATH_KEEP_ESCAPED = b"%/;?"
_PATH_SAFE = (
    b":/?[]@!$&'()*+,;=|%ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~"
)
_PATH_ESCAPES = {}
for _hi in "0123456789ABCDEFabcdef":
    for _lo in "0123456789ABCDEFabcdef":
        _byte = int(_hi + _lo, 16)
        _keep = _byte not in _PATH_SAFE or _byte in _PATH_KEEP_ESCAPED
        _PATH_ESCAPES[_hi + _lo] = f"%{_hi}{_lo}".upper() if _keep else chr(_byte)

_PLAIN_QUERY = re.compile(r"[A-Za-z0-9._~=&-]*").fullmatch


def _normalize_path_escapes(path: str) -> str:
    pieces = path.split("%")
    out = [pieces[0]]
    for piece in pieces[1:]:
        replacement = _PATH_ESCAPES.get(piece[:2])
        out.append("%" + piece if replacement is None else replacement + piece[2:])
    return "".join(out)


def _quote_plus(data: bytes) -> str:
    return quote_from_bytes(data, " ").replace(" ", "+")


def _sort_query(query: str) -> str:
    """canonicalize_url's query: fields split on "&", decoded, sorted as bytes, re-escaped."""
    if _PLAIN_QUERY(query):
        plain = canonical._sort_plain_query(query)
        if plain is not None:
            return plain
    pairs = []
    for field in query.split("&"):
        if field:
            name, _, value = field.partition("=")
            pairs.append(
                (
                    unquote_to_bytes(name.replace("+", " ")),
                    unquote_to_bytes(value.replace("+", " ")),
                )
            )
    pairs.sort()
    return "&".join([f"{_quote_plus(name)}={_quote_plus(value)}" for name, value in pairs])


def make_ada_canonicalizer() -> Canonicalizer:
    """A w3lib-like rule on top of ada-url's WHATWG parser (C++), falling back to w3lib.

    ada parses, lower-cases the host, escapes what needs escaping and resolves dot segments;
    Python then drops the fragment, normalizes path escapes and sorts the query as w3lib
    does. Where WHATWG and w3lib differ (non-ASCII, other schemes, userinfo, ports, hosts
    ada rewrites such as ``0x7f.1``, path parameters with escapes) it hands the URL to w3lib.
    """
    import ada_url

    normalize = ada_url.normalize_url
    fallback = canonical._canonicalize_with_w3lib

    def ada_canonicalize(url: str) -> str:
        if not url.startswith(("http://", "https://")) or not url.isascii():
            return fallback(url)
        try:
            href = normalize(url)
        except ValueError:
            return fallback(url)
        start = href.index("//") + 2  # same offset in url: both start with "http(s)://"
        end = href.find("/", start)  # a special-scheme href always has a path
        authority = href[start:end]
        follows = url[start + len(authority) : start + len(authority) + 1]
        if (
            "@" in authority
            or follows not in ("", "/", "?", "#")
            or url[start:end].lower() != authority
        ):
            return fallback(url)  # ada rewrote the authority (port, IPv4 form, ...)
        cut = href.find("#", end)
        if cut >= 0:
            href = href[:cut]
        query_at = href.find("?", end)
        path = href[end:query_at] if query_at >= 0 else href[end:]
        if ";" in path[path.rfind("/") :]:
            return fallback(url)  # w3lib leaves path parameters alone
        if "%" in path:
            path = _normalize_path_escapes(path)
        query = _sort_query(href[query_at + 1 :]) if query_at >= 0 else ""
        return f"{href[:end]}{path}?{query}" if query else href[:end] + path

    return ada_canonicalize


def make_naive_ada() -> Canonicalizer:
    """ada's normalized href without the fragment: what a one-liner would do."""
    import ada_url

    normalize = ada_url.normalize_url

    def naive(url: str) -> str:
        try:
            return normalize(url).partition("#")[0]
        except ValueError:
            return url

    return naive


# --- measurement -------------------------------------------------------------------------


def w3lib_as_scrapy_calls_it(url: str) -> str:
    try:
        return canonicalize_url(url)
    except ValueError:
        return url


def decode_only(url: str) -> str:
    return url


def clear_w3lib_caches() -> None:
    """Empty w3lib's internal LRU caches (private names, so looked up defensively)."""
    internals = sys.modules.get("w3lib._url")
    for name in ("_urlsplit", "_idna", "_nfkc_netloc"):
        cache_clear = getattr(getattr(internals, name, None), "cache_clear", None)
        if cache_clear is not None:
            cache_clear()


def time_run(canonicalizer: Canonicalizer, lines: list[bytes]) -> float:
    clear_w3lib_caches()
    gc.collect()
    start = time.process_time()
    for raw in lines:
        try:  # noqa: SIM105 (contextlib.suppress would cost more than the identity row)
            canonicalizer(raw.decode())
        except ValueError:  # InvalidKeyError: blank line
            pass
    return time.process_time() - start


def best_run(make: Callable[[], Canonicalizer], lines: list[bytes], repeat: int):
    """Best time of ``repeat`` runs, each with a new canonicalizer (so an empty memo)."""
    best, hit_rate = float("inf"), None
    for _ in range(repeat):
        canonicalizer = make()
        best = min(best, time_run(canonicalizer, lines))
        info = getattr(canonicalizer, "cache_info", None)
        if info is not None:
            hits, misses = info().hits, info().misses
            hit_rate = hits / max(1, hits + misses)
    return best, hit_rate


def disagreements(candidate: Canonicalizer, urls: list[str], reference: list[str | None]):
    """(count, examples) of URLs where both give a key and the keys differ."""
    count, examples = 0, []
    for url, expected in zip(urls, reference, strict=True):
        if expected is None:
            continue
        try:
            got = candidate(url)
        except ValueError:
            continue
        if got != expected:
            count += 1
            examples.append((url, expected, got))
    return count, examples


def differing_part(expected: str, got: str) -> str:
    """Which component of two URLs differs first: scheme, authority, path or query."""
    try:
        a, b = urlsplit(expected), urlsplit(got)
    except ValueError:
        return "unparsable"
    for part, x, y in zip(("scheme", "authority", "path", "query"), a[:4], b[:4], strict=True):
        if x != y:
            return part
    return "fragment"


def pick_examples(examples: list[tuple[str, str, str]], count: int) -> list[tuple[str, str, str]]:
    """Up to ``count`` short examples, taking each differing part in turn."""
    by_part: dict[str, list[tuple[str, str, str]]] = {}
    for example in sorted(examples, key=lambda example: len(example[0])):
        by_part.setdefault(differing_part(example[1], example[2]), []).append(example)
    picked: list[tuple[str, str, str]] = []
    while len(picked) < count and any(by_part.values()):
        for group in by_part.values():
            if group and len(picked) < count:
                picked.append(group.pop(0))
    return picked


def short(text: str, width: int = 90) -> str:
    text = text.replace("|", "%7C")  # keep the markdown table intact
    return text if len(text) <= width else text[: width - 3] + "..."


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="gzip file, one URL a line")
    parser.add_argument(
        "--stream-lines",
        type=int,
        default=2_000_000,
        help="first N raw lines for workload (b) (default 2,000,000)",
    )
    parser.add_argument(
        "--memo-size",
        type=int,
        default=DEFAULT_MEMO_SIZE,
        help=f"memo entries (default {DEFAULT_MEMO_SIZE})",
    )
    parser.add_argument("--repeat", type=int, default=1, help="runs per cell, best kept")
    parser.add_argument("--examples", type=int, default=5, help="disagreements to show")
    args = parser.parse_args(argv)
    if not args.data.is_file():
        parser.error(f"no data file at {args.data} (use --data PATH)")
    if importlib.util.find_spec("ada_url") is None:
        parser.error("the ada-url rows need ada-url: pip install 'urlseen[bench]'")

    with gzip.open(args.data, "rb") as f:
        lines = f.read().split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    distinct = list(dict.fromkeys(lines))
    head = lines[: args.stream_lines]
    workloads = {
        "(a) distinct": distinct,
        f"(b) first {len(head) / 1e6:g}M lines": head,
        "(c) all lines": lines,
    }

    memo, big_memo = args.memo_size, 1 << 16
    ada = make_ada_canonicalizer
    rows: list[tuple[str, Callable[[], Canonicalizer]]] = [
        ("decode only (loop baseline)", lambda: decode_only),
        ('"none" profile (identity)', lambda: get_canonicalizer("none")),
        ("w3lib `canonicalize_url`", lambda: w3lib_as_scrapy_calls_it),
        (
            "w3lib `canonicalize_url` + memo",
            lambda: canonical._memoize(w3lib_as_scrapy_calls_it, memo),
        ),
        ('urlseen "w3lib" profile', lambda: get_canonicalizer("w3lib")),
        ('urlseen "w3lib" profile + memo', lambda: get_canonicalizer("w3lib", memo_size=memo)),
        (
            f'urlseen "w3lib" profile + memo of {big_memo:,}',
            lambda: get_canonicalizer("w3lib", memo_size=big_memo),
        ),
        ("ada-url candidate", ada),
        ("ada-url candidate + memo", lambda: canonical._memoize(ada(), memo)),
    ]

    print("## Canonicalization benchmark\n")
    print(f"- data: `{args.data.name}`, {len(lines):,} lines, {len(distinct):,} distinct")
    for label, data in workloads.items():
        repeats = 1 - len(set(data)) / len(data)
        print(f"- {label}: {len(data):,} URLs, {repeats:.1%} exact repeats")
    print(
        f"- memo: LRU of {memo:,} entries keyed by the raw line, unless stated; "
        f"best of {args.repeat} run(s), CPU time"
    )
    print(
        f"- Python {platform.python_version()}, w3lib {version('w3lib')}, "
        f"ada-url {version('ada-url')}, {os.cpu_count()} CPUs, {platform.machine()}"
    )
    print(
        "- cells: URLs/s, then µs per URL net of the decode-only loop (the canonicalizer's "
        "own cost), then the memo hit rate\n"
    )

    results = {}
    for name, make in rows:
        for label, data in workloads.items():
            seconds, hit_rate = best_run(make, data, args.repeat)
            results[name, label] = (len(data) / seconds, seconds / len(data), hit_rate)
            print(
                f"  {name} / {label}: {len(data) / seconds:,.0f} URLs/s",
                file=sys.stderr,
                flush=True,
            )

    print("| canonicalizer | " + " | ".join(workloads) + " |")
    print("| --- |" + " ---: |" * len(workloads))
    for name, _ in rows:
        cells = [name]
        for label in workloads:
            rate, per_url, hit_rate = results[name, label]
            net = per_url - results[rows[0][0], label][1]
            cell = f"{rate:,.0f} · {net * 1e6:.2f} µs"
            cells.append(cell if hit_rate is None else f"{cell} · {hit_rate:.0%} hits")
        print("| " + " | ".join(cells) + " |")

    # --- agreement with w3lib on the distinct URLs ---
    urls = [raw.decode() for raw in distinct]
    reference: list[str | None] = []
    for url in urls:
        try:
            reference.append(canonicalize_url(url))
        except ValueError:
            reference.append(None)
    refused = reference.count(None)

    shortcut_misses = 0
    slow_path = canonical._canonicalize_with_w3lib

    def counting_slow_path(url: str) -> str:
        nonlocal shortcut_misses
        shortcut_misses += 1
        return slow_path(url)

    canonical._canonicalize_with_w3lib = counting_slow_path
    try:
        ours = disagreements(canonicalize, urls, reference)
    finally:
        canonical._canonicalize_with_w3lib = slow_path

    ada_fallbacks = 0

    def counting_fallback(url: str) -> str:
        nonlocal ada_fallbacks
        ada_fallbacks += 1
        return slow_path(url)

    canonical._canonicalize_with_w3lib = counting_fallback
    try:
        candidate = make_ada_canonicalizer()
    finally:
        canonical._canonicalize_with_w3lib = slow_path
    theirs = disagreements(candidate, urls, reference)
    naive = disagreements(make_naive_ada(), urls, reference)

    n = len(urls)
    print(f"\n### Keys that differ from `canonicalize_url` ({n:,} distinct URLs)\n")
    print(f"w3lib refuses {refused:,} of them (ValueError); they are left out below.\n")
    print("| rule | differing keys | share | first differing part | handed to w3lib |")
    print("| --- | ---: | ---: | --- | ---: |")
    for label, (count, examples), handed in (
        ('urlseen "w3lib" profile', ours, f"{shortcut_misses:,} ({shortcut_misses / n:.2%})"),
        ("ada-url candidate", theirs, f"{ada_fallbacks:,} ({ada_fallbacks / n:.2%})"),
        ("naive ada (`normalize_url`, fragment cut)", naive, "0"),
    ):
        parts = Counter(differing_part(expected, got) for _, expected, got in examples)
        where = ", ".join(f"{part} {k:,}" for part, k in parts.most_common()) or "-"
        print(f"| {label} | {count:,} | {count / n:.3%} | {where} | {handed} |")
    for label, (_, examples) in (
        ("ada-url candidate", theirs),
        ("naive ada", naive),
        ('urlseen "w3lib" profile', ours),
    ):
        if examples:
            print(f"\nExamples, {label} (input / w3lib / {label}):\n")
            for url, expected, got in pick_examples(examples, args.examples):
                print(f"- `{short(url)}`")
                print(f"  - w3lib: `{short(expected)}`\n  - got:   `{short(got)}`")
    return 0


if __name__ == "__main__":
    sys.exit(main())
