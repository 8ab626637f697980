"""RedisBloomFilter on a real Redis server: the same answers and bytes as a local filter,
atomic claims across processes, receipts that make a lost reply safe to resend, clear errors."""

from __future__ import annotations

import multiprocessing
import random
import threading

import pytest
import redis

from conftest import filter_bits
from urlseen import BloomFilter, ConfigError, FormatError
from urlseen.errors import RemoteError
from urlseen.shared import bits as native_bits
from urlseen.shared import client as redis_store
from urlseen.shared.bloom import RedisBloomFilter
from urlseen.shared.scripts import BLOOM_BATCH, STAGED, Op


def urls(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [f"https://site{rng.randrange(50)}.example/p/{rng.randrange(10**9)}" for _ in range(n)]


def test_answers_and_bytes_equal_a_local_filter(redis_url, redis_name):
    keys = urls(5000) + urls(2000)[:1000]  # with duplicates
    for layout in ("blocked", "standard"):
        name = f"{redis_name}-{layout}"
        shared = RedisBloomFilter(redis_url, name, capacity=20_000, layout=layout)
        local = BloomFilter(20_000, layout=layout)
        try:
            assert shared.add_many(keys) == local.add_many(keys)
            assert len(shared) == len(local)
            probe = urls(3000, seed=9)
            assert shared.contains_many(probe) == local.contains_many(probe)
            client = redis.Redis.from_url(redis_url)
            stored = client.get(redis_store.key(name, "bits"))
            assert stored == filter_bits(local)
        finally:
            shared.destroy()


MODES = {"optimistic": (True, 0.5), "native-reads": (False, 0.0), "script-only": (False, 2.0)}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("layout", ["blocked", "standard"])
@pytest.mark.parametrize(
    "capacity, batch",
    [(2_000_000, 50), (2_000, 4000)],  # bits read per block / per byte, and read whole
    ids=["large-filter-small-batches", "small-filter-large-batches"],
)
def test_every_way_of_reading_the_bits_equals_a_local_filter(
    redis_url, redis_name, layout, capacity, batch, mode
):
    """Optimistic (the client decides from a native read, the script checks its blocks and
    writes them), native reads of repeats only, or the script alone: the same answers and
    bytes as a local filter."""
    keys = urls(6000) + urls(3000)[:2000]  # repeats across and within batches
    shared = RedisBloomFilter(redis_url, redis_name, capacity=capacity, layout=layout)
    optimistic, shared.native_from = MODES[mode]
    shared.optimistic = optimistic and layout == "blocked"
    local = BloomFilter(capacity, layout=layout)
    try:
        for start in range(0, len(keys), batch):
            part = keys[start : start + batch]
            assert shared.add_many(part) == local.add_many(part)
        stored = redis.Redis.from_url(redis_url).get(redis_store.key(redis_name, "bits"))
        assert stored == filter_bits(local)
        probe = urls(500, seed=9) + keys[:500]
        assert shared.contains_many(probe) == local.contains_many(probe)
    finally:
        shared.destroy()


def test_reopen_keeps_parameters_and_refuses_others(redis_url, redis_name):
    first = RedisBloomFilter(redis_url, redis_name, capacity=1000, error_rate=0.01)
    assert first.add("https://a.example/")
    again = RedisBloomFilter(redis_url, redis_name)  # no parameters: the stored ones
    assert "https://a.example/" in again and not again.add("https://a.example/")
    assert (again.nbits, again.k) == (first.nbits, first.k)
    with pytest.raises(ConfigError, match="capacity"):
        RedisBloomFilter(redis_url, redis_name, capacity=2000)
    with pytest.raises(ConfigError, match="give a capacity"):
        RedisBloomFilter(redis_url, redis_name + "-missing")
    with pytest.raises(ConfigError):
        RedisBloomFilter(redis_url, "bad{name}", capacity=10)
    with pytest.raises(ConfigError):
        RedisBloomFilter("http://127.0.0.1:6379", redis_name, capacity=10)


def test_foreign_metadata_is_refused(redis_url, redis_name):
    client = redis.Redis.from_url(redis_url)
    client.hset(redis_store.key(redis_name, "meta"), "params", '{"format": "something else"}')
    with pytest.raises(FormatError, match="not a urlseen"):
        RedisBloomFilter(redis_url, redis_name, capacity=10)
    client.hset(redis_store.key(redis_name, "meta"), "params", "{not json")
    with pytest.raises(FormatError, match="unreadable"):
        RedisBloomFilter(redis_url, redis_name, capacity=10)


def _claim(args: tuple[str, str, list[str]]) -> list[str]:
    url, name, keys = args
    seen = RedisBloomFilter(url, name)
    won = []
    for start in range(0, len(keys), 500):
        batch = keys[start : start + 500]
        won += [k for k, new in zip(batch, seen.add_many(batch), strict=True) if new]
    return won


@pytest.mark.parametrize("shards", [1, 4])
def test_concurrent_processes_claim_each_url_exactly_once(redis_url, redis_name, shards):
    """Four processes submit overlapping streams at once: every distinct URL is reported new
    to exactly one of them (the filter is sized so that false positives are ~1e-9), whether
    its bits are in one string or split in shards."""
    RedisBloomFilter(redis_url, redis_name, capacity=200_000, error_rate=1e-9, shards=shards)
    pool_keys = urls(20_000, seed=3)
    streams = []
    for worker in range(4):
        rng = random.Random(worker)
        streams.append([pool_keys[rng.randrange(len(pool_keys))] for _ in range(15_000)])
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(4) as pool:
        claims = pool.map(_claim, [(redis_url, redis_name, s) for s in streams])
    everyone = [k for c in claims for k in c]
    assert len(everyone) == len(set(everyone)), "a URL was claimed twice"
    assert set(everyone) == {k for s in streams for k in s}, "a URL was never claimed"


def _script_keys(seen: RedisBloomFilter, monkeypatch) -> list[int]:
    """Spy on the script: the number of keys each check-and-add call sends it."""
    sent: list[int] = []
    real = seen._shards[0]._call

    def call(op, masks, fps, claim, what, *extra):
        if op == Op.ADD:
            sent.append(len(fps) // 16)
        return real(op, masks, fps, claim, what, *extra)

    monkeypatch.setattr(seen._shards[0], "_call", call)
    return sent


@pytest.mark.parametrize("capacity", [1000, 2_000_000], ids=["whole-bits", "blocks"])
def test_repeats_are_answered_by_a_native_read_and_new_keys_by_the_script(
    redis_url, redis_name, monkeypatch, capacity
):
    seen = RedisBloomFilter(redis_url, redis_name, capacity=capacity, error_rate=1e-9)
    seen.native_from = 0.0  # read natively after an all-new batch too
    sent = _script_keys(seen, monkeypatch)
    old, new = urls(300), urls(50, seed=5)
    try:
        assert all(seen.add_many(old))
        batch = old[:200] + new + new[:10] + old[:5]  # repeats within the batch too
        assert seen.add_many(batch) == [False] * 200 + [True] * 50 + [False] * 15
        assert sent == [300, 50], "only the first of each new key reaches the script"
        assert seen.contains_many(old + urls(20, seed=7)) == [True] * 300 + [False] * 20
        assert len(seen) == 350 and seen.claims_held() == 0
    finally:
        seen.destroy()


def test_a_stream_of_new_keys_skips_the_native_read(redis_url, redis_name, monkeypatch):
    """A batch that found most keys new makes the next go straight to the script (a native
    read would find nothing to answer); one that found most seen makes the next read first."""
    seen = RedisBloomFilter(redis_url, redis_name, capacity=10_000, error_rate=1e-9)
    seen.optimistic = False  # it reads before every batch
    reads = []
    real = seen._shards[0]._present
    monkeypatch.setattr(seen._shards[0], "_present", lambda m, n: reads.append(n) or real(m, n))
    try:
        seen.add_many(urls(100, seed=1))  # the first batch reads: nothing is known yet
        seen.add_many(urls(100, seed=2))  # the last was all new: no read
        seen.add_many(urls(100, seed=2))  # again none, but all seen now
        seen.add_many(urls(100, seed=2))  # the last was all seen: read
        assert reads == [100, 100]
    finally:
        seen.destroy()


def test_a_native_read_notices_lost_or_replaced_data(redis_url, redis_name):
    from urlseen.errors import FilterLostError

    client = redis.Redis.from_url(redis_url)
    seen = RedisBloomFilter(redis_url, redis_name, capacity=1000)
    keys = urls(50)
    seen.add_many(keys)
    bits, meta = (redis_store.key(redis_name, part) for part in ("bits", "meta"))
    try:
        client.hset(meta, "instance", "someone-else")
        with pytest.raises(FilterLostError, match="another filter"):
            seen.add_many(keys)
        with pytest.raises(FilterLostError, match="another filter"):
            seen.contains_many(keys)
        client.hset(meta, "instance", seen._instance)
        client.append(bits, b"\0")
        with pytest.raises(FilterLostError, match="gone or damaged"):
            seen.add_many(keys)
        client.delete(meta)
        with pytest.raises(FilterLostError, match="is gone"):
            seen.add_many(keys)
    finally:
        client.delete(*(redis_store.key(redis_name, p) for p in ("bits", "meta", "kind")))


def test_a_resent_batch_gets_the_same_answer(redis_url, redis_name, monkeypatch):
    """The reply of a committed batch is lost (the connection drops after the script ran):
    the client sends the batch again with the same receipt and gets the first answer, so the
    new URLs are still reported new."""
    seen = RedisBloomFilter(redis_url, redis_name, capacity=1000)
    calls = {"n": 0}
    real = seen._script

    def lossy(keys, args):
        answer = real(keys=keys, args=args)
        if args[0] in (Op.ACK, Op.DROP):  # acknowledging the answers: not the batch
            return answer
        calls["n"] += 1
        if calls["n"] == 1:
            raise redis.exceptions.ConnectionError("reply lost")
        return answer

    monkeypatch.setattr(seen, "_script", lossy)
    monkeypatch.setattr(redis_store.time, "sleep", lambda s: None)
    assert seen.add_many(["https://x.example/", "https://y.example/"]) == [True, True]
    assert calls["n"] == 2 and len(seen) == 2
    claims = redis.Redis.from_url(redis_url).hlen(redis_store.key(redis_name, "claims"))
    assert claims == 0, "the answers were acknowledged"


def test_an_unreachable_server_is_a_clear_error(redis_name, monkeypatch):
    monkeypatch.setattr(redis_store.time, "sleep", lambda s: None)
    with pytest.raises(RemoteError, match="unreachable"):
        RedisBloomFilter("redis://127.0.0.1:1/0", redis_name, capacity=10)


def test_bad_keys_change_nothing(redis_url, redis_name):
    seen = RedisBloomFilter(redis_url, redis_name, capacity=1000)
    with pytest.raises(TypeError):
        seen.add_many(["https://ok.example/", 42])  # type: ignore[list-item]
    with pytest.raises(TypeError):
        seen.add_many("https://one-string.example/")
    assert len(seen) == 0 and "https://ok.example/" not in seen


def test_concurrent_dedup_processes_print_each_url_once(redis_url, redis_name, tmp_path):
    """`urlseen dedup --redis` in three processes at once, over overlapping inputs: together
    they print every distinct URL exactly once."""
    import subprocess
    import sys

    pool_keys = urls(30_000, seed=7)
    inputs = []
    for worker in range(3):
        rng = random.Random(100 + worker)
        path = tmp_path / f"in{worker}.txt"
        path.write_text("\n".join(rng.choice(pool_keys) for _ in range(20_000)) + "\n")
        inputs.append(path)
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "urlseen",
                "dedup",
                "--redis",
                redis_url,
                "--name",
                redis_name,
                "--capacity",
                "100000",
                "--error-rate",
                "1e-9",
                "--no-canonicalize",
                "--batch-size",
                "700",
                str(path),
                "-o",
                str(path) + ".out",
            ],
            stderr=subprocess.PIPE,
        )
        for path in inputs
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err.decode()
    printed = [
        line
        for path in inputs
        for line in (tmp_path / (path.name + ".out")).read_text().splitlines()
    ]
    assert len(printed) == len(set(printed)), "a URL was printed by two processes"
    wanted = {line for path in inputs for line in path.read_text().splitlines()}
    assert set(printed) == wanted


