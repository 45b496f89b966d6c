"""Soak: a long varying-shape training loop under one session does not grow.

    PYTHONPATH=build/python .venv/bin/python python/bench/soak.py [--steps 1000] [--json out.json]

`make soak` runs it for 1,000 steps (python/tests/test_soak.py runs 100).

The loop is the one users write with dynamic padding: the project's GPT
decoder (python/tests/models.py) with dropout, AdamW, gradient clipping and an
LR scheduler, one ``with session:`` per step, each batch padded to a length
drawn at random from LENGTHS, and every EPOCH-th batch the smaller last batch
of an epoch. So the session sees len(LENGTHS) x 2 step programs, each planned
once (hybrid planner, half the unplanned activation peak of the longest
program, and a pinned-host budget of twice that, so the warmups need not keep
storages on the device for want of host memory) and replayed afterwards. The
first steps run every program in turn, so every warmup is over by step
``warm_steps()``.

After every step the loop samples what could grow without bound:

* ``rss_bytes``: the process's resident set (/proc/self/statm);
* ``pool_reserved_bytes``: the pinned host pool's bytes held from the backend;
* ``plans_cached``: the session's plan cache;
* ``tracked_storages``: the runtime's storage table (live storages it tracks);
* ``python_objects``: objects the garbage collector tracks (gc.get_objects()).

For each, over the steps after the warmups, it prints the least-squares slope
in units per step and the range (max - min). The process fails (exit 1) when a
sample grows after the warmups (growth_failures), when the RSS slope is above
--max-rss-slope bytes per step, or when a step held more than the device or
host budget.
"""

from __future__ import annotations

import argparse
import array
import contextlib
import gc
import json
import os
import random
import sys
from typing import Dict, List

import torch
from torch import nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))

import hyperoffload as ho  # noqa: E402
from models import GptDecoder  # noqa: E402

VOCAB, CONTEXT, WIDTH, HEADS, LAYERS, FFN = 64, 32, 32, 2, 2, 64
LENGTHS = (12, 17, 24, 32)  # padded lengths of the batches
BATCH, LAST_BATCH, EPOCH = 4, 3, 10  # every EPOCH-th batch is the short last one
METRICS = ("rss_bytes", "pool_reserved_bytes", "plans_cached", "tracked_storages", "python_objects")


def programs() -> List[tuple]:
    """Every (batch size, length) the loop runs: the step programs."""
    return [(size, length) for size in (BATCH, LAST_BATCH) for length in LENGTHS]


def warm_steps() -> int:
    """The loop runs each program once first: the steps after these are replays."""
    return len(programs())


def schedule(steps: int, seed: int) -> List[tuple]:
    """(batch size, length) per step: every program once, then random lengths with a short batch each EPOCH."""
    rng = random.Random(seed)
    out = programs()[:steps]
    for step in range(len(out), steps):
        size = LAST_BATCH if step % EPOCH == EPOCH - 1 else BATCH
        out.append((size, rng.choice(LENGTHS)))
    return out


def build():
    torch.manual_seed(3)
    model = GptDecoder(VOCAB, CONTEXT, WIDTH, HEADS, LAYERS, FFN, dropout=0.1)
    model.train()
    return model


def loss_of(model, tokens):
    inputs, targets = tokens[:, :-1], tokens[:, 1:]
    logits = model(inputs)
    return nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def budget_bytes() -> int:
    """Half the unplanned activation peak of the longest program (an unbudgeted session measures it)."""
    model = build()
    session = ho.OffloadSession()
    tokens = torch.randint(0, VOCAB, (BATCH, max(LENGTHS) + 1), generator=torch.Generator().manual_seed(0))
    with session:
        loss_of(model, tokens).backward()
    peak = session.unplanned_peak_bytes()
    session.close()
    return peak // 2


def soak(steps: int, seed: int = 0, planner: str = "hybrid", eager: bool = False) -> Dict:
    """Runs the loop; returns the budgets, per-step samples, kinds and losses, and the final parameters.
    eager=True runs the same loop with no step under the session: the baseline."""
    budget = budget_bytes()
    host_budget = 2 * budget
    model = build()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=50, gamma=0.9)
    data = torch.Generator().manual_seed(seed)
    config = ho.OffloadConfig(max_resident_activation_bytes=budget, max_offload_activation_bytes=host_budget,
                              planner=planner)
    # Preallocated, so that sampling itself allocates nothing per step.
    samples = {name: array.array("q", bytes(8 * steps)) for name in METRICS}
    peaks, host_peaks = array.array("q", bytes(8 * steps)), array.array("q", bytes(8 * steps))
    kinds = [None] * steps
    losses = array.array("d", bytes(8 * steps))
    with ho.OffloadSession(config).run() as session:
        for step, (size, length) in enumerate(schedule(steps, seed)):
            tokens = torch.randint(0, VOCAB, (size, length + 1), generator=data)
            optimizer.zero_grad()
            with session if not eager else contextlib.nullcontext():
                loss = loss_of(model, tokens)
                loss.backward()
            losses[step] = loss.item()
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            scheduler.step()
            del loss, tokens
            stats = session.stats()
            kinds[step] = stats["kind"]
            peaks[step] = stats["peak_held_bytes"]
            host_peaks[step] = stats["peak_host_bytes"]
            samples["rss_bytes"][step] = rss_bytes()
            samples["pool_reserved_bytes"][step] = stats.get("host_pool_reserved_bytes", 0)
            samples["plans_cached"][step] = stats["plans_cached"]
            samples["tracked_storages"][step] = session._rt.tracked_storages()
            samples["python_objects"][step] = len(gc.get_objects())
        final = session.stats()
    return dict(steps=steps, budget_bytes=budget, host_budget_bytes=host_budget, kinds=kinds, losses=list(losses),
                parameters=[p.detach().clone() for p in model.parameters()],
                peak_held_bytes=list(peaks), peak_host_bytes=list(host_peaks),
                samples={name: list(values) for name, values in samples.items()},
                warmups=final["warmups"], plan_hits=final["plan_hits"], plan_misses=final["plan_misses"])


