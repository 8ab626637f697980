"""Every exception urlseen raises on purpose, in one place.

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
