"""`urlseen dedup --filter exact|library --redis URL`: the exact filter shared through Redis.

With several writers a local counting filter can prove nothing, so both names open the same
thing: a FingerprintLibraryFilter on a RedisLibrary, whose atomic claims make processes that
share the URL and --name print each distinct URL exactly once between them.
"""

from __future__ import annotations

import contextlib

import click

from urlseen import _core
from urlseen.cli._state import check_given
from urlseen.filters.library import FingerprintLibraryFilter
from urlseen.linekeys import LineKeyer
from urlseen.stores.redis_library import RedisLibrary

_HASH_IDS = {"md5": _core.HASH_MD5, "xxh3_128": _core.HASH_XXH3_128}


def open_shared_exact(
    ctx: click.Context,
    url: str,
    name: str,
    capacity: int,
    remove: str | None,
    older_than: float | None,
    keyer: LineKeyer,
) -> FingerprintLibraryFilter:
    """The shared library (created with --capacity if new; an explicit --capacity that differs
    from an existing library's is a usage error), after --remove / --forget-older-than."""
    if RedisLibrary.exists(url, name):
        library = RedisLibrary(url, name)
        given = {"capacity": capacity}
        check_given(ctx, given, library.params, "shared library", keeper="library")
    else:
        library = RedisLibrary(url, name, capacity)
    forgotten = 0
    if remove is not None:
        with contextlib.ExitStack() as stack:
            stream = click.open_file(remove, "rb")
            if remove != "-":
                stack.enter_context(stream)
            keys = [k for line in stream if (k := keyer.key(line.rstrip(b"\n"))) is not None]
        fps = _core.digests(keys, _HASH_IDS[library.fingerprint])
        forgotten += sum(library.forget(fps))
    if older_than is not None:
        forgotten += library.forget_older_than(older_than)
    if remove is not None or older_than is not None:
        click.echo(f"urlseen dedup: forgot {forgotten:,} URLs (they are new again)", err=True)
    return FingerprintLibraryFilter(library=library)
