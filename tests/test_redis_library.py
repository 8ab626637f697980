"""RedisLibrary on a real Redis server: the fingerprint library shared by a crawler fleet.

Checked against a Python model: claims, look-ups, reference counts, forgetting, expiry; the
compact layout actually used by Redis; receipts that make a lost reply safe to resend; what a
killed Redis keeps; a 3-master Redis Cluster sharing the load.
"""

from __future__ import annotations

import itertools
import json
import random
import threading
import time

import pytest
import redis

from urlseen import ConfigError, ExactFilter, FormatError, _core
from urlseen.errors import RemoteError
from urlseen.exact.library_filter import FingerprintLibraryFilter
from urlseen.exact.library_repeats import once_each, spread_answers
from urlseen.shared import client as redis_store
from urlseen.shared import library as redis_library
from urlseen.shared.library import RedisLibrary
from urlseen.shared.library_layout import bucket_in, bucket_order, group_of
from urlseen.shared.scripts import Answer


def fingerprints(n: int, seed: int = 0) -> list[bytes]:
    rng = random.Random(seed)
    return [rng.randbytes(16) for _ in range(n)]


@pytest.fixture
def make(redis_url, redis_name):
    """RedisLibrary factory on the test database; every library made is destroyed after."""
    made: list[RedisLibrary] = []

    def factory(*args, url=redis_url, name=redis_name, **kwargs):
        lib = RedisLibrary(url, name, *args, **kwargs)
        made.append(lib)
        return lib

    yield factory
    for lib in made:
        lib._closed = False
        lib.destroy()


@pytest.mark.parametrize("groups", [None, 16])  # one server's default (1), and a Cluster's
def test_claims_lookups_and_references_match_a_model(make, groups):
    lib = make(5000, groups=groups)
    rng = random.Random(1)
    pool = fingerprints(3000)
    model: dict[bytes, int] = {}  # fp -> refs
    for step in range(12):
        batch = [rng.choice(pool) for _ in range(rng.randrange(1, 900))]
        op = rng.choice(["claim", "claim", "claim", "release", "forget", "contains"])
        got = getattr(lib, op)(batch)
        want = []
        for fp in batch:
            if op == "claim":
                want.append(fp not in model)
                model[fp] = model.get(fp, 0) + 1
            elif op == "contains":
                want.append(fp in model)
            else:
                want.append(fp in model)
                if fp in model:
                    model[fp] = 0 if op == "forget" else model[fp] - 1
                    if model[fp] == 0:
                        del model[fp]
        assert got == want, f"step {step}: {op}"
        assert lib.count() == len(model)
    stored = lib.records(pool)
    assert {fp: rec.refs for fp, rec in stored.items()} == model
    assert sorted(fp for chunk in lib.fingerprints(chunk=700) for fp in chunk) == sorted(model)
    assert lib.present(pool[:100]) == {fp for fp in pool[:100] if fp in model}


def test_a_repeat_within_a_batch_is_new_once_and_times_are_kept(make):
    lib = make(1000)
    a, b = fingerprints(2)
    assert lib.claim([a, a, b, a], now=1_000) == [True, False, True, False]
    assert lib.claim([b], now=2_000) == [False]
    rec = lib.records([a, b])
    assert (rec[a].refs, rec[a].first_seen, rec[a].last_seen) == (3, 1000.0, 1000.0)
    assert (rec[b].refs, rec[b].first_seen, rec[b].last_seen) == (2, 1000.0, 2000.0)
    assert set(lib.older_than(1500)) == {a, b} and lib.older_than(999) == []
    assert lib.older_than(1500, by="last_seen") == [a]
    assert lib.forget_older_than(1500, by="last_seen") == 1
    assert lib.claim([a, b], now=3_000) == [True, False]  # forgotten: new again
    with pytest.raises(ValueError):
        lib.older_than(1, by="created")


