"""One crawler integration's filter: opened through kinds.open_filter, kept durable without the
crawler's help, emptied the way a crawl framework means it, and never left behind.

Crawl frameworks do not always close what they open: scrapy-redis's scheduler never calls its
dupefilter's close(), Scrapy skips it on some error paths, a Crawlee process may simply exit.
So the handle

- groups a local exact filter's commits (GroupedAdds) and lets the caller flush them on a timer
  and on the framework's signals (`checkpoint()`), so a state is current without close();
- closes the filter at interpreter exit (or when the handle is garbage collected) if nobody
  did: grouped keys committed, a temporary library's folder removed;
- expires requests older than `expire_after` (job/expiry.py: by the library's times, or by
  generations of whole filters, job/generations.py), and forgets requests;
- for a filter shared through Redis, records this process as a member of the filter's fleet,
  so that `clear()` deletes the shared filter only when no other live process still uses it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

from urlseen import kinds
from urlseen.errors import ClosedError, ConfigError
from urlseen.integrations._grouped import grouped
from urlseen.job.expiry import (
    EXACT_KINDS,
    WHOLE_GENERATION_KINDS,
    Expiry,
    expiry_options,
    forget_keys,
)
from urlseen.protocol import SeenFilter
from urlseen.shared.fleet import Fleet
from urlseen.shared.seen_cache import DEFAULT_ENTRIES, EpochWatch, SeenCache

logger = logging.getLogger(__name__)

# The files a kind keeps in its state folder (a folder of the user's may hold others).
STATE_FILES = ("library.sqlite*", "*.urlseen", "rotating.json*", "generations.json")


def _close_quietly(seen: SeenFilter, fleet: Fleet | None) -> None:
    """The finalizer: at exit or collection, close what the crawler did not."""
    with contextlib.suppress(Exception):
        seen.close()
    if fleet is not None:
        with contextlib.suppress(Exception):
            fleet.leave()


def destroy_shared(seen: SeenFilter) -> None:
    """Delete a shared filter's keys from Redis (and close it)."""
    destroy: Callable[[], None] | None = getattr(seen, "destroy", None)
    if destroy is None:  # the exact shared filter: its library holds the keys
        destroy = getattr(getattr(seen, "library", None), "destroy", None)
    if destroy is None:  # pragma: no cover - every shared kind has one
        raise TypeError(f"{type(seen).__name__} cannot be deleted from Redis")
    destroy()


def remove_state(state: Path) -> None:
    """Remove a local state: a state file, or a kind's files in its folder (and the folder if
    nothing else is left in it)."""
    if state.is_file():
        state.unlink()
        return
    if not state.is_dir():
        return
    for pattern in STATE_FILES:
        for path in state.glob(pattern):
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        state.rmdir()  # only if empty


