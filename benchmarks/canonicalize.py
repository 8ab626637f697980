#!/usr/bin/env python3
"""What canonicalization costs per URL, and how far an ada-url based rule strays from w3lib.

Compares, on real URLs, the throughput of:

* the "none" profile (the text as is) and a bare decode loop (the baseline);
* ``w3lib.url.canonicalize_url`` as Scrapy calls it;
* urlseen's "w3lib" profile (``urlseen.canonical.canonicalize``: w3lib plus a shortcut
  for URLs that are already canonical);
* a candidate "fast" rule built on the ``ada-url`` WHATWG parser (defined below, not
  shipped: see CANONICALIZATION.md for why);

each of the last three with and without the memo (an LRU cache keyed by the raw line), on
(a) the distinct URLs and (b) the raw stream with its exact repeats. Then it counts, on the
distinct URLs, how often urlseen's profile, the ada candidate and a naive ada rule give a
different key than ``canonicalize_url``. It prints a markdown report.

Usage (from the repository root):

    python3 benchmarks/canonicalize.py                   # ~3 min on 2 cores
    python3 benchmarks/canonicalize.py --repeat 3        # best of 3 runs per cell
    python3 benchmarks/canonicalize.py --data PATH.txt.gz --stream-lines 500000

The default data file is ``../shared/data/urls-dev.txt.gz`` relative to the repository root
(gzip, one URL per line). It is read in place, never copied. Every timed run decodes its
URLs anew from bytes and starts with empty caches (w3lib's internal ones included), so no
run profits from an earlier one.
"""

from __future__ import annotations

import argparse
import gc
import gzip
import os
import platform
import re
import sys
import time
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path
from urllib.parse import quote_from_bytes, unquote_to_bytes

import w3lib._url
from w3lib.url import canonicalize_url

from urlseen import canonical
from urlseen.canonical import DEFAULT_MEMO_SIZE, canonicalize, get_canonicalizer

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DATA = REPO_ROOT.parent / "shared" / "data" / "urls-dev.txt.gz"

Canonicalizer = Callable[[str], str]


# --- the ada-url candidate ---------------------------------------------------------------

