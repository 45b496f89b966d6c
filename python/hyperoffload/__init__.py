"""hyperoffload: fit PyTorch training in less accelerator memory by offloading activations.

::

    import hyperoffload as ho
    session = ho.OffloadSession(ho.OffloadConfig(max_resident_activation_mib=512, planner="peak"))
    for step in range(steps):
        with session:              # step 1: warmup (trace + online eviction); later: replay the plan
            loss = model(x).sum()
            loss.backward()

The first step is traced and kept within the budget online; hyperoffload then
plans when to copy each activation to host memory and back, and every later step
replays that plan with the copies overlapping compute. See docs/PYTHON.md.
"""

import torch  # noqa: F401  (loads libtorch before the extension that links it)

from . import _C
from .config import OffloadConfig
from .errors import BudgetError, DeviceMismatchError, DivergenceError, HyperoffloadError
from .session import OffloadSession, skip_offload

__version__ = "0.1.0"


def unplanned_peak(trace: "dict | str") -> int:
    """Peak bytes of a ``hyperoffload.trace`` document (a dict or its JSON text) with nothing offloaded.

    Storages count from their first to their last access (retained ones to the
    end): the peak that ``hyperoffload compare --budget 50%`` percentages refer to.
    """
    import json

    text = trace if isinstance(trace, str) else json.dumps(trace)
    return _C.unplanned_peak(text)[0]


__all__ = [
    "BudgetError",
    "DeviceMismatchError",
    "DivergenceError",
    "HyperoffloadError",
    "OffloadConfig",
    "OffloadSession",
    "skip_offload",
    "unplanned_peak",
]
