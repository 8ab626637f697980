"""`urlseen info`: describe a state, or a filter shared through Redis, without changing it."""

from __future__ import annotations

import json
from typing import Any

import click

from urlseen import kinds
from urlseen.cli._common import cli_errors


@click.command("info")
@click.argument("path", type=click.Path(exists=True), required=False)
@click.option("--redis", "redis_url", metavar="URL", help="Describe a filter kept in Redis.")
@click.option("--name", help="With --redis: the filter's name.")
@click.option(
    "--verify",
    is_flag=True,
    help="Also check the data against its checksums (reads all of it).",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def info_command(
    path: str | None, redis_url: str | None, name: str | None, verify: bool, as_json: bool
) -> None:
    """Describe the state PATH (a filter's file, an exact or rotating filter's folder, or an
    expiring filter's generations), or with --redis URL --name NAME a filter shared through
    Redis (an expiring one: each generation and its age).

    \b
    Example:
        urlseen info seen.bloom
        urlseen info seen/            # an exact filter: library records, counters, sync
        urlseen info gens/            # a rotating filter: its generations
        urlseen info seen.bloom/      # an expiring Bloom filter: its generations' ages
        urlseen info --redis redis://127.0.0.1:6379/0 --name crawl
    """
    if (redis_url is None) == (path is None) or (redis_url is not None) != (name is not None):
        raise click.UsageError("give a PATH, or --redis URL and --name NAME")
    with cli_errors():
        desc = kinds.describe(path, redis=redis_url, name=name, verify=verify)
    tree = desc.pop("tree", None)
    if as_json:
        click.echo(json.dumps(desc if tree is None else {**desc, "tree": tree}))
        return
    width = max(map(len, desc))
    for key, value in desc.items():
        click.echo(f"{key:<{width}}  {value}")
    if tree is not None:
        click.echo("tree:")
        click.echo("\n".join(_tree_lines(tree)))


def _tree_lines(leaves: list[dict[str, Any]]) -> list[str]:
    """The leaves in tree order, indented by depth."""
    return [
        f"{'  ' * leaf['depth']}leaf {leaf['leaf']}: {leaf['count']:,} URLs, "
        f"{leaf['fill']:.0%} of its capacity, {leaf['state']}"
        for leaf in leaves
    ]
