"""`urlseen info`: describe a state file without loading it."""

from __future__ import annotations

import json
import os
from pathlib import Path

import click

from urlseen.cli._common import cli_errors
from urlseen.cli._redis_info import describe_redis, tree_lines
from urlseen.filters import _sizing, rotating
from urlseen.filters.bloom import BloomFilter
from urlseen.filters.counting import CountingBloomFilter
from urlseen.filters.exact import COUNTERS_FILE, LIBRARY_FILE
from urlseen.stores._format import FLAG_DATA_CRC, FLAG_OPEN, FORMAT_VERSION
from urlseen.stores.mmapfile import read_header
from urlseen.stores.sqlite_library import SQLiteLibrary


@click.command("info")
@click.argument("path", type=click.Path(exists=True), required=False)
@click.option("--redis", "redis_url", metavar="URL", help="Describe a filter kept in Redis.")
@click.option("--name", help="With --redis: the filter's name.")
@click.option(
    "--verify",
    is_flag=True,
    help="Also check the data against its checksum (reads the whole file).",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def info_command(
    path: str | None, redis_url: str | None, name: str | None, verify: bool, as_json: bool
) -> None:
    """Describe the state PATH (a Bloom filter's file, or an exact filter's folder), or with
    --redis URL --name NAME a filter shared through Redis.

    \b
    Example:
        urlseen info seen.bloom
        urlseen info seen/            # an exact filter: library records, counters, sync
        urlseen info gens/            # a rotating filter: its generations
        urlseen info --redis redis://127.0.0.1:6379/0 --name crawl
    """
    if (redis_url is None) == (path is None) or (redis_url is not None) != (name is not None):
        raise click.UsageError("give a PATH, or --redis URL and --name NAME")
    if redis_url is not None:
        assert name is not None
        with cli_errors():
            remote = describe_redis(redis_url, name)
            tree = remote.pop("tree", None)
            _print(remote if tree is None or not as_json else {**remote, "tree": tree}, as_json)
            if tree is not None and not as_json:
                click.echo("tree:")
                click.echo("\n".join(tree_lines(tree)))
        return
    assert path is not None
    if os.path.isdir(path) and os.path.exists(os.path.join(path, rotating.MANIFEST)):
        with cli_errors():
            _print(rotating.describe_folder(path), as_json)
        return
    if os.path.isdir(path):
        if not os.path.exists(os.path.join(path, LIBRARY_FILE)):
            raise click.UsageError(
                f"{path} is a folder without {LIBRARY_FILE} or {rotating.MANIFEST}: "
                "not a urlseen state"
            )
        with cli_errors():
            folder_desc = describe_folder(path, verify)
        _print(folder_desc, as_json)
        return
    with cli_errors():
        header = read_header(path)
        params = header.params
        desc: dict[str, object] = {
            "path": path,
            "format_version": FORMAT_VERSION,
            "file_bytes": os.path.getsize(path),
            "closed_cleanly": not header.flags & FLAG_OPEN,
            "count": header.count,
            **params,
        }
        if params.get("kind") == "bloom":
            desc["bits_per_key"] = params["nbits"] / params["capacity"]
            desc["estimated_error_rate"] = _sizing.error_rate_at(
                params["layout"], params["nbits"], params["k"], header.count
            )
        if verify:
            if not header.flags & FLAG_DATA_CRC:
                desc["verified"] = None
            else:
                with BloomFilter.open(path, readonly=True) as seen:
                    desc["verified"] = seen.verify()
    _print(desc, as_json)


def describe_folder(path: str, verify: bool) -> dict[str, object]:
    """An exact (or library-only) filter's folder, read-only: nothing is rebuilt or changed."""
    folder = Path(path)
    library = SQLiteLibrary(folder / LIBRARY_FILE, readonly=True)
    try:
        desc: dict[str, object] = {
            "path": path,
            "kind": "exact" if (folder / COUNTERS_FILE).exists() else "library",
            "records": library.count(),
            "fingerprint": library.get_meta("fingerprint"),
            "library_bytes": sum(os.path.getsize(f) for f in library.files()),
        }
        if verify:
            library.verify()
            desc["library_verified"] = True
        counters_path = folder / COUNTERS_FILE
        if counters_path.exists():
            header = read_header(counters_path)
            params = header.params
            desc.update(
                {
                    "counters_closed_cleanly": not header.flags & FLAG_OPEN,
                    "counters_in_sync": library.get_meta("counters") == params.get("counters_id")
                    and not header.flags & FLAG_OPEN,
                    "capacity": params.get("capacity"),
                    "error_rate": params.get("error_rate"),
                    "ncounters": params.get("ncounters"),
                    "counter_bits": params.get("counter_bits"),
                    "k": params.get("k"),
                    "counter_bytes": header.data_length,
                }
            )
            if verify and header.flags & FLAG_DATA_CRC:
                with CountingBloomFilter.open(counters_path, readonly=True) as counters:
                    desc["counters_verified"] = counters.verify()
        return desc
    finally:
        library.close()


def _print(desc: dict[str, object], as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(desc))
        return
    width = max(map(len, desc))
    for name, value in desc.items():
        click.echo(f"{name:<{width}}  {value}")
