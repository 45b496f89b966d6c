"""Runs the differential training-loop fuzzer (python/tests/loop_fuzz.py) and prints a summary.

    PYTHONPATH=build/python OMP_NUM_THREADS=1 .venv/bin/python python/tools/fuzz_loops.py --loops 2000 --seed 0
    make fuzz-loops LOOPS=2000 SEED=0                    # the same

Loop i runs the shape drawn from seed SEED + i, eagerly and under an
OffloadSession, and compares every loss, gradient, buffer, RNG state and
(after each optimizer step) weight, bit for bit. At the end: the counts of
passes, wrong results and refusals by type, and for each finding its seed,
loop shape, what went wrong and the one command that runs it again:

    ... python/tools/fuzz_loops.py --seed 17 --loops 1 -v [--set FIELD=VALUE ...]

--set FIELD=VALUE changes one field of every drawn shape (planner=peak,
accumulate=2, budget_fraction=none, ...: the fields of loop_fuzz.LoopShape);
--no-budget runs every loop without a device budget (the session traces and
replays, offloads nothing: a harness check, which must find nothing);
--repeat K runs each loop K times (plans depend on measured op times: each
run has an op-time store of its own, OffloadConfig.op_times_store, so that
runs explore the plans that timing noise gives);
--minimize simplifies each finding's shape while it keeps its verdict.
A harness error (the eager run failed or gave a non-finite result, the two
runs reached different checkpoints) is the fuzzer's own bug: listed apart,
never counted as a finding. Exit status 1 when there was a finding or a
harness error, 0 otherwise.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import pathlib
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "python" / "tests"))

import loop_fuzz  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--loops", type=int, default=50, help="how many loops (default 50)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the first loop (default 0)")
    parser.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                        help="override one field of every drawn shape (repeatable)")
    parser.add_argument("--no-budget", action="store_true", help="no device budget (harness check)")
    parser.add_argument("--repeat", type=int, default=1, help="run each loop this many times")
    parser.add_argument("--minimize", action="store_true", help="simplify each finding's shape")
    parser.add_argument("--json", type=pathlib.Path, help="write every outcome to this JSON file")
    parser.add_argument("-v", "--verbose", action="store_true", help="print each loop's shape and step kinds")
    args = parser.parse_args(argv)

    outcomes = []
    counts = collections.Counter()
    # The runs' op-time stores, one directory each (the minimizer's runs share the last), removed at exit.
    caches = tempfile.TemporaryDirectory(prefix="fuzz-loops-cache-")
    started = time.perf_counter()
    for i in range(args.loops):
        shape = loop_fuzz.draw(args.seed + i)
        if args.no_budget:
            shape = shape.replace(budget_fraction=None)
        shape = loop_fuzz.apply_overrides(shape, args.set)
        for attempt in range(args.repeat):
            os.environ["HYPEROFFLOAD_CACHE_DIR"] = os.path.join(caches.name, f"run-{len(outcomes)}")
            try:
                outcome = loop_fuzz.run_loop(shape)
            except loop_fuzz.HarnessError as error:  # the harness's own bug: reported, never a verdict
                outcome = loop_fuzz.Outcome(shape=shape, verdict="harness-error", detail=str(error))
            outcomes.append(outcome)
            counts[outcome.category()] += 1
            kinds = collections.Counter(outcome.kinds)
            line = (f"[{len(outcomes)}] {outcome.describe()} ({outcome.seconds:.1f} s; "
                    + ", ".join(f"{k} {n}" for k, n in sorted(kinds.items())) + ")")
            print(line, flush=True)
            if args.verbose:
                print(f"    shape: {shape.describe()}", flush=True)
                print(f"    steps: {' '.join(outcome.kinds)}; recomputes {outcome.recomputes}, "
                      f"offloaded {outcome.offloaded_bytes} B", flush=True)
                for warning in outcome.warnings:
                    print(f"    warning: {warning}", flush=True)
                if outcome.finding and outcome.verdict != "wrong":
                    print("    " + outcome.detail.strip().replace("\n", "\n    "), flush=True)

    elapsed = time.perf_counter() - started
    findings = [o for o in outcomes if o.finding]
    steps = collections.Counter(kind for o in outcomes for kind in o.kinds)
    print()
    print(f"== {len(outcomes)} loops in {elapsed:.0f} s "
          f"(seeds {args.seed}..{args.seed + args.loops - 1}{', no budget' if args.no_budget else ''}"
          f"{', ' + ' '.join(args.set) if args.set else ''})")
    for category in sorted(counts, key=lambda c: (c != "pass", c)):
        print(f"   {counts[category]:6d}  {category}")
    print(f"   session steps: " + ", ".join(f"{k} {n}" for k, n in sorted(steps.items())))
    print(f"   loops that recomputed: {sum(o.recomputes > 0 for o in outcomes)}, "
          f"that offloaded: {sum(o.offloaded_bytes > 0 for o in outcomes)}, "
          f"with a segment plan: {sum(o.segment_plans > 0 for o in outcomes)}")
    if findings:
        classes = collections.defaultdict(list)
        for outcome in findings:
            classes[outcome.finding_class()].append(outcome.shape.seed)
        print(f"\n== {len(findings)} findings, by kind")
        for name, seeds in sorted(classes.items(), key=lambda item: -len(item[1])):
            shown = " ".join(str(seed) for seed in seeds[:12]) + (" ..." if len(seeds) > 12 else "")
            print(f"   {len(seeds):6d}  {name}  (seeds {shown})")
        print(f"\n== {len(findings)} findings")
        for outcome in findings:
            print(f"- {outcome.describe()}")
            print(f"    shape: {outcome.shape.describe()}")
            print(f"    steps: {' '.join(outcome.kinds)}")
            print(f"    reproduce: {loop_fuzz.reproduce_command(outcome.shape, args.no_budget)}")
            if args.minimize:
                print("    minimizing:", flush=True)
                smallest = loop_fuzz.minimize(outcome, runs=args.repeat, log=lambda s: print("  " + s, flush=True))
                print(f"    minimized: {smallest.describe()}")
                print(f"      shape: {smallest.shape.describe()}")
                print(f"      reproduce: {loop_fuzz.reproduce_command(smallest.shape, args.no_budget)}")
    harness_errors = [o for o in outcomes if o.verdict == "harness-error"]
    if harness_errors:
        print(f"\n== {len(harness_errors)} harness errors (bugs of the fuzzer, not of hyperoffload)")
        for outcome in harness_errors:
            print(f"- seed {outcome.shape.seed}: {loop_fuzz.first_line(outcome.detail)}")
            print(f"    reproduce: {loop_fuzz.reproduce_command(outcome.shape, args.no_budget)}")
    if args.json:
        args.json.write_text(json.dumps([
            {"shape": vars(o.shape), "verdict": o.verdict, "where": o.where, "tensor": o.tensor, "error": o.error,
             "detail": o.detail, "peak_bytes": o.peak_bytes, "budget_bytes": o.budget_bytes,
             "host_bytes": o.host_bytes, "floor_bytes": o.floor_bytes, "kinds": o.kinds, "recomputes": o.recomputes,
             "offloaded_bytes": o.offloaded_bytes, "segment_plans": o.segment_plans, "warnings": o.warnings,
             "seconds": o.seconds,
             "reproduce": loop_fuzz.reproduce_command(o.shape, args.no_budget)} for o in outcomes], indent=1))
    return 1 if findings or harness_errors else 0


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    sys.exit(main())
