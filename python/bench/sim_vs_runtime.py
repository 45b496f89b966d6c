"""Simulator against runtime, on the emulated link: measured replay steps vs the capped simulation.

    PYTHONPATH=build/python:python/tests .venv/bin/python python/bench/sim_vs_runtime.py \
        [--rounds 5] [--link 0.05] [--models gpt,gpt2] [--planners hybrid,peak,recompute,greedy]

Every session runs on the CPU with OffloadConfig(emulate_copy_bandwidth=True):
its copies take bytes / --link GiB/s on the copy threads (faults on the step's
thread), and it plans for that link. For each model (the project's GPT-style
decoder, python/tests/models.py, and a `transformers` GPT-2 built from a config
as python/tests/hf_models.py does) and each budget (30/50/70% of the unplanned
activation peak) and planner, the session warms up and replays once; then
rounds of one step per variant (eager included) run in a random order on one
thread (torch.set_num_threads(1)), so machine noise hits all alike.

Each variant's own trace and schedule (session.save_trace/save_schedule) are
then simulated by the CLI with the device capped at the budget
(`hyperoffload simulate --memory-cap budget --json`), and compared:

  step       median replay step (wall time of the `with session:` block) against
             eager median + simulated overhead (stall + recompute): ratio; and
             against a session without a budget (the same interception, no
             copies) + simulated overhead: ratio vs unbudgeted
  compute    the simulation's compute: the warmup's measured op times, and
             the replays' (sum of the median op spans)
  replay-timed  the same schedule simulated on the same trace with each op's
             duration taken from the replays themselves (median over rounds of
             the op spans of session.last_timeline(), record_timeline=True):
             its overhead, and the replay step against eager + it. Where this
             agrees and the plain simulation does not, the simulator is right
             and its input (one warmup's op times) is what is off.
  held       max over rounds of stats()["peak_held_bytes"] against the
             simulation's timed peak (peak_bytes_timed): ratio; "<=B" when every
             step held at most the budget
  wait       median stats()["memory_wait_ms"] against the simulation's
             memory_stall_ms
  spread     (max - min) / median of the replay steps

Target: step within 15% of eager + simulated overhead, held <= budget in every step.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import random
import statistics
import subprocess
import tempfile
import time

import torch
from torch import nn

import hyperoffload as ho
import hf_models  # python/tests/hf_models.py
from models import GptDecoder  # python/tests/models.py

REPO = pathlib.Path(__file__).resolve().parents[2]
# Bigger than the tests' shapes, so that compute dominates the per-op
# interception cost (a few µs per op) and the link's copies matter.
GPT_SHAPE = dict(vocab=512, context=128, width=128, heads=4, layers=4, ffn=512, batch=8)
GPT2_SHAPE = dict(vocab=512, context=128, width=128, heads=4, layers=4, batch=4, dropout=0.1)


def build_gpt():
    s = GPT_SHAPE
    torch.manual_seed(1)
    model = GptDecoder(s["vocab"], s["context"], s["width"], s["heads"], s["layers"], s["ffn"])
    tokens = torch.randint(0, s["vocab"], (s["batch"], s["context"] + 1))
    inputs, targets = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()

    def loss_fn(model):
        logits = model(inputs)
        return nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))

    return model, loss_fn


def build_gpt2():
    model, batch, loss = hf_models.build_gpt2(GPT2_SHAPE)  # python/tests/hf_models.py, at this shape
    return model, lambda model: loss(model, batch)


MODELS = {"gpt": ("GPT-style decoder (models.py)", build_gpt, GPT_SHAPE),
          "gpt2": ("transformers GPT-2", build_gpt2, GPT2_SHAPE)}


def step(model, loss_fn, session=None) -> float:
    """One forward + backward (gradients reset first, so every step runs the same ops); wall ms."""
    for p in model.parameters():
        p.grad = None
    start = time.perf_counter()
    if session is None:
        loss_fn(model).backward()
    else:
        with session:
            loss_fn(model).backward()
    return (time.perf_counter() - start) * 1e3


def cli() -> pathlib.Path:
    return pathlib.Path(os.environ.get("HYPEROFFLOAD_CLI", REPO / "build" / "bin" / "hyperoffload"))


def simulate(session: ho.OffloadSession, copy_engines: int, op_ms=None) -> dict:
    """The capped simulation of the session's trace and schedule (op durations replaced by `op_ms` if given)."""
    with tempfile.TemporaryDirectory() as directory:
        trace, schedule = pathlib.Path(directory, "trace.json"), pathlib.Path(directory, "schedule.json")
        document = session.trace()
        if op_ms is not None:
            for op, ms in zip(document["ops"], op_ms):
                op["duration_ms"] = ms
        trace.write_text(json.dumps(document))
        session.save_schedule(schedule)
        out = subprocess.run([str(cli()), "simulate", str(trace), str(schedule), "--memory-cap", "budget",
                              "--copy-engines", str(copy_engines), "--json"],
                             check=False, capture_output=True, text=True)
        if out.returncode not in (0, 1):
            raise RuntimeError(f"hyperoffload simulate failed: {out.stderr.strip()}")
        return json.loads(out.stdout)


