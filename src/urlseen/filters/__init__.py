"""The filters: one algorithm per module, all implementing filters.base.SeenFilter."""

from urlseen.filters.base import FilterStats, Key, SeenFilter
from urlseen.filters.bloom import BloomFilter
from urlseen.filters.counting import CountingBloomFilter
from urlseen.filters.dsbf import SplittableBloomFilter
from urlseen.filters.exact import CountersRebuiltWarning, ExactFilter
from urlseen.filters.library_only import FingerprintLibraryFilter
from urlseen.filters.mdbf import MultiDimensionalBloomFilter, QueryAnyWarning
from urlseen.filters.rotating import RotatingBloomFilter

__all__ = [
    "BloomFilter",
    "CountersRebuiltWarning",
    "CountingBloomFilter",
    "ExactFilter",
    "FilterStats",
    "FingerprintLibraryFilter",
    "Key",
    "MultiDimensionalBloomFilter",
    "QueryAnyWarning",
    "RotatingBloomFilter",
    "SeenFilter",
    "SplittableBloomFilter",
]
