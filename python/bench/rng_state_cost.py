"""What RNG replay costs per op on the CPU: saving a generator state, and a recompute with it restored (issue 25).

    PYTHONPATH=build/python OMP_NUM_THREADS=1 .venv/bin/python python/bench/rng_state_cost.py [--repeats 31]

Two measurements, one intra-op thread, medians and min-max over --repeats
interleaved repeats:

1. The generator calls the session makes (python/src/rng_replay.cc), timed
   from Python on the default CPU generator (a Mersenne Twister; its state is
   a 5,056-byte tensor), less the cost of a trivial call on the generator
   (`initial_seed()`, the Python-to-C++ call itself):
     save     `clone_state()`: what the session does when a random op the plan
              re-runs first runs (at::Generator::clone);
     restore  what a recompute adds around the op: clone the generator's state
              before, then get_state + set_state to the saved state, and
              get_state + set_state back afterwards.
2. In the runtime: a step of N ops each made once and read again in the
   backward (`w * r`, with `r` the op's result), planned with
   planner="recompute" at 1.05x its floor, so the plan drops most results
   and re-runs their ops before the backward reads them. The ops are
   `torch.rand_like(x)` (random: RNG replay) or `x * 2.0` (deterministic,
   `aten::mul.Tensor`), on tensors of --numel floats. Reported per
   recompute: the runtime's own recompute time (stats()["recompute_ms"] /
   stats()["recompute_count"]), the op's time as the warmup traced it (the
   median `duration_ms`, in session.trace(), of the ops the plan re-runs,
   measured in C++ like the recompute), the op's time from Python (with
   Python's call overhead, for reference) and the recompute's time less the
   traced op's (the bookkeeping of a recompute); the random op's bookkeeping
   less the deterministic op's is what RNG replay adds per recompute.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
import warnings

import torch

import hyperoffload as ho


def per_call_us(fn, calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls * 1e6


def generator_costs(calls: int) -> dict:
    g = torch.default_generator
    saved = g.clone_state()

    def save():
        g.clone_state()

    def restore():
        before = g.clone_state()          # the caller's state, cloned
        g.set_state(saved.get_state())    # the saved state set
        g.set_state(before.get_state())   # and the caller's put back

    def baseline():
        g.initial_seed()

    state = g.get_state()
    base = per_call_us(baseline, calls)
    result = {"baseline_us": base, "save_us": per_call_us(save, calls) - base,
              "restore_us": per_call_us(restore, calls) - 5 * base, "state_bytes": state.numel()}
    g.set_state(state)
    return result


def build_step(kind: str, ops: int, numel: int):
    torch.manual_seed(0)
    x = torch.randn(numel)
    w = torch.randn(numel, requires_grad=True)

    def loss():
        total = None
        for _ in range(ops):
            r = torch.rand_like(x) if kind == "random" else x * 2.0
            term = (w * r).sum()  # mul saves r for the backward
            total = term if total is None else total + term
        return total

    def make(op):
        return (lambda: torch.rand_like(x)) if op == "random" else (lambda: x * 2.0)

    return w, loss, make(kind)


def step(w, loss, session=None) -> None:
    w.grad = None
    if session is None:
        loss().backward()
        return
    with session:
        loss().backward()


def planned(kind: str, ops: int, numel: int):
    """(step, op, session): a warmed-up planner="recompute" session at 1.05x its floor on `kind`'s step."""
    w, loss, op = build_step(kind, ops, numel)
    probe = ho.OffloadSession(ho.OffloadConfig(max_resident_activation_bytes=1, planner="recompute"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # below the floor: a RuntimeWarning (rewarm_once), the floor is known
        step(w, loss, probe)
    budget = int(probe.floor_bytes() * 1.05)
    session = ho.OffloadSession(ho.OffloadConfig(max_resident_activation_bytes=budget, planner="recompute"))
    for _ in range(2):
        step(w, loss, session)  # warmup, first replay
    if not session.stats()["recompute_count"]:
        raise SystemExit(f"{kind}: the plan at {budget} B recomputes nothing")
    return (lambda: step(w, loss, session)), op, session


def runtime_costs(ops: int, numel: int, repeats: int) -> dict:
    """Per-recompute cost of each kind of op, the kinds' replays interleaved."""
    kinds = {kind: planned(kind, ops, numel) for kind in ("deterministic", "random")}
    per_recompute = {kind: [] for kind in kinds}
    eager_op = {kind: [] for kind in kinds}
    order = list(kinds)
    for _ in range(repeats):
        random.shuffle(order)
        for kind in order:
            run, op, session = kinds[kind]
            run()
            stats = session.stats()
            per_recompute[kind].append(stats["recompute_ms"] * 1e3 / stats["recompute_count"])
            eager_op[kind].append(per_call_us(op, 200))
    rows = {}
    for kind, (_, _, session) in kinds.items():
        values = per_recompute[kind]
        ops = session.trace()["ops"]
        rerun = [ops[a["source_op"]] for a in session.schedule()["actions"] if a["kind"] == "recompute"]
        names = sorted({op["name"] for op in rerun})
        traced = [op["duration_ms"] * 1e3 for op in rerun]
        rows[kind] = {"op": "+".join(names), "numel": numel, "traced_op_us": statistics.median(traced),
                      "budget_bytes": session.stats()["budget_bytes"],
                      "recompute_count": session.stats()["recompute_count"],
                      "recompute_us": statistics.median(values),
                      "recompute_us_min": min(values), "recompute_us_max": max(values),
                      "eager_op_us": statistics.median(eager_op[kind])}
        rows[kind]["bookkeeping_us"] = rows[kind]["recompute_us"] - rows[kind]["traced_op_us"]
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=31)
    parser.add_argument("--ops", type=int, default=200, help="random (or deterministic) ops per step")
    parser.add_argument("--numel", type=int, nargs="+", default=[256, 4096], help="floats per op's result")
    parser.add_argument("--calls", type=int, default=20000, help="generator calls per timing")
    args = parser.parse_args(argv)
    if args.repeats < 1 or args.ops < 1 or min(args.numel) < 1:
        parser.error("--repeats, --ops and --numel must be positive")
    torch.set_num_threads(1)

    gen = [generator_costs(args.calls) for _ in range(args.repeats)]
    print(f"CPU generator (state {gen[0]['state_bytes']} bytes), {args.repeats} repeats of {args.calls} calls, "
          f"less the {statistics.median(g['baseline_us'] for g in gen):.2f} us of a trivial call:")
    for key, label in (("save_us", "save (clone_state, once per random op the plan re-runs)"),
                       ("restore_us", "restore around a recompute (clone + 2x get_state/set_state)")):
        values = [g[key] for g in gen]
        print(f"  {label}: {statistics.median(values):.2f} us (min {min(values):.2f}, max {max(values):.2f})")

    print(f"\nIn the runtime: {args.ops} ops per step, planner='recompute' at 1.05x its floor, "
          f"{args.repeats} replays (interleaved), per recompute:")
    print("| result floats | op | recomputes per step | recompute us, median (min-max) | op us, traced "
          "| op us, eager from Python | recompute - traced op us |")
    print("|---|---|---|---|---|---|---|")
    out = {"generator": gen, "runtime": []}
    for numel in args.numel:
        rows = runtime_costs(args.ops, numel, args.repeats)
        for kind, r in rows.items():
            out["runtime"].append(r)
            print(f"| {numel} | {r['op']} | {r['recompute_count']} | {r['recompute_us']:.2f} "
                  f"({r['recompute_us_min']:.2f}-{r['recompute_us_max']:.2f}) | {r['traced_op_us']:.2f} "
                  f"| {r['eager_op_us']:.2f} "
                  f"| {r['bookkeeping_us']:.2f} |")
        extra = rows["random"]["bookkeeping_us"] - rows["deterministic"]["bookkeeping_us"]
        from_minima = ((rows["random"]["recompute_us_min"] - rows["random"]["traced_op_us"])
                       - (rows["deterministic"]["recompute_us_min"] - rows["deterministic"]["traced_op_us"]))
        print(f"| {numel} | RNG replay adds | | | | | {extra:.2f} (from the minima: {from_minima:.2f}) |")
    return out


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
