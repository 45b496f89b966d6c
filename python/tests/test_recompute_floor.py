"""python/bench/recompute_floor.py --quick: recompute-only's reach against checkpointing, well formed.

Every model gets a row; the in-place units never raise the recompute-only limit
(they only add ways to regenerate), and on torchvision's ResNet-50, whose
ReLUs and residual sums are all in place, they lower it. At checkpointing's
memory the recompute plan runs no op again more than once (issue 35, part 1's
bound), as checkpointing re-runs each layer once. The run plans with op times
from bytes (`--costs bytes`): with the times measured on a loaded machine the
quickest plan can be one that re-runs an op more often, and which one wins
would change from run to run.
"""

from __future__ import annotations

import json

from conftest import load_bench


def test_quick_run_reports_every_model_and_units_only_lower_the_limit(tmp_path, capsys):
    bench = load_bench("recompute_floor")
    path = tmp_path / "floor.json"
    assert bench.main(["--quick", "--costs", "bytes", "--json", str(path)]) == 0
    out = capsys.readouterr().out
    rows = json.loads(path.read_text())
    assert [r["model"] for r in rows] == ["gpt2", "llama", "bert", "vit", "resnet50"]
    for r in rows:
        assert f"| {r['model']} |" in out
        assert r["with_units"]["limit_bytes"] <= r["without_units"]["limit_bytes"], r
        assert r["with_units"]["unplanned_bytes"] == r["without_units"]["unplanned_bytes"], r
        # Every model has something to re-run at a quarter to a third of its eager memory (checkpointing's),
        # and with units each op that re-runs does so once: most_reruns counts a unit's members per recompute.
        assert r["with_units"]["feasible"], r
        assert r["with_units"]["most_reruns"] == 1, r
    resnet = rows[-1]
    # 16 bottlenecks, each with three ReLUs and a residual add in place.
    assert resnet["followers"] >= 16 * 3
    assert resnet["with_units"]["limit_bytes"] < resnet["without_units"]["limit_bytes"]
