"""`urlseen dedup --filter exact|library --redis URL`: the exact filter shared through Redis.

With several writers a local counting filter can prove nothing, so both names open the same
thing: a FingerprintLibraryFilter on a RedisLibrary, whose atomic claims make processes that
share the URL and --name print each distinct URL exactly once between them.
"""

from __future__ import annotations

import click

from urlseen import _core
from urlseen.cli._state import check_given
from urlseen.filters._hashes import FINGERPRINTS
from urlseen.filters.base import Key
from urlseen.stores.redis_library import RedisLibrary


def open_shared_exact(ctx: click.Context, url: str, name: str, capacity: int) -> RedisLibrary:
    """The shared library: created with --capacity if new; an explicit --capacity that differs
    from an existing library's is a usage error."""
    if not RedisLibrary.exists(url, name):
        return RedisLibrary(url, name, capacity)
    library = RedisLibrary(url, name)
    check_given(ctx, {"capacity": capacity}, library.params, "shared library", keeper="library")
    return library


def forget_shared(library: RedisLibrary, keys: list[Key]) -> list[bool]:
    """--remove on the shared library: the keys fingerprinted the library's way."""
    return library.forget(_core.digests(keys, FINGERPRINTS[library.fingerprint]))
