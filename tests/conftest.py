"""Shared fixtures: state-file paths and the real-world URL development set.

The development set (/work/shared/data/urls-dev.txt.gz, see its README) lives outside the
repository and is never copied into it. Tests that need it skip with a clear reason when it is
missing locally, and fail when CI is set: CI must run them.
"""

from __future__ import annotations

import gzip
import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DEV_URLS = REPO_ROOT.parent / "shared" / "data" / "urls-dev.txt.gz"


def in_ci() -> bool:
    """True when the environment says we run in CI (CI=true, as most CI services set it)."""
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def dev_urls_path() -> Path:
    """Where the development set is: $URLSEEN_DEV_URLS, else <repo>/../shared/data/."""
    override = os.environ.get("URLSEEN_DEV_URLS")
    return Path(override) if override else DEFAULT_DEV_URLS


def _read_distinct(path: Path) -> list[str]:
    # One URL per line, UTF-8, LF endings (README). Keep first-appearance order so that every
    # run sees the same list; drop the empty line, which is not a URL.
    with gzip.open(path, "rt", encoding="utf-8", newline="\n") as lines:
        distinct = dict.fromkeys(line.rstrip("\n") for line in lines)
    distinct.pop("", None)
    return list(distinct)


def require_dev_urls_path() -> Path:
    """The development set's path; when it is missing, skip, or fail in CI."""
    path = dev_urls_path()
    if not path.is_file():
        if in_ci():
            pytest.fail(
                f"URL development set not found at {path} and CI is set: CI must run the "
                "real-data tests (set URLSEEN_DEV_URLS to its path)"
            )
        pytest.skip(
            f"URL development set not found at {path}; set URLSEEN_DEV_URLS to the path of "
            "urls-dev.txt.gz to run this test"
        )
    return path


@pytest.fixture(scope="session")
def dev_urls_optional() -> list[str] | None:
    """The distinct URLs of the development set, or None if it is missing (not in CI)."""
    path = dev_urls_path()
    if not path.is_file():
        if in_ci():
            pytest.fail(
                f"URL development set not found at {path} and CI is set: CI must run the "
                "real-data tests (set URLSEEN_DEV_URLS to its path)"
            )
        return None
    return _read_distinct(path)


@pytest.fixture(scope="session")
def dev_urls(dev_urls_optional: list[str] | None) -> list[str]:
    """The distinct URLs of the development set; skips (fails in CI) if it is missing."""
    if dev_urls_optional is None:
        require_dev_urls_path()
    assert dev_urls_optional is not None
    return dev_urls_optional


@pytest.fixture
def state_path(tmp_path: Path) -> Path:
    """A path for a state file that does not exist yet, in a fresh directory."""
    return tmp_path / "seen.urlseen"


@pytest.fixture
def other_state_path(tmp_path: Path) -> Path:
    """A second, distinct state-file path in the same directory as state_path."""
    return tmp_path / "other.urlseen"
