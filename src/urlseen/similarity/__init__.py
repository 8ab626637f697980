"""The similarity filter (spec D): a lossy, opt-in filter of near-duplicate URLs by features."""

from urlseen.similarity.features import (
    DEFAULT_FEATURES,
    EXTRA_FEATURES,
    FeatureExtractor,
    UrlParts,
)
from urlseen.similarity.filter import MODES, SimilarityFilter

__all__ = [
    "DEFAULT_FEATURES",
    "EXTRA_FEATURES",
    "MODES",
    "FeatureExtractor",
    "SimilarityFilter",
    "UrlParts",
]
