"""A shared filter's fleet: the live processes using it, so that a front end deletes the
filter only when no other live process still uses it (integrations/_handle.py)."""

from __future__ import annotations

import logging
import os
import time
import uuid
from typing import Any

from urlseen.shared.client import connect, key

logger = logging.getLogger(__name__)

MEMBER_SECONDS = 120.0  # a member that has not renewed for this long counts as gone


class Fleet:
    """The live processes using one shared filter: a sorted set beside the filter's keys
    (`urlseen:{name}:members`, in the filter's hash slot), member -> the time it counts as gone
    unless renewed. Plain redis-py calls: a Redis error here is the filter's own error too.

    renew() only updates a membership that is there: a member found gone (the keys deleted,
    FLUSHDB, a server restarted empty) is reported, never written back, so a process whose
    filter was lost does not leave a members key behind."""

    def __init__(self, url: str, name: str) -> None:
        self._client: Any = connect(url)
        self.key = key(name, "members")
        self.member = f"{os.getpid()}-{uuid.uuid4().hex[:12]}"
        self.join()
        self._renewed = time.monotonic()

    def join(self) -> None:
        self._client.zadd(self.key, {self.member: time.time() + MEMBER_SECONDS})

    def renew(self) -> bool:
        """Extend the membership; False if it was gone. A Redis that does not answer is
        retried at the next renewal, until half the membership's life has passed."""
        import redis

        try:
            changed = self._client.zadd(
                self.key, {self.member: time.time() + MEMBER_SECONDS}, xx=True, ch=True
            )
        except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as exc:
            if time.monotonic() - self._renewed < MEMBER_SECONDS / 2:
                logger.warning("fleet membership of %s not renewed (retried): %s", self.key, exc)
                return True
            raise
        self._renewed = time.monotonic()
        return bool(changed)

    def leave(self) -> int:
        """Leave the fleet; the number of live members left."""
        pipe = self._client.pipeline(transaction=True)
        pipe.zrem(self.key, self.member)
        pipe.zremrangebyscore(self.key, "-inf", time.time())
        pipe.zcard(self.key)
        left = int(pipe.execute()[-1])
        if left == 0:
            self._client.delete(self.key)
        return left