def slope(values: List[int]) -> float:
    """Least-squares slope of values against their index, in units per step."""
    n = len(values)
    if n < 2:
        return 0.0
    mean_x, mean_y = (n - 1) / 2, sum(values) / n
    num = sum((x - mean_x) * (y - mean_y) for x, y in enumerate(values))
    den = sum((x - mean_x) ** 2 for x in range(n))
    return num / den


def steady_growth(values: List[int]) -> float:
    """Growth per step with the single largest step-to-step jump left out. A
    leak raises RSS a page or so at nearly every step; the allocator growing
    its heap once (48 pages at once after step 40 of 84 was seen, with nothing
    else moving) is one jump, and a least-squares line through it reads as
    3.7 KiB per step."""
    if len(values) < 2:
        return 0.0
    jumps = [after - before for before, after in zip(values, values[1:])]
    return (sum(jumps) - max(0, max(jumps))) / len(jumps)


def summarize(result: Dict, settle: int) -> Dict[str, Dict[str, float]]:
    """Slope and range of each sample over the steps from `settle` on."""
    out = {}
    for name, values in result["samples"].items():
        tail = values[settle:]
        out[name] = dict(slope_per_step=slope(tail), range=max(tail) - min(tail), first=tail[0], last=tail[-1])
    return out


def growth_failures(result: Dict, settle: int, max_rss_slope: float) -> List[str]:
    """What grew after the warmups. A sample grows when its largest value in the
    second half of the steps after `settle` is above its largest in the first
    half (the pool trims and refills, the garbage collector runs: values may
    move, but never past what they reached early); RSS grows when its steady growth
    (steady_growth) is above max_rss_slope bytes per step. The pool also stays within the host
    budget."""
    failures = []
    for name, values in result["samples"].items():
        tail = values[settle:]
        half = len(tail) // 2
        if name == "rss_bytes":
            rate = steady_growth(tail)
            if rate > max_rss_slope:
                failures.append(f"RSS grows {rate:.0f} bytes per step (limit {max_rss_slope:.0f})")
        elif max(tail[half:]) > max(tail[:half]):
            failures.append(f"{name} grew after the warmups: {max(tail[:half])} -> {max(tail[half:])}")
    if max(result["samples"]["pool_reserved_bytes"]) > result["host_budget_bytes"]:
        failures.append("the pinned pool held more than the host budget")
    return failures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--planner", default="hybrid")
    parser.add_argument("--max-rss-slope", type=float, default=1024.0,
                        help="largest RSS slope, bytes per step, after the warmups (default 1024: the smallest "
                             "activation of the loop is 4.5 KiB, so leaking one per step is well above it)")
    parser.add_argument("--json", help="also write the per-step samples here")
    args = parser.parse_args()
    torch.set_num_threads(1)
    result = soak(args.steps, args.seed, args.planner)
    # Settle: the warmups, then as many steps again so the allocators' caches
    # have seen every program at least once more.
    settle = min(2 * warm_steps(), args.steps - 2)
    summary = summarize(result, settle)
    print(f"soak: {args.steps} steps, {len(programs())} step programs, planner {args.planner}, "
          f"budget {result['budget_bytes']} B, host budget {result['host_budget_bytes']} B; "
          f"warmups {result['warmups']}, plan hits {result['plan_hits']}, misses {result['plan_misses']}")
    print(f"after step {settle}:")
    print(f"{'sample':<20} {'first':>14} {'last':>14} {'range':>12} {'slope/step':>12}")
    failures = []
    for name, s in summary.items():
        print(f"{name:<20} {s['first']:>14} {s['last']:>14} {s['range']:>12} {s['slope_per_step']:>12.2f}")
    failures += growth_failures(result, settle, args.max_rss_slope)
    over = [i for i, (p, k) in enumerate(zip(result["peak_held_bytes"], result["kinds"])) if p > result["budget_bytes"]]
    if over:
        failures.append(f"steps {over[:5]} held more than the device budget")
    over_host = [i for i, p in enumerate(result["peak_host_bytes"]) if p > result["host_budget_bytes"]]
    if over_host:
        failures.append(f"steps {over_host[:5]} held more than the host budget")
    if args.json:
        tmp = args.json + ".tmp"
        with open(tmp, "w") as f:
            json.dump(dict({k: v for k, v in result.items() if k != "parameters"}, summary=summary, settle=settle), f)
        os.replace(tmp, args.json)
    for failure in failures:
        print(f"soak: FAIL: {failure}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
