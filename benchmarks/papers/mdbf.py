#!/usr/bin/env python3
"""The multi-dimensional Bloom filter paper's experiments: the MDBF against standard Bloom
filters, measured on real URLs, next to the predicted rates (urlseen.bloom.mdbf_sizing).

Usage (from the repository root; about 10 minutes on the shared 2-core benchmark machine):

    python benchmarks/papers/mdbf.py                 # all parts; writes the files below
    python benchmarks/papers/mdbf.py --quick         # smoke run (few trials), writes nothing
    python benchmarks/papers/mdbf.py --replot        # redraw PNGs and tables from the JSON

Writes key "mdbf" of benchmarks/papers/results.json,
benchmarks/papers/figures/mdbf-vs-{S,N,k,memory}.png and the tables between the markers in
benchmarks/papers/REPORT.md.

Parts
-----
(a) FP against S (1..8) at k = 4, N = 150; (b) against N (50..400) at S = 4, k = 4; (c) against
    k (1..8) at S = 4, N = 150: the paper's settings. V2 has N // r bits with r = k, as in the
    paper ("N/k"); k1 (V1's share of the k probes) is the best for the load.
    Inserted URLs: n = 20 per filter. The paper gives no n; with N = 150 and k = 4 a standard
    filter is at its optimum near n = N ln 2 / k = 26, so n = 20 puts it at about 3%, where its
    false positives are measurable (and tests/test_mdbf.py works its numbers out by hand at
    n = 20). Each point is TRIALS filters (hash seed t, 20 URLs drawn afresh from a pool of
    100,000 real ones), each asked every one of ~930,000 other distinct real URLs: ~18.6M
    foreign queries per point.
    Peers at every point: (i) a standard Bloom filter with the same N and k (the paper's
    comparison); (ii) one with the same total memory S * (N + N // r) bits and S * k probes
    (the fair comparison), both with urlseen's probes (enhanced double hashing from one 128-bit
    digest); (iii) the same as (ii) with S * k independently seeded digests, the textbook model.
    (ii) and (iii) differ at these tiny sizes: double hashing's probe sequence is fixed by two
    values, so a foreign key repeats an inserted key's whole sequence with probability ~1/m^2,
    a floor of about n / m^2 that the formula does not have.
(d) Equal memory at crawl scale: 100,000 real URLs inserted, every other distinct URL of the
    dev set queried (~930,000), 8 bits per URL (800,000 bits). MDBF with S = 1, 2, 4, 8 (for
    each S the best k per group and k1, r = 4) under both rules against a standard Bloom
    filter of the same bits with the optimal k. 3 seeds.
(e) The paper's crawl metrics on the whole dev set (2,754,358 non-empty lines, 1,029,818 distinct;
    raw lines as keys, no canonicalization, so the filter alone is timed): speed = non-duplicate
    URLs per second of add_many (batches of 65,536; best of 3), duplicate rate, space in bits,
    and the distinct URLs each filter wrongly reported seen (against a Python set). Filters
    sized for 1.1M URLs at 1e-3.

Measured rates come with 95% Wilson intervals; a rate of 0 reports "0 of Q" and its upper bound.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import platform
import random
import re
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from urlseen import BloomFilter, MultiDimensionalBloomFilter, RotatingBloomFilter, _core
from urlseen.bloom import mdbf_sizing as sizing
from urlseen.bloom.sizing import standard_error_rate

HERE = Path(__file__).resolve().parent
DEFAULT_DATA = HERE.parent.parent / "shared" / "data" / "urls-dev.txt.gz"
RESULTS = HERE / "results.json"  # key "mdbf"
DOC = HERE / "REPORT.md"
BEGIN, END = (
    "<!-- mdbf tables: begin (written by benchmarks/papers/mdbf.py) -->",
    "<!-- mdbf tables: end -->",
)

N_INSERT = 20
INSERT_POOL = 100_000
TRIALS = 30
QUERIES_PER_TRIAL = 150_000
Z = 1.959964  # 95%

warnings.simplefilter("ignore")  # QueryAnyWarning: QUERY_ANY is measured on purpose here


# -- data and statistics -------------------------------------------------------------------------


def load_distinct(path: Path) -> tuple[list[bytes], int]:
    """Distinct non-empty lines in file order, and the number of non-empty lines."""
    lines = load_lines(path)
    return list(dict.fromkeys(lines)), len(lines)


def load_lines(path: Path) -> list[bytes]:
    with gzip.open(path, "rb") as f:
        return [line for line in f.read().split(b"\n") if line]


def wilson(hits: int, total: int) -> tuple[float, float]:
    if total == 0:
        return 0.0, 1.0
    p = hits / total
    denom = 1 + Z * Z / total
    centre = (p + Z * Z / (2 * total)) / denom
    half = Z * math.sqrt(p * (1 - p) / total + Z * Z / (4 * total * total)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def rate(hits: int, total: int, per_trial: list[float] | None = None) -> dict[str, Any]:
    """The measured rate and a 95% interval: Wilson's for the queries; with per-trial rates,
    widened to the spread between filters (mean +- 1.96 standard errors), which at n = 20
    keys per filter is the larger part."""
    lo, hi = wilson(hits, total)
    if per_trial and len(per_trial) > 1:
        mean = sum(per_trial) / len(per_trial)
        var = sum((x - mean) ** 2 for x in per_trial) / (len(per_trial) - 1)
        half = Z * math.sqrt(var / len(per_trial))
        lo, hi = min(lo, max(0.0, mean - half)), max(hi, mean + half)
    return {"hits": hits, "queries": total, "rate": hits / total, "lo": lo, "hi": hi}


# -- filters as (add_many, contains_many) ------------------------------------------------------


class IndependentBloom:
    """A standard Bloom filter with k independently seeded digests (the textbook model): k
    single-probe BitFilters over one shared bit array. A query stops at its first 0 bit."""

    def __init__(self, nbits: int, k: int, seed: int) -> None:
        self.bits = bytearray((nbits + 7) // 8)
        self.probes = [
            _core.BitFilter(
                self.bits, 0, nbits, 1, _core.LAYOUT_STANDARD, (seed * 1009 + i) % 2**32
            )
            for i in range(k)
        ]

    def add_many(self, keys: Sequence[bytes]) -> None:
        for probe in self.probes:
            probe.add_many(keys)

    def count_hits(self, keys: Sequence[bytes]) -> int:
        alive = list(keys)
        for probe in self.probes:
            alive = [key for key, hit in zip(alive, probe.contains_many(alive), strict=True) if hit]
            if not alive:
                break
        return len(alive)


def count_hits(f: Any, keys: Sequence[bytes]) -> int:
    if isinstance(f, IndependentBloom):
        return f.count_hits(keys)
    return sum(f.contains_many(keys))


def mdbf(groups: int, nbits: int, k1: int, k2: int, ratio: int, query: str, seed: int) -> Any:
    f = MultiDimensionalBloomFilter.with_shape(
        N_INSERT, groups=groups, nbits=nbits, k1=k1, k2=k2, ratio=ratio, query=query, seed=seed
    )
    return f


def bloom(nbits: int, k: int, seed: int) -> Any:
    return _core.BitFilter(bytearray((nbits + 7) // 8), 0, nbits, k, _core.LAYOUT_STANDARD, seed)


def measure(
    make: Callable[[int], Any], inserted: list[list[bytes]], queries: list[list[bytes]]
) -> dict[str, Any]:
    """Trial t: a filter with hash seed t holding inserted[t], asked queries[t]."""
    hits, per_trial, total = 0, [], 0
    for seed, (keys, asked) in enumerate(zip(inserted, queries, strict=True)):
        f = make(seed)
        f.add_many(keys)
        h = count_hits(f, asked)
        hits, total = hits + h, total + len(asked)
        per_trial.append(h / len(asked))
    return rate(hits, total, per_trial)


# -- parts (a), (b), (c) -----------------------------------------------------------------------


def paper_point(
    groups: int, nbits: int, k: int, inserted: list[list[bytes]], queries: list[list[bytes]],
    same_nk: dict[str, Any] | None = None,
) -> dict[str, Any]:  # fmt: skip
    """One point of (a)-(c): the MDBF under both rules and the three standard peers."""
    r = k
    n2 = nbits // r
    k1, _ = sizing.best_k1(N_INSERT, nbits, n2, k)
    k2 = k - k1
    size = sizing.MDBFSize(groups, nbits, n2, k1, k2, r)
    memory = size.bits
    point: dict[str, Any] = {
        "S": groups, "N": nbits, "k": k, "k1": k1, "k2": k2, "r": r, "N2": n2,
        "memory_bits": memory, "n": N_INSERT,
    }  # fmt: skip
    for query in ("all", "any"):
        t = time.perf_counter()
        point[f"mdbf_{query}"] = measure(
            lambda s, q=query: mdbf(groups, nbits, k1, k2, r, q, s), inserted, queries
        )
        point[f"mdbf_{query}"]["predicted"] = sizing.error_rate(N_INSERT, size, query)
        point[f"mdbf_{query}"]["seconds"] = time.perf_counter() - t
    if same_nk is None:
        same_nk = measure(lambda s: bloom(nbits, k, s), inserted, queries)
        same_nk["predicted"] = standard_error_rate(N_INSERT, nbits, k)
    point["bf_same_n_k"] = same_nk
    big_k = min(groups * k, _core.MAX_K)
    point["bf_same_memory"] = measure(lambda s: bloom(memory, big_k, s), inserted, queries)
    point["bf_same_memory"]["predicted"] = standard_error_rate(N_INSERT, memory, big_k)
    point["bf_same_memory"]["k"] = big_k
    point["bf_same_memory_independent"] = measure(
        lambda s: IndependentBloom(memory, big_k, s), inserted, queries
    )
    point["bf_same_memory_independent"]["predicted"] = point["bf_same_memory"]["predicted"]
    return point


def part_paper(distinct: list[bytes], trials: int, log: Callable[[str], None]) -> dict[str, Any]:
    rng = random.Random(20260522)
    pool = distinct[:]
    rng.shuffle(pool)
    insert_pool, foreign = pool[:INSERT_POOL], pool[INSERT_POOL:]
    inserted = [rng.sample(insert_pool, N_INSERT) for _ in range(trials)]
    per = min(QUERIES_PER_TRIAL, len(foreign))
    starts = [(t * per) % (len(foreign) - per + 1) for t in range(trials)]
    queries = [foreign[s : s + per] for s in starts]  # windows over the whole foreign pool
    out: dict[str, Any] = {
        "queries_per_trial": per, "trials": trials, "n": N_INSERT,
        "insert_pool": INSERT_POOL, "foreign_pool": len(foreign),
    }  # fmt: skip
    same = None
    sweeps: dict[str, list[dict[str, Any]]] = {"S": [], "N": [], "k": []}
    for groups in range(1, 9):
        p = paper_point(groups, 150, 4, inserted, queries, same)
        same = p["bf_same_n_k"]
        sweeps["S"].append(p)
        log(f"(a) S={groups}: {summary(p)}")
    paper_s4 = sweeps["S"][3]  # S = 4, N = 150, k = 4: also a point of (b) and of (c)
    for nbits in (50, 75, 100, 150, 200, 300, 400):
        p = paper_s4 if nbits == 150 else paper_point(4, nbits, 4, inserted, queries)
        sweeps["N"].append(p)
        log(f"(b) N={nbits}: {summary(p)}")
    for k in range(1, 9):
        p = paper_s4 if k == 4 else paper_point(4, 150, k, inserted, queries)
        sweeps["k"].append(p)
        log(f"(c) k={k}: {summary(p)}")
    out["sweeps"] = sweeps
    return out


def summary(p: dict[str, Any]) -> str:
    keys = ("mdbf_all", "mdbf_any", "bf_same_n_k", "bf_same_memory", "bf_same_memory_independent")
    return ", ".join(f"{k}={p[k]['rate']:.3g} (pred {p[k]['predicted']:.3g})" for k in keys)


# -- part (d): equal memory at crawl scale ------------------------------------------------------

D_INSERT = 100_000
D_BITS_PER_KEY = 8
D_RATIO = 4


def best_shape_for_memory(groups: int, bits: int, n: int) -> sizing.MDBFSize:
    nbits = bits * D_RATIO // (groups * (D_RATIO + 1))
    best: tuple[float, sizing.MDBFSize] | None = None
    for k in range(1, 25):
        k1, f_g = sizing.best_k1(n, nbits, nbits // D_RATIO, k)
        fp = f_g**groups
        if best is None or fp < best[0]:
            best = (fp, sizing.MDBFSize(groups, nbits, nbits // D_RATIO, k1, k - k1, D_RATIO))
    assert best is not None
    return best[1]


def part_memory(distinct: list[bytes], seeds: int, log: Callable[[str], None]) -> dict[str, Any]:
    rng = random.Random(7)
    pool = distinct[:]
    rng.shuffle(pool)
    inserted, queries = pool[:D_INSERT], pool[D_INSERT:]
    bits = D_INSERT * D_BITS_PER_KEY
    k_opt = max(1, round(D_BITS_PER_KEY * math.log(2)))
    rows: list[dict[str, Any]] = []
    for groups in (1, 2, 4, 8):
        size = best_shape_for_memory(groups, bits, D_INSERT)
        row: dict[str, Any] = {
            "S": groups,
            **{f: getattr(size, f) for f in ("n1", "n2", "k1", "k2")},
        }
        row["memory_bits"] = size.bits
        for query in ("all", "any"):
            hits = 0
            for seed in range(seeds):
                f = MultiDimensionalBloomFilter.with_shape(
                    D_INSERT, groups=groups, nbits=size.n1, k1=size.k1, k2=size.k2,
                    ratio=D_RATIO, query=query, seed=seed,
                )  # fmt: skip
                f.add_many(inserted)
                hits += sum(f.contains_many(queries))
            row[query] = rate(hits, seeds * len(queries))
            row[query]["predicted"] = sizing.error_rate(D_INSERT, size, query)
        rows.append(row)
        log(f"(d) S={groups} {size}: all={row['all']['rate']:.4g} any={row['any']['rate']:.4g}")
    hits = 0
    for seed in range(seeds):
        f = bloom(bits, k_opt, seed)
        f.add_many(inserted)
        hits += sum(f.contains_many(queries))
    bf = rate(hits, seeds * len(queries))
    bf.update(predicted=standard_error_rate(D_INSERT, bits, k_opt), k=k_opt, memory_bits=bits)
    log(f"(d) standard BF m={bits} k={k_opt}: {bf['rate']:.4g}")
    return {
        "n": D_INSERT,
        "bits": bits,
        "queries": len(queries),
        "seeds": seeds,
        "mdbf": rows,
        "bloom": bf,
    }


# -- part (e): the paper's crawl metrics ---------------------------------------------------------

E_CAPACITY = 1_100_000
E_RATE = 1e-3
E_BATCH = 65536


def crawl_filters() -> list[tuple[str, Callable[[], Any]]]:
    return [
        ("python set (exact)", lambda: None),
        ("BloomFilter standard", lambda: BloomFilter(E_CAPACITY, E_RATE, layout="standard")),
        ("BloomFilter blocked", lambda: BloomFilter(E_CAPACITY, E_RATE)),
        ("MDBF auto (all)", lambda: MultiDimensionalBloomFilter(E_CAPACITY, E_RATE)),
        ("MDBF S=2 (all)", lambda: MultiDimensionalBloomFilter(E_CAPACITY, E_RATE, groups=2)),
        ("MDBF S=4 (all)", lambda: MultiDimensionalBloomFilter(E_CAPACITY, E_RATE, groups=4)),
        (
            "MDBF S=4 k=4 (all)",
            lambda: MultiDimensionalBloomFilter(E_CAPACITY, E_RATE, groups=4, k=4),
        ),
        (
            "MDBF S=4 (any)",
            lambda: MultiDimensionalBloomFilter(E_CAPACITY, E_RATE, groups=4, query="any"),
        ),
        ("RotatingBloomFilter G=4", lambda: RotatingBloomFilter(E_CAPACITY, E_RATE, generations=4)),
        (
            "RotatingBloomFilter G=4 counting",
            lambda: RotatingBloomFilter(E_CAPACITY, E_RATE, generations=4, counting=True),
        ),
    ]


def run_set(lines: list[bytes]) -> int:
    seen: set[bytes] = set()
    new = 0
    for start in range(0, len(lines), E_BATCH):
        for key in lines[start : start + E_BATCH]:
            if key not in seen:
                seen.add(key)
                new += 1
    return new


def part_crawl(lines: list[bytes], runs: int, log: Callable[[str], None]) -> dict[str, Any]:
    exact_new = len(set(lines))
    rows = []
    for name, make in crawl_filters():
        best = math.inf
        new = 0
        bits = 0
        detail: dict[str, Any] = {}
        for _ in range(runs):
            f = make()
            t = time.perf_counter()
            if f is None:
                new = run_set(lines)
            else:
                new = 0
                for start in range(0, len(lines), E_BATCH):
                    new += sum(f.add_many(lines[start : start + E_BATCH]))
            best = min(best, time.perf_counter() - t)
            if f is not None:
                stats = f.stats()
                bits, detail = (
                    stats.bits,
                    {k: v for k, v in stats.details.items() if k not in ("path", "readonly")},
                )
                f.close()
        row = {
            "filter": name,
            "lines": len(lines),
            "new": new,
            "duplicate_rate": 1 - new / len(lines),
            "missed_new": exact_new - new,
            "seconds": best,
            "new_per_second": new / best,
            "bits": bits,
            "details": detail,
        }
        rows.append(row)
        log(
            f"(e) {name}: {row['new_per_second']:,.0f} new/s, "
            f"missed {row['missed_new']}, {bits:,} bits"
        )
    return {"capacity": E_CAPACITY, "error_rate": E_RATE, "distinct": exact_new, "rows": rows}


# -- output: tables, plots -----------------------------------------------------------------------


def fmt(r: dict[str, Any]) -> str:
    if r["hits"] == 0:
        return f"0 of {r['queries'] / 1e6:.1f}M (< {r['hi']:.1g})"
    return f"{r['rate']:.3g} [{r['lo']:.2g}, {r['hi']:.2g}]"


def tables(results: dict[str, Any]) -> str:
    out: list[str] = []
    paper = results.get("paper")
    if paper:
        q = paper["queries_per_trial"] * paper["trials"]
        out.append(
            f"n = {paper['n']} URLs per filter, {paper['trials']} filters per point, "
            f"{q:,} foreign queries per point. Measured rate [95% interval] over predicted "
            "(the group formula for the MDBF, the exact Bloom formula for the standard filters)."
        )
        heads = {"S": "(a) against S, k = 4, N = 150", "N": "(b) against N, S = 4, k = 4",
                 "k": "(c) against k, S = 4, N = 150"}  # fmt: skip
        for sweep, title in heads.items():
            out.append(f"\n**{title}**\n")
            out.append(
                f"| {sweep} | k1+k2 | bits | MDBF all | MDBF any | BF same N, k | "
                "BF same memory | BF same memory, independent hashes |"
            )
            out.append("| --- | --- | --- | --- | --- | --- | --- | --- |")
            for p in paper["sweeps"][sweep]:
                cells = [
                    f"{fmt(p[key])}<br>pred {p[key]['predicted']:.2g}"
                    for key in ("mdbf_all", "mdbf_any", "bf_same_n_k", "bf_same_memory",
                                "bf_same_memory_independent")
                ]  # fmt: skip
                out.append(
                    f"| {p[sweep]} | {p['k1']}+{p['k2']} | {p['memory_bits']} | "
                    + " | ".join(cells)
                    + " |"
                )
    mem = results.get("memory")
    if mem:
        out.append(
            f"\n**(d) Equal memory at crawl scale**: {mem['n']:,} URLs in {mem['bits']:,} bits "
            f"({mem['bits'] // mem['n']} per URL), {mem['queries']:,} foreign queries x "
            f"{mem['seeds']} seeds.\n"
        )
        out.append("| filter | shape | bits | measured FP [95%] | predicted |")
        out.append("| --- | --- | --- | --- | --- |")
        bf = mem["bloom"]
        out.append(
            f"| standard BF | k = {bf['k']} | {bf['memory_bits']:,} | {fmt(bf)} "
            f"| {bf['predicted']:.4g} |"
        )
        for row in mem["mdbf"]:
            shape = (
                f"S={row['S']}, N={row['n1']:,}, N2={row['n2']:,}, k1={row['k1']}, k2={row['k2']}"
            )
            for query in ("all", "any"):
                r = row[query]
                out.append(
                    f"| MDBF {query} | {shape} | {row['memory_bits']:,} | {fmt(r)} "
                    f"| {r['predicted']:.4g} |"
                )
    crawl = results.get("crawl")
    if crawl:
        first = crawl["rows"][0]
        out.append(
            f"\n**(e) The paper's crawl metrics** on the dev set: {first['lines']:,} URLs, "
            f"{crawl['distinct']:,} distinct; filters sized for {crawl['capacity']:,} at "
            f"{crawl['error_rate']}; best of 3 runs of add_many in batches of {E_BATCH:,}.\n"
        )
        out.append(
            "| filter | new URLs/s | duplicate rate | space (bits) | distinct URLs missed | shape |"
        )
        out.append("| --- | --- | --- | --- | --- | --- |")
        for row in crawl["rows"]:
            d = row["details"]
            if "groups" in d:
                shape = (
                    f"S={d['groups']}, N={d['n1']:,}, N2={d['n2']:,}, k1={d['k1']}, k2={d['k2']}"
                )
            elif "generations" in d:
                shape = f"G={d['generations']}, {d['generation_capacity']:,} per generation"
            elif "k" in d:
                shape = f"{d.get('layout', '')}, k={d['k']}"
            else:
                shape = "exact"
            bits = f"{row['bits']:,}" if row["bits"] else "(not measured)"
            out.append(
                f"| {row['filter']} | {row['new_per_second'] / 1e6:.2f}M "
                f"| {row['duplicate_rate']:.2%} | {bits} | {row['missed_new']:,} | {shape} |"
            )
    return "\n".join(out)


def plots(results: dict[str, Any]) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    paper = results.get("paper")
    series = [
        ("mdbf_all", "MDBF, QUERY_ALL", "C0", "o"),
        ("mdbf_any", "MDBF, QUERY_ANY (as written)", "C3", "s"),
        ("bf_same_n_k", "standard BF, same N and k", "C2", "^"),
        ("bf_same_memory", "standard BF, same memory (double hashing)", "C1", "D"),
        ("bf_same_memory_independent", "standard BF, same memory (independent hashes)", "C4", "v"),
    ]
    titles = {"S": "FP against S (k = 4, N = 150)", "N": "FP against N (S = 4, k = 4)",
              "k": "FP against k (S = 4, N = 150)"}  # fmt: skip
    if paper:
        q = paper["queries_per_trial"] * paper["trials"]
        for sweep, title in titles.items():
            points = paper["sweeps"][sweep]
            xs = [p[sweep] for p in points]
            fig, ax = plt.subplots(figsize=(8, 5.2))
            for index, (key, label, colour, marker) in enumerate(series):
                pred = [p[key]["predicted"] for p in points]
                ax.plot(xs, pred, color=colour, lw=1, ls="--", alpha=0.8)
                mx = [x for x, p in zip(xs, points, strict=True) if p[key]["hits"]]
                my = [p[key]["rate"] for p in points if p[key]["hits"]]
                err = [
                    [p[key]["rate"] - p[key]["lo"] for p in points if p[key]["hits"]],
                    [p[key]["hi"] - p[key]["rate"] for p in points if p[key]["hits"]],
                ]
                ax.errorbar(
                    mx, my, yerr=err, color=colour, marker=marker, ls="-", label=label, capsize=2
                )
                zx = [x for x, p in zip(xs, points, strict=True) if not p[key]["hits"]]
                zy = [p[key]["hi"] for p in points if not p[key]["hits"]]
                if zx:
                    # hollow: an upper bound; sizes differ so that equal bounds stay visible
                    ax.scatter(
                        zx, zy, color=colour, marker="v", facecolors="none", s=30 + 40 * index
                    )
            ax.axhline(1 / q, color="grey", lw=0.8, ls=":")
            ax.text(xs[0], 1.3 / q, "one false positive in all queries", fontsize=7, color="grey")
            ax.set_yscale("log")
            ax.set_xlabel(sweep)
            ax.set_ylabel("false-positive rate")
            ax.set_title(
                f"{title}, n = {paper['n']}: measured (solid, 95% bars; hollow = upper bound "
                "when none seen), predicted (dashed)",
                fontsize=8,
            )
            ax.legend(fontsize=7, loc="best")
            ax.grid(True, which="both", alpha=0.3)
            path = HERE / f"figures/mdbf-vs-{sweep}.png"
            fig.tight_layout()
            fig.savefig(path, dpi=110)
            plt.close(fig)
            written.append(path)
    mem = results.get("memory")
    if mem:
        fig, ax = plt.subplots(figsize=(7, 4.5))
        groups = [row["S"] for row in mem["mdbf"]]
        for query, colour, marker in (("all", "C0", "o"), ("any", "C3", "s")):
            ax.plot(groups, [row[query]["rate"] for row in mem["mdbf"]], color=colour,
                    marker=marker, label=f"MDBF, QUERY_{query.upper()} (measured)")  # fmt: skip
            ax.plot(groups, [row[query]["predicted"] for row in mem["mdbf"]], color=colour, ls="--",
                    lw=1, label=f"MDBF, QUERY_{query.upper()} (predicted)")  # fmt: skip
        ax.axhline(
            mem["bloom"]["rate"], color="C1", label=f"standard BF, k={mem['bloom']['k']} (measured)"
        )
        ax.axhline(
            mem["bloom"]["predicted"], color="C1", ls="--", lw=1, label="standard BF (predicted)"
        )
        ax.set_xscale("log", base=2)
        ax.set_xticks(groups, [str(g) for g in groups])
        ax.set_yscale("log")
        ax.set_xlabel("S (groups), same total memory")
        ax.set_ylabel("false-positive rate")
        ax.set_title(
            f"Equal memory: {mem['n']:,} real URLs in {mem['bits']:,} bits "
            f"({mem['bits'] // mem['n']} bits per URL)",
            fontsize=9,
        )
        ax.legend(fontsize=7)
        ax.grid(True, which="both", alpha=0.3)
        path = HERE / "figures" / "mdbf-vs-memory.png"
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written


def write_tables(text: str) -> None:
    doc = DOC.read_text() if DOC.exists() else f"# MDBF\n\n{BEGIN}\n{END}\n"
    if BEGIN not in doc or END not in doc:
        doc += f"\n{BEGIN}\n{END}\n"
    pattern = re.compile(re.escape(BEGIN) + ".*?" + re.escape(END), flags=re.DOTALL)
    DOC.write_text(pattern.sub(lambda _: f"{BEGIN}\n{text}\n{END}", doc))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, default=None, help="urls-dev.txt.gz")
    parser.add_argument("--quick", action="store_true", help="smoke run; writes nothing")
    parser.add_argument("--replot", action="store_true", help="redraw from the JSON")
    parser.add_argument("--parts", default="pde", help="p = (a)-(c), d, e (default: all)")
    args = parser.parse_args()
    if args.replot:
        results = json.loads(RESULTS.read_text())["mdbf"]
        write_tables(tables(results))
        print("\n".join(str(p) for p in plots(results)))
        return 0
    data = args.data or Path(os.environ.get("URLSEEN_DEV_URLS", DEFAULT_DATA))

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    start = time.perf_counter()
    distinct, nonempty = load_distinct(data)
    results: dict[str, Any] = {
        "command": "python benchmarks/papers/mdbf.py" + (" --quick" if args.quick else ""),
        "data": {"path": data.name, "nonempty_lines": nonempty, "distinct": len(distinct)},
        "machine": {
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
        },
    }
    if "p" in args.parts:
        results["paper"] = part_paper(distinct, 4 if args.quick else TRIALS, log)
    if "d" in args.parts:
        results["memory"] = part_memory(distinct, 1 if args.quick else 3, log)
    if "e" in args.parts:
        lines = load_lines(data)
        if args.quick:
            lines = lines[:300_000]
        results["crawl"] = part_crawl(lines, 1 if args.quick else 3, log)
    results["seconds"] = time.perf_counter() - start
    text = tables(results)
    print(text)
    if not args.quick:
        kept = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
        RESULTS.write_text(json.dumps(kept | {"mdbf": results}, indent=1) + "\n")
        write_tables(text)
        for path in plots(results):
            log(f"wrote {path}")
    log(f"done in {results['seconds']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
