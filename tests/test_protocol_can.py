"""protocol.can(obj, name), the check the dedup job makes without importing typing, answers as
isinstance on the runtime-checkable Protocol of that name does."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from urlseen import protocol
from urlseen.bloom.bloom import BloomFilter
from urlseen.bloom.growing import GrowingBloomFilter
from urlseen.exact.filter import ExactFilter
from urlseen.protocol import ClaimCounts, PassesClaimsOn


def _members(proto: type) -> set[str]:
    """A Protocol's own members: what isinstance on it looks for."""
    names = set(getattr(proto, "__annotations__", {}))
    names |= {name for name in vars(proto) if not name.startswith("_")}
    return names


@pytest.mark.parametrize("name", sorted(protocol.MEMBERS))
def test_members_are_the_protocols(name: str) -> None:
    assert set(protocol.MEMBERS[name]) == _members(getattr(protocol, name))


class _Claiming:
    wait_for_claims = False
    claim_counts = ClaimCounts()
    auto_acknowledge = True

    def acknowledge(self) -> int:
        return 0


class _HalfAcknowledging:
    auto_acknowledge = True  # and no acknowledge()


class _Passing(PassesClaimsOn):
    def __init__(self, part: object) -> None:
        self.part = part

    def _claimer(self) -> object:
        return self.part


def _objects(tmp_path: Path) -> list[Any]:
    return [
        BloomFilter(1000),
        GrowingBloomFilter(),
        ExactFilter(1000, path=tmp_path / "exact"),
        _Claiming(),
        _HalfAcknowledging(),
        _Passing(_Claiming()),
        object(),
    ]


def test_can_answers_as_isinstance(tmp_path: Path) -> None:
    objects = _objects(tmp_path)
    try:
        for obj in objects:
            for name in protocol.MEMBERS:
                assert protocol.can(obj, name) is isinstance(obj, getattr(protocol, name)), (
                    obj,
                    name,
                )
        assert protocol.can(objects[2], "DedupStep")  # the exact filter runs its batches
        assert _Passing(_Claiming()).claim_counts == ClaimCounts()
    finally:
        for obj in objects:
            close = getattr(obj, "close", None)
            if close is not None:
                close()
