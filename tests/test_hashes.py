"""Hash names and seeds (hashes.py): every filter kind accepts the same ones and
refuses the rest with the same message, and state files with others are refused."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from test_format import edit_params
from urlseen import BloomFilter, ConfigError, ExactFilter, FingerprintLibraryFilter, FormatError
from urlseen.bloom.counting import CountingBloomFilter
from urlseen.bloom.mdbf import MultiDimensionalBloomFilter
from urlseen.bloom.rotating import RotatingBloomFilter
from urlseen.hashes import DEFAULT_HASH, HASHES

KINDS: dict[str, Callable[..., Any]] = {
    "bloom": BloomFilter,
    "counting": CountingBloomFilter,
    "mdbf": MultiDimensionalBloomFilter,
    "rotating": RotatingBloomFilter,
}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_kind_takes_every_hash_and_refuses_others(kind: str) -> None:
    make = KINDS[kind]
    for name in HASHES:
        seen = make(100, 0.01, hash=name, seed=2**32 - 1)
        assert seen.add("https://example.com/") and not seen.add("https://example.com/")
        seen.close()
    message = f"hash must be one of {', '.join(HASHES)}, not 'sha1'"
    with pytest.raises(ConfigError, match=re.escape(message)):
        make(100, 0.01, hash="sha1")


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("seed", [-1, 2**32, True, 1.0, "0"])
def test_every_kind_refuses_a_bad_seed(kind: str, seed: object) -> None:
    message = f"seed must be an int in [0, 2**32), not {seed!r}"
    with pytest.raises(ConfigError, match=re.escape(message)):
        KINDS[kind](100, 0.01, seed=seed)


@pytest.mark.parametrize("kind", ["bloom", "counting", "mdbf"])
@pytest.mark.parametrize(
    ("field", "value", "problem"),
    [("hash", "sha1", "unknown hash 'sha1'"), ("seed", 2**32, f"invalid seed {2**32}")],
)
def test_a_state_file_with_an_unknown_hash_or_seed_is_refused(
    kind: str, field: str, value: object, problem: str, tmp_path: Path
) -> None:
    path = tmp_path / "f.urlseen"
    KINDS[kind].create(path, 100, 0.01).close()  # type: ignore[attr-defined]
    edit_params(path, **{field: value})
    with pytest.raises(FormatError, match=re.escape(f"{path}: {problem}")):
        KINDS[kind].open(path)  # type: ignore[attr-defined]


def test_the_default_hash_is_one_of_them() -> None:
    assert DEFAULT_HASH in HASHES


def test_the_exact_filters_refuse_another_fingerprint_before_writing(tmp_path: Path) -> None:
    message = re.escape("hash must be 'md5' or 'xxh3_128', not 'sha1'")
    for folder, make in [
        (None, lambda: ExactFilter(100, hash="sha1")),
        (None, lambda: FingerprintLibraryFilter(hash="sha1")),
        (tmp_path / "a", lambda: ExactFilter.create(tmp_path / "a", 100, hash="sha1")),
        (tmp_path / "b", lambda: FingerprintLibraryFilter.create(tmp_path / "b", hash="sha1")),
    ]:
        with pytest.raises(ConfigError, match=message):
            make()
        if folder is not None:  # refused before the library file was made
            assert not (folder / "library.sqlite").exists()