def test_a_claim_rides_in_its_record_until_acknowledged(make):
    """Unacknowledged answers are claims beside their records (a hash per group); releasing,
    forgetting and acknowledging keep the claims exact, and records stay their 12 bytes."""
    lib = make(1000)
    lib.auto_acknowledge = False
    fps = fingerprints(50, seed=3)
    assert lib.claim(fps[:40], now=1_000) == [True] * 40
    assert lib.claims_held() == 40
    assert lib.claim(fps[30:], now=2_000) == [False] * 10 + [True] * 10  # 30..39: own, seen
    assert lib.claims_held() == 50
    rec = lib.records(fps[30:31])[fps[30]]
    assert (rec.refs, rec.first_seen, rec.last_seen) == (2, 1000.0, 2000.0)
    assert lib.release(fps[30:35]) == [True] * 5  # one reference left: still claimed
    assert lib.forget(fps[35:40]) == [True] * 5  # gone, claims and all
    assert lib.claims_held() == 45 and lib.count() == 45
    assert lib.acknowledge() == 5  # the forgotten ones were no longer claimed
    assert lib.claims_held() == 0
    client = lib._client
    values = [client.hget(*lib._where(fp)) for fp in fps[:35] + fps[40:]]
    assert {len(v) for v in values} == {12}


def test_claims_stay_apart_from_records_and_go_when_acknowledged(make):
    """A claimed record is its 12 bytes, in a listpack bucket; a call's claims are one field
    per group it touched (whatever the call id: a client that made 10^15 calls), expanded per
    key when released otherwise than by the acknowledgement, which deletes them all: no key
    is left per call."""
    lib = make(1000)
    lib.auto_acknowledge = False
    lib._claims._calls = itertools.count(10**15)
    fps = fingerprints(20, seed=4)
    assert lib.claim(fps) == [True] * 20
    client = lib._client
    for fp in fps:
        key, field = lib._where(fp)
        assert len(client.hget(key, field)) == 12
        assert client.object("encoding", key) == b"listpack"
    records = list(client.scan_iter(match=f"{lib._prefix}*}}:r", count=1000))
    assert {client.hlen(k) for k in records} == {1} and lib.claims_held() == 20
    assert not list(client.scan_iter(match=f"{lib._prefix}*}}:c", count=1000))
    assert lib._release(fps[:5], "renew") == 0 and lib._release(fps[5:10], "abandon") == 0
    assert lib.claims_held() == 20
    other = make(name=lib.name)  # another client: the abandoned five are taken over at once
    assert other.claim(fps[5:10]) == [True] * 5
    assert lib.acknowledge() == 5 and lib.claims_held() == 0
    assert other.acknowledge() == 0 and other.claims_held() == 0
    for kind in ("c", "r"):
        assert not list(client.scan_iter(match=f"{lib._prefix}*}}:{kind}", count=1000))
    assert not list(client.scan_iter(match=f"*{lib.name}*receipt*", count=1000))


def test_the_buckets_grow_with_the_library_and_stay_compact(make, redis_url, redis_name):
    """Buckets split one at a time (linear hashing) as the library grows, so a small library
    takes a few keys whatever its planned capacity, and a large one stays listpack-encoded
    (Redis's compact encoding, default limit 128 entries) at about PER_BUCKET per bucket; every
    fingerprint stays where the client looks for it."""
    lib = make(10_000_000)
    client = redis.Redis.from_url(redis_url)
    pattern = f"urlseen:{{{redis_name}#*}}:f:*"
    assert all(lib.claim(fingerprints(500, seed=6)))
    assert len(list(client.scan_iter(match=pattern, count=1000))) <= 2 * 500 // lib.per_bucket
    n = 30_000
    fps = fingerprints(n, seed=5)
    assert all(lib.claim(fps))
    keys = list(client.scan_iter(match=pattern, count=1000))
    assert sorted(k.decode() for k in keys) == sorted(lib._bucket_keys())
    assert n / lib.per_bucket <= len(keys) <= 1.3 * (n + 500) / lib.per_bucket
    sizes = [client.hlen(k) for k in keys]
    assert max(sizes) <= 128 and sum(sizes) == n + 500
    assert {client.object("encoding", k) for k in keys} == {b"listpack"}
    assert all(lib.contains(fps)) and len(lib.records(fps)) == n
    key, field = lib._where(fps[0])
    assert field == fps[0] and client.hexists(key, field)
    exact, estimate = lib.memory_usage(), lib.memory_usage(sample=64)
    assert 20 * n < exact < 45 * n and abs(estimate / exact - 1) < 0.1


