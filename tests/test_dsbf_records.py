"""A splittable filter's leaves claim each call's new URLs in one record (format urlseen-dsbf/6):
an acknowledgement deletes it whole, and one racing a split leaves no claim behind in the
children (shared/leaves.py, "Acknowledgements racing a split")."""

from __future__ import annotations

import json
import random
import threading
import time

import pytest
import redis

from urlseen import FormatError, _core
from urlseen.splittable.filter import SplittableBloomFilter
from urlseen.splittable.tree import LeafOp


def urls(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [f"https://r{rng.randrange(50)}.example/{rng.getrandbits(64)}" for _ in range(n)]


def small(redis_url: str, name: str, lease: float) -> SplittableBloomFilter:
    """Six full-size leaves of 334 URLs: a split gives two children (no growth)."""
    seen = SplittableBloomFilter(
        2000, 0.01, redis=redis_url, name=name, leaf_bits=1 << 12, lease=lease
    )
    seen.auto_acknowledge = False
    assert seen.first_leaf_bits == seen._full_bits
    return seen


def held(seen: SplittableBloomFilter, leaf: str) -> tuple[int, int]:
    """The leaf's per-key claims and the fingerprints its records claim."""
    store = seen._store
    client = store.client
    records = client.hvals(store._records(leaf))
    width = seen.fingerprint_bytes
    return client.hlen(store._keys(leaf)[3]), sum(
        (len(v) - v.index(b"\n") - 1) // width for v in records
    )


def busiest(seen: SplittableBloomFilter) -> str:
    leaves = [leaf for leaf, _ in seen.tree.leaves()]
    return max(leaves, key=lambda leaf: sum(held(seen, leaf)))


def test_a_batch_claims_each_leafs_new_urls_in_records_deleted_whole(redis_url, redis_name):
    seen = small(redis_url, redis_name, lease=10.0)
    new = seen.add_many(urls(300, seed=1))
    leaves = [leaf for leaf, _ in seen.tree.leaves()]
    counts = [held(seen, leaf) for leaf in leaves]
    assert all(per_key == 0 for per_key, _ in counts), "no claim per key"
    assert sum(recorded for _, recorded in counts) == sum(new) == seen.claims_held()
    sent = []
    real = seen._store._run
    seen._store._run = lambda calls, op, claim: sent.append((op, calls)) or real(calls, op, claim)
    assert seen.acknowledge() == 0 and seen.claims_held() == 0
    # each leaf's DROP names its records, not its keys: one (field, packed keys) pair per call
    drops = [call.extra for op, calls in sent for call in calls.values()]
    assert drops and all(extra[0].startswith(seen._store._claims.owner) for extra in drops)
    client = redis.Redis.from_url(redis_url)
    assert not any(client.exists(seen._store._records(leaf)) for leaf in leaves)


@pytest.mark.parametrize("expanded", [False, True], ids=["records", "expanded"])
def test_an_acknowledgement_during_a_splits_copy_of_claims_is_not_undone(
    redis_url, redis_name, monkeypatch, expanded
):
    """The hazard: a split has read the sealed leaf's claims and not yet written them into its
    children when their owner acknowledges. The owner's DROP deletes them in the sealed leaf,
    is answered MOVED and waits for the swap, then deletes the copies in the children: none
    is left to be taken over once the lease ends (a URL answered new twice). Expanded: the
    records were turned into per-key claims first (a release reads them one by one), so the
    acknowledgement finds no record and deletes per key."""
    lease = 1.5
    owner = small(redis_url, redis_name, lease)
    keys = urls(300, seed=2)
    claimed = [k for k, new in zip(keys, owner.add_many(keys), strict=True) if new]
    if expanded:
        store = owner._store
        store._release(list(store._claims.unacked), LeafOp.RENEW, owner._follow)
    leaf = busiest(owner)
    per_key, recorded = held(owner, leaf)
    assert (per_key > 0, recorded > 0) == ((True, False) if expanded else (False, True))
    splitter = SplittableBloomFilter(redis=redis_url, name=redis_name)
    store = splitter._store
    real = store._claims_to_copy
    seen_in_copy, done = [], {}

    def read_then_acknowledge(sealed, split):
        parts, kept = real(sealed, split)
        seen_in_copy.append(sum(len(p) for p in parts.values()) + len(kept))
        thread = threading.Thread(target=lambda: done.setdefault("lost", owner.acknowledge()))
        thread.start()
        deadline = time.monotonic() + 10
        while sum(held(owner, sealed)) and time.monotonic() < deadline:
            time.sleep(0.002)
        assert sum(held(owner, sealed)) == 0, "the acknowledgement reached the sealed leaf"
        assert thread.is_alive(), "it waits for the swap (MOVED)"
        done["thread"] = thread
        return parts, kept

    monkeypatch.setattr(store, "_claims_to_copy", read_then_acknowledge)
    assert splitter._split(leaf) and splitter.splits_done == 1
    done["thread"].join(30)
    assert seen_in_copy[0] > 0, "the copy read the owner's claims"
    assert done["lost"] == 0
    children = splitter.tree.splits[leaf].children
    assert [held(owner, child) for child in children] == [(0, 0)] * len(children)
    assert owner.claims_held() == 0
    time.sleep(lease + 0.1)  # past the lease: a claim left behind would be taken over now
    other = SplittableBloomFilter(redis=redis_url, name=redis_name)
    assert not any(other.add_many(claimed)), "a URL answered new twice"


@pytest.mark.parametrize("when", ["before the seal", "after the swap"])
def test_records_are_copied_to_the_children_as_records(redis_url, redis_name, when):
    """Records a split copies: under the same field, each child holding the keys it routes;
    the owner's acknowledgement, before the split or after, leaves none anywhere."""
    owner = small(redis_url, redis_name, lease=10.0)
    keys = urls(300, seed=3)
    new = owner.add_many(keys)
    leaf = busiest(owner)
    client = redis.Redis.from_url(redis_url)
    fields = set(client.hkeys(owner._store._records(leaf)))
    if when == "before the seal":
        assert owner.acknowledge() == 0
    splitter = SplittableBloomFilter(redis=redis_url, name=redis_name)
    assert splitter._split(leaf)
    children = splitter.tree.splits[leaf].children
    copied = [held(owner, child) for child in children]
    if when == "before the seal":
        assert copied == [(0, 0)] * len(children)
    else:
        assert sum(r for _, r in copied) == held(owner, leaf)[1] > 0
        assert all(per_key == 0 for per_key, _ in copied)
        for child in children:
            assert set(client.hkeys(owner._store._records(child))) <= fields
        assert owner.claims_held() == sum(new)
        assert owner.acknowledge() == 0
    assert owner.claims_held() == 0
    assert [held(owner, child) for child in children] == [(0, 0)] * len(children)


def test_claims_taken_over_are_claimed_and_acknowledged_one_by_one(redis_url, redis_name):
    """A takeover is answered new ("T": a claim of its own, not in the call's record): its
    young acknowledgement deletes those claims one by one, none left behind."""
    first = small(redis_url, redis_name, lease=2.0)
    keys = urls(100, seed=4)
    claimed = [k for k, new in zip(keys, first.add_many(keys), strict=True) if new]
    time.sleep(2.05)
    second = SplittableBloomFilter(redis=redis_url, name=redis_name, lease=2.0)
    second.auto_acknowledge = False
    assert second.add_many(claimed) == [True] * len(claimed)
    fps, _, _ = second._keys(_core.digests(claimed, _core.HASH_XXH3_128, second.seed))
    calls = second._store._record_calls
    assert {
        call for handle, call in calls.items() if handle[: second.fingerprint_bytes] in fps
    } == {0}
    assert len(calls) == len(claimed)
    assert second._store._claims.young() and second.acknowledge() == 0
    assert second.claims_held() == 0
    assert first.acknowledge() == len(claimed)  # taken over: answered new twice, and said so


@pytest.mark.parametrize("older", ["urlseen-dsbf/4", "urlseen-dsbf/5", "urlseen-dsbf/6"])
def test_an_older_format_tree_is_refused_naming_both_versions(redis_url, redis_name, older):
    seen = SplittableBloomFilter(1000, 0.01, redis=redis_url, name=redis_name)
    client = redis.Redis.from_url(redis_url)
    tree_key = seen._store.tree_key
    params = json.loads(client.hget(tree_key, "params"))
    client.hset(tree_key, "params", json.dumps({**params, "format": older}))
    with pytest.raises(FormatError, match=rf"'{older}', not 'urlseen-dsbf/7'.*rebuild"):
        SplittableBloomFilter(redis=redis_url, name=redis_name)
