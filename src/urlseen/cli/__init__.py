"""The `urlseen` command: a thin click layer over the library (one module per command).

Each command's module is imported only when that command runs (or help lists it): `urlseen
dedup` does not pay for the imports of `crawl` or `info` before its first line.
"""

from __future__ import annotations

import importlib

import click

# name -> (module, attribute): the commands, in the order help lists them.
_COMMANDS = {
    "crawl": ("urlseen.cli.crawl", "crawl_command"),
    "dedup": ("urlseen.cli.dedup", "dedup_command"),
    "info": ("urlseen.cli.info", "info_command"),
}


class _LazyGroup(click.Group):
    """A group whose commands are imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(_COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in _COMMANDS:
            return None
        module, attribute = _COMMANDS[cmd_name]
        command: click.Command = getattr(importlib.import_module(module), attribute)
        return command


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="urlseen", prog_name="urlseen")
def cli() -> None:
    """urlseen: the URL-seen test for web crawlers, in bounded memory."""


def main() -> None:
    """Console-script entry point."""
    cli()