def test_reopen_keeps_parameters_and_refuses_others(make, redis_url, redis_name):
    first = make(1000, fingerprint="xxh3_128", groups=4)
    assert first.claim(fingerprints(1)) == [True]
    again = make()
    assert (again.fingerprint, again.groups) == ("xxh3_128", 4)
    assert again.count() == 1
    with pytest.raises(ConfigError, match="capacity"):
        RedisLibrary(redis_url, redis_name, 2000)
    with pytest.raises(ConfigError, match="fingerprint"):
        RedisLibrary(redis_url, redis_name, fingerprint="md5")
    for bad in ("a{b}", "a#b", "", 7):
        with pytest.raises(ConfigError):
            RedisLibrary(redis_url, bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigError):
        RedisLibrary(redis_url, redis_name + "-new", 0)
    with pytest.raises(ConfigError):
        RedisLibrary(redis_url, redis_name + "-new", 10, groups=0)
    with pytest.raises(ConfigError):
        RedisLibrary("http://127.0.0.1:6379", redis_name)


def test_foreign_or_damaged_metadata_is_refused(redis_url, redis_name):
    client = redis.Redis.from_url(redis_url)
    meta = redis_store.key(redis_name, "library")
    for text, match in (
        ("{not json", "unreadable"),
        ('{"format": "something else"}', "not a urlseen"),
        ('{"format": "urlseen-redis-library/3"}', "another version of urlseen"),
        (json.dumps({"format": redis_library.FORMAT, "fingerprint": "md5", "groups": 0,
                     "per_bucket": 40, "capacity": 10}), "out of range"),
    ):  # fmt: skip
        client.hset(meta, "params", text)
        with pytest.raises(FormatError, match=match):
            RedisLibrary(redis_url, redis_name)


def test_bad_fingerprints_change_nothing(make):
    lib = make(1000)
    good = fingerprints(1)[0]
    for bad in ([good, b"short"], [good, "0123456789abcdef"], b"0123456789abcdef"):
        with pytest.raises(TypeError):
            lib.claim(bad)  # type: ignore[arg-type]
    assert lib.count() == 0 and lib.contains([good]) == [False]
    assert lib.claim([]) == []


@pytest.mark.parametrize("groups", [None, 16])
def test_a_resent_batch_gets_the_same_answer(make, monkeypatch, groups):
    """The reply of a committed batch is lost: the client resends it with the same receipt and
    gets the first answer, so new fingerprints are still reported new, and a resent release
    does not drop a second reference."""
    lib = make(1000, groups=groups)
    real = lib._script
    calls = {"n": 0}

    def lossy(keys, args):
        answer = real(keys=keys, args=args)
        if args[0] == "ack":  # acknowledging the claim's answers: not a batch
            return answer
        calls["n"] += 1
        if calls["n"] % 2:
            raise redis.exceptions.ConnectionError("reply lost")
        return answer

    monkeypatch.setattr(lib, "_script", lossy)
    monkeypatch.setattr(redis_store.time, "sleep", lambda s: None)
    a, b = fingerprints(2)
    assert lib.claim([a, b, a]) == [True, True, False]
    assert lib.release([a]) == [True]
    assert calls["n"] == 4
    assert {fp: r.refs for fp, r in lib.records([a, b]).items()} == {a: 1, b: 1}


def test_a_batch_whose_replies_were_all_lost_is_new_again_to_its_client(make, monkeypatch):
    """Every reply of a committed claim is lost, so claim() fails and its caller got nothing:
    the same client claiming again gets the fingerprints new, not "seen" on the strength of
    claims it never knew it made."""
    lib = make(1000)
    real, lose = lib._script, {"on": True}

    def lossy(keys, args):
        answer = real(keys=keys, args=args)
        if lose["on"] and args[0] == "claim":
            raise redis.exceptions.ConnectionError("reply lost")
        return answer

    monkeypatch.setattr(lib, "_script", lossy)
    monkeypatch.setattr(redis_store.time, "sleep", lambda s: None)
    a, b = fingerprints(2)
    with pytest.raises(RemoteError):
        lib.claim([a, b])
    lose["on"] = False
    assert lib.claim([a, b]) == [True, True]
    assert lib.claim([a, b]) == [False, False]
    assert lib.claims_held() == 0


