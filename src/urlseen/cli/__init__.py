"""The `urlseen` command: a thin click layer over the library (cli/_group.py, one module per
command). `urlseen dedup` with a command line cli/_dedup_args.py reads runs without importing
click, which is most of a small run's start-up; anything else (help, a refused value, another
command) goes to click."""

from __future__ import annotations

import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


def __getattr__(name: str) -> Any:
    if name == "cli":  # the click group, for tests and embedding: imported on first use
        from urlseen.cli._group import cli

        return cli
    raise AttributeError(f"module 'urlseen.cli' has no attribute {name!r}")


def main() -> None:
    """Console-script entry point."""
    args = sys.argv[1:]
    if args[:1] == ["dedup"]:
        from urlseen.cli._dedup_args import parse

        values = parse(args[1:])
        if values is not None:
            _run_dedup(values)
            return
    from urlseen.cli._group import cli

    cli()


def _run_dedup(values: dict[str, Any]) -> None:
    """`urlseen dedup` without click, ending as click's standalone mode ends a command: a click
    exception shown with its usage line, an interrupt as "Aborted!"."""
    from urlseen.cli.dedup import run

    try:
        run(**values)
    except (EOFError, KeyboardInterrupt):
        sys.stderr.write("\nAborted!\n")
        sys.exit(1)
    except Exception as exc:
        click = sys.modules.get("click")  # a click exception comes with click imported
        if click is None or not isinstance(exc, click.ClickException):
            raise
        if isinstance(exc, click.UsageError) and exc.ctx is None:
            from urlseen.cli._group import dedup_context

            exc.ctx = dedup_context()
        exc.show()
        sys.exit(exc.exit_code)