def test_dedup_redis_refuses_other_filters_and_state(redis_url, redis_name, tmp_path):
    from cli_helpers import invoke

    src = tmp_path / "in.txt"
    src.write_text("https://a.example/\n")
    state = ["--state", str(tmp_path / "s")]  # exact and library share through Redis without it
    for extra in (["--filter", "similar"], state, ["--filter", "exact", *state]):
        result = invoke("dedup", "--redis", redis_url, "--name", redis_name, *extra, src)
        assert result.exit_code == 2 and "--redis" in result.stderr


# ---- Redis Cluster (3 masters started by the test session) ------------------------------------


def test_on_a_cluster_a_filter_of_one_shard_lives_in_one_slot_and_filters_spread(
    redis_cluster_url,
):
    client = redis_store.connect(redis_cluster_url)
    keys = urls(3000) + urls(500)
    local = BloomFilter(10_000)
    shared = RedisBloomFilter(redis_cluster_url, "cluster-bytes", capacity=10_000, shards=1)
    try:
        assert shared.add_many(keys) == local.add_many(keys)
        assert shared.contains_many(urls(1000, seed=5)) == local.contains_many(urls(1000, seed=5))
        bits = client.get(redis_store.key("cluster-bytes", "bits"))
        assert bits == filter_bits(local)
    finally:
        shared.destroy()
    # Many filters: each in one slot, together on every master.
    nodes = set()
    for i in range(24):
        name = f"spread-{i}"
        f = RedisBloomFilter(redis_cluster_url, name, capacity=100, shards=1)
        f.add("https://x.example/")
        nodes.add(client.get_node_from_key(redis_store.key(name, "bits")).name)
        assert client.keyslot(redis_store.key(name, "bits")) == client.keyslot(
            redis_store.key(name, "meta")
        )
        f.destroy()
    assert len(nodes) == 3, nodes


