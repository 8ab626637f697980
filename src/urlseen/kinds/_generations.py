"""A kind's filter in generations that expire (job/generations.py): each generation is a whole
filter of the kind, opened through the kind's own opener, in this process's memory, in a
folder of state files, or shared through Redis (shared/generations.py)."""

from __future__ import annotations

import os

from urlseen.errors import ConfigError, OptionError
from urlseen.kinds._openers import Spell, plain

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path
    from typing import Any

    from urlseen.protocol import SeenFilter


def open_expiring(
    kind_name: str,
    age: float,
    generations: int,
    *,
    capacity: int | None = None,
    error_rate: float | None = None,
    state: str | os.PathLike[str] | None = None,
    redis: str | None = None,
    name: str | None = None,
    spell: Spell = plain,
    clock: Callable[[], float] | None = None,
    **options: Any,
) -> SeenFilter:
    """The filter of kind `kind_name` whose requests expire after `age` seconds, in
    `generations` generations of age / generations seconds each, each generation sized for
    the capacity at the error rate that keeps the whole filter's at error_rate (or the kind's
    default). clock numbers local generations (default: time.time; the Redis server's clock
    numbers shared ones).
    ConfigError when a state or name holds a filter made without expiry, or with another."""
    from pathlib import Path

    from urlseen.job.expiry import WHOLE_GENERATION_KINDS
    from urlseen.job.generations import (
        Generations,
        LocalGenerations,
        SharedGenerations,
        check_shape,
        generation_error_rate,
    )
    from urlseen.kinds import given_options, kind, open_filter

    row = kind(kind_name, spell)
    if row.name not in WHOLE_GENERATION_KINDS:
        raise OptionError(f"{row.name} does not expire by generations of whole filters")
    given_options(row.name, options, shared=redis is not None, spell=spell)
    window, generations = check_shape(age / generations, generations)
    total = row.error_rate if error_rate is None else error_rate
    if isinstance(total, bool) or not isinstance(total, (int, float)) or not 0 < total < 1:
        raise ConfigError(f"the error rate ({spell('error_rate')}) is in (0, 1), not {total!r}")
    each = generation_error_rate(float(total), generations)
    sizing: dict[str, Any] = {"capacity": capacity, "error_rate": each, "spell": spell}
    if redis is not None:
        if state is not None or name is None:  # open_filter says which
            open_filter(row.name, redis=redis, state=state, name=name, spell=spell)
        assert name is not None
        from urlseen.shared.generations import RedisGenerations

        def open_name(generation: str, create: bool) -> SeenFilter | None:
            if create:
                return open_filter(row.name, redis=redis, name=generation, **sizing, **options)
            return _existing(row.name, redis, generation, options)

        shared = RedisGenerations(redis, name, row.name, window, generations, open_name)
        return SharedGenerations(shared, window, generations, float(total))
    folder = None if state is None else Path(state)
    if folder is not None:
        if row.state != "file":  # the kind's own refusal (dsbf keeps its state in Redis)
            open_filter(row.name, state=folder, spell=spell)
        if folder.is_file():
            raise ConfigError(
                f"{spell('state')} {folder} holds {row.name} state made without "
                f"{spell('expire_after')}: a filter keeps the expiry it was made with (remove "
                "the state, or choose another)"
            )

    def open_path(path: Path | None) -> SeenFilter:
        return open_filter(row.name, state=path, **sizing, **options)

    shape = {"kind": row.name, "window": window, "generations": generations}
    import time

    local = LocalGenerations(open_path, folder, clock or time.time, shape)
    return Generations(local, window, generations, float(total))


def _existing(kind_name: str, redis: str, name: str, options: dict[str, Any]) -> SeenFilter | None:
    """An older generation, opened only if Redis still holds it (never made again: another
    client may have just dropped it)."""
    from urlseen.kinds import remote_leaf_store, remote_leaf_store_exists
    from urlseen.shared.bloom import RedisBloomFilter
    from urlseen.splittable.filter import SplittableBloomFilter

    sharing: dict[str, Any] = {
        "lease": options.get("lease"),
        "allow_eviction": bool(options.get("allow_eviction")),
    }
    seen: Any
    if kind_name == "bloom":
        if not RedisBloomFilter.exists(redis, name):
            return None
        seen = RedisBloomFilter(redis, name, **sharing)
    else:
        if not remote_leaf_store_exists(redis, name):
            return None
        seen = SplittableBloomFilter(name=name, store=remote_leaf_store(redis, name, **sharing))
    if options.get("wait_for_claims"):
        seen.wait_for_claims = True
    return seen  # type: ignore[no-any-return]


def holds_generations(state: Path | None) -> bool:
    """Whether a local state holds generations (made with an expiry). (A name in Redis says
    so in its kind record, which a plain filter's opening refuses.)"""
    from urlseen.job.generations import MANIFEST

    return state is not None and (state / MANIFEST).exists()


__all__ = ["holds_generations", "open_expiring"]
