"""URL features for the similarity filter: site, depth, first directory, tail page.

The patent reads a URL as u1/u2/…/un (n >= 1, u1 = the site) and keeps four features of it:
the site u1, the depth n, the first-level directory u2 and the last segment un. It says
nothing about real-world URLs, so the edge cases are our own decisions, made on the canonical
form (urlseen.canonical) parsed by the standard library's ``urlsplit``:

- **site** = ``scheme://host[:port]``, user info dropped. Canonicalization lower-cases it and
  IDNA-encodes the host, so ``http://Bücher.de/`` and ``http://xn--bcher-kva.de/`` share a site.
- **path** is split on "/" and empty segments are dropped: ``/a//b`` reads like ``/a/b``.
  The depth n is 1 + the number of segments. ``http://x.com/`` has n = 1.
- **n = 1** (no path): there is no u2, so dir1 is the sentinel ``NO_DIR``; un = u1, so the tail
  is the site itself (plus its query, below).
- **n = 2**: u2 = un: ``http://x.com/a.html`` has dir1 = tail = ``a.html``.
- **trailing slash**: kept on the tail (``/a/b/`` has tail ``b/``), not on dir1, so a directory
  and a file of the same name differ only in their tail.
- **query**: part of the tail by default (``list.php?page=2``); ``query_in_tail=False`` ignores
  it, which also merges session-parameter variants. Canonicalization has sorted it already.
- **relative references** (``/a/b``, no scheme or host): the site is the sentinel ``RELATIVE``
  and the path is read as usual; no base URL is guessed.
- **opaque text**: anything without a host or a "/"-rooted path (``mailto:a@b``,
  ``view-source:https://…``, ``example.com/a`` without a scheme, text ``urlsplit`` refuses such
  as ``http://[::1/``, bytes that are not UTF-8) has no parts to compare, so the whole text is
  its site and its tail, n = 1 and dir1 = ``NO_DIR``: it matches only itself.

More features (the patent allows them): ``EXTRA_FEATURES`` holds named
functions of the parsed URL (``query_keys``, ``extension``); a filter lists the names it uses,
and its state file records them.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from urllib.parse import parse_qsl, urlsplit

from urlseen.canonical import get_canonicalizer
from urlseen.errors import ConfigError, InvalidKeyError

__all__ = [
    "DEFAULT_FEATURES",
    "EXTRA_FEATURES",
    "NO_DIR",
    "RELATIVE",
    "FeatureExtractor",
    "UrlParts",
]

NO_DIR = "\x00no-dir"
"""dir1 of a URL without one (n = 1): a value no real path segment can take."""
RELATIVE = "\x00relative"
"""The site of a relative reference (no scheme, no host)."""
_BYTES_PREFIX = "\x00bytes:"  # undecodable bytes, read as Latin-1: never equal to any text

# Recent keys' values are remembered: a polled feed repeats most URLs (urlsplit is the cost).
MEMO_SIZE = 4096
_MEMO_MAX_CHARS = 1024

DEFAULT_FEATURES: tuple[str, ...] = ("site", "depth", "dir1", "tail")
"""The patent's four features, in the order their bits are probed."""


@dataclass(frozen=True)
class UrlParts:
    """A URL split the way the features read it.

    Attributes:
        site: u1, ``scheme://host[:port]`` (or a sentinel, or the whole opaque text).
        segments: the non-empty path segments, u2 … un.
        trailing_slash: the path ended with "/" after at least one segment.
        query: the query string ("" if none).
        opaque: no parts could be read; site and tail are the whole text.
    """

    site: str
    segments: tuple[str, ...]
    trailing_slash: bool
    query: str
    opaque: bool = False

    @property
    def depth(self) -> int:
        """n in u1/u2/…/un."""
        return 1 + len(self.segments)


def _site_feature(parts: UrlParts, query_in_tail: bool) -> str:
    return parts.site


def _dir1_feature(parts: UrlParts, query_in_tail: bool) -> str:
    return parts.segments[0] if parts.segments else NO_DIR


def _tail_feature(parts: UrlParts, query_in_tail: bool) -> str:
    if parts.opaque:
        return parts.site
    tail = parts.segments[-1] if parts.segments else parts.site
    if parts.trailing_slash:
        tail += "/"
    if query_in_tail and parts.query:
        tail += "?" + parts.query
    return tail


def _depth_feature(parts: UrlParts, query_in_tail: bool) -> str:
    return str(parts.depth)


