#!/usr/bin/env python3
"""Build examples/sample-urls.txt.gz: a small crawl-like URL stream to try `urlseen dedup` on.

Source: section 2 of urls-dev.txt.gz (lines 1,842,392-2,213,377), the "Top News" URL lists of
notnews/top_news, licensed CC-BY-4.0 (see examples/README.md for the attribution). Only that
section may be shipped; the other sections are for local testing only.

The stream is what a crawler's link extractor emits: 3,000 distinct article URLs, each seen
several times, sometimes spelled differently (a fragment, an upper-case host or scheme),
which canonicalization folds back together. Deterministic (seeded).

Usage: python examples/make_sample.py [../shared/data/urls-dev.txt.gz]
"""

import gzip
import random
import sys
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

FIRST, LAST = 1_842_392, 2_213_377  # section 2, 1-based, inclusive
DISTINCT = 3_000


def variant(url: str, rng: random.Random) -> str:
    """Another spelling of the same URL, as links in the wild write it."""
    parts = urlsplit(url)
    kind = rng.randrange(3)
    if kind == 0:
        return url + "#" + rng.choice(["comments", "top", "section-2"])
    if kind == 1:
        return urlunsplit(parts._replace(netloc=parts.netloc.upper()))
    return parts.scheme.upper() + url[len(parts.scheme) :]


def main() -> None:
    root = Path(__file__).resolve().parent.parent
    data = Path(sys.argv[1]) if len(sys.argv) > 1 else root.parent / "shared/data/urls-dev.txt.gz"
    with gzip.open(data, "rt", encoding="utf-8") as f:
        section = [line.rstrip("\n") for i, line in enumerate(f, 1) if FIRST <= i <= LAST]
    urls = [u for u in section if u.startswith(("http://", "https://"))]
    rng = random.Random(20261121)
    chosen = rng.sample(urls, DISTINCT)
    stream = []
    for url in chosen:
        stream.extend([url] * rng.randint(1, 4))
        if rng.random() < 0.3:
            stream.append(variant(url, rng))
    rng.shuffle(stream)
    out = root / "examples/sample-urls.txt.gz"
    with gzip.GzipFile(out, "wb", mtime=0) as f:
        f.write(("\n".join(stream) + "\n").encode())
    print(f"{out}: {len(stream)} lines, {DISTINCT} distinct URLs")


if __name__ == "__main__":
    main()
