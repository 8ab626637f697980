"""The similarity filter (patent CN106407485): a lossy, opt-in filter of near-duplicates."""

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