# Path escapes as canonicalize_url leaves them: a byte w3lib never escapes in a path comes
# back as the character, except "%", "/", ";" and "?", which keep their meaning only while
# escaped; every other byte is an upper-case escape.
_PATH_KEEP_ESCAPED = b"%/;?"
_PATH_SAFE = (
    b":/?[]@!$&'()*+,;=|%"
    b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~"
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
                (unquote_to_bytes(name.replace("+", " ")), unquote_to_bytes(value.replace("+", " ")))
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
    for name in ("_urlsplit", "_idna", "_nfkc_netloc"):
        cache_clear = getattr(getattr(w3lib._url, name, None), "cache_clear", None)
        if cache_clear is not None:
            cache_clear()


def time_run(canonicalizer: Canonicalizer, lines: list[bytes]) -> float:
    clear_w3lib_caches()
    gc.collect()
    start = time.perf_counter()
    for raw in lines:
        try:
            canonicalizer(raw.decode())
        except ValueError:  # InvalidKeyError: blank line
            pass
    return time.perf_counter() - start


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
    for url, expected in zip(urls, reference):
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


def short(text: str, width: int = 90) -> str:
    text = text.replace("|", "%7C")  # keep the markdown table intact
    return text if len(text) <= width else text[: width - 3] + "..."


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="gzip file, one URL a line")
    parser.add_argument("--stream-lines", type=int, default=2_000_000,
                        help="first N raw lines for the stream workload (default 2,000,000)")
    parser.add_argument("--memo-size", type=int, default=DEFAULT_MEMO_SIZE,
                        help=f"memo entries (default {DEFAULT_MEMO_SIZE})")
    parser.add_argument("--repeat", type=int, default=1, help="runs per cell, best kept")
    parser.add_argument("--examples", type=int, default=5, help="disagreements to show")
    args = parser.parse_args(argv)
    if not args.data.is_file():
        parser.error(f"no data file at {args.data} (use --data PATH)")

    with gzip.open(args.data, "rb") as f:
        lines = f.read().split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    distinct = list(dict.fromkeys(lines))
    stream = lines[: args.stream_lines]
    stream_repeats = 1 - len(set(stream)) / len(stream)

    memo = args.memo_size
    ada = make_ada_canonicalizer
    rows: list[tuple[str, Callable[[], Canonicalizer]]] = [
        ("decode only (loop baseline)", lambda: decode_only),
        ('"none" profile (identity)', lambda: get_canonicalizer("none")),
        ("w3lib `canonicalize_url`", lambda: w3lib_as_scrapy_calls_it),
        ("w3lib `canonicalize_url` + memo", lambda: canonical._memoize(w3lib_as_scrapy_calls_it, memo)),
        ('urlseen "w3lib" profile', lambda: get_canonicalizer("w3lib")),
        ('urlseen "w3lib" profile + memo', lambda: get_canonicalizer("w3lib", memo_size=memo)),
        ("ada-url candidate", ada),
        ("ada-url candidate + memo", lambda: canonical._memoize(ada(), memo)),
    ]

    print("# Canonicalization benchmark\n")
    print(f"- data: `{args.data.name}`, {len(lines):,} lines, {len(distinct):,} distinct")
    print(f"- (a) distinct: {len(distinct):,} URLs, each once, in file order")
    print(f"- (b) stream: first {len(stream):,} raw lines, {stream_repeats:.1%} exact repeats")
    print(f"- memo: LRU of {memo:,} entries keyed by the raw line; best of {args.repeat} run(s)")
    print(f"- Python {platform.python_version()}, w3lib {version('w3lib')}, "
          f"ada-url {version('ada-url')}, {os.cpu_count()} CPUs, {platform.machine()}")
    print("- µs/URL: time per URL minus the decode-only loop, i.e. the canonicalizer's own cost\n")

    results = {}
    for name, make in rows:
        for workload, data in (("distinct", distinct), ("stream", stream)):
            seconds, hit_rate = best_run(make, data, args.repeat)
            results[name, workload] = (len(data) / seconds, seconds / len(data), hit_rate)
            print(f"  {name} / {workload}: {len(data) / seconds:,.0f} URLs/s",
                  file=sys.stderr, flush=True)

    print("| canonicalizer | (a) distinct URLs/s | µs/URL | (b) stream URLs/s | µs/URL | memo hits (b) |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for name, _ in rows:
        cells = [name]
        for workload in ("distinct", "stream"):
            rate, per_url, _ = results[name, workload]
            net = per_url - results[rows[0][0], workload][1]
            cells += [f"{rate:,.0f}", f"{net * 1e6:.2f}"]
        hit_rate = results[name, "stream"][2]
        cells.append("" if hit_rate is None else f"{hit_rate:.1%}")
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
    print(f"\n## Keys that differ from `canonicalize_url` ({n:,} distinct URLs)\n")
    print(f"w3lib refuses {refused:,} of them (ValueError); they are left out below.\n")
    print("| rule | differing keys | share | handed to w3lib |")
    print("| --- | ---: | ---: | ---: |")
    print(f'| urlseen "w3lib" profile | {ours[0]:,} | {ours[0] / n:.4%} | '
          f"{shortcut_misses:,} ({shortcut_misses / n:.2%}) |")
    print(f"| ada-url candidate | {theirs[0]:,} | {theirs[0] / n:.4%} | "
          f"{ada_fallbacks:,} ({ada_fallbacks / n:.2%}) |")
    print(f"| naive ada (`normalize_url`, fragment cut) | {naive[0]:,} | {naive[0] / n:.4%} | 0 |")
    for label, (_, examples) in (("ada-url candidate", theirs), ("naive ada", naive),
                                 ('urlseen "w3lib" profile', ours)):
        if examples:
            print(f"\nExamples, {label} (input / w3lib / {label}):\n")
            for url, expected, got in examples[: args.examples]:
                print(f"- `{short(url)}`\n  - w3lib: `{short(expected)}`\n  - got:   `{short(got)}`")
    return 0


if __name__ == "__main__":
    sys.exit(main())
