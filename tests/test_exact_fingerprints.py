"""The exact filter's fingerprint as its state records it, counters that grow keeping it, the
cache's checkpoint drain in C, and the canonicalizer's lazy imports (`re`, and w3lib without
urllib.request)."""

from __future__ import annotations

import random
import sqlite3
import subprocess
import sys
import textwrap

import pytest

from urlseen import ExactFilter, _core
from urlseen.errors import FormatError
from urlseen.exact import folder, growth
from urlseen.exact.pending_refs import Increments

URLS = [f"https://fp.example/{i}?q={i % 7}" for i in range(3000)]


def _fp(rng: random.Random) -> bytes:
    return rng.randbytes(16)


@pytest.mark.parametrize("carried", [True, False])  # empty dicts (as at close): their own path
def test_drain_into_folds_as_drain_does(carried):
    """drain_into(counts, seen) leaves the dicts as folding drain()'s entries would: counts
    added, the later time kept (a time of 0 is not later than none), pending reset, uncommitted
    increments left alone."""
    rng = random.Random(5)
    one, two = _core.FingerprintCache(256), _core.FingerprintCache(256)
    fps = [_fp(rng) for _ in range(400)]  # more than fit: some are evicted, in both alike
    for fp in fps:
        stamp, pending = rng.randrange(0, 100), rng.randrange(0, 3)
        for cache in (one, two):
            cache.insert(fp, pending, stamp)
    for fp in rng.choices(fps, k=300):
        stamp = rng.randrange(1, 200)
        one.hit(fp, stamp)
        two.hit(fp, stamp)
    one.commit(), two.commit()
    for fp in fps[:20]:  # uncommitted: neither drains them
        one.hit(fp, 500)
        two.hit(fp, 500)
    before = {fps[0]: 7, fps[1]: 1} if carried else {}
    seen_before = {fps[0]: 10**12, fps[1]: 0, fps[2]: 150} if carried else {}
    expected = Increments()
    expected._counts.update(before)
    expected._seen.update(seen_before)
    for fp, pending, _batch, seen in one.drain():
        expected.add(fp, pending, seen)
    counts, seen = dict(before), dict(seen_before)
    two.drain_into(counts, seen)
    assert counts == dict(expected._counts) and len(counts) > 100
    assert seen == expected._seen
    assert one.drain() == two.drain() == [], "pending counts reset"
    one.commit(), two.commit()
    assert sorted(one.drain()) == sorted(two.drain()) != [], "the batch's increments kept"


@pytest.mark.parametrize("hash", ["md5", "xxh3_128"])
def test_counters_that_grow_keep_the_fingerprint_of_the_records(monkeypatch, hash):
    """A filter in memory with a fingerprint other than its library's recorded name (none)
    grows its counters with the fingerprint its records use: every repeat stays a repeat."""
    monkeypatch.setattr(growth, "START_CAPACITY", 256)
    seen = ExactFilter(hash=hash)
    for start in range(0, len(URLS), 500):
        batch = URLS[start : start + 500]
        assert seen.add_many(batch + URLS[:start:5]) == [True] * len(batch) + [False] * len(
            URLS[:start:5]
        )
    assert seen.counters.capacity > 256 and seen.counters.params["hash"] == hash
    assert seen.add_many(URLS) == [False] * len(URLS)
    seen.close()


def test_a_state_records_the_fingerprint_it_uses(tmp_path):
    """A temporary state's library names the fingerprint its records use (it named MD5
    whatever the filter hashed with); a persisted state made with MD5 opens with MD5."""
    with ExactFilter.temporary(hash="xxh3_128") as temp:
        assert temp.counters.params["hash"] == "xxh3_128"
        assert temp.library.get_meta("fingerprint") == "xxh3_128"
        assert temp.add_many(URLS[:50] * 2) == [True] * 50 + [False] * 50
    with ExactFilter.temporary() as temp:
        assert temp.counters.params["hash"] == temp.library.get_meta("fingerprint") == "md5"
    state = tmp_path / "st"
    with ExactFilter.create(state) as made:
        made.add_many(URLS)
    assert folder.describe_state(state, verify=True)["fingerprint"] == "md5"
    with ExactFilter.open(state) as again:
        assert again.counters.params["hash"] == "md5"
        assert again.add_many([*URLS, "https://fp.example/new"]) == [False] * len(URLS) + [True]


def test_info_verify_refuses_a_fingerprint_it_does_not_compute(tmp_path):
    state = tmp_path / "st"
    with ExactFilter.create(state, hash="xxh3_128") as made:
        made.add_many(URLS[:10])
    assert folder.describe_state(state, verify=True)["fingerprint"] == "xxh3_128"
    with sqlite3.connect(state / folder.LIBRARY_FILE) as db:
        db.execute("UPDATE meta SET value = 'sha1' WHERE name = 'fingerprint'")
    db.close()
    (state / (folder.LIBRARY_FILE + ".seal")).unlink()  # changed by hand: no seal to compare
    with pytest.raises(FormatError, match="'sha1'"):
        folder.describe_state(state, verify=True)


def _python(code: str) -> str:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, check=True
    ).stdout


def test_canonical_imports_re_and_urllib_request_only_when_used():
    out = _python(
        """
        import sys
        import urlseen.canonical as c
        c.LEAN_W3LIB = True  # as the dedup command sets it
        print("re" in sys.modules)
        print(c.canonicalize("https://a.example/b?y=2&x=1#f"))
        print(c.canonicalize("HTTP://A.example/a%7e b/../c?b=1&a=%41"))
        print("urllib.request" in sys.modules, "w3lib.url" in sys.modules)
        import urllib, urllib.request, w3lib.url
        print(urllib.request is sys.modules["urllib.request"], hasattr(urllib.request, "urlopen"))
        print(w3lib.url.pathname2url("/a b/ü") == urllib.request.pathname2url("/a b/ü"))
        print(w3lib.url.path_to_file_uri("/tmp/a b"))
        print(c.canonicalize("HTTP://A.example/a%7e b/../c?b=1&a=%41") ==
              w3lib.url.canonicalize_url("HTTP://A.example/a%7e b/../c?b=1&a=%41"))
        """
    )
    assert out.splitlines() == [
        "False",  # importing the canonicalizer compiles nothing
        "https://a.example/b?x=1&y=2",
        "http://a.example/c?a=A&b=1",
        "False True",  # w3lib loaded for the second URL, urllib.request not
        "True True",  # the real module, imported when asked for
        "True",
        "file:///tmp/a%20b",
        "True",
    ]
