"""The filters: one algorithm per module, all implementing filters.base.SeenFilter."""

from urlseen.filters.base import FilterStats, Key, SeenFilter
from urlseen.filters.bloom import BloomFilter

__all__ = ["BloomFilter", "FilterStats", "Key", "SeenFilter"]
