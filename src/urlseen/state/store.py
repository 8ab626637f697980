"""What a filter needs from the place its bits live: a writable buffer and a lifecycle.

Local stores (anonymous memory, a memory-mapped state file) lend the C core a buffer to probe
in place; Redis (shared/client.py) takes batches of bit positions in a script instead.
"""

from __future__ import annotations

import mmap
from typing import Any, Protocol


class BufferStore(Protocol):
    """A buffer the C core probes in place, with the filter's data at data_offset."""

    @property
    def buffer(self) -> mmap.mmap: ...

    @property
    def data_offset(self) -> int: ...

    @property
    def count_offset(self) -> int:
        """Where the C core mirrors the count in the buffer; -1 for nowhere."""
        ...

    @property
    def readonly(self) -> bool: ...

    @property
    def path(self) -> str | None: ...

    def params(self) -> dict[str, Any]: ...

    def stored_count(self) -> int: ...

    def check(self) -> None:
        """Raise (FormatError) if the buffer can no longer be touched safely: a state file cut
        short underneath. Cheap; run before every batch."""
        ...

    @property
    def closed(self) -> bool: ...

    def flush(self) -> None: ...

    def close(self) -> None: ...
