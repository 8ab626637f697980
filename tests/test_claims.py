"""Claims with leases (shared/claims.py), one client against another, for each shared
kind: a live claim is waited for until acknowledged, a dead client's claims are taken over
after the lease, younger claims are not waited for, close() abandons what was never
acknowledged, acknowledge() counts what was taken over, and a waiting batch keeps its own
claims alive."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
import uuid

import pytest

from urlseen import kinds

SHARED = ("bloom", "exact", "dsbf")
LEASE = 1.0
SIZES = {"bloom": {"capacity": 100_000, "error_rate": 1e-9}, "exact": {"capacity": 100_000},
         "dsbf": {"capacity": 2_000, "error_rate": 1e-9, "leaf_bits": 16384}}  # fmt: skip


def _open(kind: str, url: str, name: str, *, explicit: bool = True):
    seen = kinds.open_filter(kind, redis=url, name=name, lease=LEASE, **SIZES[kind])
    seen.auto_acknowledge = not explicit
    return seen


def _urls(n: int, tag: str) -> list[str]:
    return [f"https://{tag}.example/page/{i}" for i in range(n)]


def _timed(call, *args):
    started = time.monotonic()
    result = call(*args)
    return result, time.monotonic() - started


@pytest.mark.parametrize("kind", SHARED)
def test_a_live_claim_is_waited_for_until_acknowledged(kind, redis_url, redis_name):
    first, second = _open(kind, redis_url, redis_name), _open(kind, redis_url, redis_name)
    claimed, fresh = _urls(300, "a"), _urls(100, "b")
    assert all(first.add_many(claimed))
    time.sleep(0.01)  # strictly older (priorities are in ms; a tie goes by client id)
    threading.Timer(0.3, first.acknowledge).start()
    answers, waited = _timed(second.add_many, claimed + fresh)
    assert answers == [False] * 300 + [True] * 100
    assert 0.25 < waited < LEASE, waited


@pytest.mark.parametrize("kind", SHARED)
def test_a_dead_clients_claims_are_taken_over_after_its_lease(kind, redis_url, redis_name):
    """A process answered new and died before acknowledging: the next client gets those URLs
    as new, once the dead one's lease is over."""
    _die_then_rerun(kind, redis_url, redis_name)


@pytest.mark.parametrize("kind", ["exact", "dsbf"])
def test_on_a_cluster_a_dead_clients_claims_are_taken_over(kind, redis_cluster_url):
    """The same on a 3-master Cluster, where the library's groups and the leaves spread over
    the slots (each claims hash beside its data)."""
    name = f"claims-{kind}-{uuid.uuid4().hex[:8]}"
    try:
        _die_then_rerun(kind, redis_cluster_url, name)
    finally:
        seen = _open(kind, redis_cluster_url, name)
        (seen.library if kind == "exact" else seen).destroy()


