"""urlseen: the URL-seen test for web crawlers.

"Have I already got this URL?" answered fast, in bounded memory, by the Bloom-filter family,
with a C core. Start with BloomFilter; canonicalize URLs with urlseen.canonical.

Example:
    >>> import urlseen
    >>> seen = urlseen.BloomFilter(capacity=1_000_000, error_rate=0.001)
    >>> seen.add("https://example.com/a")
    True
    >>> "https://example.com/a" in seen
    True
"""

from __future__ import annotations

import importlib

from urlseen.errors import (
    ClosedError,
    ConfigError,
    CountersRebuiltWarning,
    EvictionPolicyError,
    FilterLostError,
    FormatError,
    IncompatibleFiltersError,
    InvalidKeyError,
    MissingDependencyError,
    QueryAnyWarning,
    ReadOnlyError,
    RemoteError,
    StateInUseError,
    UncleanShutdownWarning,
    UrlseenError,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from urlseen.bloom.bloom import BloomFilter
    from urlseen.bloom.mdbf import MultiDimensionalBloomFilter
    from urlseen.bloom.rotating import RotatingBloomFilter
    from urlseen.exact.filter import ExactFilter
    from urlseen.exact.library_filter import FingerprintLibraryFilter
    from urlseen.protocol import FilterStats, SeenFilter
    from urlseen.shared.bloom import RedisBloomFilter
    from urlseen.shared.library import RedisLibrary
    from urlseen.similarity import SimilarityFilter
    from urlseen.splittable.filter import SplittableBloomFilter

    __version__: str

# The filters are imported on first use (PEP 562), so that a command that needs one filter
# (`urlseen dedup`) does not start by importing all of them, SQLite and Redis clients included.
_LAZY = {
    "BloomFilter": "urlseen.bloom.bloom",
    "ExactFilter": "urlseen.exact.filter",
    "FilterStats": "urlseen.protocol",
    "FingerprintLibraryFilter": "urlseen.exact.library_filter",
    "MultiDimensionalBloomFilter": "urlseen.bloom.mdbf",
    "RotatingBloomFilter": "urlseen.bloom.rotating",
    "SeenFilter": "urlseen.protocol",
    "SplittableBloomFilter": "urlseen.splittable.filter",
    "RedisBloomFilter": "urlseen.shared.bloom",
    "SimilarityFilter": "urlseen.similarity",
    "RedisLibrary": "urlseen.shared.library",
}


def __getattr__(name: str) -> Any:
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version

        try:
            value: Any = version("urlseen")
        except PackageNotFoundError:  # running from a source tree without installing
            value = "0+unknown"
    elif name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
    else:
        raise AttributeError(f"module 'urlseen' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


# What the README documents; the plumbing (stores, counting filters, libraries) is imported
# from its own module.
__all__ = [
    "BloomFilter",
    "ClosedError",
    "ConfigError",
    "CountersRebuiltWarning",
    "EvictionPolicyError",
    "ExactFilter",
    "FilterLostError",
    "FilterStats",
    "FingerprintLibraryFilter",
    "FormatError",
    "IncompatibleFiltersError",
    "InvalidKeyError",
    "MissingDependencyError",
    "MultiDimensionalBloomFilter",
    "QueryAnyWarning",
    "ReadOnlyError",
    "RedisBloomFilter",
    "RedisLibrary",
    "RemoteError",
    "RotatingBloomFilter",
    "SeenFilter",
    "SimilarityFilter",
    "SplittableBloomFilter",
    "StateInUseError",
    "UncleanShutdownWarning",
    "UrlseenError",
    "__version__",
]
