"""The hash functions and seeds a filter may name: checked once, for every filter kind."""

from __future__ import annotations

from urlseen import _core
from urlseen.errors import ConfigError, FormatError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

# Hash names as stored in state files, and the C core's ids for them (csrc/digest.h).
HASHES = {
    "xxh3_128": _core.HASH_XXH3_128,
    "murmur3_x64_128": _core.HASH_MURMUR3_X64_128,
    "md5": _core.HASH_MD5,
    "xxh3_64": _core.HASH_XXH3_64,
}
DEFAULT_HASH = "xxh3_128"
# A Bloom filter's probes need no more than 64 bits (csrc/digest.h): new Bloom filters (local and
# in Redis) hash with XXH3-64, about a third cheaper per URL; a state records its hash, so
# filters made with another keep it.
BLOOM_HASH = "xxh3_64"
# The hashes a fingerprint library may be keyed by (16-byte digests), and their ids.
FINGERPRINTS = {name: HASHES[name] for name in ("md5", "xxh3_128")}


def check_hash(hash: object) -> str:
    """A hash name given by the caller (ConfigError if unknown)."""
    if hash not in HASHES:
        raise ConfigError(f"hash must be one of {', '.join(HASHES)}, not {hash!r}")
    return hash


def check_fingerprint(hash: object) -> str:
    """A fingerprint hash name given by the caller (ConfigError unless md5 or xxh3_128)."""
    if hash not in FINGERPRINTS:
        raise ConfigError(f"hash must be 'md5' or 'xxh3_128', not {hash!r}")
    return hash


def check_seed(seed: object) -> int:
    """A seed given by the caller (ConfigError unless an int in [0, 2**32))."""
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**32:
        raise ConfigError(f"seed must be an int in [0, 2**32), not {seed!r}")
    return seed


def require_stored_hash(params: dict[str, Any], where: str) -> None:
    """A state file's hash name (FormatError if this code does not know it)."""
    if params["hash"] not in HASHES:
        raise FormatError(f"{where}: unknown hash {params['hash']!r}")


def require_stored_seed(params: dict[str, Any], where: str) -> None:
    """A state file's seed (FormatError unless in [0, 2**32))."""
    if not 0 <= params["seed"] < 2**32:
        raise FormatError(f"{where}: invalid seed {params['seed']}")
