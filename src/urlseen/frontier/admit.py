"""The seen-test and the frontier committed in the right order: a request's frontier entry is
durable before the filter's "new" answer for it can be relied on.

How, for each kind of filter:

- a filter that commits after a callback (exact, local or shared library: `add_many(keys,
  before_commit=...)`): the frontier commits inside the callback, before the library;
- a filter whose answers are claims (shared through Redis: `auto_acknowledge`): the claims are
  acknowledged only after the frontier committed; a claim not acknowledged (the process died)
  goes, after its lease, to the next asker as new;
- any other filter (a local Bloom filter, whose bits are written as it answers): the batch is
  only tested first, the frontier commits what is new, and only then are the new keys added.
  This needs a single writer, which a local state has (it is locked).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from urlseen.protocol import Acknowledging, CommitAfterWrite, Key, SeenFilter, new_in_batch

Keep = Callable[[list[bool]], object]


def admit(seen: SeenFilter, keys: Sequence[Key], keep: Keep) -> list[bool]:
    """Check-and-add keys; keep(flags) runs once the answers are known and before any new
    answer is durable in the filter. Returns the answers (True: new)."""
    keys = list(keys)
    if not keys:
        keep([])
        return []
    if isinstance(seen, Acknowledging):  # answers held as claims until acknowledged
        seen.auto_acknowledge = False
    if isinstance(seen, CommitAfterWrite):
        flags: list[bool] = []

        def before_commit(answers: list[bool]) -> None:
            flags[:] = answers
            keep(answers)

        seen.add_many(keys, before_commit=before_commit)  # type: ignore[call-arg]
    elif isinstance(seen, Acknowledging):
        flags = seen.add_many(keys)
        keep(flags)
    else:
        flags = new_in_batch(seen, keys)
        keep(flags)
        fresh = [key for key, new in zip(keys, flags, strict=True) if new]
        if fresh:
            seen.add_many(fresh)
    if isinstance(seen, Acknowledging):
        seen.acknowledge()
    return flags
