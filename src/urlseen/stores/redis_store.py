"""Redis as a filter store: connections, key names, and batch scripts that survive lost replies.

Every key of one filter shares the hash tag `{name}`, so a filter lives in one Redis Cluster
slot and a script can touch all of its keys atomically. A batch script writes a receipt (its
answer, kept for two minutes under a batch id the client chose); when the connection drops before
the reply arrives, the client sends the same batch again and gets the same answer, so a URL
reported new is never reported seen because its first report was lost. Retries are bounded;
after them the caller gets RemoteError and the batch may or may not have been applied (its
receipt says which, if the caller retries with the same id).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from importlib import resources
from typing import Any, TypeVar

from urlseen.errors import ConfigError, FormatError, MissingDependencyError, UrlseenError

RECEIPT_SECONDS = 120  # far longer than the retries take (~7 s); receipts cost ~1 B per URL
RETRIES = 8  # backoff 0.05 s doubling to 2 s: ~7 s, a Redis failover's order of magnitude
T = TypeVar("T")


class RemoteError(UrlseenError, ConnectionError):
    """Redis could not be reached (after retries) or answered with an error."""


def _redis() -> Any:
    try:
        import redis
    except ImportError as exc:  # pragma: no cover - the test extra installs it
        raise MissingDependencyError(
            "Redis support needs redis-py: pip install 'urlseen[redis]'"
        ) from exc
    return redis


def connect(target: Any) -> Any:
    """A redis-py client from a URL or a client as is. redis://, rediss:// and unix:// name
    one server; redis-cluster://host:port (any node) a Redis Cluster."""
    redis = _redis()
    if isinstance(target, str):
        if target.startswith("redis-cluster://"):
            return redis.RedisCluster.from_url("redis://" + target[len("redis-cluster://") :])
        if not target.startswith(("redis://", "rediss://", "unix://")):
            raise ConfigError(
                "a Redis URL starts with redis://, rediss://, unix:// or redis-cluster://: "
                f"{target!r}"
            )
        return redis.Redis.from_url(target)
    if isinstance(target, (redis.Redis, redis.RedisCluster)):
        return target
    raise ConfigError(f"expected a Redis URL or a redis-py client, not {type(target).__name__}")


def check_name(name: object) -> str:
    if not isinstance(name, str) or not name or any(c in name for c in "{}\n\r"):
        raise ConfigError(f"a filter name is a non-empty str without braces or newlines: {name!r}")
    return name


def key(name: str, part: str) -> str:
    """The Redis key of one part of filter `name`: all parts share the slot of `{name}`."""
    return f"urlseen:{{{name}}}:{part}"


def params_exist(client: Any, meta: str) -> bool:
    """Whether the hash `meta` holds a thing's parameters (whether the thing exists)."""
    return bool(retrying(lambda: client.hexists(meta, "params"), "exists"))


def load_params(client: Any, meta: str, fmt: str, noun: str) -> dict[str, Any] | None:
    """The JSON parameters kept in the hash `meta`, or None if there are none yet.

    Raises FormatError if they are unreadable or not of format `fmt` (`noun` names the thing);
    the caller checks the fields its format promises.
    """
    raw = retrying(lambda: client.hget(meta, "params"), "open")
    if raw is None:
        return None
    try:
        params = json.loads(raw)
    except ValueError as exc:
        raise FormatError(f"Redis key {meta}: unreadable parameters") from exc
    if not isinstance(params, dict) or params.get("format") != fmt:
        raise FormatError(f"Redis key {meta}: not a urlseen {noun}")
    return params


def check_given(stored: dict[str, Any], given: dict[str, Any], what: str) -> None:
    """Refuse explicit values that differ from the stored ones (None: not given)."""
    for field, value in given.items():
        if value is not None and value != stored[field]:
            raise ConfigError(f"{what} exists with {field}={stored[field]!r}, not {value!r}")


def receipt_key(name: str) -> str:
    return key(name, f"receipt:{uuid.uuid4().hex}")


def load_script(client: Any, filename: str) -> Any:
    """A registered Lua script (EVALSHA, falling back to EVAL after a SCRIPT FLUSH)."""
    source = resources.files("urlseen.stores").joinpath("lua", filename).read_text()
    return client.register_script(source)


def retrying(call: Callable[[], T], what: str) -> T:
    """Run call, retrying connection errors with backoff; RemoteError when it keeps failing."""
    redis = _redis()
    transient = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError)
    delay = 0.05
    for attempt in range(RETRIES + 1):
        try:
            return call()
        except transient as exc:
            if attempt == RETRIES:
                raise RemoteError(
                    f"{what}: Redis unreachable after {RETRIES} retries ({exc})"
                ) from exc
            time.sleep(delay)
            delay = min(delay * 2, 2.0)
        except redis.exceptions.RedisError as exc:
            raise RemoteError(f"{what}: Redis error: {exc}") from exc
    raise AssertionError("unreachable")  # pragma: no cover
