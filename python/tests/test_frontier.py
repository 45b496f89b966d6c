"""python/bench/frontier.py --quick: the race against transformers' checkpointing frontier, well formed.

Every point of every model is measured; every session that fits is bit-identical
to eager, within its budget at every measured step, and replays; the reported
ratio is the better counting variant's median over checkpointing's.
"""

from __future__ import annotations

import json

from conftest import load_bench


def test_offload_without_a_cuda_device_is_refused_before_anything_runs(capsys):
    bench = load_bench("frontier")
    if bench.torch.cuda.is_available():
        return  # scripts/gpu-check.sh runs --offload there
    try:
        bench.main(["--quick", "--offload"])
    except SystemExit as exit:
        assert exit.code == 2
    else:
        raise AssertionError("--offload ran without a CUDA device")
    assert "--offload needs a CUDA device" in capsys.readouterr().err


def test_quick_race_is_well_formed_bit_identical_and_within_budget(tmp_path, capsys):
    bench = load_bench("frontier")
    path, svg = tmp_path / "frontier.json", tmp_path / "frontier.svg"
    document = bench.main(["--quick", "--json", str(path), "--plot", str(svg)])
    out = capsys.readouterr().out
    assert json.loads(path.read_text()) == json.loads(json.dumps(document))
    assert svg.read_text().startswith("<svg") and svg.read_text().count("<polyline") >= 4
    assert document["device"] == "cpu" and "offload=True) not measured" in out
    # Every variant ran on a malloc that keeps freed memory (bench_steps.keep_freed_memory).
    assert document["malloc"].startswith("glibc malloc keeps freed memory") and document["malloc"] in out
    assert [r["model"] for r in document["results"]] == ["gpt2", "llama", "bert", "vit"]
    for r in document["results"]:
        assert r["rounds"] == 2 and r["shape"] == bench.QUICK[r["model"]]
        assert [p["every_n_layers"] for p in r["points"]] == [1, 2, 3]
        for p in r["points"]:
            # Checkpointing holds less than eager; a point checkpointing fewer layers holds at least as much.
            assert 0 < p["budget_bytes"] < r["eager_peak_held_bytes"]
            assert len(p["checkpoint"]["step_ms"]) == 2
            for planner in ("recompute", "hybrid"):
                info = p[planner]
                if not info["feasible"]:
                    assert info["floor_bytes"] > p["budget_bytes"]
                    continue
                assert info["bit_identical"], (r["model"], p["every_n_layers"], planner)
                assert info["within_budget"] and info["peak_held_bytes"] <= p["budget_bytes"]
                assert info["kinds"] == ["replay", "replay"]
                # The plan the session chose, as its note names it ("recompute: 12 recompute(s) ...").
                assert info["plan_note"].startswith(f"{planner}: "), info["plan_note"]
                assert info["vs_checkpoint"] == p["checkpoint"]["median_ms"] / info["median_ms"]
            if p["best"] is not None:
                assert p["best_ratio"] == p[p["best"]]["median_ms"] / p["checkpoint"]["median_ms"]
        budgets = [p["budget_bytes"] for p in r["points"]]
        assert budgets == sorted(budgets)
    assert "| every_n_layers |" in out
