"""What the commands share: one filter opener for every command, library errors turned into
clean CLI errors, number formatting."""

from __future__ import annotations

import contextlib
import errno
import os
import warnings
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import click

from urlseen import kinds
from urlseen.errors import UrlseenError

if TYPE_CHECKING:
    from urlseen.protocol import SeenFilter


class Count(click.ParamType):  # type: ignore[type-arg]
    """A positive whole number, also written 1e9 or 10_000_000 (exactly: 1e27 is 10**27)."""

    name = "integer"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int):
            number = value
        else:
            import decimal  # here, not at the top: only a --capacity given pays its import

            try:
                exact = decimal.Decimal(str(value).replace("_", ""))
            except decimal.InvalidOperation:
                self.fail(f"{value!r} is not a whole number", param, ctx)
            if not exact.is_finite() or exact != exact.to_integral_value():
                self.fail(f"{value!r} is not a whole number", param, ctx)
            number = int(exact)
        if number < 1:
            self.fail(f"{value!r} is not a positive number", param, ctx)
        return number


def flag(name: str) -> str:
    """A parameter's name as the command line writes it: error_rate -> --error-rate."""
    return "--" + name.replace("_", "-")


@contextlib.contextmanager
def cli_errors() -> Iterator[None]:
    """Library errors cross into the CLI once, as a one-line message: a parameter that does
    not fit is a usage error (status 2), anything else status 1."""
    try:
        yield
    except kinds.OptionError as exc:
        raise click.UsageError(str(exc)) from exc
    except UrlseenError as exc:
        raise click.ClickException(str(exc)) from exc
    except BrokenPipeError:  # `urlseen dedup | head`: the reader is gone, stop quietly
        raise SystemExit(0) from None
    except OSError as exc:
        if exc.errno == errno.EPIPE:
            raise SystemExit(0) from None
        where = f"{exc.filename}: " if exc.filename else ""
        raise click.ClickException(f"{where}{exc.strerror or exc}") from exc


def open_filter(kind: str, **values: Any) -> SeenFilter:
    """kinds.open_filter with options spelled as flags, and the warnings opening raised (an
    unclean shutdown, rebuilt counters, query='any') printed on stderr as `warning: ...`."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", UserWarning)
        seen = kinds.open_filter(kind, spell=flag, **values)
    for warning in caught:
        if issubclass(warning.category, UserWarning):
            click.echo(f"warning: {warning.message}", err=True)
    return seen


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


def human(n: float, unit: str = "") -> str:
    """1234567 -> '1.23M'; bytes (unit "B") in binary units: 8.7e7 -> '83.1 MiB', not '0.0 MiB'."""
    for power, prefix in ((4, "T"), (3, "G"), (2, "M"), (1, "K" if unit else "k")):
        if abs(n) >= (scale := (1024 if unit else 1000) ** power):
            return f"{n / scale:.1f} {prefix}i{unit}" if unit else f"{n / scale:.3g}{prefix}"
    return f"{n:.0f} {unit}" if unit else f"{n:.3g}" if isinstance(n, float) else str(n)
