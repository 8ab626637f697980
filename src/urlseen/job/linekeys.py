"""From a raw input line to the key a filter hashes, with every odd line handled on purpose.

Lines come in as bytes so that nothing is lost before a decision is made:

- the line terminator (LF, or CRLF) is not part of the URL;
- an empty or blank line is no URL: it is skipped and counted, never written out;
- a line that is not valid UTF-8 cannot be canonicalized: its raw bytes are the key, so it
  still deduplicates exactly, and it is written out unchanged;
- a line longer than `max_canonical_bytes` (default 64 KiB; real URLs stop near 8 KiB) is keyed
  by its raw bytes too, so a pathological line cannot stall the run;
- everything else is decoded and canonicalized (urlseen.canonical), unless canonicalization is
  off, in which case the raw bytes are the key (exact-line dedup, like `sort -u`).

This module is the reference. The dedup job's C line engine (csrc/lines.c) applies the same
rules to the lines it can decide in C and hands every other line to LineKeyer.key.
"""

from __future__ import annotations

from collections.abc import Callable

from urlseen._frozen import Record
from urlseen.canonical import DEFAULT_MEMO_SIZE, get_canonicalizer
from urlseen.errors import InvalidKeyError

DEFAULT_MAX_CANONICAL_BYTES = 64 * 1024


class LineCounts(Record):
    """How many lines took each path (reported in the dedup summary)."""

    __slots__ = ("empty", "invalid_utf8", "oversized", "verbatim")
    empty: int
    invalid_utf8: int
    oversized: int
    verbatim: int  # lines the canonicalizer could not parse, keyed as text

    def __init__(
        self, empty: int = 0, invalid_utf8: int = 0, oversized: int = 0, verbatim: int = 0
    ) -> None:
        self._init(empty, invalid_utf8, oversized, verbatim)


class LineKeyer(Record):
    """Turns raw lines into keys; `profile="none"` keys every line by its bytes. Compared and
    shown by its three parameters."""

    def __init__(
        self,
        profile: str = "w3lib",
        max_canonical_bytes: int = DEFAULT_MAX_CANONICAL_BYTES,
        counts: LineCounts | None = None,
    ) -> None:
        self.profile = profile
        self.max_canonical_bytes = max_canonical_bytes
        self.counts = LineCounts() if counts is None else counts
        self._canonicalize: Callable[[str], str] | None = (
            None
            if self.profile == "none"
            else get_canonicalizer(self.profile, memo_size=DEFAULT_MEMO_SIZE)
        )

    def _names(self) -> tuple[str, ...]:
        return ("profile", "max_canonical_bytes", "counts")

    def key(self, line: bytes) -> str | bytes | None:
        """The key for one line without its terminator, or None for a line that is no URL."""
        if line.endswith(b"\r"):
            line = line[:-1]
        if not line.strip():
            self.counts.empty += 1
            return None
        if self._canonicalize is None:
            return line
        if len(line) > self.max_canonical_bytes:
            self.counts.oversized += 1
            return line
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError:
            self.counts.invalid_utf8 += 1
            return line
        try:
            return self._canonicalize(text)
        except InvalidKeyError:
            self.counts.verbatim += 1
            return line