def _query_keys_feature(parts: UrlParts, query_in_tail: bool) -> str:
    """The sorted distinct parameter names: ``?b=1&a=2`` and ``?a=9&b=0`` share it."""
    names = {name for name, _ in parse_qsl(parts.query, keep_blank_values=True)}
    return "&".join(sorted(names))


def _extension_feature(parts: UrlParts, query_in_tail: bool) -> str:
    """The last segment's extension (``html``, ``php``), "" if it has none."""
    if not parts.segments or parts.trailing_slash:
        return ""
    name = parts.segments[-1]
    dot = name.rfind(".")
    return name[dot + 1 :].lower() if dot > 0 else ""


FeatureFunction = Callable[[UrlParts, bool], str]

_FEATURES: dict[str, FeatureFunction] = {
    "site": _site_feature,
    "depth": _depth_feature,
    "dir1": _dir1_feature,
    "tail": _tail_feature,
}
EXTRA_FEATURES: dict[str, FeatureFunction] = {
    "query_keys": _query_keys_feature,
    "extension": _extension_feature,
}
"""Features beyond the patent's four, by name."""


def split_url(text: str) -> UrlParts:
    """Split a canonical URL (or any text) into the parts the features read; never raises."""
    try:
        split = urlsplit(text)
    except ValueError:  # e.g. an unbalanced "[" in the host
        return UrlParts(text, (), False, "", opaque=True)
    path = split.path
    if split.netloc:
        site = f"{split.scheme}://" if split.scheme else "//"
        site += split.netloc.rpartition("@")[2]
    elif path.startswith("/"):
        site = f"{split.scheme}://" if split.scheme else RELATIVE  # file:///a, /a/b
    else:
        return UrlParts(text, (), False, "", opaque=True)
    segments = tuple(s for s in path.split("/") if s)
    return UrlParts(site, segments, bool(segments) and path.endswith("/"), split.query)


class FeatureExtractor:
    """Turns keys (str or bytes) into the feature values a similarity filter hashes.

    Args:
        features: names from DEFAULT_FEATURES and EXTRA_FEATURES, in probe order.
        query_in_tail: whether the query string belongs to the tail (default: yes, so that
            ?page=1 and ?page=2 are different tails).
        canonicalize: "w3lib" (canonicalize keys first, the default) or "none" (keys are
            canonical already, as in `urlseen dedup`).

    Raises:
        ConfigError: an unknown or repeated feature name, or an unknown profile.
    """

    def __init__(
        self,
        features: Sequence[str] = DEFAULT_FEATURES,
        *,
        query_in_tail: bool = True,
        canonicalize: str = "w3lib",
    ) -> None:
        if isinstance(features, str) or not features:
            raise ConfigError(f"features must be a non-empty list of names, not {features!r}")
        known = {**_FEATURES, **EXTRA_FEATURES}
        unknown = [f for f in features if f not in known]
        if unknown or len(set(features)) != len(features):
            raise ConfigError(
                f"features must be distinct names from {', '.join(known)}, not {list(features)!r}"
            )
        self.names: tuple[str, ...] = tuple(features)
        self.query_in_tail = bool(query_in_tail)
        self.profile = canonicalize
        self._functions = [known[name] for name in self.names]
        self._canonicalize = get_canonicalizer(canonicalize)
        self._memo = functools.lru_cache(maxsize=MEMO_SIZE)(self._values)

    def parts(self, key: object) -> UrlParts:
        """The parsed parts of one key.

        Raises:
            InvalidKeyError: key is not str or bytes, is empty, or has lone surrogates.
        """
        if isinstance(key, (bytes, bytearray, memoryview)):
            raw = bytes(key)
            if not raw:
                raise InvalidKeyError("an empty URL has no features")
            try:
                key = raw.decode("utf-8")
            except UnicodeDecodeError:
                return UrlParts(_BYTES_PREFIX + raw.decode("latin-1"), (), False, "", True)
        if not isinstance(key, str):
            raise InvalidKeyError(f"a URL must be str or bytes, not {type(key).__name__}")
        return split_url(self._canonicalize(key))

    def values(self, key: object) -> tuple[str, ...]:
        """The feature values of one key, in the order of `names` (depth as decimal text)."""
        if type(key) is str and 0 < len(key) <= _MEMO_MAX_CHARS:
            return self._memo(key)
        return self._values(key)

    def _values(self, key: object) -> tuple[str, ...]:
        parts = self.parts(key)
        return tuple(f(parts, self.query_in_tail) for f in self._functions)

    def extract(self, key: object) -> dict[str, str]:
        """The feature values of one key by name (what the audit log stores)."""
        return dict(zip(self.names, self.values(key), strict=True))
