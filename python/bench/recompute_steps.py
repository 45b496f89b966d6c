"""Step time of a GPT-style decoder in training mode: eager, offload-only (peak) and hybrid plans.

    PYTHONPATH=build/python .venv/bin/python python/bench/recompute_steps.py [--rounds 7]

Every variant is a session (or plain eager) on the same model; after each
session's warmup, rounds of one step per variant run in a random order
(interleaved, so machine noise hits all alike), and the median and the range
of the wall time per step are printed with the time the runtime spent
re-running ops (stats()["recompute_ms"]). Budgets are 30/50/70% of the
unplanned activation peak. Plans use the link the warmup measured (memcpy on
this CPU, where offloading is nearly free) and, for "slow link", 0.01 GiB/s —
this machine's 2 cores compute about 2000x slower than an A100, whose PCIe
link moves ~25 GB/s, so 0.01 GiB/s keeps a GPU's ratio of compute to copy time.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

import torch
from torch import nn

import hyperoffload as ho
from models import GptDecoder  # python/tests/models.py

SHAPE = dict(vocab=512, context=128, width=256, heads=4, layers=4, ffn=1024, batch=8)


def build():
    torch.manual_seed(1)
    s = SHAPE
    model = GptDecoder(s["vocab"], s["context"], s["width"], s["heads"], s["layers"], s["ffn"], dropout=0.1)
    model.train()
    tokens = torch.randint(0, s["vocab"], (s["batch"], s["context"] + 1))
    return model, tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()


def step(model, inputs, targets, session=None):
    for p in model.parameters():
        p.grad = None
    start = time.perf_counter()
    if session is None:
        logits = model(inputs)
        nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1)).backward()
    else:
        with session:
            logits = model(inputs)
            nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1)).backward()
    return (time.perf_counter() - start) * 1e3


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    torch.set_num_threads(1)
    model, inputs, targets = build()
    probe = ho.OffloadSession()
    step(model, inputs, targets, probe)
    peak = probe.unplanned_peak_bytes()

    variants = {"eager": None}
    for fraction in (0.3, 0.5, 0.7):
        budget = int(peak * fraction)
        for planner, link in (("peak", None), ("hybrid", None), ("hybrid", 0.01)):
            name = f"{planner}{' slow link' if link else ''} {int(fraction * 100)}%"
            session = ho.OffloadSession(ho.OffloadConfig(max_resident_activation_bytes=budget, planner=planner,
                                                         copy_bandwidth_gib_per_s=link))
            try:
                step(model, inputs, targets, session)  # warmup
                step(model, inputs, targets, session)  # first replay
            except ho.HyperoffloadError as error:
                print(f"{name}: {error}")
                continue
            variants[name] = session
    times = {name: [] for name in variants}
    recompute = {name: [] for name in variants}
    order = list(variants)
    for _ in range(args.rounds):
        random.shuffle(order)
        for name in order:
            times[name].append(step(model, inputs, targets, variants[name]))
            if variants[name] is not None:
                recompute[name].append(variants[name].stats()["recompute_ms"])
    print(f"GPT-style decoder {SHAPE}, unplanned activation peak {peak / 2**20:.1f} MiB, "
          f"{args.rounds} interleaved rounds, 1 thread")
    print(f"{'variant':<24} {'step ms (median)':>16} {'min-max':>17} {'recompute ms':>13} {'recomputes':>10} "
          f"{'offloaded MiB':>13}")
    for name, session in variants.items():
        t = times[name]
        stats = session.stats() if session is not None else {}
        print(f"{name:<24} {statistics.median(t):16.1f} {min(t):8.1f}-{max(t):<8.1f} "
              f"{statistics.median(recompute[name]) if recompute[name] else 0.0:13.1f} "
              f"{stats.get('recompute_count', 0):10d} {stats.get('offloaded_bytes', 0) / 2**20:13.1f}")


if __name__ == "__main__":
    main()
