"""Turn a URL into the key urlseen hashes, so that equal URLs give equal bytes.

Every filter, store and interface gets its keys from here. The rule is Scrapy's own,
``w3lib.url.canonicalize_url``: scheme and host lower-cased, host IDNA-encoded, fragment
dropped, dot segments resolved, percent-encoding normalised, query arguments sorted. A
urlseen filter then agrees with Scrapy's dupefilter and HTTP cache about which URLs are equal.

Profiles, chosen with ``get_canonicalizer(profile)``:

- ``"w3lib"`` (default): the result of ``canonicalize_url``, with the edge cases below.
- ``"none"``: the text itself, unchanged (only empty text and lone surrogates are refused).

Edge cases, decided here so that a crawler never stops on a URL:

- Surrounding whitespace and C0 control characters are stripped, as browsers and w3lib do.
- Relative references (``/path``), unknown or mistyped schemes (``hhttps://x``,
  ``view-source:https://...``), spaces and IRIs get whatever ``canonicalize_url`` makes of
  them. No base URL is applied, so ``/a`` never equals ``http://x/a``.
- Text that ``canonicalize_url`` rejects (``http://x:99999/``, ``http://[::1/``) is kept
  verbatim after stripping, so it still deduplicates exactly by its text.
- There is no length limit: a 1 MB URL takes well under a second.
- Keys are stable under a second pass except after a stray "%" in the path: w3lib turns
  ``/%a%41`` into ``/%aA``, which a second pass reads as an escape.
- ``InvalidKeyError`` is raised for a key that would be empty (``""``, blank lines), for text
  with lone surrogates (it has no UTF-8 form to hash) and for anything that is not a str.

Speed: ``canonicalize_url`` manages about 140k URLs/s, while the Bloom filter does millions.
Most real URLs are already canonical (99% of the distinct development URLs), so a strict
pattern recognises them and returns them without calling w3lib: 1.2M URLs/s, and the same
keys (tests check the shortcut against w3lib). ``benchmarks/dedup/REPORT.md`` has the
numbers, the memo's, and why no profile built on the ``ada-url`` parser is offered. The dedup
job does the same in C (csrc/lines.c: this shortcut, and w3lib's rule for http(s) URLs of
printable ASCII), asking this module only about the URLs it defers.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Iterable, Sequence

from urlseen.errors import ConfigError, InvalidKeyError

TYPE_CHECKING = False
if TYPE_CHECKING:
    import re

    from urlseen import _core
    from urlseen.protocol import SeenFilter

__all__ = [
    "DEFAULT_MEMO_SIZE",
    "DEFAULT_PROFILE",
    "PROFILES",
    "Canonicalizer",
    "add_urls",
    "canonicalize",
    "get_canonicalizer",
]

Canonicalizer = Callable[[str], str]

PROFILES: tuple[str, ...] = ("w3lib", "none")
DEFAULT_PROFILE = "w3lib"
# A small memo keeps most of the hits (77% against 80% for 2**16 entries on a polled feed)
# and its misses stay cheap; benchmarks/dedup/REPORT.md has the numbers.
DEFAULT_MEMO_SIZE = 4096
# Longer lines bypass the memo, so a few huge URLs cannot fill memory.
_MEMO_MAX_CHARS = 1024

# What browsers (URL Standard) and w3lib strip from both ends of a URL.
_C0_CONTROL_OR_SPACE = "".join(map(chr, range(0x21)))

# http(s) URLs that canonicalize_url returns unchanged, apart from dropping the fragment,
# adding "/" for an empty path and sorting a plain query. It is kept strict on purpose:
# lower-case host, no userinfo, a port without leading zeros, a path of characters w3lib
# never escapes or unescapes (no "%", no ";" because of path parameters, no "\"), a query
# of unreserved characters, and printable ASCII in the fragment. Everything else goes to w3lib.
_PLAIN_HTTP_URL = (
    r"(https?://[a-z0-9._-]+(?::[1-9][0-9]{0,3})?)"  # origin
    r"(/[A-Za-z0-9._~!$&'()*+,=:@/-]*)?"  # path
    r"(?:\?([A-Za-z0-9._~=&-]*))?"  # query
    r"(?:#[!-~]*)?"  # fragment, dropped
)


def _compile_plain_http_url(url: str) -> re.Match[str] | None:
    """The pattern's fullmatch, compiled at the first call (which it answers): `re` (with
    `enum`) stays out of a run that never canonicalizes in Python, as `urlseen dedup` whose
    lines the C engine keys."""
    global _match_plain_http_url
    import re

    _match_plain_http_url = re.compile(_PLAIN_HTTP_URL).fullmatch
    return _match_plain_http_url(url)


_match_plain_http_url: Callable[[str], re.Match[str] | None] = _compile_plain_http_url


def canonicalize(url: str) -> str:
    """Return the canonical form of ``url``, the text urlseen hashes.

    This is ``w3lib.url.canonicalize_url`` (Scrapy's rule), so two spellings of one
    resource (``http://X.com/b?y=2&x=1#top`` and ``http://x.com/b?x=1&y=2``) give one key
    and the URL-seen test does not fetch it twice. See the module docstring for the edge
    cases.

    Args:
        url: An absolute URL, ideally; any other text gets a well-defined key too.

    Returns:
        A non-empty str that encodes to UTF-8.

    Raises:
        InvalidKeyError: ``url`` is blank, contains lone surrogates, or is not a str.
    """
    try:
        match = _match_plain_http_url(url)
    except TypeError:
        raise InvalidKeyError(f"a URL must be str, not {type(url).__name__}") from None
    if match is None:
        return _canonicalize_with_w3lib(url)
    origin, path, query = match.groups()
    if path is None:
        path = "/"
    elif "/." in path:  # a dot segment may need resolving
        return _canonicalize_with_w3lib(url)
    if query:
        query = _sort_plain_query(query)
        if query is None:
            return _canonicalize_with_w3lib(url)
        if query:
            return f"{origin}{path}?{query}"
    return origin + path


def _sort_plain_query(query: str) -> str | None:
    """Sort a query of unreserved characters as canonicalize_url does, or None to defer to it.

    w3lib sorts (name, value) pairs by their decoded bytes; with nothing to decode (no "%"
    or "+"), comparing the ASCII str pairs gives the same order. Empty fields are dropped
    and a name without "=" gets one, as in w3lib.
    """
    pairs = []
    for field in query.split("&"):
        if field:
            name, _, value = field.partition("=")
            if "=" in value:  # w3lib escapes it as %3D
                return None
            pairs.append((name, value))
    pairs.sort()
    return "&".join([f"{name}={value}" for name, value in pairs])


LEAN_W3LIB = False
"""Set by the dedup command (one Python thread): import w3lib without urllib.request (see
_import_w3lib_canonicalize). Off in a library user's process, whose other threads could
import urllib.request while the stand-in is in sys.modules."""


@functools.cache
def _w3lib() -> Callable[[str], str]:
    """w3lib's canonicalize_url, imported on first use: a run that never needs it (the dedup
    job without canonicalization, or on plain URLs only) does not pay for the import."""
    if not LEAN_W3LIB or "w3lib.url" in sys.modules or "urllib.request" in sys.modules:
        from w3lib.url import canonicalize_url

        return canonicalize_url
    return _import_w3lib_canonicalize()


def _import_w3lib_canonicalize() -> Callable[[str], str]:
    """w3lib.url without urllib.request: w3lib takes only `pathname2url` from it (for
    path_to_file_uri, which canonicalization never calls), and urllib.request brings
    http.client, email and ssl along: ~60% of the import's CPU time, paid by every
    canonicalizing run that meets one URL the C shortcut leaves to w3lib
    (benchmarks/dedup/REPORT.md). While w3lib.url loads, `urllib.request` is a stand-in whose
    pathname2url imports the real module at its first call and hands over to it; the stand-in
    leaves sys.modules at once, so any later `import urllib.request` gets the real module.
    A w3lib that wants more of it than the stand-in holds is imported the ordinary way."""
    import types
    import urllib

    def pathname2url(pathname: str) -> str:
        from urllib.request import pathname2url as real

        return real(pathname)

    stand_in = types.ModuleType("urllib.request", "urlseen's stand-in while w3lib.url loads")
    stand_in.pathname2url = pathname2url  # type: ignore[attr-defined]
    sys.modules["urllib.request"] = stand_in
    try:
        import w3lib.url
    except ImportError:
        pass
    finally:
        if sys.modules.get("urllib.request") is stand_in:
            del sys.modules["urllib.request"]
        if getattr(urllib, "request", None) is stand_in:
            del urllib.request
    import w3lib.url  # a no-op when the import above succeeded

    return w3lib.url.canonicalize_url


def _canonicalize_with_w3lib(url: str) -> str:
    text = url.strip(_C0_CONTROL_OR_SPACE)
    if not text:
        raise InvalidKeyError(f"an empty URL has no key: {_preview(url)}")
    if not text.isascii():
        _require_utf8(text)
    try:
        return _w3lib()(text)
    except Exception:
        # w3lib raises ValueError for what it cannot parse (a bad port, an unbalanced "[").
        # Any failure of a third-party parser on untrusted input must still leave the crawler
        # a key, so the stripped text serves as its own key.
        return text


def _verbatim(url: str) -> str:
    """The "none" profile: the text itself, once it is known to be hashable."""
    if not isinstance(url, str):
        raise InvalidKeyError(f"a URL must be str, not {type(url).__name__}")
    if not url:
        raise InvalidKeyError("an empty URL has no key: ''")
    if not url.isascii():
        _require_utf8(url)
    return url


def _require_utf8(text: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise InvalidKeyError(
            f"a URL with a lone surrogate at index {e.start} has no UTF-8 form: {_preview(text)}"
        ) from None


def _preview(text: str) -> str:
    return repr(text) if len(text) <= 80 else f"{text[:80]!r}... ({len(text)} chars)"


def _memoize(canonicalizer: Canonicalizer, size: int) -> Canonicalizer:
    """Wrap ``canonicalizer`` in an LRU cache of ``size`` entries keyed by the raw text."""
    cached = functools.lru_cache(maxsize=size)(canonicalizer)

    def memoized(url: str) -> str:
        if type(url) is not str or len(url) > _MEMO_MAX_CHARS:
            return canonicalizer(url)
        return cached(url)

    memoized.cache_info = cached.cache_info  # type: ignore[attr-defined]
    return memoized


def get_canonicalizer(profile: str = DEFAULT_PROFILE, *, memo_size: int = 0) -> Canonicalizer:
    """Return the function that turns a URL into its key under ``profile``.

    Args:
        profile: ``"w3lib"`` (Scrapy's rule, the default) or ``"none"`` (the text as is).
        memo_size: Remember the keys of this many recent distinct URLs (0: none). It pays
            off on streams with many exact repeats, such as a polled feed; the CLI uses
            ``DEFAULT_MEMO_SIZE``. Ignored for ``"none"``, which has nothing to save.

    Returns:
        A callable ``str -> str`` with the contract of ``canonicalize``; thread-safe.

    Raises:
        ConfigError: Unknown ``profile`` or a ``memo_size`` that is not an int >= 0.

    Example:
        >>> key = get_canonicalizer("w3lib", memo_size=DEFAULT_MEMO_SIZE)
        >>> key("HTTP://Example.com/a?b=2&a=1#frag")
        'http://example.com/a?a=1&b=2'
    """
    if profile not in PROFILES:
        choices = ", ".join(repr(p) for p in PROFILES)
        raise ConfigError(f"profile must be one of {choices}, not {profile!r}")
    if isinstance(memo_size, bool) or not isinstance(memo_size, int) or memo_size < 0:
        raise ConfigError(f"memo_size must be an int >= 0, not {memo_size!r}")
    if profile == "none":
        return _verbatim
    if memo_size == 0:
        return canonicalize
    return _memoize(canonicalize, memo_size)


# Lines per engine batch in add_urls: a few MB of joined text at a time, not the whole list.
_ADD_BATCH = 1 << 16


def add_urls(
    seen: SeenFilter, urls: Iterable[str | bytes], *, canonicalize: bool = True
) -> list[bool]:
    """Canonicalize and check-and-add a batch of URLs; return which were new, in order.

    The same answers as ``seen.add_many([canonicalize(url) for url in urls])`` (with
    ``canonicalize=False``: ``seen.add_many(urls)``), at the speed of ``urlseen dedup``: the
    URLs are joined into lines that the dedup job's C line engine keys (its canonicalizer in
    C, this module for the URLs it defers) and, for the Bloom and exact filters, hashes and
    probes without a Python object per URL. A bytes URL is read as UTF-8; one that is not
    UTF-8 is keyed by its bytes, as a line of ``urlseen dedup`` is.

    Raises:
        InvalidKeyError: a URL has no key (blank, lone surrogates, neither str nor bytes).
    """
    from urlseen import _core

    items = urls if isinstance(urls, Sequence) else list(urls)
    if not canonicalize:  # the filter's own add_many hashes the text as it is, in C
        return seen.add_many(items)
    engine = _core.LineEngine(True, sys.maxsize)  # no length limit, as canonicalize
    memo = get_canonicalizer(memo_size=DEFAULT_MEMO_SIZE)
    new: list[bool] = []
    for start in range(0, len(items), _ADD_BATCH):
        chunk = items[start : start + _ADD_BATCH]
        flags = _engine_add(seen, engine, chunk, memo)
        if flags is None:  # what the lines cannot say exactly: URL by URL
            flags = seen.add_many([_url_key(url) for url in chunk])
        new += flags
    return new


def _engine_add(
    seen: SeenFilter,
    engine: _core.LineEngine,
    chunk: Sequence[str | bytes],
    memo: Canonicalizer,
) -> list[bool] | None:
    """add_urls for one chunk through the engine, or None (nothing added) when its lines would
    not key every URL as _url_key does: a URL with a newline, or a blank one."""
    try:
        data = "\n".join(chunk).encode() if isinstance(chunk[0], str) else b"\n".join(chunk)  # type: ignore[arg-type]
    except (TypeError, UnicodeEncodeError):  # mixed types, lone surrogates: _url_key decides
        return None
    engine.feed(data)
    engine.end_input()
    if engine.next_batch(len(chunk) + 1, final=True) != len(chunk) or engine.empty:
        while engine.next_batch(len(chunk), final=True):  # the rest of the input, unused
            pass
        return None  # a URL of several lines, or a blank one (an error)
    if engine.ndeferred:
        engine.set_deferred([_url_key(line, memo) for line in engine.deferred()])
    step = getattr(seen, "dedup_step", None)

    def write(flags: list[bool] | None) -> None:
        if flags is not None:
            engine.set_flags(flags)

    if step is not None and step(engine, write, False) is not None:
        return engine.flags()
    return seen.add_many(engine.keys())


def _url_key(url: str | bytes, key: Canonicalizer = canonicalize) -> str | bytes:
    """add_urls' key for one URL (the reference its engine path matches)."""
    if isinstance(url, bytes):
        try:
            text = url.decode("utf-8")
        except UnicodeDecodeError:  # keyed as a line of `urlseen dedup`: without its "\r"
            return url[:-1] if url.endswith(b"\r") else url
        return key(text)
    return key(url)
