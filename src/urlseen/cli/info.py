"""`urlseen info`: describe a state file without loading it."""

from __future__ import annotations

import json
import os

import click

from urlseen.cli._common import cli_errors
from urlseen.filters import _sizing
from urlseen.filters.bloom import BloomFilter
from urlseen.stores._format import FLAG_DATA_CRC, FLAG_OPEN, FORMAT_VERSION
from urlseen.stores.mmapfile import read_header


@click.command("info")
@click.argument("path", type=click.Path(exists=True, dir_okay=False))
@click.option(
    "--verify",
    is_flag=True,
    help="Also check the data against its checksum (reads the whole file).",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def info_command(path: str, verify: bool, as_json: bool) -> None:
    """Describe the state file PATH: filter, parameters, fill, state.

    \b
    Example:
        urlseen info seen.bloom
    """
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
    if as_json:
        click.echo(json.dumps(desc))
        return
    width = max(map(len, desc))
    for name, value in desc.items():
        click.echo(f"{name:<{width}}  {value}")
