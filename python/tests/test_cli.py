"""A captured trace round-trips through the hyperoffload CLI (plan, validate, compare)."""

from __future__ import annotations

import json
import subprocess

import pytest

import hyperoffload as ho
from conftest import cli_path, train
from models import CASES


def run_cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run([str(cli_path()), *map(str, args)], capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module", params=["greedy", "peak"])
def captured(request, tmp_path_factory):
    """A ViT session at half its activation peak: its trace and schedule files."""
    build = CASES["vit"].build
    probe = ho.OffloadSession()
    train(build, probe, steps=1)
    budget = probe.unplanned_peak_bytes() // 2
    session = ho.OffloadSession(ho.OffloadConfig(max_resident_activation_bytes=budget, planner=request.param))
    train(build, session, steps=2)
    directory = tmp_path_factory.mktemp(request.param)
    trace_path, schedule_path = directory / "trace.json", directory / "schedule.json"
    session.save_trace(trace_path, meta={"model": "vit", "test": True})
    session.save_schedule(schedule_path)
    return session, budget, trace_path, schedule_path


def test_the_saved_trace_is_the_sessions_and_carries_meta(captured):
    session, budget, trace_path, _ = captured
    saved = json.loads(trace_path.read_text())
    assert saved["meta"] == {"model": "vit", "test": True}
    del saved["meta"]
    assert saved == session.trace()
    assert saved["format"] == "hyperoffload.trace" and saved["memory_limit_bytes"] == budget
    assert ho.unplanned_peak(saved) == session.unplanned_peak_bytes()


def test_validate_accepts_the_sessions_schedule_within_the_budget(captured):
    session, budget, trace_path, schedule_path = captured
    result = run_cli("validate", trace_path, schedule_path, "--budget", budget)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith(f"valid: {schedule_path}")
    assert "within" in result.stdout and "faults    0" in result.stdout
    report = json.loads(run_cli("validate", trace_path, schedule_path, "--json").stdout)
    # The replay's measured peak is the validator's op-granular peak.
    assert report["peak_bytes"] <= budget
    assert session.stats()["peak_held_bytes"] <= budget


def test_plan_reproduces_the_sessions_schedule(captured, tmp_path):
    session, _, trace_path, _ = captured
    planner = session.schedule()["planner"]
    out = tmp_path / "planned.json"
    result = run_cli("plan", trace_path, "--planner", planner, "--output", out)
    assert result.returncode == 0, result.stderr
    assert json.loads(out.read_text()) == session.schedule()


def test_compare_runs_every_planner_on_the_captured_trace(captured):
    session, _, trace_path, _ = captured
    result = run_cli("compare", trace_path, "--budget", "50%", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["trace"]["ops"] == len(session.trace()["ops"])
    assert report["trace"]["unplanned_peak_bytes"] == session.unplanned_peak_bytes()
    planners = {r["planner"]: r for r in report["results"]}
    # The default planners and DTR, the published recompute-only reference.
    assert set(planners) == {"greedy", "peak", "hybrid", "recompute", "dtr"}
    assert all(r["valid"] and r["faults"] == 0 for r in planners.values())
    # Recompute-only has only the ops the capture marked recomputable to work
    # with; the others reach any budget above the floor.
    assert all(planners[name]["feasible"] for name in ("greedy", "peak", "hybrid"))
    table = run_cli("compare", trace_path, "--budget", "50%")
    assert table.returncode == 0 and "recompute ms (n)" in table.stdout


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_shipped_example_traces_describe_their_model_and_compare(name):
    from conftest import REPO

    path = REPO / "examples" / "traces" / f"{name}.json"
    document = json.loads(path.read_text())
    meta = document["meta"]
    assert meta["model"] == CASES[name].description["model"]
    assert meta["unplanned_peak_bytes"] == ho.unplanned_peak(document)
    assert document["memory_limit_bytes"] == meta["unplanned_peak_bytes"] // 2
    assert meta["replay_peak_resident_bytes"] <= document["memory_limit_bytes"]
    # Held bytes (device memory in time) are recorded by captures made since
    # the runtime counts them; the shipped files may predate it.
    assert meta.get("replay_peak_held_bytes", 0) <= document["memory_limit_bytes"]
    result = run_cli("compare", path, "--budget", "50%", "--json")
    assert result.returncode == 0, result.stderr
    # Version 3 where an op draws random numbers (the CPU attention takes a
    # dropout_p: marked rng_replay), version 2 for resnet18, which has none.
    random_ops = [op["name"] for op in document["ops"] if op.get("rng_replay")]
    assert document["version"] == (2 if name == "resnet18" else 3), random_ops
    assert bool(random_ops) == (name != "resnet18")
    assert any(op.get("recomputable") for op in document["ops"])
    results = {r["planner"]: r for r in json.loads(result.stdout)["results"]}
    # Every planner fits wherever its floor allows. Recompute-only can free
    # only what recomputable ops wrote, so it may not fit, but it does
    # recompute (the capture marks ops recomputable).
    # DTR (the reference, an online heuristic) may miss a budget and states no
    # floor.
    for r in results.values():
        assert r["valid"], r["planner"]
        if r["planner"] != "dtr":
            assert r["feasible"] or r["floor"]["bytes"] > r["budget_bytes"], r["planner"]
    assert all(results[name]["feasible"] for name in ("greedy", "peak", "hybrid"))
    assert results["recompute"]["recompute_count"] > 0
