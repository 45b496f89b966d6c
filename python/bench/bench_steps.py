"""One timed training step, the activation peak a session measures, atomic result files: for the step-time benchmarks.

Used by checkpoint_wallclock.py and frontier.py (run from python/bench/, which is
on sys.path when either runs as a script or is loaded by a test).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import time

import torch

import hyperoffload as ho


def keep_freed_memory() -> str:
    """Makes glibc's malloc keep the memory it frees for reuse; returns what was done, for the report.

    On a GPU, PyTorch's caching allocator keeps freed blocks, so a step's
    tensors reuse memory already mapped. On the CPU, PyTorch allocates from
    glibc's malloc, which by default hands freed memory back to the kernel
    (trimming the heap's top, unmapping blocks above the mmap threshold), so
    every step takes page faults for memory it touches anew: GPT-2 of
    frontier.py took 8-12k minor faults an eager step, and its replays under
    a session up to 42k, varying from step to step. With the heap never
    trimmed, a top pad of 256 MiB and the mmap threshold at its maximum (32
    MiB) — the settings of the `hyperoffload` CLI (cli/main.cc) — its eager
    steps took 0-800 faults and its later replays single digits, so the
    variants of a benchmark are timed without that noise, on the same malloc,
    closer to a GPU's allocator (BENCHMARKS.md, "Keeping freed memory";
    python/bench/warmup_op_times.py). It does not change what a session's
    first warmup under a budget records, 1.1-2.2x the eager step from one
    process to the next with it or without. Process-wide, so a benchmark
    calls it once at its start, before any tensor is made; a no-op where libc
    is not glibc.
    """
    path = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(path) if path else None
        mallopt = libc.mallopt if libc is not None else None
    except (OSError, AttributeError):
        mallopt = None
    if mallopt is None:
        return "malloc left as it is (no glibc mallopt)"
    m_trim_threshold, m_top_pad, m_mmap_threshold = -1, -2, -3  # glibc's <malloc.h>
    done = (mallopt(m_trim_threshold, 2**31 - 1) == 1 and mallopt(m_top_pad, 256 << 20) == 1
            and mallopt(m_mmap_threshold, 32 << 20) == 1)
    return ("glibc malloc keeps freed memory (no trim, top pad 256 MiB, mmap threshold 32 MiB)" if done
            else "glibc mallopt refused the settings; malloc left as it is")


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
