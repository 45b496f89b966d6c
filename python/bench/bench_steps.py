"""One timed training step, the activation peak a session measures, atomic result files: for the step-time benchmarks.

Used by checkpoint_wallclock.py and frontier.py (run from python/bench/, which is
on sys.path when either runs as a script or is loaded by a test).
"""

from __future__ import annotations

import os
import time

import torch

import hyperoffload as ho


def step(loss_fn, modules, session=None) -> float:
    """One training step in ms (gradients set to None first, so each step makes them anew).

    On a CUDA device the step is timed between two synchronizations, so the
    kernels it queued count; on the CPU the ops run as they are called.
    """
    for module in modules:
        for p in module.parameters():
            p.grad = None
    cuda = torch.cuda.is_available() and any(p.is_cuda for module in modules for p in module.parameters())
    if cuda:
        torch.cuda.synchronize()
    start = time.perf_counter()
    if session is None:
        loss_fn().backward()
    else:
        with session:
            loss_fn().backward()
    if cuda:
        torch.cuda.synchronize()
    return (time.perf_counter() - start) * 1e3


def measured_peak(loss_fn, modules) -> int:
    """Held activation peak of one step, measured by a session with no budget (the tracker)."""
    tracker = ho.OffloadSession()
    step(loss_fn, modules, tracker)
    return tracker.stats()["peak_held_bytes"]


def write_atomically(path, text: str) -> None:
    """Writes `text` to `path` through a temporary file and a rename: an error never leaves a partial file."""
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)
