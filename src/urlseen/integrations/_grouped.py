"""Grouped adds for a crawler that asks one request at a time: Scrapy does, and a library commit
per request would set the crawl's pace."""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Iterable

from urlseen.exact.filter import ExactFilter
from urlseen.protocol import FilterStats, Key, SeenFilter


class GroupedAdds:
    """A single-writer exact filter whose adds reach it in groups: one commit per `size` new
    keys (or per `seconds`), not one per request; and a bounded memory of `recent` keys known
    seen, because a crawl meets the same links (menus, indexes) on page after page and each
    would otherwise cost a library look-up.

    Answers stay exact: a key is new unless the filter holds it or it waits in the group.
    What a killed (not closed) process loses is the waiting group: at most `size` keys that
    will be reported new again after a restart, never a key reported seen that was not.

    maybe: a quick test with no false negatives (the exact filter's own counters, in C): a key
    it rules out is new without asking the filter.
    """

    def __init__(
        self,
        seen: SeenFilter,
        size: int = 1024,
        seconds: float = 1.0,
        recent: int = 65536,
        maybe: Callable[[Key], bool] | None = None,
    ) -> None:
        self.seen, self.size, self.seconds, self.recent = seen, size, seconds, recent
        self._maybe = maybe
        self._waiting: dict[Key, None] = {}
        self._recent: OrderedDict[Key, None] = OrderedDict()  # the oldest leaves first
        self._since = time.monotonic()

    def add(self, key: Key) -> bool:
        if key in self._recent or key in self._waiting:
            return False
        if (self._maybe is None or self._maybe(key)) and key in self.seen:
            self._remember(key)
            return False
        self._waiting[key] = None
        if len(self._waiting) >= self.size or time.monotonic() - self._since >= self.seconds:
            self.flush()
        return True

    def _remember(self, key: Key) -> None:
        self._recent[key] = None
        if len(self._recent) > self.recent:
            self._recent.popitem(last=False)  # O(1); deleting a plain dict's first key is not

    def __contains__(self, key: object) -> bool:
        return key in self._recent or key in self._waiting or key in self.seen

    def add_many(self, keys: Iterable[Key]) -> list[bool]:
        return [self.add(k) for k in keys]

    def contains_many(self, keys: Iterable[Key]) -> list[bool]:
        return [k in self for k in keys]

    def flush(self) -> None:
        """Commit the waiting keys."""
        if self._waiting:
            self.seen.add_many(list(self._waiting))
            for key in self._waiting:
                self._remember(key)
            self._waiting.clear()
        self._since = time.monotonic()

    def forget_many(self, keys: Iterable[Key]) -> list[bool]:
        """Forget each key (new again): the group committed first, recent keys emptied."""
        self.flush()
        self._recent.clear()
        return list(self.seen.forget_many(list(keys)))  # type: ignore[attr-defined]

    def forget_older_than(self, timestamp: float) -> int:
        """Forget every key first seen before timestamp (the group committed, recent emptied)."""
        self.flush()
        self._recent.clear()
        return int(self.seen.forget_older_than(timestamp))  # type: ignore[attr-defined]

    def __len__(self) -> int:
        return len(self.seen) + len(self._waiting)

    def stats(self) -> FilterStats:
        return self.seen.stats()

    def close(self) -> None:
        try:
            self.flush()
        finally:
            self.seen.close()

    def __enter__(self) -> GroupedAdds:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def grouped(seen: SeenFilter, size: int) -> GroupedAdds:
    """A local exact filter with grouped adds, its counters as the quick test."""
    maybe = seen.counters.__contains__ if isinstance(seen, ExactFilter) else None
    return GroupedAdds(seen, size, maybe=maybe)
