"""Exceptions raised by hyperoffload. Every one is a RuntimeError."""


class HyperoffloadError(RuntimeError):
    """A failure of the offloading runtime (its message names the op and storage)."""


class DivergenceError(HyperoffloadError):
    """A replayed step ran other ops than the warmup step it replays.

    The message names the op index and both op names; dynamic regions belong in
    :func:`hyperoffload.skip_offload`.
    """


class BudgetError(HyperoffloadError):
    """The activation budget is below the step's unavoidable floor (both are in the message)."""


class DeviceMismatchError(HyperoffloadError):
    """A session was used with tensors of another device than the one it is bound to."""