def cpu_model() -> str:
    try:
        for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--link", type=float, default=0.1, help="emulated copy link, GiB/s (both directions)")
    parser.add_argument("--models", default="gpt,gpt2")
    parser.add_argument("--planners", default="hybrid,peak,recompute,greedy")
    parser.add_argument("--fractions", default="0.3,0.5,0.7")
    parser.add_argument("--copy-engines", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(1)
    random.seed(args.seed)
    print(f"machine: {os.cpu_count()} CPUs ({cpu_model()}), torch {torch.__version__}, 1 intra-op thread; "
          f"link {args.link} GiB/s emulated, {args.copy_engines} copy engine(s), {args.rounds} interleaved rounds")
    for key in args.models.split(","):
        title, build, shape = MODELS[key]
        model, loss_fn = build()
        probe = ho.OffloadSession()
        step(model, loss_fn, probe)
        peak = probe.unplanned_peak_bytes()
        variants = {"eager": None, "no budget": probe}
        skipped = []
        for fraction in (float(f) for f in args.fractions.split(",")):
            budget = int(peak * fraction)
            for planner in args.planners.split(","):
                name = f"{planner} {round(fraction * 100)}%"
                session = ho.OffloadSession(ho.OffloadConfig(
                    max_resident_activation_bytes=budget, planner=planner, copy_engines=args.copy_engines,
                    copy_bandwidth_gib_per_s=args.link, emulate_copy_bandwidth=True, rewarm_once=False,
                    record_timeline=True))
                try:
                    step(model, loss_fn, session)  # warmup
                    step(model, loss_fn, session)  # first replay
                except ho.HyperoffloadError as error:
                    skipped.append(f"{name}: {str(error).splitlines()[0][:110]}")
                    continue
                variants[name] = session
        times = {name: [] for name in variants}
        held = {name: [] for name in variants}
        waits = {name: [] for name in variants}
        op_ms = {name: [] for name in variants}  # per round: each op's duration in the replay
        order = list(variants)
        for _ in range(args.rounds):
            random.shuffle(order)
            for name in order:
                times[name].append(step(model, loss_fn, variants[name]))
                if variants[name] is not None:
                    stats = variants[name].stats()
                    assert stats["kind"] == "replay", (name, stats["kind"])
                    held[name].append(stats["peak_held_bytes"])
                    waits[name].append(stats["memory_wait_ms"])
                    timeline = variants[name].last_timeline()
                    if timeline is not None:  # the unbudgeted probe records none
                        spans = sorted((s for s in timeline["spans"] if s["kind"] == "op"), key=lambda s: s["op"])
                        op_ms[name].append([s["end_ms"] - s["start_ms"] for s in spans])
        eager_ms = statistics.median(times["eager"])
        unbudgeted_ms = statistics.median(times["no budget"])
        print()
        print(f"{title} {shape}: unplanned activation peak {peak / 2**20:.2f} MiB; eager step "
              f"{eager_ms:.1f} ms (median, {min(times['eager']):.1f}-{max(times['eager']):.1f}); session without a "
              f"budget {unbudgeted_ms:.1f} ms ({min(times['no budget']):.1f}-{max(times['no budget']):.1f})")
        print(f"| {'variant':<14} | {'replay ms':>9} | {'eager+sim ms':>12} | {'ratio':>5} | {'vs unbudg.':>10} | "
              f"{'meas. ovh ms':>12} | {'sim ovh ms':>10} | {'sim compute':>11} | {'rt compute':>10} | {'rt ovh ms':>9} | "
              f"{'rt ratio':>8} | {'held KiB':>9} | {'sim peak KiB':>12} | {'ratio':>5} | {'<=B':>3} | "
              f"{'wait ms':>7} | {'sim wait ms':>11} | {'rt wait ms':>10} | {'spread':>6} |")
        print("|" + "|".join("-" * (w + 2) for w in (14, 9, 12, 5, 10, 12, 10, 11, 10, 9, 8, 9, 12, 5, 3, 7, 11, 10, 6))
              + "|")
        within, within_rt, total = 0, 0, 0
        for name, session in variants.items():
            if session is None or name == "no budget":
                continue
            sim = simulate(session, args.copy_engines)
            budget = session.config.budget_bytes
            replay_ms = statistics.median(times[name])
            sim_overhead = sim["stall_ms"] + sim["recompute_ms"]
            predicted = eager_ms + sim_overhead
            ratio = replay_ms / predicted
            peak_held = max(held[name])
            held_ratio = peak_held / sim["peak_bytes_timed"] if sim["peak_bytes_timed"] else float("nan")
            fits = all(h <= budget for h in held[name])
            spread = (max(times[name]) - min(times[name])) / replay_ms
            replay_op_ms = [statistics.median(column) for column in zip(*op_ms[name])]
            timed = simulate(session, args.copy_engines, replay_op_ms)
            timed_overhead = timed["stall_ms"] + timed["recompute_ms"]
            timed_ratio = replay_ms / (eager_ms + timed_overhead)
            total += 1
            within += abs(ratio - 1) <= 0.15
            within_rt += abs(timed_ratio - 1) <= 0.15
            print(f"| {name:<14} | {replay_ms:9.1f} | {predicted:12.1f} | {ratio:5.2f} | "
                  f"{replay_ms / (unbudgeted_ms + sim_overhead):10.2f} | {replay_ms - eager_ms:12.1f} | "
                  f"{sim_overhead:10.1f} | {sim['compute_ms']:11.1f} | {timed['compute_ms']:10.1f} | "
                  f"{timed_overhead:9.1f} | {timed_ratio:8.2f} | "
                  f"{peak_held / 1024:9.0f} | {sim['peak_bytes_timed'] / 1024:12.0f} | {held_ratio:5.2f} | "
                  f"{'yes' if fits else 'NO':>3} | {statistics.median(waits[name]):7.1f} | "
                  f"{sim['memory_stall_ms']:11.1f} | {timed['memory_stall_ms']:10.1f} | {spread:6.2f} |")
        print(f"{within} of {total} variants within 15% of eager + simulated overhead; {within_rt} of {total} "
              f"with the replay-timed simulation")
        for line in skipped:
            print(f"  not run: {line}")


if __name__ == "__main__":
    main()
