"""Redis as a filter store: connections, names and keys, records, and batch scripts that survive
lost replies, vanished data and evicting servers.

Names and keys. Every key of a filter named N starts `urlseen:{E}` or, for the parts a Redis
Cluster spreads over its slots, `urlseen:{E#g}` (library groups) or `urlseen:{E:leaf:ID}`
(splittable-filter leaves), where E is N escaped (`escape`): every byte outside a small safe
set, ':' and '%' among them, is written %XX, and names have no '#' or braces. So the suffixes
a kind adds inside a hash tag can never be produced by another name, and no two names share a
key. The kind record
`urlseen:{E}:kind` says which kind N holds (record.lua), so one name never holds two kinds.

Vanished data. A filter's parameters carry a random instance id, written at creation into
every slot that holds its data; each batch script checks it before writing anything and
answers "URLSEEN-LOST ..." when the data is gone (Redis restarted without persistence,
FLUSHDB, eviction, a deleted key) or belongs to a filter made anew under the same name. The
client raises FilterLostError: a filter never re-creates itself mid-run. Opening a filter on a
server whose maxmemory-policy evicts any key (allkeys-*) is refused (EvictionPolicyError)
unless the caller allows it.

Lost replies. A script either answers from its claims (shared/claims.py: a call sent
again gets its first answer) or, for the few writes claims do not cover, leaves a receipt (its
answer, kept for two minutes under a batch id the client chose). When the connection drops
before the reply arrives, the client sends the same call again. Retries are bounded; after
them the caller gets RemoteError.
"""

from __future__ import annotations

import json
import re
import string
import time
import unicodedata
import uuid
import warnings
from collections.abc import Callable
from typing import Any, TypeVar
from urllib.parse import parse_qs, urlsplit, urlunsplit

from urlseen.errors import (
    ConfigError,
    EvictionPolicyError,
    FilterLostError,
    FormatError,
    MissingDependencyError,
    RemoteError,
)
from urlseen.shared import marks

RECEIPT_SECONDS = 120  # far longer than the retries take (~7 s); receipts cost ~1 B per URL
RETRIES = 8  # backoff 0.05 s doubling to 2 s: ~7 s, a Redis failover's order of magnitude
RETRY_SECONDS = 8.0  # no retry starts later than this after the first attempt (~7 s of backoff)
# A server that accepts connections and never answers fails a call after SOCKET_TIMEOUT, not
# never; a URL's own ?socket_timeout= / ?socket_connect_timeout= wins.
SOCKET_TIMEOUT = 10.0
CONNECT_TIMEOUT = 5.0
# URL query options whose values redis-py takes as given but cannot use.
_NUMBER_OPTIONS = ("socket_timeout", "socket_connect_timeout", "health_check_interval")
_WHOLE_OPTIONS = ("max_connections",)
_BOOL_OPTIONS = ("socket_keepalive", "retry_on_timeout", "ssl_check_hostname")
MAX_NAME_BYTES = 200
EVICTING_POLICIES = ("allkeys-lru", "allkeys-lfu", "allkeys-random")
T = TypeVar("T")

_SAFE = frozenset(string.ascii_letters + string.digits + "-._~/@+=,;!$&'()")
_LOST = "URLSEEN-LOST "


LOST_HELP = (
    "the filter's data in Redis is gone or was replaced (Redis restarted without "
    "persistence, FLUSHDB/FLUSHALL, eviction, or a deleted key), so its answers can no "
    "longer be trusted and this client stops instead of starting again from empty; check "
    "Redis's persistence and maxmemory-policy, then destroy the filter or use a new name"
)


def _redis() -> Any:
    try:
        import redis
    except ImportError as exc:  # pragma: no cover - the test extra installs it
        raise MissingDependencyError(
            "Redis support needs redis-py: pip install 'urlseen[redis]'"
        ) from exc
    return redis


# -- URLs and connections -------------------------------------------------------------------


def redacted(url: str) -> str:
    """url without its password (for messages)."""
    try:
        parts = urlsplit(url)
        if parts.password is None:
            return url
        user = parts.username or ""
        host = parts.netloc.rsplit("@", 1)[1]
        return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))
    except ValueError:
        return "<a malformed URL>"