def test_an_unreachable_server_is_a_clear_error(redis_name, monkeypatch):
    monkeypatch.setattr(redis_store.time, "sleep", lambda s: None)
    with pytest.raises(RemoteError, match="unreachable"):
        RedisLibrary("redis://127.0.0.1:1/0", redis_name)


def test_filters_on_a_shared_library(make, redis_url, redis_name):
    """FingerprintLibraryFilter is the shared exact filter; ExactFilter refuses a shared
    library (its local counters could prove nothing there)."""
    lib = make(1000)
    first = FingerprintLibraryFilter(library=lib)
    second = FingerprintLibraryFilter(library=RedisLibrary(redis_url, redis_name))
    urls = [f"https://s.example/{i}" for i in range(300)]
    assert first.add_many(urls[:200]) == [True] * 200
    assert second.add_many(urls[100:]) == [False] * 100 + [True] * 100
    assert second.contains_many([urls[0], "https://other.example/"]) == [True, False]
    assert len(first) == len(second) == 300 and first.stats().kind == "redis-library"
    flags: list[list[bool]] = []
    assert first.add_many(["https://late.example/"], before_commit=flags.append) == [True]
    assert flags == [[True]]
    fp = _core.md5("https://late.example/")
    assert lib.contains([fp]) == [True]
    with pytest.raises(ConfigError, match="shared library"):
        ExactFilter(1000, library=lib)  # type: ignore[arg-type]


def test_info_describes_a_shared_library(make, redis_url, redis_name):
    from cli_helpers import invoke

    lib = make(1000)
    lib.claim(fingerprints(250))
    result = invoke("info", "--redis", redis_url, "--name", redis_name, "--json")
    assert result.exit_code == 0, result.stderr
    desc = json.loads(result.stdout)
    assert desc["kind"] == "redis-library" and desc["count"] == 250
    # one group on one server (16 on a Cluster: below), its buckets grown by splits
    assert desc["groups"] == 1 and desc["buckets"] == len(lib._bucket_keys()) > 1
    assert 16 * 250 < desc["redis_bytes"] < 200 * 250


# ---- a Redis that goes away: a private server with an append-only file ------------------------


def test_a_killed_server_is_a_clear_error_and_acknowledged_claims_survive(
    private_redis, monkeypatch
):
    """What is guaranteed, stated: while Redis is down, claim() retries (about 7 s by default;
    2 retries here) and then raises RemoteError; that batch's answers were never given, so
    nothing was acknowledged. A server that persists every write (appendfsync always) comes back
    with every fingerprint claim() had reported new, with its reference count."""
    monkeypatch.setattr(redis_store, "RETRIES", 2)
    lib = RedisLibrary(private_redis.url, "fleet", 10_000)
    acknowledged = fingerprints(3000, seed=11)
    assert all(lib.claim(acknowledged))
    assert lib.claim(acknowledged[:10]) == [False] * 10
    private_redis.kill()
    with pytest.raises(RemoteError, match="unreachable"):
        lib.claim(fingerprints(10, seed=12))
    private_redis.start()
    again = RedisLibrary(private_redis.url, "fleet")
    assert all(again.contains(acknowledged)) and again.count() == 3000
    assert {r.refs for r in again.records(acknowledged[:10]).values()} == {2}
    fresh = fingerprints(1, seed=13)
    assert lib.claim([*acknowledged[:5], *fresh]) == [False] * 5 + [True]


