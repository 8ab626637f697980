"""The URLSEEN_* settings of Scrapy's integrations read and typed, and scrapy-redis's and
scrapy-redis-bloomfilter's settings translated."""

from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING, Any

from urlseen import kinds
from urlseen.errors import ConfigError

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings

BLOOM_KINDS = ("bloom", "dsbf")  # kinds sized by bits and hashes, as scrapy-redis-bloomfilter's
BLOOMFILTER_DEFAULTS = (30, 6)  # scrapy-redis-bloomfilter's BLOOMFILTER_BIT, _HASH_NUMBER

logger = logging.getLogger("scrapy.dupefilters")  # Scrapy's dupefilter logger, as RFPDupeFilter
_warned: set[str] = set()


_SETTINGS = {"filter": "URLSEEN_FILTER", "redis": "URLSEEN_REDIS_URL", "name": "URLSEEN_REDIS_NAME"}


def kind_settings(settings: BaseSettings) -> dict[str, Any]:
    """The kind options given as settings (URLSEEN_LAYOUT, URLSEEN_LEASE, ...), typed; a flag
    set False counts as not given."""
    given: dict[str, Any] = {}
    for name, option in kinds.OPTIONS.items():
        value = typed(settings, setting_name(name), option.type)
        if value is not None and value is not False:
            given[name] = value
    return given


_READERS: dict[type, tuple[str, str]] = {
    bool: ("getbool", "true or false"),
    int: ("getint", "a whole number"),
    float: ("getfloat", "a number"),
}


def typed(settings: BaseSettings, setting: str, kind: type) -> Any:
    """A setting read as its type (None when not set); ConfigError naming the setting when
    its value is not of that type."""
    value = settings.get(setting)
    if value is None or kind not in _READERS:
        return value
    method, noun = _READERS[kind]
    try:
        typed = getattr(settings, method)(setting)
    except (TypeError, ValueError):
        raise ConfigError(f"{setting} must be {noun}, not {value!r}") from None
    if kind is not bool and isinstance(value, bool):
        raise ConfigError(f"{setting} must be {noun}, not {value!r}")
    return typed


def setting_name(name: str) -> str:
    """A filter parameter's name as a Scrapy setting, for messages."""
    return _SETTINGS.get(name, f"URLSEEN_{name.upper()}")


def _warn_once(message: str, *args: object) -> None:
    if message not in _warned:
        _warned.add(message)
        logger.warning(message, *args)


def scrapy_redis_url(settings: BaseSettings) -> str:
    """The Redis that scrapy-redis's scheduler uses (REDIS_URL, else REDIS_HOST / REDIS_PORT /
    REDIS_DB and REDIS_PARAMS' password), where its own dupefilter would keep its set."""
    url = settings.get("REDIS_URL")
    if url:
        return str(url)
    params = settings.getdict("REDIS_PARAMS")
    password = params.get("password")
    auth = f":{password}@" if password else ""
    host = settings.get("REDIS_HOST") or params.get("host") or "localhost"
    port = settings.get("REDIS_PORT") or params.get("port") or 6379
    db = settings.get("REDIS_DB") or params.get("db") or 0
    return f"redis://{auth}{host}:{port}/{db}"


def bloomfilter_in_use(settings: BaseSettings) -> bool:
    """Whether the crawl was set up for scrapy-redis-bloomfilter (its scheduler, or its
    BLOOMFILTER_* settings): then its users' stat, bloomfilter/filtered, is counted too."""
    scheduler = settings.get("SCHEDULER")
    path = scheduler if isinstance(scheduler, str) else getattr(scheduler, "__module__", "")
    return str(path).startswith("scrapy_redis_bloomfilter") or any(
        settings.get(name) is not None for name in ("BLOOMFILTER_BIT", "BLOOMFILTER_HASH_NUMBER")
    )


def translate_bloomfilter(
    settings: BaseSettings, kind: str, capacity: int | None, error_rate: float | None
) -> tuple[int | None, float | None, dict[str, Any]]:
    """scrapy-redis-bloomfilter's BLOOMFILTER_BIT (m = 2**bit bits) and BLOOMFILTER_HASH_NUMBER
    (k hashes) as urlseen's sizing: for a Bloom kind, the capacity at which m bits and k hashes
    are the optimum (m ln 2 / k) and that optimum's error rate (2**-k), in the standard layout:
    the same bits and hashes. Other kinds have no bits to size: warned once, ignored."""
    bit, hashes = settings.get("BLOOMFILTER_BIT"), settings.get("BLOOMFILTER_HASH_NUMBER")
    if bit is None and hashes is None:
        return capacity, error_rate, {}
    bit = settings.getint("BLOOMFILTER_BIT", BLOOMFILTER_DEFAULTS[0])
    hashes = settings.getint("BLOOMFILTER_HASH_NUMBER", BLOOMFILTER_DEFAULTS[1])
    if kind not in BLOOM_KINDS:
        _warn_once(
            "BLOOMFILTER_BIT and BLOOMFILTER_HASH_NUMBER size scrapy-redis-bloomfilter's Bloom "
            "filter; URLSEEN_FILTER %r never drops a request and has no bit array to size, so "
            "they are ignored (URLSEEN_FILTER = 'bloom' translates them; URLSEEN_CAPACITY sizes "
            "any filter)",
            kind,
        )
        return capacity, error_rate, {}
    if capacity is not None or error_rate is not None:
        _warn_once(
            "BLOOMFILTER_BIT and BLOOMFILTER_HASH_NUMBER ignored: URLSEEN_CAPACITY or "
            "URLSEEN_ERROR_RATE is set, and sizes the filter"
        )
        return capacity, error_rate, {}
    capacity = max(1, int((1 << bit) * math.log(2) / hashes))
    error_rate = 0.5**hashes
    logger.info(
        "BLOOMFILTER_BIT %d and BLOOMFILTER_HASH_NUMBER %d translated: capacity %d at error "
        "rate %g, standard layout (2**%d bits, %d hashes)",
        bit, hashes, capacity, error_rate, bit, hashes,
    )  # fmt: skip
    return capacity, error_rate, {"layout": "standard"}
