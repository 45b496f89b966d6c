"""What the session says it decided: OffloadSession.summary(), plan_summary() and the log line."""

from __future__ import annotations

import logging

import torch

import hyperoffload as ho
from conftest import train
from hyperoffload.session import _size
from models import CASES


def test_before_any_step_the_summary_says_the_next_step_is_the_warmup():
    session = ho.OffloadSession(ho.OffloadConfig(max_resident_activation_mib=1))
    assert session.plan_summary() is None
    assert session.summary() == "hyperoffload: no step traced yet; the next step is the warmup"


def test_the_summary_reports_the_plan_the_session_replays(caplog):
    build = CASES["gpt_decoder"].build
    probe = ho.OffloadSession()
    train(build, probe, steps=1)
    budget = probe.unplanned_peak_bytes() // 2
    session = ho.OffloadSession(ho.OffloadConfig(max_resident_activation_bytes=budget, planner="peak"))
    with caplog.at_level(logging.INFO, logger="hyperoffload"):
        train(build, session, steps=3)
    plan = session.plan_summary()
    trace, schedule = session.trace(), session.schedule()
    sizes = {s["id"]: s["size_bytes"] for s in trace["storages"]}
    copies = [a for a in schedule["actions"] if a["kind"] == "copy_d2h"]
    # Every number is the one the session's own accessors and documents give.
    assert plan["planner"] == "peak"
    assert plan["ops"] == len(trace["ops"]) == session.stats()["ops"]
    assert plan["storages"] == len(trace["storages"])
    assert plan["budget_bytes"] == budget
    assert plan["floor_bytes"] == session.floor_bytes()
    assert plan["unplanned_peak_bytes"] == session.unplanned_peak_bytes() == probe.unplanned_peak_bytes()
    assert plan["floor_bytes"] <= plan["planned_peak_bytes"] <= budget < plan["unplanned_peak_bytes"]
    # A replay carries out the plan's copies to host: the same count and bytes.
    assert plan["offload_count"] == len(copies) == session.stats()["d2h_count"] > 0
    assert plan["offloaded_bytes"] == sum(sizes[a["storage"]] for a in copies) == session.stats()["d2h_bytes"]
    assert plan["recomputed_bytes"] == 0
    assert plan["compute_ms"] > 0 and plan["stall_ms"] >= 0
    assert plan["overhead_percent"] == 100 * plan["stall_ms"] / plan["compute_ms"]
    line = session.summary()
    assert line.startswith(f"hyperoffload: planned {plan['ops']} ops with peak: budget ")
    assert f"({plan['offload_count']} copies)" in line and "recomputes 0 B" in line
    assert f"simulated overhead {plan['overhead_percent']:.1f}%" in line
    # Then the last step's measured peaks: held (in time) and resident.
    stats = session.stats()
    held = stats["peak_held_bytes"]
    assert stats["peak_resident_bytes"] <= held <= budget
    assert line.endswith(f"; last step (replay): held peak {_size(held)}, resident peak "
                         f"{_size(stats['peak_resident_bytes'])}, {stats['memory_wait_ms']:.3f} ms waiting for memory"
                         f"; plans: 1 cached, 2 hits, 1 misses, 1 warmups; plan {stats['plan_fingerprint']}")
    assert len(stats["plan_fingerprint"]) == 16
    # One INFO line, after the warmup only (steps 2 and 3 replay): the same
    # plan, and the warmup's peaks.
    records = [r for r in caplog.records if r.name == "hyperoffload"]
    assert [r.levelno for r in records] == [logging.INFO]
    logged_plan, logged_step = records[0].getMessage().split("; last step ")
    assert logged_plan == line.split("; last step ")[0]
    assert logged_step.startswith("(warmup): held peak ")


def test_without_a_budget_the_summary_says_nothing_is_offloaded():
    session = ho.OffloadSession()
    x = torch.randn(32, 32, requires_grad=True)
    with session:
        (x.exp() * 2).sum().backward()
    plan = session.plan_summary()
    assert plan["budget_bytes"] is None and plan["offloaded_bytes"] == 0 and plan["offload_count"] == 0
    assert f"no budget, nothing offloaded; activation peak {plan['unplanned_peak_bytes'] / 1024:.2f} KiB; " \
           f"last step (warmup): held peak " in session.summary()


def test_a_greedy_plan_over_the_budget_is_replaced_by_the_peak_planners():
    # GPT decoder, gradients reset to None every step, budget 60% of the
    # unplanned peak: the floor (the retained .grads plus the largest backward
    # op) is 56% of the peak, and greedy's plan peaks at 60.4% — above the
    # budget (measured: 775,940 B against 752,796 B). The session must not
    # replay it: it plans again with "peak" and says so.
    from test_models import run_loop

    build = CASES["gpt_decoder"].build
    eager, _ = run_loop(build, None, 3, "none")
    probe = ho.OffloadSession()
    run_loop(build, probe, 1, "none")
    budget = probe.unplanned_peak_bytes() * 6 // 10
    session = ho.OffloadSession(ho.OffloadConfig(max_resident_activation_bytes=budget, planner="greedy"))
    results, warned = run_loop(build, session, 3, "none")
    assert warned == []
    assert [r.stats["kind"] for r in results] == ["warmup", "replay", "replay"]
    for e, r in zip(eager, results):
        assert torch.equal(e.loss, r.loss)
        assert r.stats["peak_held_bytes"] <= budget and r.stats["offloaded_bytes"] > 0
    notes = [n for n in session.notes() if 'planned with "peak"' in n]
    assert len(notes) == 1 and notes[0].startswith('planner "greedy" peaked at ')
    assert session.schedule()["planner"] == "peak"
    assert session.plan_summary()["planned_peak_bytes"] <= budget