def test_on_a_cluster_a_client_alone_stages_its_rewrites(redis_cluster_url, monkeypatch):
    """A Cluster pipeline refuses EVALSHA: the stage is set first, then the script takes it."""
    client = redis_store.connect(redis_cluster_url)
    seen = RedisBloomFilter(redis_cluster_url, "cluster-stage", capacity=3000, shards=1)
    local = BloomFilter(3000)
    staged, real_set = [], seen._client.set
    monkeypatch.setattr(seen._client, "set", lambda key, *a, **kw: staged.append(key) or
                        real_set(key, *a, **kw))  # fmt: skip
    try:
        for i in range(4):
            batch = urls(400, seed=60 + i)
            assert seen.add_many(batch) == local.add_many(batch)
        assert staged == [seen._shards[0]._stage] * 3, "alone from the second batch on: staged"
        bits = client.get(redis_store.key("cluster-stage", "bits"))
        assert bits == filter_bits(local)
        assert client.ttl(redis_store.key("cluster-stage", "bits")) == -1
        assert client.exists(seen._shards[0]._stage) == 0
    finally:
        seen.destroy()


def test_on_a_cluster_repeats_are_answered_by_a_native_transaction(redis_cluster_url, monkeypatch):
    """MULTI/EXEC works there (the keys share a slot); without TIME in a Cluster transaction,
    another client's live claim goes to the script, which says it is pending or seen."""
    seen = RedisBloomFilter(redis_cluster_url, "cluster-native", capacity=10_000, shards=1)
    other = RedisBloomFilter(redis_cluster_url, "cluster-native")
    seen.native_from = other.native_from = 0.0
    sent = _script_keys(seen, monkeypatch)
    try:
        old, held = urls(200), urls(20, seed=3)
        assert all(seen.add_many(old))
        other.auto_acknowledge = False
        assert all(other.add_many(held))  # claimed by `other`, older than seen's next batch
        threading.Timer(0.3, other.acknowledge).start()
        assert seen.add_many(old + held) == [False] * 220  # held: pending until acknowledged
        assert sent[0] == 200 and set(sent[1:]) == {20}, "only the claimed keys reach the script"
        assert seen.contains_many(old + held + urls(5, seed=4)) == [True] * 220 + [False] * 5
    finally:
        other.acknowledge()
        other.close()
        seen.destroy()


