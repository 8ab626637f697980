"""Value classes (frozen or not) without the cost of making a dataclass.

On this Python a frozen dataclass costs ~3.7M instructions to create (it compiles six methods
at import), and the rows below are made at every `urlseen dedup` start
(benchmarks/tools/callgrind_startup.py). A subclass lists its fields in `__slots__`, assigns them
once in `__init__` through `_init`, and behaves as `@dataclass(frozen=True)`
would: equality and hash by the fields in order, the same repr, FrozenInstanceError on
assignment (tests/test_frozen.py compares each with the dataclass it replaces).
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing itself stays off the start-up path
if TYPE_CHECKING:
    from typing import Any


class Record:
    """A dataclass's eq and repr, from `__slots__` (mutable: defining __eq__ alone leaves it
    unhashable, as a dataclass is)."""

    __slots__: tuple[str, ...] = ()

    def _init(self, *values: Any) -> None:
        """Set the fields, in `__slots__`' order (for `__init__`)."""
        for name, value in zip(self.__slots__, values, strict=True):
            object.__setattr__(self, name, value)

    def _names(self) -> tuple[str, ...]:
        """The fields' names: `__slots__` (a subclass with other attributes lists its own)."""
        return self.__slots__

    def _fields(self) -> tuple[Any, ...]:
        return tuple(getattr(self, name) for name in self._names())

    def as_dict(self) -> dict[str, Any]:
        """The fields by name (a new dict, the values as they are)."""
        return dict(zip(self._names(), self._fields(), strict=True))

    def __eq__(self, other: object) -> bool:
        if other.__class__ is self.__class__:
            assert isinstance(other, Record)
            return self._fields() == other._fields()
        return NotImplemented

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in self._names())
        return f"{self.__class__.__qualname__}({shown})"


class Frozen(Record):
    """A frozen dataclass's eq, hash, repr and immutability, from `__slots__`."""

    __slots__ = ()

    def __hash__(self) -> int:
        return hash(self._fields())

    def __setattr__(self, name: str, value: Any) -> None:
        from dataclasses import FrozenInstanceError  # here: dataclasses imports inspect

        raise FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        from dataclasses import FrozenInstanceError

        raise FrozenInstanceError(f"cannot delete field {name!r}")

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled as its constructor's arguments (the slots cannot be set after it)."""
        return (self.__class__, self._fields())