def test_a_server_back_within_the_retry_window_is_invisible(private_redis):
    """Killed and restarted while a client streams claims: the client retries, and across the
    outage every fingerprint is reported new exactly once."""
    lib = RedisLibrary(private_redis.url, "fleet", 50_000)
    pool = fingerprints(20_000, seed=14)
    rng = random.Random(15)
    stream = [rng.choice(pool) for _ in range(60_000)]
    claimed: list[bytes] = []
    batches: list[int] = []  # batches answered when the server was killed
    done = 0

    def kill() -> None:
        private_redis.kill()
        batches.append(done)

    timers = [threading.Timer(0.3, kill), threading.Timer(0.8, private_redis.start)]
    for timer in timers:
        timer.start()
    for start in range(0, len(stream), 500):
        batch = stream[start : start + 500]
        claimed += [fp for fp, new in zip(batch, lib.claim(batch), strict=True) if new]
        done += 1
        time.sleep(0.005)
    for timer in timers:  # the server is back (and the fixture stops it) before the test ends
        timer.join()
    assert batches and 0 < batches[0] < done, f"no outage mid-stream ({batches}, {done})"
    assert len(claimed) == len(set(claimed)) == len(set(stream))
    assert RedisLibrary(private_redis.url, "fleet").count() == len(set(stream))


# ---- Redis Cluster (3 masters started by the test session) ------------------------------------


def test_on_a_cluster_groups_spread_over_every_master(redis_cluster_url):
    client = redis_store.connect(redis_cluster_url)
    lib = RedisLibrary(redis_cluster_url, "cluster-lib", 20_000)
    try:
        assert lib.groups == 16  # the default on a Cluster
        fps = fingerprints(8000, seed=21)
        assert all(lib.claim(fps)) and lib.claim(fps[:100]) == [False] * 100
        assert lib.count() == 8000 and all(lib.contains(fps))
        assert sorted(f for c in lib.fingerprints() for f in c) == sorted(fps)
        nodes = {client.get_node_from_key(lib._where(fp)[0]).name for fp in fps}
        assert len(nodes) == 3, nodes
        for fp in fps[:200]:  # a bucket lives in its group's slot
            key, _ = lib._where(fp)
            group = group_of(fp, lib.groups)
            assert client.keyslot(key) == client.keyslot(f"x{{cluster-lib#{group}}}")
        assert lib.forget(fps[:10]) == [True] * 10 and lib.count() == 7990
    finally:
        lib.destroy()


# Repeats within a batch: a fingerprint is sent to the script once per batch with the count of
# its further sightings, so repeats cost no command, yet every sighting is one reference.


def calls(client: redis.Redis) -> dict[str, int]:
    return {k[8:]: v["calls"] for k, v in client.info("commandstats").items()}


def commands_of(lib: RedisLibrary, batch: list[bytes]) -> tuple[list[bool], dict[str, int]]:
    """claim(batch) and the hget/hset/hsetnx/hdel calls the server counted for it."""
    before = calls(lib._client)
    answers = lib.claim(batch, now=2_000)
    after = calls(lib._client)
    names = ("hget", "hset", "hsetnx", "hdel")
    return answers, {n: after.get(n, 0) - before.get(n, 0) for n in names}


def test_repeats_in_a_batch_cost_no_command_and_count_every_sighting(private_redis):
    """On a server of its own: INFO commandstats counts every client's commands."""
    lib = RedisLibrary(private_redis.url, "repeats", 1000, groups=1)
    lib.auto_acknowledge = False  # the acknowledgement's commands are not the batch's
    a, b, c, d, e, f = fingerprints(6, seed=7)
    assert lib.claim([a, b, d, e], now=1_000) == [True] * 4
    lib.acknowledge()
    once, spent_once = commands_of(lib, [c, d, e])
    lib.acknowledge()
    batch = [f] + [a] * 300 + [b] * 3 + [f] * 2
    answers, spent = commands_of(lib, batch)
    assert once == [True, False, False]
    assert answers == [True] + [False] * 305
    assert spent == spent_once  # 300 sightings of a, 3 of b, 3 of f: as one of each
    records = lib.records([a, b, f])
    assert {fp: r.refs for fp, r in records.items()} == {a: 301, b: 4, f: 3}
    assert (records[a].first_seen, records[a].last_seen) == (1000.0, 2000.0)
    before = calls(lib._client)  # the acknowledgement: one HDEL of the call's record, no script
    assert lib.acknowledge() == 0 and lib.claims_held() == 0
    after = calls(lib._client)
    spent_ack = {n: after.get(n, 0) - before.get(n, 0) for n in ("evalsha", "hdel")}
    assert spent_ack == {"evalsha": 0, "hdel": 1}
    lib.destroy()


