"""What the commands share: turning urlseen errors into clean CLI errors, number formatting."""

from __future__ import annotations

import contextlib
import errno
from collections.abc import Iterator

import click

from urlseen.errors import UrlseenError


@contextlib.contextmanager
def cli_errors() -> Iterator[None]:
    """Library errors cross into the CLI once, as a one-line message and exit status 1."""
    try:
        yield
    except UrlseenError as exc:
        raise click.ClickException(str(exc)) from exc
    except BrokenPipeError:  # `urlseen dedup | head`: the reader is gone, stop quietly
        raise SystemExit(0) from None
    except OSError as exc:
        if exc.errno == errno.EPIPE:
            raise SystemExit(0) from None
        where = f"{exc.filename}: " if exc.filename else ""
        raise click.ClickException(f"{where}{exc.strerror or exc}") from exc


def human(n: float) -> str:
    """1234567 -> '1.23M': short numbers for a one-line summary."""
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.3g}{unit}"
    return f"{n:.3g}" if isinstance(n, float) else str(n)
