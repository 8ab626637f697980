"""The click options several commands declare alike: sizing, and one option per kind option."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import click

from urlseen import kinds
from urlseen.cli._common import flag, whole_number


class Count(click.ParamType):  # type: ignore[type-arg]
    """A positive whole number, also written 1e9 or 10_000_000 (exactly: 1e27 is 10**27)."""

    name = "integer"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int):
            if value < 1:
                self.fail(f"{value!r} is not a positive number", param, ctx)
            return value
        try:
            return whole_number(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


def sizing_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """--capacity and --error-rate, left None when not given: the table's defaults, or an
    existing filter's own values."""
    rates = ", ".join(
        f"{k.name} {k.error_rate:g}" for k in kinds.KINDS.values() if k.error_rate is not None
    )
    command = click.option(
        "--error-rate",
        type=click.FloatRange(0, 1, min_open=True, max_open=True),
        help="False-positive rate at capacity: for Bloom-like filters the share of new URLs "
        "dropped as seen; for exact the share that costs a library look-up (never a wrong "
        f"answer) [default: {rates}].",
    )(command)
    return click.option(
        "--capacity",
        type=Count(),
        help="Distinct URLs the filter is sized for (1e9 is 10**9) "
        f"[default: {kinds.DEFAULT_CAPACITY}].",
    )(command)


def kind_options(offered: list[kinds.Kind]) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """One option per entry of kinds.OPTIONS that an offered kind takes, its help naming the
    kinds that take it; each left None unless given."""

    def decorate(command: Callable[..., Any]) -> Callable[..., Any]:
        for option in reversed(kinds.OPTIONS.values()):
            takers = "/".join(k.name for k in offered if option.name in k.options)
            low, high = (None if b is None else int(b) for b in (option.low, option.high))
            kind_of_value: Any = {
                int: click.IntRange(low, high),
                float: click.FloatRange(option.low, option.high, min_open=True),
                os.PathLike: click.Path(dir_okay=False),
            }.get(option.type, str)
            default = "" if option.default is None else f" [default: {option.default}]"
            text = f"{takers}{' with --redis' if option.shared else ''}: {option.help}{default}"
            value: dict[str, Any] = (
                {"is_flag": True, "default": None}  # a flag: None unless given
                if option.type is bool
                else {"type": click.Choice(option.choices) if option.choices else kind_of_value}
            )
            if takers:
                command = click.option(flag(option.name), option.name, help=text, **value)(command)
        return command

    return decorate
