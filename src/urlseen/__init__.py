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

from importlib.metadata import PackageNotFoundError, version

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

try:
    __version__ = version("urlseen")
except PackageNotFoundError:  # running from a source tree without installing
    __version__ = "0+unknown"

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
