"""LineKeyer: every path from a raw input line to a filter key, and the counts it keeps."""

from __future__ import annotations

import pytest

from urlseen.canonical import canonicalize
from urlseen.errors import ConfigError
from urlseen.job.linekeys import DEFAULT_MAX_CANONICAL_BYTES, LineCounts, LineKeyer


def test_plain_url_is_canonicalized_to_str() -> None:
    keyer = LineKeyer()
    key = keyer.key(b"HTTP://Example.COM/b?y=2&x=1#top")
    assert key == "http://example.com/b?x=1&y=2"
    assert isinstance(key, str)
    assert keyer.counts == LineCounts()


def test_spelling_variants_share_one_key() -> None:
    keyer = LineKeyer()
    variants = [
        b"http://example.com/a?b=2&a=1",
        b"HTTP://EXAMPLE.com/a?a=1&b=2#frag",
        b"http://example.com/a?a=1&b=2\r",
    ]
    assert len({keyer.key(v) for v in variants}) == 1


def test_key_matches_canonicalize_for_valid_utf8() -> None:
    keyer = LineKeyer()
    url = "https://bücher.example/straße?q=ä"
    assert keyer.key(url.encode()) == canonicalize(url)


@pytest.mark.parametrize("line", [b"", b" ", b"\t \t", b"\r", b" \r", b"\x0b\x0c"])
def test_empty_and_blank_lines_have_no_key(line: bytes) -> None:
    keyer = LineKeyer()
    assert keyer.key(line) is None
    assert keyer.counts.empty == 1
    assert keyer.counts.as_dict() == {"empty": 1, "invalid_utf8": 0, "oversized": 0, "verbatim": 0}


def test_blank_lines_are_counted_each_time() -> None:
    keyer = LineKeyer()
    for line in (b"", b"  ", b"http://a/", b"\r", b""):
        keyer.key(line)
    assert keyer.counts.empty == 4


def test_crlf_terminator_is_not_part_of_the_key() -> None:
    keyer = LineKeyer()
    assert keyer.key(b"http://a.example/x\r") == keyer.key(b"http://a.example/x")
    # Only the terminator goes: with exact keys, a CR inside the line is data (the URL
    # Standard, hence w3lib, drops it, so the default profile cannot show the difference).
    exact = LineKeyer(profile="none")
    assert exact.key(b"http://a.example/\rx") == b"http://a.example/\rx"
    assert exact.key(b"http://a.example/x\r\r") == b"http://a.example/x\r"


def test_crlf_stripped_with_profile_none_too() -> None:
    keyer = LineKeyer(profile="none")
    assert keyer.key(b"http://a.example/x\r") == b"http://a.example/x"


def test_invalid_utf8_is_keyed_by_raw_bytes() -> None:
    keyer = LineKeyer()
    line = b"http://x/\xff\xfe"
    key = keyer.key(line)
    assert key == line
    assert isinstance(key, bytes)
    assert keyer.counts.invalid_utf8 == 1
    # Deduplicates exactly among themselves: same bytes, same key; other bytes, other key.
    assert keyer.key(b"http://x/\xff\xfe") == key
    assert keyer.key(b"http://x/\xfe") != key
    assert keyer.counts.invalid_utf8 == 3


def test_invalid_utf8_with_crlf_drops_only_the_cr() -> None:
    keyer = LineKeyer()
    assert keyer.key(b"http://x/\xff\r") == b"http://x/\xff"
    assert keyer.counts.invalid_utf8 == 1


def test_invalid_utf8_is_not_canonicalized() -> None:
    keyer = LineKeyer()
    # Case and fragment would be folded for a UTF-8 line; these bytes stay as they are.
    assert keyer.key(b"HTTP://X/\xff#frag") == b"HTTP://X/\xff#frag"


def test_default_max_canonical_bytes_is_64_kib() -> None:
    assert DEFAULT_MAX_CANONICAL_BYTES == 64 * 1024
    assert LineKeyer().max_canonical_bytes == DEFAULT_MAX_CANONICAL_BYTES


def test_oversized_line_is_keyed_by_raw_bytes() -> None:
    keyer = LineKeyer()
    line = b"HTTP://Example.com/" + b"a" * DEFAULT_MAX_CANONICAL_BYTES
    key = keyer.key(line)
    assert key == line
    assert keyer.counts.oversized == 1
    assert keyer.counts.invalid_utf8 == 0


def test_oversized_boundary_is_exclusive_and_ignores_the_cr() -> None:
    keyer = LineKeyer(max_canonical_bytes=20)
    at_limit = b"HTTP://E.com/" + b"a" * 7  # 20 bytes
    assert len(at_limit) == 20
    assert keyer.key(at_limit) == "http://e.com/aaaaaaa"
    assert keyer.key(at_limit + b"\r") == "http://e.com/aaaaaaa"
    assert keyer.counts.oversized == 0
    assert keyer.key(at_limit + b"a") == at_limit + b"a"
    assert keyer.counts.oversized == 1


def test_oversized_check_comes_before_utf8_check() -> None:
    keyer = LineKeyer(max_canonical_bytes=8)
    assert keyer.key(b"http://x/\xff\xfe") == b"http://x/\xff\xfe"
    assert keyer.counts.oversized == 1
    assert keyer.counts.invalid_utf8 == 0


def test_verbatim_fallback_when_canonicalizer_rejects_the_text() -> None:
    keyer = LineKeyer()
    # Not blank as bytes (bytes.strip keeps C0 controls), but empty once the canonicalizer
    # strips C0 controls: it raises InvalidKeyError and the line is its own key.
    line = b"\x01\x02"
    assert keyer.key(line) == line
    assert keyer.counts.verbatim == 1
    assert keyer.counts.empty == 0


def test_unparsable_url_still_gets_a_stable_key() -> None:
    keyer = LineKeyer()
    # canonicalize_url rejects the port; canonical.py keys the stripped text.
    assert keyer.key(b"http://x:99999/") == keyer.key(b"http://x:99999/") == "http://x:99999/"


def test_profile_none_keys_the_exact_bytes() -> None:
    keyer = LineKeyer(profile="none")
    assert keyer.key(b"HTTP://Example.com/#x") == b"HTTP://Example.com/#x"
    assert keyer.key(b"http://example.com/") != keyer.key(b"http://example.com")
    # Odd lines take no special path: nothing is counted except empties.
    assert keyer.key(b"http://x/\xff") == b"http://x/\xff"
    assert keyer.key(b"a" * (DEFAULT_MAX_CANONICAL_BYTES + 1)) == b"a" * (
        DEFAULT_MAX_CANONICAL_BYTES + 1
    )
    assert keyer.key(b"") is None
    assert keyer.counts.as_dict() == {"empty": 1, "invalid_utf8": 0, "oversized": 0, "verbatim": 0}


def test_unknown_profile_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="bogus"):
        LineKeyer(profile="bogus")


def test_each_keyer_has_its_own_counts() -> None:
    a, b = LineKeyer(), LineKeyer()
    a.key(b"")
    assert b.counts.empty == 0
