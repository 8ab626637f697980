"""Which similarity mode to pick: what each one drops on the real development URLs.

Usage (from the repository root; about 5 minutes on 2 cores):

    python benchmarks/papers/similarity.py

The development set (/work/shared/data/urls-dev.txt.gz, or $URLSEEN_DEV_URLS) is streamed in
file order, the way a crawler meets URLs: every non-empty line is canonicalized as `urlseen
dedup` does (LineKeyer, w3lib profile) and offered to each filter with `add_many` in batches.
The ground truth is exact: a URL is *never seen* if its canonical key has not occurred before
in the stream. For each configuration the script reports

- the share of never-seen URLs the filter drops (for a URL-seen test this is the loss: pages
  never crawled), overall and per section of the data set;
- the share of dropped URLs that are exact duplicates after canonicalization;
- memory (the filter's bits) and time;
- examples of never-seen URLs it dropped, with the earlier kept URL that has the same
  features (composite) or the features that all matched (per-feature modes).

The peer is urlseen's BloomFilter (standard layout) keyed by the canonical URL itself at the
same error rate: a plain URL-seen test, whose drop rate of never-seen URLs is its
false-positive rate. Every filter is sized for the number of distinct canonical keys.
Finally one composite run records every decision in a URL_DB (SQLite), on the first
`--audit-lines` lines, to measure what auditing costs.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from array import array
from pathlib import Path
from typing import Any

from urlseen.bloom.bloom import BloomFilter
from urlseen.job.linekeys import LineKeyer
from urlseen.similarity import FeatureExtractor, SimilarityFilter
from urlseen.similarity.filter import _composite_key

REPO = Path(__file__).resolve().parents[2]
DEFAULT_DATA = REPO.parent / "shared" / "data" / "urls-dev.txt.gz"
RESULTS = Path(__file__).resolve().parent / "results.json"  # key "similarity"
# Last line number of each section of the data set (its README).
SECTIONS = (
    ("openphish feed", 1_842_391),
    ("news articles", 2_213_377),
    ("archiveteam seeds", 2_754_359),
)
BATCH = 65536
EXAMPLES = 8

CONFIGS: list[dict[str, Any]] = [
    {"name": "bloom (peer: the URL itself)", "kind": "bloom", "error_rate": 0.01},
    {"name": "composite", "mode": "composite", "index": "shared", "error_rate": 0.01},
    {"name": "exact4, shared", "mode": "exact4", "index": "shared", "error_rate": 0.01},
    {"name": "exact4, regions", "mode": "exact4", "index": "regions", "error_rate": 0.01},
    {"name": "patent, N = M", "mode": "patent", "index": "shared", "error_rate": 0.01},
    {"name": "patent, N = prime", "mode": "patent", "index": "prime", "error_rate": 0.01},
    {"name": "patent, regions", "mode": "patent", "index": "regions", "error_rate": 0.01},
    {
        "name": "patent, no query",
        "mode": "patent",
        "index": "shared",
        "error_rate": 0.01,
        "query_in_tail": False,
    },
    {"name": "bloom (peer: the URL itself)", "kind": "bloom", "error_rate": 0.001},
    {"name": "composite", "mode": "composite", "index": "shared", "error_rate": 0.001},
    {"name": "patent, N = M", "mode": "patent", "index": "shared", "error_rate": 0.001},
]


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def load(path: Path) -> tuple[list[str | bytes], array[int], array[int]]:
    """Distinct keys in first-seen order, the stream as key ids, and each line's section."""
    keyer = LineKeyer()
    ids: dict[bytes, int] = {}
    distinct: list[str | bytes] = []
    stream, section = array("I"), array("B")
    bounds = [end for _, end in SECTIONS]
    current = 0
    with gzip.open(path, "rb") as lines:
        for number, line in enumerate(lines, 1):
            while current < len(bounds) - 1 and number > bounds[current]:
                current += 1
            key = keyer.key(line.rstrip(b"\n"))
            if key is None:
                continue
            as_bytes = key.encode() if isinstance(key, str) else key  # as the filters hash it
            i = ids.get(as_bytes)
            if i is None:
                i = ids[as_bytes] = len(distinct)
                distinct.append(key)
            stream.append(i)
            section.append(current)
    return distinct, stream, section


