"""The one lifecycle of everything urlseen opens: filters and stores alike.

`Closeable` is a thing you close. `with x:` closes it; close() is idempotent; `closed` says
whether it was closed; garbage collection closes it quietly; and using it afterwards raises
ClosedError (from `_usable()`, which each operation calls first). It sits beside errors.py so
that every layer can build on it (stores must not import filters).

A subclass releases what it holds in `_close()`, which close() runs once, after `closed` became
true (so a failure while releasing never leaves a half-closed object that looks open). An
instance counts as open until then; `_close()` must therefore cope with an object whose
construction failed part way (the finalizer closes those too). A subclass whose closed state is
its resource itself (a released buffer, for the slotted C filter types) overrides `closed` and
`close()` and keeps the rest.
"""

from __future__ import annotations

import contextlib

from urlseen.errors import ClosedError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import ClassVar

    from typing_extensions import Self


class Closeable:
    """Context manager, idempotent close(), `closed`, a quiet finalizer, ClosedError after."""

    __slots__ = ()
    _noun: ClassVar[str] = "filter"  # what the ClosedError message calls it
    _closed: bool = False  # close() sets it on the instance

    @property
    def closed(self) -> bool:
        """True once close() was called."""
        return self._closed

    def close(self) -> None:
        """Release what this holds; calling it again does nothing."""
        if self.closed:
            return
        self._closed = True  # type: ignore[misc]  # slotted subclasses override close()
        self._close()

    def _close(self) -> None:
        """Release the resources (runs once, from the first close())."""

    def _usable(self) -> None:
        """Raise ClosedError if closed: the first step of every operation."""
        if self.closed:
            raise self._closed_error()

    def _closed_error(self) -> ClosedError:
        return ClosedError(f"the {self._noun} is closed")

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # at interpreter shutdown: nothing to report
            self.close()
