"""One parameter list per filter: create(path, ...) is the constructor with path=path, so its
parameters are the constructor's (filters/_persistent.creator)."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from urlseen import (
    BloomFilter,
    ConfigError,
    ExactFilter,
    FingerprintLibraryFilter,
    MultiDimensionalBloomFilter,
    RotatingBloomFilter,
    SimilarityFilter,
)
from urlseen.bloom.counting import CountingBloomFilter
from urlseen.exact.memory_library import MemoryLibrary

FILTERS = [
    BloomFilter,
    CountingBloomFilter,
    MultiDimensionalBloomFilter,
    RotatingBloomFilter,
    SimilarityFilter,
    ExactFilter,
    FingerprintLibraryFilter,
]


@pytest.mark.parametrize("kind", FILTERS, ids=lambda k: k.__name__)
def test_create_takes_the_constructors_parameters(kind: type) -> None:
    made = inspect.signature(kind)
    create = inspect.signature(kind.create)
    first, *rest = create.parameters.values()
    assert first.name == "path" and first.kind is inspect.Parameter.POSITIONAL_ONLY
    assert rest == [p for p in made.parameters.values() if p.name != "path"]
    assert "path" in made.parameters
    assert kind.create.__doc__ and kind.create.__qualname__ == f"{kind.__name__}.create"


@pytest.mark.parametrize("kind", FILTERS, ids=lambda k: k.__name__)
def test_create_is_the_constructor_with_a_path(kind: type, tmp_path: Path) -> None:
    args = () if kind is FingerprintLibraryFilter else (1000,)
    with kind.create(tmp_path / "a", *args) as by_create:
        assert by_create.add("https://example.com/a")
        assert type(by_create) is kind
    with kind(*args, path=tmp_path / "b") as by_constructor:
        assert by_constructor.add("https://example.com/a")
    assert sorted(p.name for p in (tmp_path / "a").parent.iterdir()) == ["a", "b"]
    with pytest.raises(FileExistsError):
        kind.create(tmp_path / "a", *args)


def test_create_options_reach_the_filter(tmp_path: Path) -> None:
    with BloomFilter.create(tmp_path / "b", 1000, 0.01, layout="standard", seed=7) as f:
        assert (f.capacity, f.error_rate, f.seed) == (1000, 0.01, 7)
        assert f.stats().details["layout"] == "standard"
    with BloomFilter.create(tmp_path / "b", 500, overwrite=True) as f:
        assert f.capacity == 500
    with ExactFilter.create(tmp_path / "e", 1000, cache_entries=0, write_back=False) as f:
        assert f.stats().details["cache_entries"] == 0


@pytest.mark.parametrize("kind", [ExactFilter, FingerprintLibraryFilter], ids=lambda k: k.__name__)
def test_a_folder_keeps_its_own_library(kind: type, tmp_path: Path) -> None:
    args = () if kind is FingerprintLibraryFilter else (1000,)
    with pytest.raises(ConfigError, match="keeps its own library"):
        kind(*args, library=MemoryLibrary(), path=tmp_path / "f")
    assert not (tmp_path / "f").exists()