def make_filter(config: dict[str, Any], capacity: int) -> Any:
    if config.get("kind") == "bloom":
        return BloomFilter(capacity, config["error_rate"], layout="standard")
    return SimilarityFilter(
        capacity,
        config["error_rate"],
        mode=config["mode"],
        index=config["index"],
        query_in_tail=config.get("query_in_tail", True),
        canonicalize="none",  # keys are canonical already, as in `urlseen dedup`
    )


def run(
    config: dict[str, Any], distinct: list[str | bytes], stream: array[int], section: array[int]
) -> dict[str, Any]:
    capacity = len(distinct)
    seen_filter = make_filter(config, capacity)
    first_seen = bytearray(len(distinct))  # ground truth: has this key occurred before?
    never_seen = [0] * len(SECTIONS)
    never_seen_dropped = [0] * len(SECTIONS)
    dropped = dropped_exact = kept_repeats = 0
    dropped_new_ids: list[int] = []
    seconds = 0.0
    for start in range(0, len(stream), BATCH):
        chunk = stream[start : start + BATCH]
        keys = [distinct[i] for i in chunk]
        t0 = time.perf_counter()
        flags = seen_filter.add_many(keys)
        seconds += time.perf_counter() - t0
        for offset, (i, new) in enumerate(zip(chunk, flags, strict=True)):
            fresh = not first_seen[i]
            first_seen[i] = 1
            s = section[start + offset]
            if fresh:
                never_seen[s] += 1
                if not new:
                    never_seen_dropped[s] += 1
                    dropped_new_ids.append(i)
            if not new:
                dropped += 1
                dropped_exact += not fresh
            elif not fresh:
                kept_repeats += 1
    stats = seen_filter.stats()
    seen_filter.close()
    total_new, total_new_dropped = sum(never_seen), sum(never_seen_dropped)
    result: dict[str, Any] = {
        "name": config["name"],
        "config": config,
        "lines": len(stream),
        "never_seen": total_new,
        "never_seen_dropped": total_new_dropped,
        "never_seen_drop_rate": total_new_dropped / total_new,
        "dropped": dropped,
        "dropped_exact_duplicates": dropped_exact,
        "dropped_exact_share": dropped_exact / dropped if dropped else 0.0,
        "repeats_kept": kept_repeats,
        "sections": [
            {"section": name, "never_seen": n, "dropped": d, "drop_rate": d / n if n else 0.0}
            for (name, _), n, d in zip(SECTIONS, never_seen, never_seen_dropped, strict=True)
        ],
        "bits": stats.bits,
        "mib": stats.bits / 8 / 2**20,
        "bits_per_url": stats.bits / capacity,
        "details": {k: v for k, v in stats.details.items() if k not in ("path", "url_db")},
        "seconds": seconds,
        "lines_per_second": len(stream) / seconds,
        "examples": [],
    }
    step = max(1, len(dropped_new_ids) // EXAMPLES)
    result["example_ids"] = dropped_new_ids[::step][:EXAMPLES]
    return result


_FIRST_WITH_FEATURES: dict[bool, dict[str, int]] = {}


def first_with_features(distinct: list[str | bytes], query_in_tail: bool) -> dict[str, int]:
    """Composite feature key -> the first distinct key that has it (built once per option)."""
    if query_in_tail not in _FIRST_WITH_FEATURES:
        extractor = FeatureExtractor(query_in_tail=query_in_tail, canonicalize="none")
        index: dict[str, int] = {}
        for j, key in enumerate(distinct):
            index.setdefault(_composite_key(extractor.values(key)), j)
        _FIRST_WITH_FEATURES[query_in_tail] = index
    return _FIRST_WITH_FEATURES[query_in_tail]


def add_examples(result: dict[str, Any], distinct: list[str | bytes]) -> None:
    """Dropped never-seen URLs, each with the first earlier URL that has all its features."""
    ids = result.pop("example_ids")
    config = result["config"]
    if config.get("kind") == "bloom":
        result["examples"] = [{"url": _text(distinct[i])} for i in ids]
        return
    query_in_tail = config.get("query_in_tail", True)
    extractor = FeatureExtractor(query_in_tail=query_in_tail, canonicalize="none")
    first = first_with_features(distinct, query_in_tail)
    for i in ids:
        values = extractor.values(distinct[i])
        example: dict[str, Any] = {
            "url": _text(distinct[i]),
            "features": dict(zip(extractor.names, values, strict=True)),
        }
        j = first[_composite_key(values)]
        if j != i:  # an earlier URL has every feature: a whole-pattern match
            example["same_features_as"] = _text(distinct[j])
        else:  # each feature came from some other earlier URL
            example["same_features_as"] = None
        result["examples"].append(example)


def _text(key: str | bytes) -> str:
    return key if isinstance(key, str) else key.decode("utf-8", "backslashreplace")


def audit_cost(distinct: list[str | bytes], stream: array[int], lines: int) -> dict[str, Any]:
    """Composite with and without a URL_DB recording every decision, on the first lines."""
    keys = [distinct[i] for i in stream[:lines]]
    out: dict[str, Any] = {"lines": len(keys)}
    with tempfile.TemporaryDirectory(prefix="urlseen-sim-") as tmp:
        for label, db in (("without", None), ("with", os.path.join(tmp, "url_db.sqlite"))):
            f = SimilarityFilter(len(distinct), 0.01, canonicalize="none", url_db=db)
            t0 = time.perf_counter()
            for start in range(0, len(keys), BATCH):
                f.add_many(keys[start : start + BATCH])
            f.close()
            out[f"seconds_{label}"] = time.perf_counter() - t0
            if db is not None:
                size = sum(
                    os.path.getsize(p) for p in Path(tmp).iterdir() if p.name.startswith("url_db")
                )
                out["url_db_bytes"] = size
                out["bytes_per_decision"] = size / len(keys)
    return out


def markdown(results: list[dict[str, Any]]) -> str:
    head = (
        "| P | configuration | never-seen URLs dropped | "
        + " | ".join(f"… in {name}" for name, _ in SECTIONS)
        + " | dropped that are exact duplicates | memory | bits/URL | lines/s |"
    )
    rows = [head, "|" + " --- |" * (7 + len(SECTIONS))]
    for r in results:
        sections = " | ".join(f"{s['drop_rate']:.2%}" for s in r["sections"])
        rows.append(
            f"| {r['config']['error_rate']} | {r['name']} | "
            f"{r['never_seen_drop_rate']:.2%} ({r['never_seen_dropped']:,} of "
            f"{r['never_seen']:,}) | {sections} | {r['dropped_exact_share']:.2%} | "
            f"{r['mib']:.2f} MiB | {r['bits_per_url']:.2f} | {r['lines_per_second'] / 1e3:.0f}k |"
        )
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=None, help="urls-dev.txt.gz")
    parser.add_argument("--json", type=Path, default=RESULTS, help="write the results here")
    parser.add_argument("--audit-lines", type=int, default=500_000)
    args = parser.parse_args()
    data = args.data or Path(os.environ.get("URLSEEN_DEV_URLS", DEFAULT_DATA))
    started = time.time()
    log(f"loading and canonicalizing {data} ...")
    t0 = time.perf_counter()
    distinct, stream, section = load(data)
    log(
        f"  {len(stream):,} URL lines, {len(distinct):,} distinct keys, "
        f"{time.perf_counter() - t0:.0f} s"
    )
    results = []
    for config in CONFIGS:
        result = run(config, distinct, stream, section)
        add_examples(result, distinct)
        log(
            f"  P={config['error_rate']} {config['name']}: drops "
            f"{result['never_seen_drop_rate']:.2%} of never-seen URLs, "
            f"{result['seconds']:.0f} s"
        )
        results.append(result)
    log("URL_DB audit cost ...")
    audit = audit_cost(distinct, stream, args.audit_lines)
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=REPO
    ).stdout.strip()
    report = {
        "command": "python benchmarks/papers/similarity.py",
        "data": str(data),
        "lines": len(stream),
        "distinct_keys": len(distinct),
        "started_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(started)),
        "minutes": (time.time() - started) / 60,
        "machine": {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "load_average": os.getloadavg(),
        },
        "git_head": commit,
        "results": results,
        "audit": audit,
    }
    table = markdown(results)
    print(table)
    print(json.dumps(audit))
    if args.json is not None:
        kept = json.loads(args.json.read_text()) if args.json.exists() else {}
        text = json.dumps(kept | {"similarity": report}, indent=1, ensure_ascii=False)
        args.json.write_text(text + "\n")
        log(f"wrote {args.json}")


if __name__ == "__main__":
    main()