def _die_then_rerun(kind: str, redis_url: str, redis_name: str) -> None:
    urls = _urls(200, "dead")
    code = (
        "import os, sys\n"
        "from urlseen import kinds\n"
        f"seen = kinds.open_filter({kind!r}, redis={redis_url!r}, name={redis_name!r}, "
        f"lease={LEASE!r}, **{SIZES[kind]!r})\n"
        "seen.auto_acknowledge = False\n"
        f"assert all(seen.add_many({urls!r}))\n"
        "os._exit(0)  # dies: never acknowledges, never closes\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
    assert kinds.describe(redis=redis_url, name=redis_name)["claims"] == 200  # urlseen info
    rerun = _open(kind, redis_url, redis_name)
    answers, waited = _timed(rerun.add_many, urls)
    assert all(answers)
    assert waited < 2.5 * LEASE + 1, waited
    assert rerun.acknowledge() == 0
    assert kinds.describe(redis=redis_url, name=redis_name)["claims"] == 0


@pytest.mark.parametrize("kind", SHARED)
def test_a_claim_younger_than_the_batch_is_not_waited_for(kind, redis_url, redis_name):
    """A client holding claims of its own waits only on older ones: a URL another client
    claimed later is answered seen at once (its claimer delivers it), so two clients never
    wait on each other."""
    older, younger = _open(kind, redis_url, redis_name), _open(kind, redis_url, redis_name)
    assert all(older.add_many(_urls(10, "mine")))  # held: its batches keep this priority
    time.sleep(0.01)
    assert all(younger.add_many(_urls(50, "theirs")))
    answers, waited = _timed(older.add_many, _urls(50, "theirs"))
    assert not any(answers) and waited < 0.5 * LEASE, waited
    threading.Timer(0.3, older.acknowledge).start()
    answers, waited = _timed(younger.add_many, _urls(10, "mine"))  # older: waited for
    assert not any(answers) and waited > 0.25, waited


@pytest.mark.parametrize("kind", SHARED)
def test_close_abandons_what_was_never_acknowledged(kind, redis_url, redis_name):
    first = _open(kind, redis_url, redis_name)
    urls = _urls(100, "closed")
    assert all(first.add_many(urls))
    first.close()  # e.g. the caller failed to keep them: the next client takes them at once
    answers, waited = _timed(_open(kind, redis_url, redis_name).add_many, urls)
    assert all(answers) and waited < 0.5 * LEASE, waited


@pytest.mark.parametrize("kind", SHARED)
def test_acknowledge_counts_the_claims_taken_over(kind, redis_url, redis_name):
    slow, other = _open(kind, redis_url, redis_name), _open(kind, redis_url, redis_name)
    urls = _urls(100, "slow")
    assert all(slow.add_many(urls))
    time.sleep(LEASE + 0.2)  # the slow client stalls past its lease
    assert all(other.add_many(urls))
    assert slow.acknowledge() == 100 and other.acknowledge() == 0
    assert slow.acknowledge() == 0  # nothing held any more


@pytest.mark.parametrize("kind", ["bloom", "dsbf"])
def test_a_waiting_batch_keeps_its_own_claims_alive(kind, redis_url, redis_name):
    """A batch that waits a whole lease for another client's claim (a client that stalls and
    never acknowledges) renews its own claims meanwhile: a third client that meets them when
    the batch returns waits for their acknowledgement instead of taking them over."""
    stalled = _open(kind, redis_url, redis_name)
    waiter, third = _open(kind, redis_url, redis_name), _open(kind, redis_url, redis_name)
    held, mine = _urls(20, "held"), _urls(50, "mine")
    assert all(stalled.add_many(held))
    time.sleep(0.01)  # strictly older (priorities are in ms; a tie goes by client id)
    answers, waited = _timed(waiter.add_many, held + mine)
    assert all(answers) and waited > 0.9 * LEASE  # took the stalled client's URLs over
    threading.Timer(0.2, waiter.acknowledge).start()
    assert not any(third.add_many(mine)), "the waiting batch's own claims ran out"


def test_the_native_claim_rule_answers_seen_only_where_the_script_does(redis_url, redis_name):
    """claim_seen (a native read's twin of claims.lua's claim_present) against the script
    itself, on the same claims: every claim it calls seen, the script answers "0"; with the
    server's time it calls seen exactly what the script does, and without (a Cluster) only
    URLs without a claim or with the asker's own, past its lease or not, unless abandoned."""
    from importlib import resources

    import redis

    from urlseen.shared import client as redis_store
    from urlseen.shared.claims import claim_seen

    client = redis.Redis.from_url(redis_url)
    lua = resources.files("urlseen.shared").joinpath("lua", "claims.lua").read_text()
    probe = """
local c = claims_context(ARGV[1], ARGV[2], ARGV[3], ARGV[4])
local fps = {}
for i = 5, #ARGV do fps[#fps + 1] = ARGV[i] end
claims_lookup(c, KEYS[1], #fps, function() return fps end)
local out = {}
for i, fp in ipairs(fps) do
  out[i] = claims_none(c, KEYS[1]) and '0' or claim_present(c, KEYS[1], fp)
end
return table.concat(out)
"""
    script = client.register_script(lua + probe)
    key = redis_store.key(redis_name, "claims")
    me, prio = "b" * 16, 5_000_000
    sec, usec = client.time()
    now = sec * 1000 + usec // 1000
    live, dead = now + 60_000, now - 60_000
    claims = {
        b"own-earlier-call": f"{me} {prio} 3 {live}",
        b"own-expired": f"{me} {prio - 9} 4 {dead}",
        b"own-abandoned": f"{me} {prio - 9} 5 0",
        b"other-expired": f"{'a' * 16} {prio + 9} 1 {dead}",
        b"other-older": f"{'c' * 16} {prio - 1} 1 {live}",
        b"other-younger": f"{'a' * 16} {prio + 1} 1 {live}",
        b"tie-lower-owner": f"{'a' * 16} {prio} 1 {live}",
        b"tie-higher-owner": f"{'c' * 16} {prio} 1 {live}",
    }
    client.hset(key, mapping=claims)
    fps = [*claims, b"unclaimed"]
    try:
        said = script(keys=[key], args=[me, prio, 99, 10_000, *fps]).decode()
        assert said == "001" + "1P0P0" + "0"  # the script's rule, as documented
        for fp, answer in zip(fps, said, strict=True):
            value = client.hget(key, fp)
            assert claim_seen(value, me, prio, now) == (answer == "0"), fp
            mine = fp in (b"own-earlier-call", b"own-expired")
            assert claim_seen(value, me, prio, None) == (value is None or mine), fp
    finally:
        client.delete(key)


def test_repeats_inside_a_batch_are_asked_once_and_answered_as_the_script_would():
    from urlseen.shared.claims import ask_each_once

    fps = [b"new", b"pending", b"seen", b"new", b"pending", b"seen", b"other"]
    script = {b"new": ord("1"), b"pending": ord("P"), b"seen": ord("0"), b"other": ord("1")}
    asked = []

    def ask(idx):
        asked.append(idx)
        return bytes(script[fps[i]] for i in idx)

    assert ask_each_once([0, 1, 2, 3, 4, 5, 6], fps, ask) == b"1P00P01"
    assert ask_each_once([4, 6, 1], fps, ask) == b"P1P"
    assert asked == [[0, 1, 2, 6], [4, 6]]


def test_claims_are_young_for_half_a_lease_from_before_their_batch():
    """Claims.young() lets RedisBloomFilter acknowledge without reading its claims: true only
    while every held claim's batch began less than half a lease ago."""
    from urlseen.shared.claims import Claims

    claims = Claims(lease=0.2)
    assert not claims.young()  # nothing held
    with claims.batch(lambda fps: None) as priority:
        claims.hold([b"a"], priority)
    assert claims.young()
    time.sleep(0.11)
    with claims.batch(lambda fps: None) as priority:
        claims.hold([b"b"], priority)
    assert not claims.young(), "the oldest held claim decides"
    assert claims.take() == [b"a", b"b"] and not claims.young()
    with claims.batch(lambda fps: None) as priority:
        claims.hold([b"c"], priority)
    assert claims.young()


def test_an_acknowledgement_after_half_a_lease_reads_its_claims(redis_url, redis_name, monkeypatch):
    """Past half a lease the Bloom filter acknowledges by the checked release (a takeover is
    counted), before it by deleting its claims unread: both leave none held."""
    seen = _open("bloom", redis_url, redis_name)
    checked = []
    real = seen._release
    monkeypatch.setattr(seen, "_release", lambda fps, how: checked.append(how) or real(fps, how))
    try:
        assert all(seen.add_many(_urls(30, "young")))
        assert seen.claims_held() == 30 and seen.acknowledge() == 0 and seen.claims_held() == 0
        assert checked == []
        assert all(seen.add_many(_urls(30, "old")))
        time.sleep(0.6 * LEASE)
        assert seen.acknowledge() == 0 and seen.claims_held() == 0
        assert checked == ["ack"]
    finally:
        seen.destroy()