def check_url(url: str) -> None:
    """Refuse a Redis URL that redis-py would misread or choke on, with the reason."""
    shown = redacted(url)

    def bad(why: str) -> ConfigError:
        return ConfigError(f"malformed Redis URL {shown!r}: {why}")

    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number in range
    except ValueError as exc:
        raise bad(str(exc)) from None
    schemes = ("redis", "rediss", "unix", "redis-cluster")
    if parts.scheme not in schemes:
        raise ConfigError(
            f"a Redis URL starts with redis://, rediss://, unix:// or redis-cluster://: {shown!r}"
        )
    try:
        query = parse_qs(parts.query, keep_blank_values=True, strict_parsing=bool(parts.query))
    except ValueError as exc:
        raise bad(f"its query: {exc}") from None
    _check_query(query, parts.scheme, bad)
    if parts.scheme in ("redis", "rediss", "redis-cluster") and parts.port == 0:
        raise bad("the port is a number from 1 to 65535, not 0")
    dbs = query.get("db", [])
    if parts.scheme == "unix":
        if not parts.path:
            raise bad("unix:// needs the socket's path, e.g. unix:///run/redis.sock")
    elif parts.path not in ("", "/"):
        if not re.fullmatch(r"/[0-9]+", parts.path):
            raise bad(f"the database is a number (redis://host:6379/0), not {parts.path!r}")
        dbs.append(parts.path[1:])
    for db in dbs:
        if not re.fullmatch(r"[0-9]+", db):
            raise bad(f"the database is a number, not {db!r}")
    if parts.scheme == "redis-cluster" and any(int(db) for db in dbs):
        raise bad("a Redis Cluster has database 0 only")


def connect(target: Any) -> Any:
    """A redis-py client from a URL or a client as is. redis://, rediss:// and unix:// name
    one server; redis-cluster://host:port (any node) a Redis Cluster."""
    redis = _redis()
    if isinstance(target, str):
        check_url(target)
        _build_unopened(redis, target)
        query = parse_qs(urlsplit(target).query)
        timeouts = {
            name: value
            for name, value in (
                ("socket_timeout", SOCKET_TIMEOUT),
                ("socket_connect_timeout", CONNECT_TIMEOUT),
            )
            if name not in query
        }
        try:
            if target.startswith("redis-cluster://"):
                url = "redis://" + target[len("redis-cluster://") :]
                return retrying(lambda: redis.RedisCluster.from_url(url, **timeouts), "connect")
            return redis.Redis.from_url(target, **timeouts)
        except ValueError as exc:
            raise ConfigError(f"malformed Redis URL {redacted(target)!r}: {exc}") from None
    if isinstance(target, (redis.Redis, redis.RedisCluster)):
        return target
    raise ConfigError(f"expected a Redis URL or a redis-py client, not {type(target).__name__}")


def _build_unopened(redis: Any, url: str) -> None:
    """Build, without opening, the connection redis-py would make from the URL: an option it
    does not take fails here, named, not as a traceback at the first command."""
    shown = redacted(url)
    if url.startswith("redis-cluster://"):
        url = "redis://" + url[len("redis-cluster://") :]
    try:
        pool = redis.ConnectionPool.from_url(url)
        pool.connection_class(**pool.connection_kwargs)
    except (TypeError, ValueError, redis.exceptions.RedisError) as exc:
        unknown = re.search(r"unexpected keyword argument '(\w+)'", str(exc))
        why = f"unknown option {unknown[1]!r}" if unknown else str(exc)
        raise ConfigError(f"malformed Redis URL {shown!r}: {why}") from None


def is_cluster(client: Any) -> bool:
    return type(client).__name__ == "RedisCluster"


def eviction_policies(client: Any) -> set[str]:
    """The maxmemory-policy of every server the client writes to (INFO memory)."""
    if is_cluster(client):
        replies = client.info("memory", target_nodes=client.PRIMARIES)
        infos = list(replies.values()) if "maxmemory_policy" not in replies else [replies]
    else:
        infos = [client.info("memory")]
    return {str(info.get("maxmemory_policy", "")) for info in infos}


def check_eviction(client: Any, allow: bool, what: str) -> None:
    """Refuse (EvictionPolicyError) a server that may evict any key, unless allowed. A server
    that does not say (INFO refused) is used with a warning."""
    if allow:
        return
    try:
        policies = retrying(lambda: eviction_policies(client), f"{what}: read maxmemory-policy")
    except RemoteError as exc:
        if isinstance(exc.__cause__, _redis().exceptions.ResponseError):
            warnings.warn(
                f"{what}: could not read the server's maxmemory-policy ({exc.__cause__}); "
                "make sure it never evicts the filter's keys (noeviction or volatile-*)",
                UserWarning,
                stacklevel=3,
            )
            return
        raise
    evicting = sorted(p for p in policies if p in EVICTING_POLICIES)
    if evicting:
        raise EvictionPolicyError(
            f"{what}: the Redis server's maxmemory-policy is {evicting[0]}, so it may evict "
            "the filter's keys, and a filter that loses keys forgets URLs or stops mid-run; "
            "set maxmemory-policy noeviction (or volatile-*: urlseen's filter keys never "
            "expire), or allow it explicitly (allow_eviction=True, --allow-eviction, "
            "URLSEEN_ALLOW_EVICTION) to stop with FilterLostError when eviction is noticed"
        )


