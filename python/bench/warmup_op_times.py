"""What a warmup's recorded op times add up to, against the eager step, and the page faults behind them.

    PYTHONPATH=build/python OMP_NUM_THREADS=1 .venv/bin/python python/bench/warmup_op_times.py \\
        [--model gpt2] [--budget-fraction 0.25] [--sessions 3] [--keep-freed-memory] [--quick] [--json PATH]

A session plans from the op times its warmup records (with the op-time store,
from the first warmup of each step program: exec/warmup_executor.h, Note
[Reproducible plans]). On the CPU those times can be far above what the ops
take in an eager step, and a plan made from them expects compute to hide
copies behind that is not there. This measures, for one model of
frontier.py (training mode, the CPU, one thread):

  eager      the median of 3 steps, and its minor page faults per step;
  session i  `--sessions` sessions one after the other in this process, each
             at `--budget-fraction` of the eager activation peak with
             op_times="measured" and no store: the warmup's wall time and
             minor faults, the recorded op times' sum over the eager step,
             and the first replay's wall time and faults.

--keep-freed-memory first applies bench_steps.keep_freed_memory() (glibc
keeps the memory it frees, as frontier.py does); compare a run with and one
without it (BENCHMARKS.md, "Keeping freed memory"). --quick: frontier.py's
tiny shapes (python/tests/test_warmup_op_times.py).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import frontier  # noqa: E402  (python/bench/frontier.py: the models and their shapes)
from bench_steps import keep_freed_memory, measured_peak, step, write_atomically  # noqa: E402

import hyperoffload as ho  # noqa: E402


def minor_faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="gpt2", choices=sorted(frontier.FULL))
    parser.add_argument("--budget-fraction", type=float, default=0.25)
    parser.add_argument("--sessions", type=int, default=3)
    parser.add_argument("--keep-freed-memory", action="store_true")
    parser.add_argument("--quick", action="store_true", help="frontier.py's tiny shapes")
    parser.add_argument("--json", help="write the results as JSON to this path")
    args = parser.parse_args(argv)
    if not 0.0 < args.budget_fraction <= 1.0:
        parser.error("--budget-fraction must be in (0, 1]")
    if args.sessions < 1:
        parser.error("--sessions must be at least 1")
    frontier.torch.set_num_threads(1)
    malloc = keep_freed_memory() if args.keep_freed_memory else "malloc left as it is"
    shape = (frontier.QUICK if args.quick else frontier.FULL)[args.model]
    model, loss_of = frontier.build(args.model, shape)
    call = lambda: loss_of(model)  # noqa: E731
    for _ in range(3):
        step(call, [model])
    before = minor_faults()
    eager_ms = statistics.median(step(call, [model]) for _ in range(3))
    eager_faults = (minor_faults() - before) / 3
    budget = int(measured_peak(call, [model]) * args.budget_fraction)
    print(f"{args.model}: {malloc}; eager {eager_ms:.1f} ms, {eager_faults:.0f} minor faults a step; "
          f"budget {budget} bytes ({args.budget_fraction:.0%} of the eager activation peak)", flush=True)
    sessions = []
    for i in range(args.sessions):
        session = ho.OffloadSession(ho.OffloadConfig(planner="recompute", op_times="measured",
                                                     op_times_store=False, max_resident_activation_bytes=budget))
        before = minor_faults()
        try:
            with warnings.catch_warnings():
                # Below the floor the first warmup warns and the next step raises.
                warnings.simplefilter("ignore")
                warmup_ms = step(call, [model], session)
                after_warmup = minor_faults()
                recorded_ms = sum(op["duration_ms"] for op in session.trace()["ops"])
                replay_ms = step(call, [model], session)
        except ho.BudgetError as error:
            print(f"warmup_op_times.py: {error}; raise --budget-fraction", file=sys.stderr)
            raise SystemExit(2) from error
        row = {"warmup_ms": warmup_ms, "warmup_faults": after_warmup - before, "recorded_ms": recorded_ms,
               "recorded_over_eager": recorded_ms / eager_ms, "replay_ms": replay_ms,
               "replay_faults": minor_faults() - after_warmup, "replay_kind": session.stats()["kind"]}
        session.close()
        sessions.append(row)
        print(f"session {i + 1}: warmup {warmup_ms:.0f} ms, {row['warmup_faults']} faults, recorded op times "
              f"{recorded_ms:.0f} ms ({row['recorded_over_eager']:.2f}x eager); replay {replay_ms:.0f} ms, "
              f"{row['replay_faults']} faults", flush=True)
    document = {"model": args.model, "shape": shape, "malloc": malloc, "eager_ms": eager_ms,
                "eager_faults_per_step": eager_faults, "budget_bytes": budget, "sessions": sessions}
    if args.json:
        write_atomically(args.json, json.dumps(document, indent=1))
    return document


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
