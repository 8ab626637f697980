"""`urlseen dedup`'s command line read without click, so that a run starts at the interpreter's
pace: importing click is most of a one-line run's time (benchmarks/dedup/startup.py).

It reads the options cli/_dedup_click.py declares, with the same values, and only the command
lines it is sure of: `parse` answers None for help, an option it does not know, a value click
would refuse or convert otherwise, or a spelling it does not take (`-ao x`, a value that starts
with "-"), and click then reads the line, so help and every message stay click's.
tests/test_cli_args.py holds the two readers equal.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable

from urlseen import kinds
from urlseen.canonical import DEFAULT_PROFILE, PROFILES
from urlseen.cli._common import flag, whole_number

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, NoReturn, TypeAlias

    Convert: TypeAlias = Callable[[str], Any]


class _Unsure(Exception):
    """A value or spelling this reader leaves to click."""


def _path(dir_okay: bool = True, allow_dash: bool = False) -> Convert:
    """click.Path(dir_okay=..., allow_dash=...): a missing path is taken as given; an existing
    one must be readable, and not a folder unless dir_okay."""

    def convert(text: str) -> str:
        if allow_dash and text == "-":
            return text
        try:
            mode = os.stat(text).st_mode
        except (OSError, ValueError):
            return text
        if (not dir_okay and stat.S_ISDIR(mode)) or not os.access(text, os.R_OK):
            raise _Unsure
        return text

    return convert


def _choice(choices: list[str] | tuple[str, ...]) -> Convert:
    return lambda text: text if text in choices else _unsure()


def _unsure() -> NoReturn:
    raise _Unsure


def _whole(low: int | None, high: int | None) -> Convert:
    """click.IntRange(low, high), for plain decimal digits."""

    def convert(text: str) -> int:
        number = int(text) if text.isascii() and text.isdigit() else _unsure()
        inside = (low is None or number >= low) and (high is None or number <= high)
        return number if inside else _unsure()

    return convert


def _fraction(low: float | None, high: float | None, high_open: bool = False) -> Convert:
    """click.FloatRange(low, high, min_open=True, max_open=high_open); NaN left to click."""

    def convert(text: str) -> float:
        try:
            number = float(text)
        except ValueError:
            return _unsure()
        above = low is None or number > low
        below = high is None or (number < high if high_open else number <= high)
        return number if above and below else _unsure()

    return convert


def _count(text: str) -> int:
    """cli/_options.Count."""
    try:
        return whole_number(text)
    except ValueError:
        return _unsure()


# dest -> (spellings, how a value converts; None for a flag, whose value is the spelling's)
_FIXED: dict[str, tuple[dict[str, Any], Convert | None]] = {
    "output": ({"-o": None, "--output": None}, _path(dir_okay=False, allow_dash=True)),
    "append": ({"-a": True, "--append": True}, None),
    "state": ({"--state": None}, _path()),
    "redis_url": ({"--redis": None}, str),
    "name": ({"--name": None}, str),
    "kind": ({"--filter": None}, _choice(list(kinds.KINDS))),
    "error_rate": ({"--error-rate": None}, _fraction(0, 1, high_open=True)),
    "capacity": ({"--capacity": None}, _count),
    "remove": ({"--remove": None}, _path(dir_okay=False, allow_dash=True)),
    "forget_older_than": ({"--forget-older-than": None}, str),
    "profile": ({"--canonicalize": None}, _choice([*PROFILES, "none"])),
    "no_canonicalize": ({"--no-canonicalize": True}, None),
    "batch_size": ({"--batch-size": None}, _whole(1, 1_000_000)),
    "progress": ({"--progress": True, "--no-progress": False}, None),
    "as_json": ({"--json": True}, None),
}
_DEFAULTS: dict[str, Any] = {
    "output": "-", "append": False, "state": None, "redis_url": None, "name": "dedup",
    "kind": "bloom", "error_rate": None, "capacity": None, "remove": None,
    "forget_older_than": None, "profile": DEFAULT_PROFILE, "no_canonicalize": False,
    "batch_size": None, "progress": None, "as_json": False,
}  # fmt: skip


def _kind_option(option: kinds.Option) -> tuple[dict[str, Any], Convert | None]:
    """cli/_options.kind_options' click type for one of kinds.OPTIONS."""
    if option.type is bool:
        return {flag(option.name): True}, None
    convert: Convert
    if option.choices:
        convert = _choice(option.choices)
    elif option.type is int:
        convert = _whole(option.low, option.high)
    elif option.type is float:
        convert = _fraction(option.low, option.high)
    elif option.type is os.PathLike:
        convert = _path(dir_okay=False)
    else:
        convert = str
    return {flag(option.name): None}, convert


def options() -> dict[str, tuple[dict[str, Any], Convert | None]]:
    """Every option of `urlseen dedup` by its parameter's name: spellings and conversion."""
    table = dict(_FIXED)
    for option in kinds.OPTIONS.values():
        if any(option.name in kind.options for kind in kinds.KINDS.values()):
            table[option.name] = _kind_option(option)
    return table


def parse(args: list[str]) -> dict[str, Any] | None:
    """The values click would pass `urlseen dedup` for args, or None to leave args to click."""
    table = options()
    spelled = {spelling: dest for dest, (names, _) in table.items() for spelling in names}
    values = dict(_DEFAULTS)
    values.update((dest, None) for dest in table if dest not in _DEFAULTS)
    inputs: list[str] = []
    read_input = _path(dir_okay=False, allow_dash=True)
    rest = iter(args)
    try:
        for arg in rest:
            if arg == "--":
                inputs.extend(read_input(text) for text in rest)
            elif arg == "-" or not arg.startswith("-"):
                inputs.append(read_input(arg))
            else:
                spelling, equals, attached = arg.partition("=")
                dest = spelled.get(spelling)
                if dest is None or (equals and not spelling.startswith("--")):
                    return None
                names, convert = table[dest]
                if convert is None:
                    if equals:
                        return None
                    values[dest] = names[spelling]
                    continue
                text = attached if equals else next(rest, None)
                if text is None or (not equals and text.startswith("-") and text != "-"):
                    return None
                values[dest] = convert(text)
    except _Unsure:
        return None
    values["inputs"] = tuple(inputs)
    return values