def _check_query(
    query: dict[str, list[str]], scheme: str, bad: Callable[[str], ConfigError]
) -> None:
    """Refuse query values redis-py would misread or fail on late (a traceback at the first
    command): SSL options on a plain connection, values of the wrong form. Unknown names are
    left to redis-py itself (connect builds a connection from the URL first)."""
    for option, values in query.items():
        if option.startswith("ssl_") and scheme != "rediss":
            raise bad(f"{option} needs a TLS connection (rediss://)")
        for value in values:
            if option in _NUMBER_OPTIONS:
                try:
                    number = float(value)
                except ValueError:
                    number = -1.0
                if not number >= 0 or number == float("inf"):
                    raise bad(f"{option} is a number of seconds >= 0, not {value!r}")
            elif option in _WHOLE_OPTIONS and not re.fullmatch(r"[1-9][0-9]*", value):
                raise bad(f"{option} is a positive whole number, not {value!r}")
            elif option in _BOOL_OPTIONS and value.lower() not in _BOOLS:
                raise bad(f"{option} is true or false, not {value!r}")
            elif option == "ssl_cert_reqs" and value not in ("none", "optional", "required"):
                raise bad(f"ssl_cert_reqs is none, optional or required, not {value!r}")


_BOOLS = ("0", "1", "true", "false", "yes", "no", "y", "n", "on", "off")


# -- names and keys -------------------------------------------------------------------------


