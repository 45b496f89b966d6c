"""What differs between the PyTorch versions hyperoffload supports (1.13 and 2.x).

Both have ``torch.utils._python_dispatch.TorchDispatchMode`` (entered and left with
``__enter__``/``__exit__``), ``_get_current_dispatch_mode`` and
``_pop_mode_temporarily``; their signatures drifted, so the session reaches them
only through the two helpers below.
"""

from __future__ import annotations

import contextlib

from torch.utils import _python_dispatch as _dispatch

TorchDispatchMode = _dispatch.TorchDispatchMode


def current_dispatch_mode():
    """The innermost active TorchDispatchMode on this thread, or None."""
    getter = getattr(_dispatch, "_get_current_dispatch_mode", None)
    if getter is not None:
        return getter()
    stack = _dispatch._get_current_dispatch_mode_stack()
    return stack[-1] if stack else None


@contextlib.contextmanager
def suspended_mode():
    """Runs the block without the innermost TorchDispatchMode (ops go straight to kernels)."""
    pop_temporarily = getattr(_dispatch, "_pop_mode_temporarily", None)
    if pop_temporarily is not None:
        with pop_temporarily():
            yield
        return
    mode = _dispatch._pop_mode()
    try:
        yield
    finally:
        _dispatch._push_mode(mode)
