"""Host memory is a budget too (issue 28): training within a pinned-host limit never fails for lack of it.

The 8-layer MLP of the issue, at a 600 kB device budget with the hybrid
planner: with 1 GiB, 256 KiB, 16 KiB or 0 B of pinned host memory every step
succeeds (the warmup keeps on the device what the full pool cannot take; the
plan recomputes or keeps what does not fit on the host) and is bit-identical
to eager.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import hyperoffload as ho
from conftest import assert_bit_identical, train

STEPS = 4
DEVICE_BUDGET_BYTES = 700_000


def build_mlp():
    """8 Linear+ReLU layers, 64 x 256 floats per activation (64 KiB each)."""
    torch.manual_seed(0)
    layers = []
    for _ in range(8):
        layers += [nn.Linear(256, 256), nn.ReLU()]
    model = nn.Sequential(*layers)
    batch = torch.randn(64, 256)

    def loss_fn(m, x):
        return m(x).square().mean()

    return model, batch, loss_fn


@pytest.fixture(scope="module")
def eager():
    return train(build_mlp, steps=STEPS)


@pytest.mark.parametrize("host_bytes", [1 << 30, 256 << 10, 16 << 10, 0])
def test_every_step_succeeds_and_is_bit_identical_at_any_host_budget(eager, host_bytes):
    config = ho.OffloadConfig(max_resident_activation_bytes=DEVICE_BUDGET_BYTES,
                              max_offload_activation_bytes=host_bytes, planner="hybrid")
    session = ho.OffloadSession(config)
    results = train(build_mlp, session, steps=STEPS)
    assert_bit_identical(eager, results)
    kinds = [r.stats["kind"] for r in results]
    assert kinds[0] == "warmup" and kinds[-1] == "replay", kinds
    for step, r in enumerate(results):
        assert r.stats["peak_host_bytes"] <= host_bytes, f"step {step} ({kinds[step]})"


# What the plan offloads with unlimited host memory at this device budget:
# three 64 KiB activations (3 x 64 x 256 x 4 bytes = 196,608), measured by the
# 1 GiB case above (offloaded_bytes of every step).
OFFLOADED_BYTES = 3 * 64 * 256 * 4


@pytest.mark.parametrize("share", [0.0, 0.1, 0.5])
def test_peak_host_bytes_stay_within_a_share_of_the_offloaded_bytes_in_every_step(eager, share):
    host_bytes = int(share * OFFLOADED_BYTES)
    config = ho.OffloadConfig(max_resident_activation_bytes=DEVICE_BUDGET_BYTES,
                              max_offload_activation_bytes=host_bytes, planner="hybrid")
    session = ho.OffloadSession(config)
    results = train(build_mlp, session, steps=STEPS)
    assert_bit_identical(eager, results)
    for step, r in enumerate(results):
        assert r.stats["peak_host_bytes"] <= host_bytes, f"step {step} ({r.stats['kind']})"
    # Replays keep the device budget too: the plan is within both budgets.
    for r in results[1:]:
        assert r.stats["peak_held_bytes"] <= DEVICE_BUDGET_BYTES


def test_unlimited_host_memory_offloads_three_activations():
    config = ho.OffloadConfig(max_resident_activation_bytes=DEVICE_BUDGET_BYTES, planner="hybrid")
    session = ho.OffloadSession(config)
    results = train(build_mlp, session, steps=2)
    assert [r.stats["offloaded_bytes"] for r in results] == [OFFLOADED_BYTES, OFFLOADED_BYTES]


def test_the_pinned_pool_stays_flat_across_steps_and_within_the_host_budget():
    # 256 KiB of host memory: the plan holds at most 4/5 of it in host copies
    # (the pool's size classes are at most 25% larger than a request), so the
    # pool never needs more than the capacity, and replays reuse its blocks.
    host_bytes = 256 << 10
    config = ho.OffloadConfig(max_resident_activation_bytes=DEVICE_BUDGET_BYTES,
                              max_offload_activation_bytes=host_bytes, planner="hybrid")
    with ho.OffloadSession(config).run() as session:
        results = train(build_mlp, session, steps=STEPS)
        reserved = [r.stats["host_pool_reserved_bytes"] for r in results]
        assert all(r <= host_bytes for r in reserved), reserved
        # Replays neither grow nor shrink the pool: it holds the plan's peak
        # host bytes, three 64 KiB activations (65,536 = 4 x 2^14 is a size
        # class of its own, so no rounding): 3 x 65,536 = 196,608.
        assert reserved[1:] == [196_608] * (STEPS - 1), reserved
        assert all(r.stats["peak_host_bytes"] <= host_bytes * 4 // 5 for r in results[1:])
    assert session.closed


def test_a_closed_session_says_so_and_closing_twice_is_fine():
    session = ho.OffloadSession(ho.OffloadConfig(max_resident_activation_bytes=DEVICE_BUDGET_BYTES))
    train(build_mlp, session, steps=1)
    session.close()
    session.close()
    with pytest.raises(ho.HyperoffloadError, match="this OffloadSession is closed"):
        session.stats()
    with pytest.raises(ho.HyperoffloadError, match="this OffloadSession is closed"):
        with session:
            pass


def test_the_plan_summary_is_of_the_host_budget_the_plan_was_made_for():
    # One target (exec/session.h, Session::target): 256 KiB of pinned host
    # memory gives plans a host budget of 4/5 of it, 209,712 bytes
    # (262,144 / 5 = 52,428 rounded down, x 4), and the summary simulates the plan against
    # that same budget (it left the host budget out once).
    config = ho.OffloadConfig(max_resident_activation_bytes=DEVICE_BUDGET_BYTES,
                              max_offload_activation_bytes=256 << 10, planner="hybrid")
    session = ho.OffloadSession(config)
    train(build_mlp, session, steps=1)
    summary = session.plan_summary()
    assert summary["budget_bytes"] == DEVICE_BUDGET_BYTES
    assert summary["host_budget_bytes"] == 209_712
    unlimited = ho.OffloadSession(ho.OffloadConfig(max_resident_activation_bytes=DEVICE_BUDGET_BYTES))
    train(build_mlp, unlimited, steps=1)
    assert unlimited.plan_summary()["host_budget_bytes"] is None