def check_name(name: object) -> str:
    """A filter's name: non-empty UTF-8 text of at most MAX_NAME_BYTES bytes, without braces,
    '#' or control characters (ConfigError saying which rule it breaks)."""
    if not isinstance(name, str):
        raise ConfigError(f"a filter name is a str, not {type(name).__name__}")
    if not name:
        raise ConfigError("a filter name is not empty")
    try:
        size = len(name.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise ConfigError(
            f"a filter name is UTF-8 text: {name!r} holds bytes that are not UTF-8 "
            f"(at character {exc.start})"
        ) from None
    if size > MAX_NAME_BYTES:
        raise ConfigError(f"a filter name has at most {MAX_NAME_BYTES} bytes, not {size}")
    if any(c in "{}#" or unicodedata.category(c) in ("Cc", "Zl", "Zp") for c in name):
        raise ConfigError(f"a filter name has no braces, '#' or control characters: {name!r}")
    return name


def escape(name: str) -> str:
    """The name as it appears inside a hash tag: every UTF-8 byte outside letters, digits and
    -._~/@+=,;!$&'() written %XX (so ':', '#', '%', glob characters and spaces are)."""
    return "".join(
        chr(b) if chr(b) in _SAFE else f"%{b:02X}" for b in check_name(name).encode("utf-8")
    )


def tagged(tag: str, part: str) -> str:
    """The key of `part` under the hash tag `tag` (an escaped name, maybe with a suffix)."""
    return f"urlseen:{{{tag}}}:{part}"


def key(name: str, part: str) -> str:
    """The Redis key of one part of filter `name`: all parts share the slot of its tag."""
    return tagged(escape(name), part)


# -- the record: kind, parameters, instance -------------------------------------------------


def new_instance() -> str:
    return uuid.uuid4().hex[:16]


def _parse_params(meta: str, raw: Any, fmt: str, noun: str) -> dict[str, Any]:
    try:
        params = json.loads(raw)
    except ValueError as exc:
        raise FormatError(f"Redis key {meta}: unreadable parameters") from exc
    if not isinstance(params, dict) or params.get("format") != fmt:
        if isinstance(params, dict) and str(params.get("format", "")).startswith(
            fmt.rsplit("/", 1)[0] + "/"
        ):
            raise FormatError(
                f"Redis key {meta}: a {noun} of format {params['format']!r}, made by another "
                f"version of urlseen (this one reads {fmt!r}): destroy it or use a new name"
            )
        raise FormatError(f"Redis key {meta}: not a urlseen {noun}")
    return params


def record(
    client: Any,
    name: str,
    kind: str,
    meta: str,
    fmt: str,
    noun: str,
    validate: Callable[[dict[str, Any]], None],
    create: dict[str, Any] | None = None,
    allocate: tuple[str, int] | None = None,
) -> dict[str, Any] | None:
    """The parameters of the `kind` called `name` (kept in the hash `meta`), created from
    `create` if the name is free (and `allocate`'s string allocated with them, atomically);
    None if the name is free and there is nothing to create.

    ConfigError if the name holds another kind; FormatError if its parameters are unreadable,
    of another format, refused by `validate` (the kind's own checks) or not urlseen's;
    FilterLostError if the record lost them.
    """
    script = load_script(client, "record.lua")
    text = "" if create is None else json.dumps(create, sort_keys=True)
    instance = "" if create is None else create["instance"]
    spare, nbytes = allocate or (key(name, "unused"), 0)
    args = [kind, text, instance, "read" if create is None else "create", nbytes]
    reply = retrying(
        lambda: script(keys=[key(name, "kind"), meta, spare], args=args), f"{noun} {name!r}: open"
    )
    if not reply:
        return None
    found = reply[0].decode()
    if found and found != kind:
        raise ConfigError(
            f"Redis holds a {found} filter named {name!r}, not a {kind}: a name holds one "
            "kind of filter (choose another name, or the kind it holds)"
        )
    if not reply[1]:
        raise FilterLostError(
            f"{noun} {name!r}: its kind record is there but its parameters ({meta}) are gone; "
            + LOST_HELP
        )
    params = _parse_params(meta, reply[1], fmt, noun)
    validate(params)
    instance = params.get("instance")
    if not isinstance(instance, str) or not instance:
        raise FormatError(f"Redis key {meta}: not a urlseen {noun} (no instance id)")
    if not found:
        raise FormatError(
            f"Redis key {meta}: a {noun} without a kind record, made by an older urlseen: "
            "destroy it or use a new name"
        )
    return params


def holds(client: Any, name: str, kind: str) -> bool:
    """Whether the name holds a filter of this kind (its kind record says so)."""
    found = retrying(lambda: client.get(key(name, "kind")), "exists")
    return found is not None and found.decode() == kind


def check_alive(
    what: str, meta: str, found: bytes | None, instance: str, data: str, length: int, nbytes: int
) -> None:
    """For a native read (no script): FilterLostError, as the batch scripts answer it, when the
    metadata `meta` read in the same snapshot is gone (`found` None) or holds another instance
    than the one opened, or the data string `data` is not `nbytes` long."""
    if found is None:
        detail = f"{meta} is gone"
    elif found.decode("utf-8", "replace") != instance:
        detail = f"{meta} belongs to another filter of the same name, created since"
    elif length != nbytes:
        detail = f"{data} is gone or damaged"
    else:
        return
    raise FilterLostError(f"{what}: {detail}; {LOST_HELP}")


# -- scripts --------------------------------------------------------------------------------


def load_script(client: Any, filename: str) -> Any:
    """A registered Lua script of shared/lua/ (EVALSHA, falling back to EVAL after a SCRIPT
    FLUSH), with what it needs put in front of it (urlseen.shared.scripts)."""
    from urlseen.shared.scripts import MARKED, SCRIPTS, lua_text

    script = SCRIPTS.get(filename)
    if script is not None:
        return client.register_script(script.source())
    front = lua_text("mark.lua") + "\n" if filename in MARKED else ""
    return client.register_script(front + lua_text(filename))


def retrying(call: Callable[[], T], what: str) -> T:
    """Run call, retrying connection errors with backoff; RemoteError when it keeps failing,
    FilterLostError when a script found the filter's data gone."""
    redis = _redis()
    # RedisClusterException: no node of a cluster answers (or the server is no cluster node)
    transient = (
        redis.exceptions.ConnectionError,
        redis.exceptions.TimeoutError,
        redis.exceptions.RedisClusterException,
    )
    refused = (redis.exceptions.AuthenticationError, redis.exceptions.AuthorizationError)
    delay, start = 0.05, time.monotonic()
    for attempt in range(RETRIES + 1):
        try:
            return call()
        except refused as exc:
            raise RemoteError(
                f"{what}: Redis refused the URL's credentials ({exc}); check the user and "
                "password in the URL"
            ) from exc
        except transient as exc:
            if "not enabled" in str(exc):  # a plain server named as redis-cluster://
                raise RemoteError(f"{what}: {exc}") from exc
            if attempt == RETRIES or time.monotonic() - start + delay > RETRY_SECONDS:
                raise RemoteError(
                    f"{what}: Redis unreachable after {attempt} retries in "
                    f"{time.monotonic() - start:.1f} s ({exc})"
                ) from exc
            time.sleep(delay)
            delay = min(delay * 2, 2.0)
        except redis.exceptions.ResponseError as exc:
            text = str(exc)  # a pipeline's error names the command first
            named = marks.script_error(what, text)
            if named is not None:
                raise named from exc
            if _LOST in text:
                detail = text[text.index(_LOST) + len(_LOST) :]
                raise FilterLostError(f"{what}: {detail}; {LOST_HELP}") from exc
            raise RemoteError(f"{what}: Redis error: {exc}") from exc
        except redis.exceptions.RedisError as exc:
            raise RemoteError(f"{what}: Redis error: {exc}") from exc
    raise AssertionError("unreachable")  # pragma: no cover
