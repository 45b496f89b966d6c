"""examples/traces/dtr_*.json, DTR's model families (issue 26): meta, and `compare` against the DTR reference.

The traces are captured by python/tools/capture_example_traces.py from
python/tests/dtr_models.py. `hyperoffload compare --budgets 30%,50%,70%` on each
(a device that holds only the budget, the captured link) must keep issue 26's
targets where they are met today (BENCHMARKS.md, "Recompute-only against DTR on
DTR's model families", lists every cell and why some miss):

* recompute-only is feasible exactly where the budget is at least its true
  limit (`recompute_only_limit`: what one op touches plus what cannot be
  recomputed);
* its overhead is never above DTR's heuristic's, and at most 0.8x of it in the
  cells listed in MEETS_0_8;
* hybrid fits every budget and is no slower than recompute-only or DTR, also on
  a slow link (0.25 GiB/s each way, the transformer) where offloading costs stall;
* the shipped traces are the models' steps (not stale).
"""

from __future__ import annotations

import json
import subprocess

import pytest
import torch

import hyperoffload as ho
from conftest import REPO, cli_path, train
from dtr_models import DTR_CASES

# Cells where recompute-only's overhead is at most 0.8x DTR's (BENCHMARKS.md):
# all fifteen. unet at 50% joined with the exclusion search (Note [Excluding
# candidates], plan/hybrid/hybrid_plans.h: 14.23% against DTR's 17.86%,
# 0.797x); unet at 70% joined with kept
# dead inputs (Note [Keeping a dead input]). Inception and the
# transformer at 30% joined with in-place units (issue 35, part 2): Inception
# was below the limit before, and the transformer's chains now regenerate what
# autograd's add_ sums made. densenet at 30% joined with segment re-runs; unet
# at 30% with the eviction walk by next use and resnet32 at 30% with the walk
# by furthest next use: DTR's own walk was the quickest recompute-only plan
# that fit there (1.0x) before.
MEETS_0_8 = {(name, percent) for name in ("dtr_resnet32", "dtr_densenet", "dtr_unet", "dtr_inception",
                                          "dtr_transformer") for percent in (30, 50, 70)}
# Dropout draws random numbers: its mask op is recomputable by RNG replay.
RNG_REPLAY_OPS = {"dtr_resnet32": 0, "dtr_densenet": 0, "dtr_unet": 0, "dtr_inception": 1,
                  "dtr_transformer": 6 * 4 + 1}