def test_on_a_cluster_concurrent_processes_claim_each_url_once(redis_cluster_url):
    RedisBloomFilter(redis_cluster_url, "cluster-fleet", capacity=200_000, error_rate=1e-9)
    pool_keys = urls(10_000, seed=4)
    streams = []
    for worker in range(4):
        rng = random.Random(50 + worker)
        streams.append([pool_keys[rng.randrange(len(pool_keys))] for _ in range(8_000)])
    ctx = multiprocessing.get_context("spawn")
    try:
        with ctx.Pool(4) as pool:
            claims = pool.map(_claim, [(redis_cluster_url, "cluster-fleet", s) for s in streams])
        everyone = [k for c in claims for k in c]
        assert len(everyone) == len(set(everyone)), "a URL was claimed twice"
        assert set(everyone) == {k for s in streams for k in s}
    finally:
        RedisBloomFilter(redis_cluster_url, "cluster-fleet").destroy()


# ---- a Redis that goes away: a private server with an append-only file -------------------------


def test_a_killed_server_is_a_clear_error_and_acknowledged_urls_survive(private_redis, monkeypatch):
    """What happens, stated: while Redis is down, add_many retries (about 7 s by default; 2
    retries here) and then raises RemoteError (the batch is not applied: its answers were
    never acknowledged). A server that persists every write (appendfsync always) comes back
    with every URL that add_many had reported new."""
    monkeypatch.setattr(redis_store, "RETRIES", 2)
    seen = RedisBloomFilter(private_redis.url, "fleet", capacity=10_000)
    acknowledged = urls(2000, seed=11)
    assert all(seen.add_many(acknowledged))
    private_redis.kill()
    with pytest.raises(RemoteError, match="unreachable"):
        seen.add_many(urls(10, seed=12))
    private_redis.start()
    again = RedisBloomFilter(private_redis.url, "fleet")
    assert all(again.contains_many(acknowledged)) and len(again) == 2000
    assert seen.add_many([*acknowledged[:5], "https://brand-new.example/"]) == [False] * 5 + [True]


