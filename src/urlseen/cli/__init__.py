"""The `urlseen` command: a thin click layer over the library (one module per command)."""

from __future__ import annotations

import click

from urlseen.cli.crawl import crawl_command
from urlseen.cli.dedup import dedup_command
from urlseen.cli.info import info_command


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="urlseen", prog_name="urlseen")
def cli() -> None:
    """urlseen: the URL-seen test for web crawlers, in bounded memory."""


cli.add_command(crawl_command)
cli.add_command(dedup_command)
cli.add_command(info_command)


def main() -> None:
    """Console-script entry point."""
    cli()
