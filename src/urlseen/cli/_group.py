"""The click group `urlseen`: help, --version and every command (each module imported only when
its command runs or help lists it)."""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping

import click

# name -> (module, attribute), in the order help lists them
_COMMANDS = {
    "crawl": ("urlseen.cli.crawl", "crawl_command"),
    "dedup": ("urlseen.cli._dedup_click", "dedup_command"),
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


def dedup_context() -> click.Context:
    """The context click gives `urlseen dedup`, for a usage error met on the path without
    click: its message then names the same usage and help as click's own."""
    from click.utils import _detect_program_name

    command = cli.commands["dedup"]
    parent = click.Context(cli, info_name=_detect_program_name(), **cli.context_settings)
    return click.Context(command, info_name="dedup", parent=parent)