def test_a_server_back_within_the_retry_window_is_invisible(private_redis):
    import threading
    import time

    seen = RedisBloomFilter(private_redis.url, "fleet", capacity=10_000)
    first = urls(100, seed=13)
    assert all(seen.add_many(first))
    private_redis.kill()
    restart = threading.Timer(0.3, private_redis.start)
    restart.start()
    started = time.monotonic()
    assert seen.add_many([*first, "https://later.example/"]) == [False] * 100 + [True]
    assert time.monotonic() - started < 10
    restart.join()  # the server is back (and the fixture stops it) before the test ends


def test_info_describes_a_redis_filter(redis_url, redis_name):
    import json

    from cli_helpers import invoke

    seen = RedisBloomFilter(redis_url, redis_name, capacity=1000)
    seen.add_many(urls(100))
    result = invoke("info", "--redis", redis_url, "--name", redis_name, "--json")
    assert result.exit_code == 0, result.stderr
    desc = json.loads(result.stdout)
    assert desc["count"] == 100 and desc["nbits"] == seen.nbits and desc["k"] == seen.k
    assert 0 < desc["fill"] * seen.nbits <= 100 * seen.k and desc["redis_bytes"] >= seen.nbits / 8
    missing = invoke("info", "--redis", redis_url, "--name", redis_name + "-none")
    assert missing.exit_code == 2 and "no urlseen filter" in missing.stderr
    assert invoke("info", "--redis", redis_url).exit_code == 2  # --name missing


@pytest.mark.parametrize("optimistic", [True, False], ids=["optimistic", "script-only"])
def test_a_batch_whose_replies_were_all_lost_is_new_again_to_its_client(
    redis_url, redis_name, monkeypatch, optimistic
):
    """Every reply of a committed batch is lost (the script ran, claims and bits written), so
    add_many fails: its caller got nothing. The same client asking again gets the URLs new, not
    "seen" on the strength of claims it never knew it made (optimistic: its native read sees
    the bits set, so the script decides them by their abandoned claims)."""
    seen = RedisBloomFilter(redis_url, redis_name, capacity=1000)
    seen.optimistic = optimistic
    seen.native_from = 2.0  # else every batch through the script
    real, lose = seen._script, {"on": True}

    def lossy(keys, args):
        answer = real(keys=keys, args=args)
        if lose["on"] and args[0] == Op.ADD:  # check-and-add: ran, reply lost
            raise redis.exceptions.ConnectionError("reply lost")
        return answer

    monkeypatch.setattr(seen, "_script", lossy)
    monkeypatch.setattr(redis_store.time, "sleep", lambda s: None)
    urls = ["https://lost-1.example/", "https://lost-2.example/"]
    with pytest.raises(RemoteError):
        seen.add_many(urls)
    lose["on"] = False
    assert seen.add_many(urls) == [True, True]
    assert seen.add_many(urls) == [False, False]
    seen.close()