class SeenHandle:
    """The filter of one crawler process, opened now (bad settings fail early), reopened
    lazily after clear().

    Args: as kinds.open_filter; group: a local exact filter's grouped adds (new keys per
    commit; 0: none); keys: what the crawler's keys are, for the error when the kind reads
    URLs' structure (a crawler's request keys are opaque); expire_after: job/expiry.py;
    seen_cache: with redis, the keys this client remembers seen (shared/seen_cache.py: its
    repeats cost no round trip; 0: none).
    """

    def __init__(
        self,
        kind: str,
        *,
        capacity: int | None = None,
        error_rate: float | None = None,
        state: str | os.PathLike[str] | None = None,
        redis: str | None = None,
        name: str | None = None,
        spell: Callable[[str], str] | None = None,
        group: int = 0,
        keys: str = "request keys",
        expire_after: float | None = None,
        seen_cache: int = DEFAULT_ENTRIES,
        **options: Any,
    ) -> None:
        row = kinds.kind(kind, spell) if spell is not None else kinds.kind(kind)
        if row.url_keys:
            name = spell("filter") if spell is not None else "filter"
            raise kinds.OptionError(f"{name} {kind!r} reads URLs' structure; {keys} are opaque")
        setting = spell("expire_after") if spell is not None else "expire_after"
        generations = kinds.OPTIONS["generations"].default
        # (age, G) of a kind that expires by generations of whole filters
        self.expiring: tuple[float, int] | None = None
        if expire_after is not None and kind in WHOLE_GENERATION_KINDS:
            given = {"generations": options.pop("generations", None)}
            kinds.given_options("rotating", given, shared=False, spell=spell or str)
            self.expiring = (expire_after, given["generations"] or generations)
        options = expiry_options(
            kind, redis is not None, expire_after, options, setting, generations
        )
        self.expiry = (
            Expiry(expire_after) if expire_after is not None and kind in EXACT_KINDS else None
        )
        self.kind = kind
        self.state = None if state is None else Path(state)
        self.redis, self.name = redis, name
        self.group = group if kind == "exact" and redis is None else 0
        self.cache_entries = seen_cache if redis is not None else 0
        self.lease: float | None = options.get("lease")
        self._arguments: dict[str, Any] = dict(
            capacity=capacity,
            error_rate=error_rate,
            state=state,
            redis=redis,
            name=name,
            **options,
        )
        if spell is not None:
            self._arguments["spell"] = spell
        self._seen: SeenFilter | None = None
        self._fleet: Fleet | None = None
        self._finalizer: weakref.finalize[Any, SeenHandle] | None = None
        self._failed = False
        seen = self.seen  # open now: bad settings fail before the crawl starts
        if self.state is None and self.redis is None:
            # Nothing to keep yet: closed again, and opened on first use, so that a crawl that
            # fails before using it (Scrapy has such paths, and sends no signal on them)
            # leaves no temporary folder behind, even in a process that lives on.
            self._detach()
            seen.close()

    @property
    def shared(self) -> bool:
        return self.redis is not None

    @property
    def opened(self) -> bool:
        return self._seen is not None

    @property
    def seen(self) -> SeenFilter:
        """The open filter (opened again after clear())."""
        if self._seen is None:
            if self._failed:
                raise ClosedError(f"the {self.kind} filter was abandoned after it failed")
            seen = self._open()
            if self.group:
                seen = grouped(seen, self.group)
            if self.cache_entries > 0 and self.redis is not None:
                watch = EpochWatch(self.redis, self.name or "")
                seen = SeenCache(seen, watch, self.cache_entries, self.lease)
            try:
                fleet = Fleet(self.redis, self.name or "") if self.redis is not None else None
            except BaseException:
                seen.close()
                raise
            self._seen, self._fleet = seen, fleet
            self._finalizer = weakref.finalize(self, _close_quietly, seen, fleet)
            if self.expiry is not None:
                self.expiry.sweep(seen, force=True)
        return self._seen

    def _open(self) -> SeenFilter:
        if self.expiring is not None:
            return kinds.open_expiring(self.kind, *self.expiring, **self._arguments)
        if kinds.holds_generations(self.state):
            name = self._arguments.get("spell", str)("expire_after")
            raise ConfigError(
                f"the state at {self.state} was made with {name}: give it again (a filter "
                "keeps the expiry it was made with), or remove the state"
            )
        return kinds.open_filter(self.kind, **self._arguments)

    def forget(self, keys: list[Any], why: str) -> int:
        """Forget keys (new again); how many the filter held (job/expiry.py: forget_keys)."""
        return forget_keys(self.seen, self.kind, keys, why)

    def checkpoint(self) -> None:
        """Make every answer given so far durable: commit grouped adds, tell a shared filter
        that its answers reached us (acknowledge, where the filter has it), renew membership."""
        seen = self._seen
        if seen is None:
            return
        flush = getattr(seen, "flush", None)
        if flush is not None:
            flush()
        acknowledge = getattr(seen, "acknowledge", None)
        if acknowledge is not None:
            acknowledge()
        if self.expiry is not None:
            self.expiry.sweep(seen)
        if self._fleet is not None and not self._fleet.renew():
            # Gone from the fleet: the filter's keys may be gone too (len asks Redis, and
            # raises FilterLostError if so); else this process was too slow to renew, and
            # joins again.
            len(seen)
            logger.warning("%s: this process's fleet membership expired; joined again", self.name)
            self._fleet.join()

    def clear(self) -> str:
        """Forget every key: a local state is removed, a temporary filter dropped, a shared
        filter deleted from Redis if no other live process uses it (else only left). The
        filter opens again, empty, on next use. Returns what was done, for the log."""
        seen = self._seen or self.seen
        fleet = self._fleet
        self._detach()
        if fleet is not None:
            left = fleet.leave()
            if left:
                seen.close()
                return f"left the shared filter {self.name!r} to its {left} other process(es)"
            destroy_shared(seen)
            return f"deleted the shared filter {self.name!r} (no other process used it)"
        seen.close()
        if self.state is not None:
            remove_state(self.state)
            return f"removed the state at {self.state}"
        return "dropped the filter (it was not persisted)"

    def close(self) -> None:
        """Commit and close; a shared filter stays in Redis (this process leaves its fleet)."""
        seen, fleet = self._seen, self._fleet
        if seen is None:
            return
        try:
            self.checkpoint()
        finally:
            self._detach()
            try:
                seen.close()
            finally:
                if fleet is not None:
                    fleet.leave()

    def abandon(self) -> None:
        """Close after the filter failed (lost, or Redis unreachable): nothing acknowledged
        (answers not acknowledged go, after their lease, to another process: a page fetched
        twice, never lost), errors of the closing steps suppressed, the fleet left if Redis
        answers. Never opens the filter again."""
        seen, fleet = self._seen, self._fleet
        self._detach()
        self._failed = True
        if seen is not None:
            _close_quietly(seen, fleet)

    def _detach(self) -> None:
        if self._finalizer is not None:
            self._finalizer.detach()
        self._seen = self._fleet = self._finalizer = None