def compare(path, *extra) -> dict:
    result = subprocess.run([str(cli_path()), "compare", str(path), "--budgets", "30%,50%,70%",
                             "--planners", "recompute,hybrid,dtr", "--json", *extra],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def by_budget(comparison: dict) -> dict:
    cells: dict = {}
    for r in comparison["results"]:
        assert r["valid"], (r["planner"], r["budget_percent"])
        cells.setdefault(round(r["budget_percent"]), {})[r["planner"]] = r
    assert sorted(cells) == [30, 50, 70]
    return cells


@pytest.mark.parametrize("name", sorted(DTR_CASES))
def test_the_dtr_family_traces_describe_their_model(name):
    document = json.loads((REPO / "examples" / "traces" / f"{name}.json").read_text())
    meta = document["meta"]
    case = DTR_CASES[name]
    assert meta["model"] == case.description["model"] and meta["family"] == case.description["family"]
    assert meta["reduced"] == case.description["reduced"]
    assert meta["batch"] == case.description["batch"]
    assert meta["parameters"] == sum(p.numel() for p in case.build()[0].parameters())
    assert meta["unplanned_peak_bytes"] == ho.unplanned_peak(document)
    assert document["memory_limit_bytes"] == meta["unplanned_peak_bytes"] // 2
    assert meta["replay_peak_resident_bytes"] <= document["memory_limit_bytes"]
    rng_replay = sum(1 for op in document["ops"] if op.get("rng_replay"))
    assert rng_replay == RNG_REPLAY_OPS[name]
    assert document["version"] == (3 if rng_replay else 2)
    assert all(op.get("recomputable") for op in document["ops"] if op.get("rng_replay"))


@pytest.mark.parametrize("name", sorted(DTR_CASES))
def test_the_shipped_dtr_family_traces_are_the_models_step(name):
    """Tracing the model again gives the shipped trace's ops, accesses and storages (the durations are measured)."""
    document = json.loads((REPO / "examples" / "traces" / f"{name}.json").read_text())
    if document["meta"]["torch"] != torch.__version__:
        pytest.skip(f"captured with torch {document['meta']['torch']}")
    session = ho.OffloadSession()
    train(DTR_CASES[name].build, session, steps=1)
    trace = session.trace()
    def structure(t):
        return [(op["name"], op.get("recomputable", False), op.get("rng_replay", False), op["accesses"])
                for op in t["ops"]]
    assert structure(trace) == structure(document), "the shipped trace is stale: recapture it"
    assert trace["storages"] == document["storages"]
    assert session.unplanned_peak_bytes() == document["meta"]["unplanned_peak_bytes"]


def test_resnet32_is_dtrs_shape():
    meta = json.loads((REPO / "examples" / "traces" / "dtr_resnet32.json").read_text())["meta"]
    assert (meta["batch"], meta["height"], meta["width"], meta["reduced"]) == (56, 32, 32, {})
    model = DTR_CASES["dtr_resnet32"].build()[0]
    convs = [m for m in model.modules() if isinstance(m, torch.nn.Conv2d)]
    assert len(convs) + 1 == 32  # 6n + 1 convs and the linear head: ResNet-32


@pytest.mark.parametrize("name", sorted(DTR_CASES))
def test_compare_meets_issue_26s_targets_where_they_are_met(name):
    comparison = compare(REPO / "examples" / "traces" / f"{name}.json")
    limit = comparison["recompute_only_limit"]["bytes"]
    for percent, cell in by_budget(comparison).items():
        recompute, hybrid, dtr = cell["recompute"], cell["hybrid"], cell["dtr"]
        where = (name, percent)
        assert recompute["feasible"] == (recompute["budget_bytes"] >= limit), where
        assert not dtr["feasible"] or recompute["feasible"], where
        if dtr["feasible"]:
            assert recompute["overhead_percent"] <= dtr["overhead_percent"] + 1e-9, where
        if where in MEETS_0_8:
            assert recompute["overhead_percent"] <= 0.8 * dtr["overhead_percent"], where
        assert hybrid["feasible"], where
        for other in (recompute, dtr):
            if other["feasible"]:
                assert hybrid["overhead_percent"] <= other["overhead_percent"] + 1e-9, (where, other["planner"])


@pytest.mark.parametrize("name", ["dtr_transformer"])
def test_on_a_slow_link_hybrid_recomputes_and_beats_both(name, tmp_path):
    """At 0.25 GiB/s each way offloading alone stalls; hybrid mixes in recomputes and stays below both."""
    document = json.loads((REPO / "examples" / "traces" / f"{name}.json").read_text())
    document["d2h_bandwidth_gbps"] = document["h2d_bandwidth_gbps"] = 0.25
    path = tmp_path / f"{name}.slow.json"
    path.write_text(json.dumps(document))
    for percent, cell in by_budget(compare(path)).items():
        recompute, hybrid, dtr = cell["recompute"], cell["hybrid"], cell["dtr"]
        assert hybrid["feasible"] and recompute["feasible"] and dtr["feasible"], (name, percent)
        assert hybrid["overhead_percent"] <= min(recompute["overhead_percent"], dtr["overhead_percent"]), \
            (name, percent)
        if percent <= 50:
            assert hybrid["recompute_count"] > 0 and hybrid["bytes_moved"] > 0, (name, percent)
