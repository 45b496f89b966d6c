"""The bounded soak: 100 steps of the varying-shape loop of python/bench/soak.py (`make soak` runs 1,000).

Dynamic padding to one of 4 lengths and the short last batch of each epoch (8
step programs), dropout, AdamW, clipping and an LR scheduler, one session. The
session plans each program once and replays it afterwards; nothing the
session keeps grows after the warmups (issue 24, part 4), and the pinned pool
stays within what the hungriest cached plan needs (issue 28, part 3; exec/
session.h, Note [Pinned pool between steps]).
"""

from __future__ import annotations

import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench"))

import soak  # noqa: E402

STEPS = 100


def test_rss_growth_counts_a_steady_leak_and_not_one_jump():
    # A leak of 4.5 KiB (4,608 B) per step over 84 steps: 83 jumps of 4,608,
    # the largest left out: 82 x 4,608 / 83 = 4,552.5 B per step, over 4,096.
    assert soak.steady_growth([4608 * step for step in range(84)]) == 82 * 4608 / 83
    # The allocator growing its heap once by 48 pages (196,608 B) after step
    # 40, and a page later: the jump is left out, 4,096 / 83 B per step remain.
    assert soak.steady_growth([0] * 40 + [196608] * 30 + [200704] * 14) == 4096 / 83


def test_a_varying_shape_loop_plans_each_program_once_and_nothing_grows():
    result = soak.soak(STEPS)
    programs = len(soak.programs())
    assert programs == 8  # 4 lengths x 2 batch sizes
    # The first 8 steps run each program once: 8 warmups (each a miss). The
    # cache holds 8 plans by default (max_plans), so every later step finds its
    # plan: 92 hits, no more misses.
    assert result["kinds"] == ["warmup"] * programs + ["replay"] * (STEPS - programs)
    assert (result["warmups"], result["plan_misses"], result["plan_hits"]) == (8, 8, 92)
    assert result["samples"]["plans_cached"][programs:] == [8] * (STEPS - programs)
    # Within both budgets in every step, the warmups included.
    for step in range(STEPS):
        assert result["peak_held_bytes"][step] <= result["budget_bytes"], f"step {step}"
        assert result["peak_host_bytes"][step] <= result["host_budget_bytes"], f"step {step}"
    # Nothing grows after the warmups (counters, pool, objects); RSS: at most
    # 4 KiB per step over 84 steps here (the 1,000-step soak measures the slope
    # itself; leaking the loop's smallest activation, 4.5 KiB, per step fails).
    settle = 2 * programs
    assert soak.growth_failures(result, settle, max_rss_slope=4096) == []
    # The runtime tracks no storage between steps.
    assert set(result["samples"]["tracked_storages"]) == {0}

    # Bit-identical to the same loop run eagerly.
    eager = soak.soak(STEPS, eager=True)
    assert result["losses"] == eager["losses"]
    for index, (p, e) in enumerate(zip(result["parameters"], eager["parameters"])):
        assert torch.equal(p, e), f"parameter {index} differs from eager's"
