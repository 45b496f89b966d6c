"""torch.compile inside a session step: compiled callables run eagerly there.

A session sees a step through the aten dispatcher (its C++ fallback, or its
``TorchDispatchMode``; docs/PYTHON.md, "How ops are intercepted"). Code that
Dynamo compiled does not go through it: Inductor's kernels never reach the aten
dispatcher, so the session could neither trace nor offload what they read and
write (and a released storage read by such a kernel would be read without
data). Under the C++ fallback the thread's dispatch keys gain the fallback's
key, so every guard fails and Dynamo compiles the code again for the step —
into kernels that bypass the session. Under the mode the keys gain ``Python``
and Dynamo, refusing to compile under a non-infra dispatch mode, falls back to
the original frame — but on PyTorch 2.13 that fallback marks the code object
"skip" for good (pytorch/pytorch#190286): after one step under a session, the
model — and ``nn.Module._call_impl``, so every compiled module — never
compiles again, even outside the session; and ``fullgraph=True`` raises
Dynamo's ``Unsupported`` instead.

So each step runs under ``torch.compiler.set_stance("force_eager")``: every
``torch.compile``'d callable called inside the step runs its original Python
code, eagerly, op by op through the dispatcher — the session traces and offloads
it like any eager model, with the same guarantees (bit-identical to the
uncompiled model; budget; replay). Outside the step the callables compile and
run compiled as usual, and nothing is marked skipped. The stance is Dynamo's
process-wide setting: compiled calls on other threads also run eagerly while a
step is running.

What cannot work raises :class:`HyperoffloadError` when the step starts:
``with session:`` inside a function that is itself running compiled (its frame
is Dynamo's, whose graph would bypass the session, and the stance cannot change
there).

On PyTorch without ``torch.compiler.set_stance`` (before 2.6) nothing is
changed: compiled code still never runs under the session's mode there (the
dispatch-key guards fail), untested.
"""

from __future__ import annotations

from typing import Callable

import torch

from .errors import HyperoffloadError

_EAGER = "force_eager"


def _eval_frame_callback():
    """Dynamo's eval-frame callback on this thread (None/False: no compiled frame is running)."""
    try:
        from torch._C._dynamo.eval_frame import get_eval_frame_callback
    except ImportError:  # pragma: no cover - PyTorch without this getter
        return None
    return get_eval_frame_callback()


def _nothing() -> None:
    return None


def check_step_start() -> Callable[[], None]:
    """Starts a session step's compile scope; returns the function that ends it.

    Raises HyperoffloadError when the step is entered from code that runs under
    ``torch.compile``. Otherwise sets Dynamo's stance to ``force_eager`` until
    the returned function is called (once, when the step ends, however it ends),
    which restores the stance that was set before.
    """
    compiling = getattr(torch.compiler, "is_compiling", None)
    if (compiling is not None and compiling()) or _eval_frame_callback() not in (None, False):
        raise HyperoffloadError(
            "a session step was entered inside a torch.compile'd function: compiled code bypasses the session's "
            "op interception, so its ops could be neither traced nor offloaded. Keep `with session:` in eager code "
            "and compile the model (or its forward/loss function) instead — inside the step it runs eagerly "
            "through the session — or mark the function that enters the step with @torch.compiler.disable")
    set_stance = getattr(torch.compiler, "set_stance", None)
    if set_stance is None:
        return _nothing
    stance = set_stance(_EAGER)  # takes effect now; stance.__exit__ restores the previous stance

    def end() -> None:
        stance.__exit__(None, None, None)

    return end


def current_stance() -> str:
    """Dynamo's current stance ("default", "force_eager", ...), or "default" where PyTorch has none."""
    try:
        from torch._dynamo.eval_frame import _stance
    except ImportError:  # pragma: no cover
        return "default"
    return _stance.stance