def test_a_resent_batch_with_repeats_is_new_once_and_counts_once(make, monkeypatch):
    """The first reply of a committed claim is lost and the call is resent: its new URLs are
    new (once each, to this one caller), its present ones seen, and no sighting is counted
    twice."""
    lib = make(1000)
    a, b, c = fingerprints(3, seed=8)
    assert lib.claim([c]) == [True]
    real, lost = lib._script, {"n": 0}

    def lossy(keys, args):
        answer = real(keys=keys, args=args)
        if args[0] == "claim" and not lost["n"]:
            lost["n"] += 1
            raise redis.exceptions.ConnectionError("reply lost")
        return answer

    monkeypatch.setattr(lib, "_script", lossy)
    monkeypatch.setattr(redis_store.time, "sleep", lambda s: None)
    assert lib.claim([a, a, b, c, a, c]) == [True, False, True, False, False, False]
    assert lost["n"] == 1
    assert {fp: r.refs for fp, r in lib.records([a, b, c]).items()} == {a: 3, b: 1, c: 3}
    assert lib.claims_held() == 0
    other = RedisLibrary(lib._client, lib.name)  # another client: none of them is new
    assert other.claim([a, b, c]) == [False, False, False]
    other.close()


def test_once_each_sends_every_256th_sighting_again_and_spreads_the_answers():
    a, b = b"a" * 16, b"b" * 16
    fps = [a] * 600 + [b, a]
    sent, extra, slot = once_each(fps, range(len(fps)))
    assert sent == [0, 256, 512, 600] and extra == [255, 255, 88, 0]
    assert sum(extra) + len(sent) == len(fps)
    said = bytes([Answer.NEW, Answer.SEEN, Answer.SEEN, Answer.PENDING])
    out = spread_answers(range(len(fps)), sent, said, slot, Answer.PENDING, Answer.SEEN)
    assert out[0] == Answer.NEW and set(out[1:600]) == {Answer.SEEN}
    assert out[600] == Answer.PENDING and out[601] == Answer.SEEN


def test_the_call_order_puts_each_bucket_together_at_every_level():
    """bucket_order: a group's fingerprints of one bucket are consecutive whatever the group's
    level and split, so library_batch.lua reads and writes each bucket once per call."""
    fps = sorted(fingerprints(3000, seed=9), key=lambda fp: bucket_order(fp, 4))
    for level, split in [(0, 0), (1, 1), (3, 5), (6, 0), (6, 17), (9, 300)]:
        places = [(group_of(fp, 4), bucket_in(fp, level, split)) for fp in fps]
        starts = [p for k, p in enumerate(places) if k == 0 or p != places[k - 1]]
        assert len(starts) == len(set(places))


def test_a_call_in_any_order_gives_the_same_answers(make, monkeypatch):
    """The script reads a bucket's run with one command, and is exact in any order (a run is
    then shorter): shuffled calls that split buckets, with repeats, against a model."""
    rng = random.Random(11)
    monkeypatch.setattr(redis_library, "bucket_order", lambda fp, groups: rng.random())
    lib = make(5000, groups=2)
    pool = fingerprints(4000, seed=10)
    model: dict[bytes, int] = {}
    for step in range(8):
        batch = [rng.choice(pool) for _ in range(rng.randrange(500, 3000))]
        op = ["claim", "claim", "contains", "release"][step % 4]
        want = []
        for fp in batch:
            want.append(fp not in model if op == "claim" else fp in model)
            if op == "claim":
                model[fp] = model.get(fp, 0) + 1
            elif op == "release" and fp in model:
                model[fp] -= 1
                if not model[fp]:
                    del model[fp]
        assert getattr(lib, op)(batch) == want, f"step {step}: {op}"
        assert lib.count() == len(model)
    assert {fp: rec.refs for fp, rec in lib.records(pool).items()} == model
