"""Every exception and warning urlseen raises on purpose, in one place.

Each one also inherits the builtin a caller would already catch (ValueError, OSError,
ImportError), so `except ValueError` keeps working while `except UrlseenError` catches them all.
"""


class UrlseenError(Exception):
    """Base class of every error urlseen raises on purpose."""


class ConfigError(UrlseenError, ValueError):
    """An invalid parameter: the message names the argument and the value received."""


class InvalidKeyError(UrlseenError, ValueError):
    """A key that cannot be turned into bytes (a str with lone surrogates, a wrong type)."""


class FormatError(UrlseenError, ValueError):
    """A state file that is corrupted, truncated, foreign or of an unknown version."""


class IncompatibleFiltersError(UrlseenError, ValueError):
    """Two filters that cannot be combined (different size, hash count, layout or seed)."""


class StateInUseError(UrlseenError, OSError):
    """A state file that another process holds open for writing."""


class ClosedError(UrlseenError, ValueError):
    """An operation on a filter that was already closed."""


class MissingDependencyError(UrlseenError, ImportError):
    """An optional dependency is missing: the message names the extra to install."""


class ReadOnlyError(UrlseenError, ValueError):
    """A write (add) to a filter opened read-only."""


class OptionError(ConfigError):
    """A parameter that does not fit the kind or the place (a front end's usage error)."""


class ParameterConflict(OptionError):
    """A value given that contradicts the one an existing filter was created with."""


class RemoteError(UrlseenError, ConnectionError):
    """Redis could not be reached (after retries) or answered with an error."""


class FilterLostError(RemoteError):
    """A shared filter's data vanished from Redis, or was replaced by a filter made anew under
    the same name, since this client opened it: its answers can no longer be trusted."""


class FilterRolledBackError(FilterLostError):
    """A shared filter's data in Redis went back in time since this client wrote to it (a
    restore from an earlier snapshot, a failover to a replica that lagged): URLs it answered
    new since may be answered new again, so the client stops."""


class EvictionPolicyError(ConfigError):
    """The Redis server may evict a shared filter's keys (maxmemory-policy allkeys-*)."""


class InputError(UrlseenError, OSError):
    """An input that cannot be read to its end (missing, damaged or cut-short gzip data): the
    message names the file."""

    def __str__(self) -> str:
        return f"{self.filename}: {self.strerror}"


class DataChecksumError(FormatError):
    """A state file's data does not match the checksum of its last clean close (its header is
    sound: derived data, like an exact filter's counters, can be rebuilt)."""


# Warnings: a state opened that the caller should know about, nothing refused.


class QueryAnyWarning(UserWarning):
    """QUERY_ANY was chosen: its false-positive rate grows with the number of groups."""


class UncleanShutdownWarning(UserWarning):
    """A state file was not closed by its last writer (killed, crashed)."""


class CountersRebuiltWarning(UserWarning):
    """The counting filter was rebuilt from the library (after an unclean shutdown, or because
    the counter file did not match the library). Nothing was lost; it took time."""
