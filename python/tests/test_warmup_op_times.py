"""python/bench/warmup_op_times.py --quick: the warmup's recorded op times against eager, well formed."""

from __future__ import annotations

import json

from conftest import load_bench


def test_quick_run_reports_each_session_warmup_and_replay(tmp_path, capsys):
    bench = load_bench("warmup_op_times")
    path = tmp_path / "warmup.json"
    # The tiny GPT-2's floor is above a quarter of its activation peak.
    document = bench.main(["--quick", "--budget-fraction", "0.6", "--sessions", "2", "--keep-freed-memory",
                           "--json", str(path)])
    assert json.loads(path.read_text()) == json.loads(json.dumps(document))
    assert document["malloc"].startswith("glibc malloc keeps freed memory")
    assert document["eager_ms"] > 0 and document["eager_faults_per_step"] >= 0
    assert len(document["sessions"]) == 2
    for row in document["sessions"]:
        # The second step of a session replays its plan; the recorded times are positive and their ratio is
        # what the report says it is.
        assert row["replay_kind"] == "replay"
        assert row["recorded_ms"] > 0
        assert row["recorded_over_eager"] == row["recorded_ms"] / document["eager_ms"]
        assert row["warmup_faults"] >= 0 and row["replay_faults"] >= 0
    assert capsys.readouterr().out.count("session ") == 2


def exit_code(argv):
    """The exit code main() stops with; fails the test when it returns instead."""
    try:
        load_bench("warmup_op_times").main(argv)
    except SystemExit as exit:
        return exit.code
    raise AssertionError(f"{argv} ran to the end")


def test_a_budget_below_the_floor_says_so(capsys):
    assert exit_code(["--quick", "--budget-fraction", "0.05"]) == 2
    assert "below the unavoidable floor" in capsys.readouterr().err


def test_a_budget_fraction_outside_zero_to_one_is_refused():
    assert exit_code(["--quick", "--budget-fraction", "0"]) == 2
