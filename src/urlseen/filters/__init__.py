"""The filters: one algorithm per module, all implementing filters.base.SeenFilter."""

from urlseen.filters.base import FilterStats, Key, SeenFilter
from urlseen.filters.bloom import BloomFilter
from urlseen.filters.counting import CountingBloomFilter
from urlseen.filters.exact import CountersRebuiltWarning, ExactFilter
from urlseen.filters.library import FingerprintLibraryFilter

__all__ = [
    "BloomFilter",
    "CountersRebuiltWarning",
    "CountingBloomFilter",
    "ExactFilter",
    "FilterStats",
    "FingerprintLibraryFilter",
    "Key",
    "SeenFilter",
]
