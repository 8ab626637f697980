#!/usr/bin/env python3
"""Where RedisBloomFilter's server CPU per new URL goes: its batch script with parts removed.

One private redis-server (started here on a free port, stopped at the end). For each variant, a
fresh RedisBloomFilter (blocked layout, f = 0.001, sized for the URLs) checks the first --new
distinct dev lines (every one new) in batches of --batch, auto-acknowledged; its script is
bloom_batch.lua with one more part removed than the variant before it. The server CPU
(`INFO cpu` used_cpu_sys + used_cpu_user delta) per URL of each variant, and the difference to
the next, say what each part costs. Variants without their writes give wrong answers and
leave wrong bits: they measure, they are not filters.

Optimistic path (the client decides new keys from its native read; the default):
  full        as shipped
  noclaims    no claims written (no record: its acknowledging HDEL finds none), none deleted
  nosetrange  ... and no SETRANGE of the blocks or of the whole bits (one client: the count is
              always as read, so no block is compared)
  empty       ... and the script answers at once: what is left is the native read, the
              arguments, the acknowledging call
Script path (optimistic = False, native_from = 2: the script decides every key, as before
redis-new-cpu):
  script-full, script-noclaims, script-nosetrange (as above), script-norebuild (no block
  rebuilt per new key in Lua, hence no bits set), script-empty

Usage (from the repository root):

    python benchmarks/redis_script_profile.py
    python benchmarks/redis_script_profile.py --batch 1000 --variants full,script-full
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from redis_shared import DEFAULT_DATA, Server, distinct_lines, private_server  # the sibling's
from urlseen.shared.bloom import RedisBloomFilter
from urlseen.shared.scripts import BLOOM_BATCH, lua_text

CUTS = ("noclaims", "nosetrange", "empty")
SCRIPT_CUTS = ("noclaims", "nosetrange", "norebuild", "empty")


def _cut(source: str, old: str, new: str) -> str:
    if old not in source:
        raise SystemExit(f"the batch scripts changed: {old!r} not found; update the variants")
    return source.replace(old, new)


def variant_source(name: str) -> str:
    """bloom_batch.lua with what it needs in front (claims.lua, bits.lua, batch_claims.lua),
    less the parts `name` removes."""
    claims, bits, answers, batch = (lua_text(f) for f in (*BLOOM_BATCH.needs, "bloom_batch.lua"))
    cuts = SCRIPT_CUTS if name.startswith("script-") else CUTS
    level = name.removeprefix("script-")
    removed = set() if level == "full" else set(cuts[: cuts.index(level) + 1])
    if "noclaims" in removed:  # none written, none deleted by the acknowledgement
        claims = _cut(claims, "  q[n + 1] = fp\n  q[n + 2] = c.mine\n", "")
        record = (
            "  return redis.call('HSETNX', records, c.owner .. ' ' .. c.call, c.mine .. '\\n' .. "
            "fps) == 1\n"
        )
        claims = _cut(claims, record, "  return true\n")
        batch = _cut(
            batch,
            "  return batch_drop_each(claims_key, ARGV, TAIL + 1)",
            "  return #ARGV - TAIL",
        )
    if "nosetrange" in removed:
        bits = _cut(
            bits, "    redis.call('SETRANGE', key, u32_at(", "    (function() end)(key, u32_at("
        )
        bits = _cut(bits, "redis.call('SETRANGE', key, base, over[base])", "")
        batch = _cut(
            batch,
            "          redis.call('RENAME', stage_key, bits_key)\n"
            "          redis.call('PERSIST', bits_key) -- RENAME kept the stage's expiry\n",
            "          redis.call('DEL', stage_key)\n",
        )
    if "norebuild" in removed:
        bits = _cut(
            bits, "    if is_new and set then\n      local t", "    if false then\n      local t"
        )
    if "empty" in removed:
        answer = "if op == OP_ADD then return string.rep(NEW, #fps / width) end\n"
        batch = _cut(batch, "local whole = bits_whole(", answer + "local whole = bits_whole(")
    return "\n".join((claims, bits, answers, batch))


def measure(server: Server, name: str, keys: list[str], batch: int) -> float:
    """Server CPU (us) per URL of checking keys with the variant `name`, from an empty server."""
    server.flush()
    server.client.script_flush()
    bloom = RedisBloomFilter(server.url, "profile", capacity=len(keys), error_rate=0.001)
    bloom._script = server.client.register_script(variant_source(name))
    if name.startswith("script-"):
        bloom.optimistic, bloom.native_from = False, 2.0
    time.sleep(0.2)
    before = server.cpu()
    for start in range(0, len(keys), batch):
        bloom.add_many(keys[start : start + batch])
    spent = server.cpu() - before
    bloom.close()
    return spent * 1e6 / len(keys)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--new", type=int, default=500_000, help="distinct dev lines (default 500k)")
    ap.add_argument("--batch", type=int, default=8192)
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    default = ["full", *CUTS, "script-full", *(f"script-{c}" for c in SCRIPT_CUTS)]
    ap.add_argument("--variants", default=",".join(default))
    args = ap.parse_args()
    keys = distinct_lines(args.data, args.new)
    with tempfile.TemporaryDirectory() as folder, private_server(Path(folder)) as server:
        print(f"{len(keys):,} new URLs, batch {args.batch}, redis-server {server.version()}")
        for name in args.variants.split(","):
            cost = measure(server, name, keys, args.batch)
            print(f"{name:18s} {cost:5.2f} us of server CPU per new URL", flush=True)


if __name__ == "__main__":
    main()