def test_an_optimistic_batch_sends_its_answers_and_blocks(redis_url, redis_name, monkeypatch):
    """The blocked layout decides a batch from its native read: the script gets the answers
    and each block they change (offset, as read, as left), once per block."""
    seen = RedisBloomFilter(redis_url, redis_name, capacity=100_000)
    sent = []
    real = seen._script

    def spy(keys, args):
        if args[0] == Op.ADD:
            sent.append(args[len(BLOOM_BATCH.argv) :])
        return real(keys=keys, args=args)

    monkeypatch.setattr(seen, "_script", spy)
    try:
        batch = urls(100) + urls(100)[:10]
        assert seen.add_many(batch) == [True] * 100 + [False] * 10
        (extra,) = sent
        assert extra[0] == b"0" and extra[1] == b"1" * 100  # the count read; each key new
        blocks, olds = extra[2], extra[3]
        offsets = {seen._shards[0]._masks([k])[1:5] for k in urls(100)}
        assert len(blocks) == 68 * len(offsets) and len(olds) == 64 * len(offsets)
        sent_offsets = [blocks[j : j + 4] for j in range(0, len(blocks), 68)]
        assert set(sent_offsets) == offsets and len(sent_offsets) == len(offsets)
        for j in range(len(offsets)):
            old, new = olds[64 * j : 64 * j + 64], blocks[68 * j + 4 : 68 * j + 68]
            assert old != new and all(o | n == n for o, n in zip(old, new, strict=True))
    finally:
        seen.destroy()


@pytest.mark.parametrize("overlap", [True, False], ids=["same-keys", "other-keys"])
@pytest.mark.parametrize("capacity", [1000, 2_000_000], ids=["whole-bits", "blocks"])
def test_a_block_written_after_the_read_sends_the_batch_to_the_script(
    redis_url, redis_name, monkeypatch, capacity, overlap
):
    """Another client adds keys between a batch's native read and its script, so the count the
    batch read is stale and the script compares its blocks. Some of the batch's keys: their
    blocks changed, so the script decides the batch itself; the other client's keys are seen,
    the rest new, never one new twice. Other keys: the blocks still agree (in the larger
    filter) or not; either way the bits equal a local filter's."""
    seen = RedisBloomFilter(redis_url, redis_name, capacity=capacity)
    other = RedisBloomFilter(redis_url, redis_name)
    local = BloomFilter(capacity)
    batch = urls(200)
    theirs = batch[::7] if overlap else urls(30, seed=11)
    real = seen._shards[0]._present

    def read_then_other_writes(masks, n):
        snapshot = real(masks, n)
        assert all(other.add_many(theirs))
        return snapshot

    monkeypatch.setattr(seen._shards[0], "_present", read_then_other_writes)
    try:
        answers = seen.add_many(batch)
        assert answers == [k not in set(theirs) for k in batch]
        local.add_many(theirs)
        local.add_many(batch)
        stored = redis.Redis.from_url(redis_url).get(redis_store.key(redis_name, "bits"))
        assert stored == filter_bits(local)
        assert seen.claims_held() == 0
    finally:
        seen.destroy()


