"""What the commands share: one filter opener for every command, library errors turned into
clean CLI errors, number formatting. Without click at import: `urlseen dedup` runs without it
(cli/_dedup_args.py); click is imported where an error is raised."""

from __future__ import annotations

import contextlib
import errno
import sys
import warnings
from collections.abc import Iterator

from urlseen import kinds
from urlseen.errors import UrlseenError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from urlseen.protocol import SeenFilter


def whole_number(text: str) -> int:
    """A positive whole number, also written 1e9 or 10_000_000 (exactly: 1e27 is 10**27);
    ValueError says what is wrong with it."""
    import decimal  # here, not at the top: only a --capacity given pays its import

    try:
        exact = decimal.Decimal(text.replace("_", ""))
    except decimal.InvalidOperation:
        raise ValueError(f"{text!r} is not a whole number") from None
    if not exact.is_finite() or exact != exact.to_integral_value():
        raise ValueError(f"{text!r} is not a whole number")
    if exact < 1:
        raise ValueError(f"{text!r} is not a positive number")
    return int(exact)


def echo(message: str) -> None:
    """One line on stderr, as click.echo(err=True) writes it, without importing click."""
    sys.stderr.write(f"{message}\n")
    sys.stderr.flush()


def flag(name: str) -> str:
    """A parameter's name as the command line writes it: error_rate -> --error-rate."""
    return "--" + name.replace("_", "-")


@contextlib.contextmanager
def cli_errors() -> Iterator[None]:
    """Library errors cross into the CLI once, as a one-line message: a parameter that does
    not fit is a usage error (status 2), anything else status 1."""
    try:
        yield
    except (kinds.OptionError, UrlseenError, OSError) as exc:
        error = _click_error(exc)
        if isinstance(error, SystemExit):
            raise error from None
        raise error from exc


def _click_error(exc: Exception) -> BaseException:
    """The click exception that says exc (click imported here: only a failed run pays for it),
    or SystemExit(0) for a reader that went away."""
    import click

    if isinstance(exc, kinds.OptionError):
        return click.UsageError(str(exc))
    if isinstance(exc, UrlseenError):
        return click.ClickException(str(exc))
    if isinstance(exc, BrokenPipeError) or (
        isinstance(exc, OSError) and exc.errno == errno.EPIPE
    ):  # `urlseen dedup | head`: the reader is gone, stop quietly
        return SystemExit(0)
    where = f"{exc.filename}: " if isinstance(exc, OSError) and exc.filename else ""
    strerror = exc.strerror if isinstance(exc, OSError) else None
    return click.ClickException(f"{where}{strerror or exc}")


def open_filter(kind: str, **values: Any) -> SeenFilter:
    """kinds.open_filter with options spelled as flags, and the warnings opening raised (an
    unclean shutdown, rebuilt counters, query='any') printed on stderr as `warning: ...`."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", UserWarning)
        seen = kinds.open_filter(kind, spell=flag, **values)
    for warning in caught:
        if issubclass(warning.category, UserWarning):
            echo(f"warning: {warning.message}")
    return seen


def human(n: float, unit: str = "") -> str:
    """1234567 -> '1.23M'; bytes (unit "B") in binary units: 8.7e7 -> '83.1 MiB', not '0.0 MiB'."""
    for power, prefix in ((4, "T"), (3, "G"), (2, "M"), (1, "K" if unit else "k")):
        if abs(n) >= (scale := (1024 if unit else 1000) ** power):
            return f"{n / scale:.1f} {prefix}i{unit}" if unit else f"{n / scale:.3g}{prefix}"
    return f"{n:.0f} {unit}" if unit else f"{n:.3g}" if isinstance(n, float) else str(n)
