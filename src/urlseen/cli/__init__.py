"""The `urlseen` command: a thin click layer over the library (one module per command).

Each command's module is imported only when that command runs (or help lists it): `urlseen
dedup` does not pay for the imports of `crawl` or `info` before its first line.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, MutableMapping

import click

# name -> (module, attribute): the commands, in the order help lists them.
_COMMANDS = {
    "crawl": ("urlseen.cli.crawl", "crawl_command"),
    "dedup": ("urlseen.cli.dedup", "dedup_command"),
    "info": ("urlseen.cli.info", "info_command"),
}


class _Commands(MutableMapping[str, click.Command]):
    """The group's commands by name, each module imported when its command is first asked for
    (click asks only for the one being run; help and `cli.commands[...]` for all)."""

    def __init__(self) -> None:
        self._loaded: dict[str, click.Command] = {}

    def __getitem__(self, name: str) -> click.Command:
        if name not in self._loaded:
            if name not in _COMMANDS:
                raise KeyError(name)
            module, attribute = _COMMANDS[name]
            self._loaded[name] = getattr(importlib.import_module(module), attribute)
        return self._loaded[name]

    def __setitem__(self, name: str, command: click.Command) -> None:
        self._loaded[name] = command

    def __delitem__(self, name: str) -> None:
        del self._loaded[name]

    def __iter__(self) -> Iterator[str]:
        return iter(dict.fromkeys([*_COMMANDS, *self._loaded]))

    def __len__(self) -> int:
        return len(set(_COMMANDS) | set(self._loaded))


@click.group(commands=_Commands(), context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="urlseen", prog_name="urlseen")
def cli() -> None:
    """urlseen: the URL-seen test for web crawlers, in bounded memory."""


def main() -> None:
    """Console-script entry point."""
    cli()
