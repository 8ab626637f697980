"""Tests for urlseen.canonical: the URL -> key rule every filter relies on."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from w3lib.url import canonicalize_url

from urlseen import canonical
from urlseen.canonical import (
    DEFAULT_PROFILE,
    PROFILES,
    canonicalize,
    get_canonicalizer,
)
from urlseen.errors import ConfigError, InvalidKeyError

# (input, expected key); expectations written from the rules, not copied from output.
TRICKY = [
    # Scrapy's rule: sorted query, lower-case scheme and host, no fragment.
    ("http://www.example.com/do?c=3&b=5&b=2&a=50", "http://www.example.com/do?a=50&b=2&b=5&c=3"),
    ("HTTP://WWW.Example.COM/Path", "http://www.example.com/Path"),
    ("http://example.com/a#frag", "http://example.com/a"),
    ("http://example.com/a#b?c=1", "http://example.com/a"),
    ("http://example.com", "http://example.com/"),
    ("http://example.com?b=1", "http://example.com/?b=1"),
    ("http://example.com/a?", "http://example.com/a"),
    ("http://example.com/?a=1&&b=2", "http://example.com/?a=1&b=2"),
    ("http://example.com/?flag&x=1", "http://example.com/?flag=&x=1"),
    ("http://example.com/?a=1&A=2", "http://example.com/?A=2&a=1"),  # sorted by bytes
    ("http://example.com/?a=1=2", "http://example.com/?a=1%3D2"),
    # Percent-encoding: unreserved characters decoded, delimiters kept, hex upper-cased.
    ("http://example.com/%7Euser/%2f%3b%3f", "http://example.com/~user/%2F%3B%3F"),
    ("http://example.com/%zz", "http://example.com/%zz"),
    ("http://example.com/a b", "http://example.com/a%20b"),
    ("http://example.com/?q=a b&p=c+d", "http://example.com/?p=c+d&q=a+b"),
    ("http://example.com/?q=a%20b", "http://example.com/?q=a+b"),
    ("http://example.com/?b=%e9", "http://example.com/?b=%E9"),  # not UTF-8: byte kept
    ("http://example.com/?next=http://a.org/x", "http://example.com/?next=http%3A%2F%2Fa.org%2Fx"),
    # Paths: dot segments resolved, backslash is a slash, path parameters untouched.
    ("http://example.com/a/./b/../c", "http://example.com/a/c"),
    ("http://example.com/a/%2e%2E/b", "http://example.com/b"),
    ("http://example.com/a\\b", "http://example.com/a/b"),
    ("http://example.com/a;jsessionid=%41", "http://example.com/a;jsessionid=%41"),
    # Hosts: IDNA, IPv6 shortened; the default port stays (w3lib, unlike browsers, keeps it).
    ("http://bücher.example/straße?q=é", "http://xn--bcher-kva.example/stra%C3%9Fe?q=%C3%A9"),
    ("http://[::0:1]/a", "http://[::1]/a"),
    ("http://example.com:80/", "http://example.com:80/"),
    ("http://user:pass@Example.com/", "http://user:pass@example.com/"),
    # Surrounding whitespace and control characters are stripped; tabs inside removed.
    ("  http://example.com/a\n", "http://example.com/a"),
    ("\x00http://example.com/a\tb\r\n", "http://example.com/ab"),
    # Not absolute http(s): w3lib's treatment, no base URL applied.
    ("/news/deals?b=2&a=1", "/news/deals?a=1&b=2"),
    ("example.com/a", "example.com/a"),
    ("hhttps://example.com/a", "hhttps://example.com/a"),
    ("view-source:https://example.com/a?b=1&a=2#x", "view-source:https://example.com/a?a=2&b=1"),
    ("mailto:A@Example.COM", "mailto:A@Example.COM"),
    ("http://exa mple.com/a", "http://exa mple.com/a"),  # w3lib keeps a space in the host
    # w3lib refuses these: the stripped text is its own key.
    ("http://example.com:99999/", "http://example.com:99999/"),
    ("http://example.com:8o/a?b=1&a=2", "http://example.com:8o/a?b=1&a=2"),
    (" http://[::1/ ", "http://[::1/"),
]

INVALID = ["", " ", "\t\r\n", "\x00\x1f", "http://example.com/\ud800", "\udcff", "a\ud800b"]

# Everyday shapes of crawled URLs: the shortcut must agree with w3lib on them, and take them.
COMMON = [
    "https://example.com/",
    "https://example.com",
    "http://www.example.com/news/2024/05/some-article-title.html",
    "https://example.com/path/to/page?id=123",
    "https://example.com/search?q=term&page=2",
    "https://example.com/search?page=2&q=term",
    "https://example.com/?utm_source=x&utm_medium=y&id=1",
    "https://example.com/index.php?title=Main_Page&action=edit",
    "https://sub.example.co.uk:8080/a/b/",
    "https://example.com/a/b#section-2",
    "https://example.com/wiki/Foo_(bar)",
    "https://example.com/@user/status/12345",
    "https://example.com/a/b/c.d.e/f~g",
    "http://192.168.0.1/login.php",
    "https://example.com/a?b",
    "https://example.com/?",
    "https://example.com//double//slashes",
    "https://example.com/a,b:c+d*e'f!g$h",
]


@pytest.mark.parametrize(("url", "expected"), TRICKY)
def test_tricky_urls(url, expected):
    assert canonicalize(url) == expected


def _w3lib_or_none(url):
    try:
        return canonicalize_url(url)
    except ValueError:
        return None


@pytest.mark.parametrize("url", [u for u, _ in TRICKY if _w3lib_or_none(u) is not None])
def test_tricky_urls_match_w3lib_where_it_parses(url):
    assert canonicalize(url) == canonicalize_url(url)


@pytest.mark.parametrize("url", INVALID)
def test_unhashable_text_is_rejected(url):
    with pytest.raises(InvalidKeyError):
        canonicalize(url)


@pytest.mark.parametrize("value", [b"http://example.com/", None, 42, ["http://example.com/"]])
def test_non_str_is_rejected_with_its_type(value):
    with pytest.raises(InvalidKeyError, match=type(value).__name__):
        canonicalize(value)


def test_str_subclass_is_accepted():
    class Url(str):
        pass

    assert canonicalize(Url("http://example.com/?b=1&a=2")) == "http://example.com/?a=2&b=1"


def test_megabyte_url_is_canonicalized():
    url = "http://example.com/" + "a" * 1_000_000 + "?b=1&a=2"
    assert canonicalize(url) == "http://example.com/" + "a" * 1_000_000 + "?a=2&b=1"


@pytest.mark.parametrize("url", COMMON)
def test_shortcut_agrees_with_w3lib_on_common_shapes(url, monkeypatch):
    expected = canonicalize_url(url)

    def fail(url):
        raise AssertionError(f"shortcut not taken for {url!r}")

    monkeypatch.setattr(canonical, "_canonicalize_with_w3lib", fail)
    assert canonicalize(url) == expected


@settings(max_examples=300, deadline=None)
@given(st.from_regex(canonical._PLAIN_HTTP_URL, fullmatch=True))
def test_shortcut_agrees_with_w3lib(url):
    assert canonicalize(url) == canonicalize_url(url)


URL_PREFIXES = ["http://", "https://", "HTTP://", "//", "/", "view-source:http://", " http://"]
ANY_TEXT = st.one_of(
    st.text(),
    st.builds(lambda prefix, rest: prefix + rest, st.sampled_from(URL_PREFIXES), st.text()),
)


@settings(max_examples=500, deadline=None)
@given(ANY_TEXT)
def test_any_text_gives_a_key_or_invalid_key_error(text):
    try:
        key = canonicalize(text)
    except InvalidKeyError:
        return
    assert isinstance(key, str)
    assert key
    key.encode("utf-8")


def _join(parts, sep):
    return sep.join(parts)


_SEGMENT = st.lists(
    st.sampled_from([*"abcXYZ019-._~!$&'()*+,;=:@ |^\"<>é", "%41", "%2f", "%e9", "%zz"]),
    max_size=8,
).map("".join)
_QUERY_PART = st.lists(
    st.sampled_from([*"abAB01-._~+/?:@!$'()*,;é ", "%20", "%3d", "%26", "%e9"]),
    max_size=6,
).map("".join)
HTTP_URLS = st.builds(
    lambda scheme, host, port, segments, pairs, fragment: (
        f"{scheme}://{host}{port}/{_join(segments, '/')}"
        + ("?" + "&".join(f"{k}={v}" for k, v in pairs) if pairs else "")
        + fragment
    ),
    st.sampled_from(["http", "https", "HTTP", "hTTps"]),
    st.builds(
        _join,
        st.lists(
            st.from_regex(r"[a-zA-Z0-9]([a-zA-Z0-9-]{0,8}[a-zA-Z0-9])?", fullmatch=True),
            min_size=1,
            max_size=3,
        ),
        st.just("."),
    ),
    st.sampled_from(["", ":80", ":443", ":8080"]),
    st.lists(st.one_of(_SEGMENT, st.sampled_from([".", ".."])), max_size=5),
    st.lists(st.tuples(_QUERY_PART, _QUERY_PART), max_size=4),
    st.sampled_from(["", "#", "#top", "#a?b=c"]),
)


@settings(max_examples=300, deadline=None)
@given(HTTP_URLS)
def test_canonicalize_is_idempotent_on_http_urls(url):
    key = canonicalize(url)
    assert canonicalize(key) == key


def test_stray_percent_before_an_escape_is_the_one_known_non_idempotent_case():
    # w3lib decodes "%41" but leaves the stray "%", so "%a" + "A" becomes a new escape.
    assert canonicalize("http://example.com/%a%41") == "http://example.com/%aA"
    assert canonicalize("http://example.com/%aA") == "http://example.com/%AA"


# --- profiles and memo -------------------------------------------------------------------


def test_default_profile_is_w3lib():
    assert DEFAULT_PROFILE == "w3lib"
    assert get_canonicalizer() is canonicalize


def test_none_profile_keeps_text_exactly():
    key = get_canonicalizer("none")
    assert key(" HTTP://Example.com/b?z=1&a=2#f ") == " HTTP://Example.com/b?z=1&a=2#f "
    for bad in ["", "a\ud800", b"http://example.com/"]:
        with pytest.raises(InvalidKeyError):
            key(bad)


@pytest.mark.parametrize("profile", ["fast", "W3LIB", "", None])
def test_unknown_profile_names_value_and_choices(profile):
    with pytest.raises(ConfigError) as info:
        get_canonicalizer(profile)
    message = str(info.value)
    assert repr(profile) in message
    assert all(repr(p) in message for p in PROFILES)


@pytest.mark.parametrize("memo_size", [-1, 1.5, "10", True, None])
def test_bad_memo_size_is_a_config_error(memo_size):
    with pytest.raises(ConfigError, match="memo_size"):
        get_canonicalizer("w3lib", memo_size=memo_size)


def test_memo_gives_the_same_keys_and_remembers():
    key = get_canonicalizer("w3lib", memo_size=64)
    urls = [u for u, _ in TRICKY] * 2
    assert [key(u) for u in urls] == [canonicalize(u) for u in urls]
    assert key.cache_info().hits > 0
    with pytest.raises(InvalidKeyError):
        key("")
    with pytest.raises(InvalidKeyError):
        key(b"http://example.com/")


def test_memo_skips_long_urls():
    key = get_canonicalizer("w3lib", memo_size=4)
    url = "http://example.com/" + "a" * 5000
    assert key(url) == url
    assert key.cache_info().currsize == 0
