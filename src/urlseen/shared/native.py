"""The former name of shared/bits.py, kept importable until its last users move to it."""

from urlseen.shared.bits import (
    BitsRead,
    fell_back,
    optimistic_args,
    seen_by_claims,
    server_ms,
)
from urlseen.shared.bits import OptimisticBackoff as Optimism

__all__ = ["BitsRead", "Optimism", "fell_back", "optimistic_args", "seen_by_claims", "server_ms"]
