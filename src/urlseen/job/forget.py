"""Forgetting URLs before a run (`urlseen dedup --remove / --forget-older-than`): the re-crawl
half of the pipeline, for exact filters, local or shared. Forgotten URLs are new again."""

from __future__ import annotations

from typing import Any

from urlseen.job.linekeys import LineKeyer
from urlseen.job.streams import input_lines


def forget(seen: Any, remove: str | None, older_than: float | None, profile: str) -> int:
    """Forget the URLs listed in the file `remove` (keyed with `profile`, as the run keys its
    lines) and those first seen before the Unix time `older_than`; the number forgotten."""
    forgotten = 0
    if remove is not None:
        keyer = LineKeyer(profile=profile)  # its own: --remove's lines are not the run's
        lines = input_lines((remove,))
        keys = [k for line in lines if (k := keyer.key(line.rstrip(b"\n"))) is not None]
        forgotten += sum(seen.forget_many(keys))
    if older_than is not None:
        forgotten += seen.forget_older_than(older_than)
    return forgotten
