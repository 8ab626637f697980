"""Feature extraction for the similarity filter: a table of tricky URLs with the
values the documented rules give, the options, and no crash on any text or bytes."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from urlseen.errors import ConfigError, InvalidKeyError
from urlseen.similarity.features import NO_DIR, RELATIVE, FeatureExtractor

# url -> (site, depth, dir1, tail), with the default options (canonicalize, query in the tail).
TRICKY = {
    # no path: n = 1, no dir1, the tail is the site (un = u1)
    "http://Example.COM": ("http://example.com", "1", NO_DIR, "http://example.com"),
    "https://x.com/": ("https://x.com", "1", NO_DIR, "https://x.com"),
    "https://x.com/?b=2&a=1": ("https://x.com", "1", NO_DIR, "https://x.com?a=1&b=2"),
    # n = 2: u2 = un
    "http://x.com/a.html": ("http://x.com", "2", "a.html", "a.html"),
    "http://x.com/a/": ("http://x.com", "2", "a", "a/"),
    # deeper paths; the query belongs to the tail, sorted by canonicalization
    "http://x.com/a/b/c.php?z=1&y=2#frag": ("http://x.com", "4", "a", "c.php?y=2&z=1"),
    "http://x.com/a/b/": ("http://x.com", "3", "a", "b/"),
    "http://x.com//a//b": ("http://x.com", "3", "a", "b"),  # empty segments dropped
    "http://x.com/a/./b/../c": ("http://x.com", "3", "a", "c"),  # dot segments resolved
    # port and user info: the port is part of the site, the user info is not
    "http://user:pw@x.com:8080/a/b": ("http://x.com:8080", "3", "a", "b"),
    # IDN: punycode, whichever way it was written; the path percent-encoded
    "http://Bücher.de/ä/ö.html": ("http://xn--bcher-kva.de", "3", "%C3%A4", "%C3%B6.html"),
    "http://xn--bcher-kva.de/%C3%A4/%C3%B6.html": (
        "http://xn--bcher-kva.de",
        "3",
        "%C3%A4",
        "%C3%B6.html",
    ),
    # relative references: one shared sentinel site, the path read as usual
    "/a/b?x=1": (RELATIVE, "3", "a", "b?x=1"),
    "/": (RELATIVE, "1", NO_DIR, RELATIVE),
    # a mistyped scheme with a host is still read as scheme://host
    "hhttps://x.com/a": ("hhttps://x.com", "2", "a", "a"),
    "file:///etc/passwd": ("file://", "3", "etc", "passwd"),
    # opaque text: the whole text is site and tail
    "mailto:a@b.c": ("mailto:a@b.c", "1", NO_DIR, "mailto:a@b.c"),
    "view-source:https://x.com/a": (
        "view-source:https://x.com/a",
        "1",
        NO_DIR,
        "view-source:https://x.com/a",
    ),
    "example.com/a": ("example.com/a", "1", NO_DIR, "example.com/a"),
    "http://[::1/": ("http://[::1/", "1", NO_DIR, "http://[::1/"),  # urlsplit refuses it
}


@pytest.mark.parametrize("url", list(TRICKY))
def test_tricky_urls(url: str) -> None:
    extractor = FeatureExtractor()
    assert extractor.values(url) == TRICKY[url]
    assert extractor.extract(url) == dict(
        zip(("site", "depth", "dir1", "tail"), TRICKY[url], strict=True)
    )


def test_bytes_keys() -> None:
    extractor = FeatureExtractor()
    assert extractor.values(b"http://x.com/a/b") == ("http://x.com", "3", "a", "b")
    raw = b"http://x.com/\xff"
    site, depth, dir1, tail = extractor.values(raw)
    assert (depth, dir1) == ("1", NO_DIR) and site == tail
    assert site != raw.decode("latin-1")  # marked: never equal to a text key
    assert extractor.values(b"http://x.com/\xfe") != extractor.values(raw)


def test_query_can_be_left_out_of_the_tail() -> None:
    extractor = FeatureExtractor(query_in_tail=False)
    assert extractor.values("http://x.com/a/list.php?page=2&sid=9") == (
        "http://x.com",
        "3",
        "a",
        "list.php",
    )
    assert extractor.values("http://x.com/?a=1")[3] == "http://x.com"


def test_without_canonicalization_the_text_is_read_as_is() -> None:
    extractor = FeatureExtractor(canonicalize="none")
    assert extractor.values("HTTP://X.com/A/b?z=1&a=2")[0] == "http://X.com"  # scheme: urlsplit
    assert extractor.values("HTTP://X.com/A/b?z=1&a=2")[3] == "b?z=1&a=2"


def test_extra_features() -> None:
    extractor = FeatureExtractor(("site", "query_keys", "extension"))
    assert extractor.names == ("site", "query_keys", "extension")
    assert extractor.values("http://x.com/a/p.HTML?sid=1&b=2&b=3") == (
        "http://x.com",
        "b&sid",
        "html",
    )
    assert extractor.values("http://x.com/a/") == ("http://x.com", "", "")
    assert extractor.values("http://x.com/.profile") == ("http://x.com", "", "")


@pytest.mark.parametrize(
    "features", [(), "site", ("site", "site"), ("site", "colour"), ["depth", None]]
)
def test_bad_feature_lists_are_refused(features: object) -> None:
    with pytest.raises(ConfigError, match="features"):
        FeatureExtractor(features)  # type: ignore[arg-type]


def test_bad_profile_is_refused() -> None:
    with pytest.raises(ConfigError, match="profile"):
        FeatureExtractor(canonicalize="strict")


@pytest.mark.parametrize("key", ["", "   ", b"", "http://x.com/\ud800", 3, None])
def test_bad_keys_raise_invalid_key_error(key: object) -> None:
    with pytest.raises(InvalidKeyError):
        FeatureExtractor().values(key)


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(min_size=1), st.binary(min_size=1)))
def test_any_key_gets_features_or_a_clear_error(key: str | bytes) -> None:
    extractor = FeatureExtractor(("site", "depth", "dir1", "tail", "query_keys", "extension"))
    try:
        values = extractor.values(key)
    except InvalidKeyError:  # only blank text and lone surrogates have no features
        text = key.decode("utf-8") if isinstance(key, bytes) else key  # bytes: UTF-8 ones only
        assert not text.strip("".join(map(chr, range(0x21)))) or any(
            0xD800 <= ord(c) <= 0xDFFF for c in text
        )
        return
    assert len(values) == 6 and all(isinstance(v, str) for v in values)
    assert int(values[1]) >= 1
    for v in values:
        v.encode("utf-8")  # every value can be hashed


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from(["http", "https"]),
    st.from_regex(r"[a-z0-9]{1,8}(\.[a-z]{2,3}){1,2}", fullmatch=True),
    st.lists(st.from_regex(r"[A-Za-z0-9_.~-]{1,6}", fullmatch=True), max_size=5),
)
def test_depth_counts_the_path_segments(scheme: str, host: str, segments: list[str]) -> None:
    segments = [s for s in segments if s not in (".", "..")]
    url = f"{scheme}://{host}/" + "/".join(segments)
    site, depth, dir1, tail = FeatureExtractor().values(url)
    assert site == f"{scheme}://{host}"
    assert int(depth) == 1 + len(segments)
    assert dir1 == (segments[0] if segments else NO_DIR)
    assert tail == (segments[-1] if segments else site)