def test_masks_apply_is_the_scripts_rule_on_a_snapshot():
    """_core.masks_apply, the client's twin of bits.lua's blocked check-and-add: on the
    whole bits or on 64-byte blocks numbered by an index, the answers and bytes of a local
    filter fed the same keys (repeats inside the batch answered seen)."""
    import struct

    from urlseen import _core

    local = BloomFilter(2000)  # blocked layout, the default
    assert local.layout == _core.LAYOUT_BLOCKED
    keys = [k.encode() for k in urls(1500) + urls(1500)[:300]]
    masks = _core.byte_masks(keys, local.nbits, local.k, _core.LAYOUT_BLOCKED, local.seed,
                             local.hash)  # fmt: skip
    whole = bytearray((local.nbits + 7) // 8)
    said = _core.masks_apply(masks, whole)
    assert [b == 1 for b in said] == local.add_many([k.decode() for k in keys])
    assert bytes(whole) == filter_bits(local)
    bases = _core.mask_blocks(masks)
    number = {b: i for i, b in enumerate(dict.fromkeys(bases))}
    blocks = bytearray(64 * len(number))
    index = struct.pack(f"<{len(bases)}I", *[number[b] for b in bases])
    assert _core.masks_apply(masks, blocks, index) == said
    assert all(blocks[64 * i : 64 * i + 64] == whole[b : b + 64] for b, i in number.items())
    with pytest.raises(ValueError, match="outside"):
        _core.masks_apply(masks, bytearray(64))


def test_blocks_written_after_the_read_are_merged_not_decided_again(
    redis_url, redis_name, monkeypatch
):
    """A block another client wrote between a batch's read and its script is merged: the keys
    said new in it are decided again from the block as it is now (those the other client
    added are seen), the other keys keep the client's answers, and the bits are the union
    (a local filter's); the optimistic path goes on without a pause."""
    client = redis.Redis.from_url(redis_url)
    seen = RedisBloomFilter(redis_url, redis_name, capacity=1000)
    other = RedisBloomFilter(redis_url, redis_name)
    local = BloomFilter(1000)
    sent, real_call, real_present = [], seen._shards[0]._call, seen._shards[0]._present
    batches = [urls(50, seed=200 + i) for i in range(4)]
    interfere = list(batches)

    def spy(op, masks, fps, claim, what, extra=()):
        if op == Op.ADD:
            sent.append(len(extra))
        return real_call(op, masks, fps, claim, what, extra)

    def read_then_other_writes(masks, n):
        snapshot = real_present(masks, n)
        if interfere:
            assert all(other.add_many(interfere.pop(0)[::5]))
        return snapshot

    monkeypatch.setattr(seen._shards[0], "_call", spy)
    monkeypatch.setattr(seen._shards[0], "_present", read_then_other_writes)
    try:
        for batch in batches:
            assert seen.add_many(batch) == [i % 5 != 0 for i in range(50)]
            local.add_many(batch)
        assert sent == [4] * 4 and seen._shards[0]._reads.backoff.skip == 0
        assert client.get(redis_store.key(redis_name, "bits")) == filter_bits(local)
        assert seen.claims_held() == 0 and len(seen) == 200
    finally:
        seen.destroy()


def test_the_backoff_pauses_after_fallbacks_in_a_row_and_longer_each_time():
    backoff = native_bits.OptimisticBackoff()
    for _ in range(native_bits.STREAK - 1):
        backoff.record(3, 2)  # most of a batch's leaves fell back: once or twice, still trying
        assert backoff.sends()
    waits = []
    for _ in range(8):
        backoff.record(3, 2)
        skipped = 0
        while not backoff.sends():
            skipped += 1
        waits.append(skipped)
    assert waits == [4, 8, 16, 32, 64, 128, 256, 256]
    backoff.record(3, 1)  # most agreed: the streak and the pause start over
    backoff.record(0, 0)  # nothing tried: nothing learnt
    for _ in range(native_bits.STREAK - 1):
        backoff.record(1, 1)
    assert backoff.skip == 0
    backoff.record(1, 1)
    assert backoff.skip == native_bits.PAUSE_FIRST
    assert backoff.fallbacks == 8 + 2 * (native_bits.STREAK - 1) + 1
    assert native_bits.fell_back(b"0101F") == (b"0101", True)
    assert native_bits.fell_back(b"0P12") == (b"0P12", False)


def test_a_call_claims_its_new_keys_in_one_record(redis_url, redis_name):
    """A script call claims its new keys in one record (one field, not one per key), deleted
    by the acknowledgement; another client that meets those keys reads the record's claims in
    place (natively, and in its script: no per-key claims are written), waits on the older
    claims until acknowledged, and the acknowledgement still deletes the record whole."""
    client = redis.Redis.from_url(redis_url)
    claims, records = (redis_store.key(redis_name, part) for part in ("claims", "records"))
    first = RedisBloomFilter(redis_url, redis_name, capacity=10_000, error_rate=1e-9, lease=5)
    first.auto_acknowledge = False
    keys, others = urls(200, seed=3), urls(100, seed=4)
    assert all(first.add_many(keys))
    assert client.hlen(claims) == 0 and client.hlen(records) == 1
    assert first.claims_held() == 200
    assert first.acknowledge() == 0 and first.claims_held() == 0
    assert client.hlen(records) == 0, "acknowledged by deleting the record"

    assert all(first.add_many(others))
    second = RedisBloomFilter(redis_url, redis_name, lease=5)
    polls: list[bool] = []
    shard, real = second._shards[0], second._shards[0]._still_pending
    shard._still_pending = lambda *a: polls.append(real(*a)) or polls[-1]  # type: ignore[method-assign]
    answers: list[list[bool]] = []
    asking = threading.Thread(target=lambda: answers.append(second.add_many(others[:50] + keys)))
    asking.start()
    for _ in range(500):  # its script met first's claims: it polls them natively, pending
        if polls:
            break
        asking.join(0.01)
    assert all(polls[0]) and asking.is_alive(), "pending on the older claims"
    assert client.hlen(claims) == 0 and client.hlen(records) == 1, "the record read in place"
    assert first.acknowledge() == 0
    assert client.hlen(records) == 0, "the record deleted whole"
    asking.join()
    assert answers == [[False] * 250]
    assert first.claims_held() == 0 and client.hlen(claims) + client.hlen(records) == 0
    first.destroy()


def test_claims_taken_over_are_acknowledged_one_by_one(redis_url, redis_name):
    """A key taken over from a stalled client is claimed by a field of its own, not in the
    taker's record (the script answers it "T"): the taker's acknowledgement deletes those
    fields too, so no claim outlives the answers."""
    import time

    slow = RedisBloomFilter(redis_url, redis_name, capacity=10_000, error_rate=1e-9, lease=0.3)
    slow.auto_acknowledge = False
    keys = urls(100, seed=5)
    assert all(slow.add_many(keys))
    time.sleep(0.5)  # past the stalled client's lease
    taker = RedisBloomFilter(redis_url, redis_name, lease=5)
    assert all(taker.add_many(keys[:60] + urls(40, seed=6)))  # taken over, and fresh ones
    assert taker.claims_held() == 40, "only the stalled client's other 40 claims are left"
    assert slow.acknowledge() == 60
    assert taker.claims_held() == 0
    taker.destroy()


def test_a_client_alone_rewrites_a_small_filter_whole(redis_url, redis_name, monkeypatch):
    """A client whose read finds the count its own last batch left (alone on the filter) stages
    a small filter's whole bits instead of sending its blocks; the script renames them over the
    bits only if the count is still as read: after another client's write it deletes them and
    decides the batch itself. The answers and bits equal a local filter's either way, and no
    stage, nor an expiry on the bits, is left."""
    client = redis.Redis.from_url(redis_url)
    seen = RedisBloomFilter(redis_url, redis_name, capacity=2000)
    other = RedisBloomFilter(redis_url, redis_name)
    local = BloomFilter(2000)
    sent, real = [], seen._shards[0]._call

    def spy(op, masks, fps, claim, what, extra=()):
        if op == Op.ADD and extra:
            sent.append(extra)
        return real(op, masks, fps, claim, what, extra)

    def left_over() -> list[bytes]:
        return [k for k in client.keys(f"*{redis_name}*") if b":stage:" in k]

    monkeypatch.setattr(seen._shards[0], "_call", spy)
    first, second, third, theirs = urls(500, 1), urls(500, 2), urls(500, 3), urls(100, 4)
    assert seen.add_many(first) == local.add_many(first)
    assert sent[-1][2] != STAGED, "no count expected yet: blocks"
    assert seen.add_many(second) == local.add_many(second)
    assert sent[-1][2] == STAGED and sent[-1][3] == b"", "alone: the whole bits"
    bits = redis_store.key(redis_name, "bits")
    assert client.ttl(bits) == -1 and left_over() == []
    real_present = seen._shards[0]._present

    def read_then_other_writes(masks, n):
        snapshot = real_present(masks, n)
        other.add_many(theirs)
        return snapshot

    monkeypatch.setattr(seen._shards[0], "_present", read_then_other_writes)
    local.add_many(theirs)
    assert seen.add_many(third) == local.add_many(third)
    assert sent[-1][2] == STAGED and seen._shards[0]._reads.backoff.fallbacks == 1, "count moved"
    assert left_over() == [], "the stage not taken is deleted"
    stored = client.get(bits)
    assert stored == filter_bits(local)
    assert client.ttl(bits) == -1 and seen.claims_held() == 0
    seen.destroy()


def test_a_client_alone_reads_no_bits_until_another_writes(redis_url, redis_name, monkeypatch):
    """A client alone keeps the bits its last batch left and reads only the count; when another
    client has written since (the count moved), it reads the bits again: the answers are a
    local filter's throughout, repeats of the other client's keys included."""
    seen = RedisBloomFilter(redis_url, redis_name, capacity=5000)
    other = RedisBloomFilter(redis_url, redis_name)
    local = BloomFilter(5000)
    bits_read = []
    real = native_bits.BitsRead.queue

    def spy(plan, pipe, key):
        bits_read.append(key)
        return real(plan, pipe, key)

    monkeypatch.setattr(native_bits.BitsRead, "queue", spy)
    batches = [urls(300, seed=40 + i) for i in range(4)]
    for batch in batches:
        assert seen.add_many(batch) == local.add_many(batch)
    assert len(bits_read) == 2, "read twice (until alone), then kept"
    theirs = urls(200, seed=50)
    assert other.add_many(theirs) == local.add_many(theirs)
    reads = len(bits_read)
    mixed = theirs[:100] + urls(200, seed=51)
    assert seen.add_many(mixed) == local.add_many(mixed)
    assert len(bits_read) == reads + 1, "the count moved: read again"
    assert seen.add_many(batches[0] + theirs) == [False] * 500
    seen.destroy()
