"""The answers a shared dupefilter gives ahead of Scrapy's scheduler: a callback's requests
checked in one batch (integrations/scrapy_prefetch.py), each answer left for request_seen."""

from __future__ import annotations

from typing import TYPE_CHECKING

from urlseen.job.expiry import EXACT_KINDS
from urlseen.shared.seen_cache import SeenCache

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.utils.request import RequestFingerprinterProtocol

    from urlseen.integrations._handle import SeenHandle
    from urlseen.integrations._stop import CrawlStopper

PREFETCH_WAIT = 5.0  # seconds a request checked ahead may take to reach request_seen


class PrefetchedAnswers:
    """UrlseenDupeFilter's side of the prefetch: check ahead, hand over, release."""

    batched: bool
    handle: SeenHandle
    fingerprinter: RequestFingerprinterProtocol
    _stop: CrawlStopper

    def cache(self) -> SeenCache | None:
        """The shared filter's memory, when requests may be checked ahead in batches
        (prefetch): one request at a time reaches request_seen, the filter can forget (a
        request checked ahead and never scheduled is forgotten again), the crawl runs."""
        if self.batched or self._stop.failure is not None or self.handle.kind not in EXACT_KINDS:
            return None
        seen = self.handle.seen if self.handle.opened else None
        return seen if isinstance(seen, SeenCache) else None

    def prefetch(self, requests: list[Request]) -> None:
        """Check-and-add requests ahead of the scheduler, in one round trip for those not known
        seen; request_seen then finds each answer. A failure closes the crawl (the requests
        then pass unchecked)."""
        cache = self.cache()
        if cache is None:
            return
        self.release(PREFETCH_WAIT)
        try:
            cache.prefetch([self.fingerprinter.fingerprint(r) for r in requests])
        except Exception as exc:
            if not self._stop.fail(exc, "checking a callback's requests"):
                raise

    def release(self, older_than: float = 0.0) -> int:
        """Forget again the requests a prefetch answered new that never reached request_seen
        within older_than seconds (dropped on the way, or the crawl closing): they were
        claimed, and are new again for every client; then the answers held for them are
        acknowledged. How many."""
        cache = self.cache()
        late = [] if cache is None else cache.undelivered(older_than)
        if late:
            self.handle.forget(late, "checked ahead and never scheduled")
            if cache is not None and cache.auto_acknowledge:
                cache.acknowledge()
        return len(late)
