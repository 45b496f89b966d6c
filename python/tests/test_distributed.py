"""Multi-process training on PyTorch's own engine, one OffloadSession per rank.

`torchrun --standalone --nproc_per_node 2` runs python/tests/distributed_worker.py
with the gloo backend on CPU: DDP and FSDP2 (fully_shard) train a small GPT-style
decoder without a session, with a session without a budget, and with one at half
of each rank's unplanned activation peak; losses and gradients must be
bit-identical on both ranks, and the buffers collectives use must have left the
session at their collective (docs/PYTHON.md, "Multi-process training").
Also: record_function blocks and a torch.profiler.profile() around a step.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

import hyperoffload as ho
from conftest import REPO, StepResult, assert_bit_identical
from models import build_gpt

WORKER = REPO / "python" / "tests" / "distributed_worker.py"
STEPS = 5
FRACTION = 0.5
# Step 1 creates state (DDP: nothing; FSDP2: its all-gather outputs), step 2
# differs (DDP rebuilds its buckets; FSDP2 has them): another step program,
# so it continues as a warmup from where it differs (docs/PYTHON.md, "Training
# loops") and the later steps replay its plan.
KINDS = ["warmup", "warmup", "replay", "replay", "replay"]


def distributed_available() -> bool:
    import torch.distributed as dist
    return dist.is_available() and dist.is_gloo_available()


pytestmark = pytest.mark.skipif(not distributed_available(), reason="torch.distributed with gloo is not available")


def run_ranks(mode: str, out) -> list:
    env = dict(os.environ)
    env["OMP_NUM_THREADS"] = "1"
    env.setdefault("PYTHONPATH", "")
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
               str(WORKER), "--mode", mode, "--fraction", str(FRACTION), "--steps", str(STEPS), "--out", str(out)]
    done = subprocess.run(command, env=env, cwd=REPO, capture_output=True, text=True, timeout=240)
    results = []
    for rank in range(2):
        path = out / f"rank{rank}.json"
        assert path.exists(), f"rank {rank} wrote no result (exit {done.returncode}):\n{done.stderr[-4000:]}"
        results.append(json.loads(path.read_text()))
    for r in results:
        assert r["ok"], f"rank {r['rank']} failed:\n{r.get('error')}"
    assert done.returncode == 0, done.stderr[-4000:]
    return results


@pytest.fixture(scope="module", params=["ddp", "fsdp2"])
def ranks(request, tmp_path_factory):
    return request.param, run_ranks(request.param, tmp_path_factory.mktemp(request.param))


def test_every_rank_trains_bit_identically_with_and_without_offloading(ranks):
    mode, results = ranks
    for r in results:
        assert r["world_size"] == 2 and r["mode"] == mode
        for run in ("probe", "offload"):
            assert r[run]["losses_equal"] == [True] * STEPS, f"rank {r['rank']} {run}: {r[run]['losses']}"
            assert r[run]["grads_equal"] == [True] * STEPS, f"rank {r['rank']} {run}"
    # The ranks saw different batches: the gradients were really averaged.
    assert results[0]["eager_losses"] != results[1]["eager_losses"]


def test_each_rank_stays_within_its_budget_and_offloads(ranks):
    mode, results = ranks
    for r in results:
        stats = r["offload"]["stats"]
        assert [s["kind"] for s in stats] == KINDS, f"rank {r['rank']}: {r['offload']['warnings']}"
        assert [s["passthrough"] for s in stats] == [k is None for k in KINDS]
        assert r["offload"]["warnings"] == []
        budget = r["budget_bytes"]
        assert budget == int(r["unplanned_peak_bytes"] * FRACTION)
        assert r["floor_bytes"] <= budget
        for step, s in enumerate(stats):
            if s["kind"] is None:
                continue
            assert s["budget_bytes"] == budget
            assert s["peak_held_bytes"] <= budget, f"rank {r['rank']} step {step}"
            assert s["offloaded_bytes"] > 0 and s["d2h_count"] > 0, f"rank {r['rank']} step {step}"
        for s in stats[3:]:
            assert s["faults"] == 0
        probe = r["probe"]["stats"]
        assert [s["kind"] for s in probe] == KINDS
        assert all(s["offloaded_bytes"] == 0 for s in probe)


def test_buffers_collectives_use_leave_the_session_at_their_collective(ranks):
    mode, results = ranks
    for r in results:
        c = r["collectives"]
        if mode == "ddp":
            # Forward broadcasts the buffers, backward all-reduces the gradient buckets.
            assert {"c10d::allreduce_", "c10d::broadcast_"} <= set(c["ops"])
        else:
            assert {"c10d::_allgather_base_", "c10d::_reduce_scatter_base_", "fsdp::all_gather_copy_in",
                    "fsdp::split_with_sizes_copy", "fsdp::chunk_cat"} <= set(c["ops"])
            assert c["tracked_storages"], "FSDP2's unsharded gradients reach fsdp::chunk_cat tracked"
        # No op touches them after, the plan never copies them, and the step
        # does not end holding them (FSDP2's gradients live on, untracked).
        assert c["used_after"] == []
        assert c["moved_after"] == []
        assert c["retained"] == []


# ---- record_function and the profiler (one process) -----------------------------------


def profiled_steps(session, steps=3):
    model, batch, loss_fn = build_gpt()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    results = []
    for _ in range(steps):
        optimizer.zero_grad(set_to_none=False)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):
            with session:
                with torch.autograd.profiler.record_function("forward"):
                    loss = loss_fn(model, batch)
                with torch.autograd.profiler.record_function("backward"):
                    loss.backward()
        results.append(StepResult(loss.detach().clone(), [p.grad.clone() for p in model.parameters()],
                                  session.stats()))
        optimizer.step()
    return results


def test_record_function_blocks_and_the_profiler_pass_through_a_session():
    from conftest import train
    eager = train(build_gpt, steps=3)
    probe = ho.OffloadSession()
    assert_bit_identical(eager, profiled_steps(probe))
    budget = probe.unplanned_peak_bytes() // 2
    session = ho.OffloadSession(ho.OffloadConfig(max_resident_activation_bytes=budget))
    results = profiled_steps(session)
    assert_bit_identical(eager, results)
    assert [r.stats["kind"] for r in results] == ["warmup", "replay", "replay"]
    for r in results:
        assert r.stats["peak_held_bytes"] <= budget
        assert r.stats["offloaded_bytes"] > 0
    # The profiler's ops (a script-object handle in, none out) are traced ops touching no storage.
    names = [op["name"] for op in session.trace()["ops"]]
    assert names.count("profiler::_record_function_enter_new") == 2
    for op in session.trace()["ops"]:
        if op["name"].startswith("profiler::"):
            assert op["accesses"] == []
