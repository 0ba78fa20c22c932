"""mxhet's exception family."""


class MxhetError(Exception):
    """Base of every error mxhet raises on purpose."""


class ConfigError(MxhetError, ValueError):
    """A bad option, environment variable or argument."""


class ProtocolError(MxhetError):
    """A control-plane message that does not follow the protocol."""


class NotRegistered(ProtocolError):
    """The State Server does not know the sender (e.g. it was restarted)."""


class StateServerTimeout(MxhetError):
    """The State Server did not answer within the allowed time."""


class TransportError(MxhetError):
    """The worker's control-plane I/O thread failed or did not start in time."""


class UnknownModeError(ConfigError):
    """A synchronization mode name that is not registered."""


class DataError(MxhetError):
    """The data set is missing or malformed."""


class NonFiniteError(MxhetError):
    """NaN or Inf in a model delta or gradient about to be pushed."""
