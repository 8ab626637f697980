"""Parameters kept in Redis (shared/client.py): the shared Bloom filter and the shared
library read, refuse and compare them the same way, each naming itself in the errors."""

from __future__ import annotations

import re
from typing import Any

import pytest
import redis

from urlseen import ConfigError, FormatError
from urlseen.shared import client as redis_store
from urlseen.shared.bloom import RedisBloomFilter
from urlseen.shared.library import RedisLibrary

# kind -> (class, the key part holding its params, the noun in "not a urlseen ...")
KINDS: dict[str, tuple[Any, str, str]] = {
    "bloom": (RedisBloomFilter, "meta", "Redis Bloom filter"),
    "library": (RedisLibrary, "library", "fingerprint library"),
}


@pytest.fixture(params=sorted(KINDS))
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def test_exists_only_once_created(kind: str, redis_url: str, redis_name: str) -> None:
    cls, _, _ = KINDS[kind]
    assert not cls.exists(redis_url, redis_name)
    cls(redis_url, redis_name, 1000).close()
    assert cls.exists(redis_url, redis_name)


def test_an_explicit_parameter_that_differs_is_refused(
    kind: str, redis_url: str, redis_name: str
) -> None:
    cls, _, _ = KINDS[kind]
    cls(redis_url, redis_name, 1000).close()
    cls(redis_url, redis_name).close()  # none given: the stored ones
    cls(redis_url, redis_name, 1000).close()  # the same: fine
    noun = "filter" if kind == "bloom" else "library"
    message = f"{noun} {redis_name!r} exists with capacity=1000, not 2000"
    with pytest.raises(ConfigError, match=re.escape(message)):
        cls(redis_url, redis_name, 2000)


@pytest.mark.parametrize(
    ("text", "problem"),
    [("{not json", "unreadable parameters"), ('{"format": "other/1"}', "not a urlseen {noun}"),
     ("[1, 2]", "not a urlseen {noun}")],
)  # fmt: skip
def test_unreadable_or_foreign_parameters_are_refused(
    kind: str, redis_url: str, redis_name: str, text: str, problem: str
) -> None:
    cls, part, noun = KINDS[kind]
    meta = redis_store.key(redis_name, part)
    redis.Redis.from_url(redis_url).hset(meta, "params", text)
    with pytest.raises(FormatError) as info:
        cls(redis_url, redis_name)
    assert str(info.value) == f"Redis key {meta}: {problem.format(noun=noun)}"
