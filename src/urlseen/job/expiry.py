"""Expiry and forgetting for a crawler's filter (the crawler integrations' re-crawl half, as
forget.py is the pipeline's): seen requests expire after an age, and a request can be
forgotten (a download that failed for good, one a callback marks), so that a later run, or the
same crawl, fetches it again.

What each kind the integrations offer can do:

- exact and library (local, or shared through Redis): both, exactly. Their library keeps each
  request's first-seen time, so expiry forgets exactly the requests first seen more than the
  age ago (a sweep when the filter opens, then every quarter of the age while it runs).
- bloom, dsbf, mdbf (local), bloom and dsbf shared through Redis: expiry by generations of
  whole filters (job/generations.py): G generations (the generations setting, default 4) of
  age / G seconds each, aligned on the clock (a shared filter's: the Redis server's); a
  request expires more than age * (G - 1) / G and at most age after it was first seen. Near a
  generation boundary a request may be answered new twice (a page fetched twice), never seen
  when no live generation holds it. Each generation is sized for the capacity at an error
  rate that keeps the whole filter's (1 - (1 - p)^(1/G) each), so memory is up to G times
  the filter's. They cannot forget one request (a Bloom filter cannot delete): a forget is
  logged once and ignored (the request stays seen until its generation expires).
- rotating (local): expiry by its own generations: the age sets the window (age / G), so a
  request expires between age * (G - 1) / G and age after it was first seen (or sooner when a
  generation fills). It cannot forget one request either.

Every kind the integrations offer can expire (similar reads URLs' structure and is refused as
a crawler's filter earlier); a kind that can do neither is refused when the crawl is
configured, naming the kinds that can.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence
from typing import Any

from urlseen.errors import ConfigError
from urlseen.protocol import Key, SeenFilter

logger = logging.getLogger(__name__)

EXACT_KINDS = ("exact", "library")  # forget and expire by their library's times
GENERATION_KINDS = ("rotating",)  # expire by their own generations, locally
WHOLE_GENERATION_KINDS = ("bloom", "dsbf", "mdbf")  # by generations of whole filters
CAN_EXPIRE = (
    "exact and library (local or shared through Redis), bloom and dsbf (local or shared), "
    "mdbf and rotating (local)"
)
SWEEPS_PER_AGE = 4  # an exact filter is swept for expired requests every age / this

_warned: set[str] = set()


def expire_seconds(value: object, setting: str) -> float | None:
    """An expiry age read as seconds > 0 (a number, or a string of one: Scrapy's -s gives
    strings); None when not set. ConfigError naming the setting otherwise."""
    if value is None or value == "":
        return None
    seconds: float | None = None
    if not isinstance(value, bool):
        try:
            seconds = float(value)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            seconds = None
    if seconds is None or not (seconds > 0 and math.isfinite(seconds)):
        raise ConfigError(f"{setting} must be a number of seconds > 0, not {value!r}")
    return seconds


def expiry_options(
    kind: str,
    shared: bool,
    age: float | None,
    options: dict[str, Any],
    setting: str,
    generations: int,
) -> dict[str, Any]:
    """The kind options that make `kind` expire after `age` (a rotating filter's window, for
    options' generations, else `generations`; other kinds' as given: the filter by
    generations is made around them), or ConfigError naming the setting and the kinds that
    can when `kind` cannot expire."""
    if age is None:
        return options
    if kind in EXACT_KINDS or kind in WHOLE_GENERATION_KINDS:
        return options
    if kind in GENERATION_KINDS:  # shared: open_filter says it cannot be
        generations = options.get("generations") or generations
        window = age / generations
        given = options.get("window")
        if given is not None and not math.isclose(float(given), window):
            raise ConfigError(
                f"{setting} {age:g} s sets the rotating filter's window to {window:g} s "
                f"(age / {generations} generations); drop the window option ({given!r})"
            )
        return {**options, "window": window}
    where = " shared through Redis" if shared else ""
    raise ConfigError(
        f"{setting}: the {kind} filter{where} cannot expire requests; kinds that can: {CAN_EXPIRE}"
    )


class Expiry:
    """Forgets an exact filter's requests first seen more than `age` seconds ago: on `sweep`,
    at most every age / SWEEPS_PER_AGE (each sweep reads the whole library)."""

    def __init__(self, age: float, clock: Callable[[], float] = time.time) -> None:
        self.age, self.clock = age, clock
        self.every = age / SWEEPS_PER_AGE
        self._last: float | None = None
        self.expired = 0

    def sweep(self, seen: SeenFilter, *, force: bool = False) -> int:
        """Forget the expired requests if a sweep is due (or force); how many."""
        now = self.clock()
        if not force and self._last is not None and now - self._last < self.every:
            return 0
        self._last = now
        forget_older_than: Callable[[float], int] | None = getattr(seen, "forget_older_than", None)
        if forget_older_than is None:  # pragma: no cover - expiry_options refused the kind
            return 0
        gone = forget_older_than(now - self.age)
        self.expired += gone
        if gone:
            logger.info("urlseen: %d seen request(s) expired (older than %g s)", gone, self.age)
        return gone


def forget_keys(seen: SeenFilter, kind: str, keys: Sequence[Key], why: str) -> int:
    """Forget keys from the filter (new again); how many it held. A kind that cannot forget
    (a Bloom filter cannot delete) logs it once and forgets nothing."""
    forget_many: Callable[[Sequence[Key]], list[bool]] | None = getattr(seen, "forget_many", None)
    if forget_many is None or kind not in EXACT_KINDS:
        if kind not in _warned:
            _warned.add(kind)
            logger.warning(
                "urlseen: the %s filter cannot forget a request (%s): it stays seen, and a "
                "later run skips it; the exact filter forgets exactly",
                kind,
                why,
            )
        return 0
    return sum(forget_many(list(keys)))


__all__ = [
    "CAN_EXPIRE",
    "WHOLE_GENERATION_KINDS",
    "Expiry",
    "expire_seconds",
    "expiry_options",
    "forget_keys",
]
