"""The filters: one algorithm per module, all implementing filters.base.SeenFilter.

Each filter's module is imported on first use (PEP 562): opening one kind of filter does not
import the others.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from urlseen.filters.base import FilterStats, Key, SeenFilter

if TYPE_CHECKING:
    from urlseen.filters.bloom import BloomFilter
    from urlseen.filters.counting import CountingBloomFilter
    from urlseen.filters.dsbf import SplittableBloomFilter
    from urlseen.filters.exact import CountersRebuiltWarning, ExactFilter
    from urlseen.filters.library_only import FingerprintLibraryFilter
    from urlseen.filters.mdbf import MultiDimensionalBloomFilter, QueryAnyWarning
    from urlseen.filters.rotating import RotatingBloomFilter

_LAZY = {
    "BloomFilter": "bloom",
    "CountingBloomFilter": "counting",
    "SplittableBloomFilter": "dsbf",
    "CountersRebuiltWarning": "exact",
    "ExactFilter": "exact",
    "FingerprintLibraryFilter": "library_only",
    "MultiDimensionalBloomFilter": "mdbf",
    "QueryAnyWarning": "mdbf",
    "RotatingBloomFilter": "rotating",
}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'urlseen.filters' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"urlseen.filters.{_LAZY[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


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
