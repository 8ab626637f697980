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
    CountingBloomFilter,
    ExactFilter,
    FilterStats,
    FingerprintLibraryFilter,
    MultiDimensionalBloomFilter,
    QueryAnyWarning,
    RotatingBloomFilter,
    SeenFilter,
    SplittableBloomFilter,
)
from urlseen.similarity import SimilarityFilter
from urlseen.stores.library_protocol import FingerprintLibrary
from urlseen.stores.memory_library import MemoryLibrary
from urlseen.stores.mmapfile import UncleanShutdownWarning
from urlseen.stores.sqlite_library import SQLiteLibrary
from urlseen.stores.url_db import SQLiteUrlDB

try:
    __version__ = version("urlseen")
except PackageNotFoundError:  # running from a source tree without installing
    __version__ = "0+unknown"

__all__ = [
    "BloomFilter",
    "ClosedError",
    "ConfigError",
    "CountersRebuiltWarning",
    "CountingBloomFilter",
    "ExactFilter",
    "FilterStats",
    "FingerprintLibrary",
    "FingerprintLibraryFilter",
    "FormatError",
    "IncompatibleFiltersError",
    "InvalidKeyError",
    "MemoryLibrary",
    "MissingDependencyError",
    "MultiDimensionalBloomFilter",
    "QueryAnyWarning",
    "ReadOnlyError",
    "RotatingBloomFilter",
    "SQLiteLibrary",
    "SQLiteUrlDB",
    "SeenFilter",
    "SimilarityFilter",
    "SplittableBloomFilter",
    "StateInUseError",
    "UncleanShutdownWarning",
    "UrlseenError",
    "__version__",
]
