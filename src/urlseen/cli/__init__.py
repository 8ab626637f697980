"""The `urlseen` command: a thin click layer over the library (one module per command, each
imported only when its command runs or help lists it)."""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping

import click

# name -> (module, attribute), in the order help lists them
_COMMANDS = {
    "crawl": ("urlseen.cli.crawl", "crawl_command"),
    "dedup": ("urlseen.cli.dedup", "dedup_command"),
    "info": ("urlseen.cli.info", "info_command"),
}


class _Commands(Mapping[str, click.Command]):
    """The group's commands by name: click asks for the one being run, so `urlseen dedup` does
    not import `crawl` (Scrapy's side) or `info`; help and `cli.commands[...]` get them all."""

    def __getitem__(self, name: str) -> click.Command:
        module, attribute = _COMMANDS[name]
        command: click.Command = getattr(importlib.import_module(module), attribute)
        return command

    def __iter__(self) -> Iterator[str]:
        return iter(_COMMANDS)

    def __len__(self) -> int:
        return len(_COMMANDS)


@click.group(commands=_Commands(), context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="urlseen", prog_name="urlseen")
def cli() -> None:
    """urlseen: the URL-seen test for web crawlers, in bounded memory."""


def main() -> None:
    """Console-script entry point."""
    cli()
