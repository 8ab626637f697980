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
from typing import TYPE_CHECKING, Any

from urlseen.errors import (
    ClosedError,
    ConfigError,
    FormatError,
    IncompatibleFiltersError,
    InvalidKeyError,
    MissingDependencyError,
    ReadOnlyError,
    StateInUseError,
    UrlseenError,
)

if TYPE_CHECKING:
    from urlseen.filters import (
        BloomFilter,
        CountersRebuiltWarning,
        ExactFilter,
        FilterStats,
        FingerprintLibraryFilter,
        MultiDimensionalBloomFilter,
        QueryAnyWarning,
        RotatingBloomFilter,
        SeenFilter,
        SplittableBloomFilter,
    )
    from urlseen.filters.redis_bloom import RedisBloomFilter
    from urlseen.similarity import SimilarityFilter
    from urlseen.stores.mmapfile import UncleanShutdownWarning
    from urlseen.stores.redis_library import RedisLibrary
    from urlseen.stores.redis_store import EvictionPolicyError, FilterLostError, RemoteError

    __version__: str

# The filters are imported on first use (PEP 562), so that a command that needs one filter
# (`urlseen dedup`) does not start by importing all of them, SQLite and Redis clients included.
_LAZY = {
    "BloomFilter": "urlseen.filters.bloom",
    "CountersRebuiltWarning": "urlseen.filters.exact",
    "ExactFilter": "urlseen.filters.exact",
    "FilterStats": "urlseen.filters.base",
    "FingerprintLibraryFilter": "urlseen.filters.library_only",
    "MultiDimensionalBloomFilter": "urlseen.filters.mdbf",
    "QueryAnyWarning": "urlseen.filters.mdbf",
    "RotatingBloomFilter": "urlseen.filters.rotating",
    "SeenFilter": "urlseen.filters.base",
    "SplittableBloomFilter": "urlseen.filters.dsbf",
    "RedisBloomFilter": "urlseen.filters.redis_bloom",
    "SimilarityFilter": "urlseen.similarity",
    "UncleanShutdownWarning": "urlseen.stores.mmapfile",
    "RedisLibrary": "urlseen.stores.redis_library",
    "EvictionPolicyError": "urlseen.stores.redis_store",
    "FilterLostError": "urlseen.stores.redis_store",
    "RemoteError": "urlseen.stores.redis_store",
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
