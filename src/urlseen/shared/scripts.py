"""The batch scripts' protocol: their operations, their answers, and the one builder of their
KEYS and ARGV.

Each script (shared/lua/) names its KEYS and ARGV in order in two header lines, `-- KEYS:`
and `-- ARGV:`, and binds them to locals of the same names; a `Script` here lists the same
names (tests/test_shared_scripts.py holds the two equal). A caller builds a call from named
fields, so no caller counts positions. The fields after ARGV, the operation's tail, are
documented in each script.

The operations are the leaf store's (`urlseen.splittable.tree.LeafOp`), sent as their value:
a RedisBloomFilter's batch and a splittable filter's leaf take the same ones (bits.lua names
them OP_*).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import IntEnum
from importlib import resources
from typing import Any, NamedTuple

from urlseen.splittable.tree import LeafOp as Op


class Answer(IntEnum):
    """A batch script's answer for one key: a byte of its reply (claims.lua and bits.lua name
    them alike)."""

    NEW = 0x31  # b"1": new (ADD, COPY), absent (CONTAINS), still the caller's (a release)
    SEEN = 0x30  # b"0": seen, present, or no longer the caller's
    PENDING = 0x50  # b"P": another client's older live claim holds it: ask again
    OWN = 0x54  # b"T": new, claimed by a field of its own, not in the call's record


MOVED = b"M"  # a leaf's whole reply: it takes no more writes (sealed, or at its write limit)
MISSING = b"X"  # a leaf's whole reply: it does not exist or belongs to another instance
FELL_BACK = b"F"  # ends an ADD's reply whose optimistic arguments were not taken
STAGED = b"S"  # the optimistic tail's third field for a whole rewrite (bloom_batch.lua)


class ClaimArgs(NamedTuple):
    """A script call's side of the claims (claims.lua, claims_context)."""

    owner: str
    priority: int
    call: int
    lease_ms: int


@dataclass(frozen=True)
class Script:
    """A script file, what it needs put in front of it, and the names of its KEYS and ARGV in
    order."""

    filename: str
    keys: tuple[str, ...]
    argv: tuple[str, ...]
    needs: tuple[str, ...] = ()

    def call(
        self, keys: Mapping[str, str], args: Mapping[str, Any], tail: Iterable[Any] = ()
    ) -> tuple[list[str], list[Any]]:
        """KEYS and ARGV of one call from named fields (a field missing or unknown is a
        KeyError: a caller's mistake), then the operation's tail."""
        unknown = (set(keys) - set(self.keys)) | (set(args) - set(self.argv))
        if unknown:
            raise KeyError(f"{self.filename} takes no {sorted(unknown)}")
        return [keys[k] for k in self.keys], [_wire(args[a]) for a in self.argv] + list(tail)

    def source(self) -> str:
        """The script's source, what it needs in front."""
        return "\n".join(lua_text(name) for name in (*self.needs, self.filename))


def _wire(value: Any) -> Any:
    # redis-py sends an IntEnum's repr: send its value
    return int(value) if isinstance(value, IntEnum) else value


def lua_text(filename: str) -> str:
    """The text of a script file of shared/lua/."""
    return resources.files("urlseen.shared").joinpath("lua", filename).read_text()


def _names(*parts: str) -> tuple[str, ...]:
    """Names given as a script's header lists them: space-separated."""
    return tuple(name for part in parts for name in part.split())


CLAIMS = _names("owner priority call lease_ms")
_BATCH_NEEDS = ("claims.lua", "bits.lua", "batch_claims.lua", "mark.lua")

BLOOM_BATCH = Script(
    "bloom_batch.lua",
    keys=_names("bits meta claims records stage"),
    argv=_names("op instance nbytes layout fp_bytes masks fps", *CLAIMS, "mark"),
    needs=_BATCH_NEEDS,
)
LEAF_BATCH = Script(
    "leaf_batch.lua",
    keys=_names("bits meta receipt claims fps records"),
    argv=_names(
        "masks op receipt_ttl layout fps fp_bytes write_limit instance nbytes", *CLAIMS, "mark"
    ),
    needs=_BATCH_NEEDS,
)
LIBRARY_BATCH = Script(
    "library_batch.lua",
    keys=_names("receipt"),
    argv=_names(
        "mode fps prefix groups per_bucket now receipt_ttl instance", *CLAIMS, "marks extra"
    ),
    needs=("claims.lua", "mark.lua", "library_buckets.lua"),
)
SCRIPTS = {s.filename: s for s in (BLOOM_BATCH, LEAF_BATCH, LIBRARY_BATCH)}
# The other scripts that check write marks (mark.lua) have it put in front.
MARKED = ("dsbf_tree.lua", "frontier.lua")

# dsbf_batch.lua runs leaf_batch.lua for several leaves in one call: its ARGV are the fields
# every leaf shares, once, then per leaf its own fields, the length of its tail and the tail.
LEAVES_SHARED = _names("op receipt_ttl layout fp_bytes instance", *CLAIMS)
LEAF_OWN = _names("masks fps write_limit nbytes mark")


def leaves_argv(
    shared: Mapping[str, Any], leaves: Iterable[tuple[Mapping[str, Any], Sequence[Any]]]
) -> list[Any]:
    """dsbf_batch.lua's ARGV from named fields: `shared` (LEAVES_SHARED), then per leaf its
    own fields (LEAF_OWN) and its tail."""
    argv = [_wire(shared[name]) for name in LEAVES_SHARED]
    for own, tail in leaves:
        argv += [*(_wire(own[name]) for name in LEAF_OWN), len(tail), *tail]
    return argv


def claim_fields(claim: Sequence[Any]) -> dict[str, Any]:
    """A ClaimArgs (or its four values) as named ARGV fields."""
    return dict(zip(CLAIMS, claim, strict=True))


__all__ = [
    "BLOOM_BATCH",
    "CLAIMS",
    "FELL_BACK",
    "LEAF_BATCH",
    "LEAF_OWN",
    "LEAVES_SHARED",
    "LIBRARY_BATCH",
    "MARKED",
    "MISSING",
    "MOVED",
    "SCRIPTS",
    "STAGED",
    "Answer",
    "ClaimArgs",
    "Op",
    "Script",
    "claim_fields",
    "leaves_argv",
    "lua_text",
]
