"""How low planner="recompute" can go once dropout is recomputable (RNG replay, issue 25).

    PYTHONPATH=build/python:python/tests .venv/bin/python python/bench/rng_replay_floor.py

For each model in training mode with dropout on: the unplanned activation peak
and the floor of the recompute planner (the least budget any plan of it meets),
with the dispatcher fallback (dropout's mask is one op, re-run with its
generator's state) and with interception="dispatch_mode" (dropout decomposes
into in-place ops there, so its mask must stay resident: the floor before RNG
replay). Then one step each of eager and of planner="recompute" at 1.05x the
new floor, with the recomputes the runtime ran and their RNG-replayed share.
"""

from __future__ import annotations

import statistics
import time
import warnings

import torch

import hyperoffload as ho
import hf_models
import models


def one_step(build, session=None):
    model, batch, loss_fn = build()
    model.train()
    torch.manual_seed(0)
    start = time.perf_counter()
    if session is None:
        loss_fn(model, batch).backward()
    else:
        with session:
            loss_fn(model, batch).backward()
    return (time.perf_counter() - start) * 1e3


def floor(build, interception):
    probe = ho.OffloadSession(ho.OffloadConfig(max_resident_activation_bytes=1, planner="recompute",
                                               interception=interception))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        one_step(build, probe)
    return probe.floor_bytes()


def main():
    torch.set_num_threads(1)
    cases = {"gpt_decoder (dropout 0.1)": lambda: models.CASES["gpt_decoder"].build(dropout=0.1),
             "vit (dropout 0.1)": lambda: models.CASES["vit"].build(dropout=0.1),
             "hf_gpt2": hf_models.HF_CASES["hf_gpt2"].build,
             "hf_bert": hf_models.HF_CASES["hf_bert"].build}
    mib = 2.0 ** 20
    print("| model | unplanned peak MiB | recompute floor, in-place dropout MiB | recompute floor, RNG replay MiB "
          "| eager ms | recompute at 1.05x floor ms (recomputes, of them random) |")
    print("|---|---|---|---|---|---|")
    for name, build in cases.items():
        probe = ho.OffloadSession()
        one_step(build, probe)
        peak = probe.unplanned_peak_bytes()
        old, new = floor(build, "dispatch_mode"), floor(build, "auto")
        budget = int(new * 1.05)
        session = ho.OffloadSession(ho.OffloadConfig(max_resident_activation_bytes=budget, planner="recompute"))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for _ in range(2):
                one_step(build, session)  # warmup (and a re-warmup where the first step differs)
        eager = statistics.median(one_step(build) for _ in range(3))
        replay = statistics.median(one_step(build, session) for _ in range(3))
        ops = session.trace()["ops"]
        recomputes = [a for a in session.schedule()["actions"] if a["kind"] == "recompute"]
        random_ones = sum(bool(ops[a["source_op"]].get("rng_replay")) for a in recomputes)
        print(f"| {name} | {peak / mib:.2f} | {old / mib:.2f} ({old / peak:.0%}) | {new / mib:.2f} ({new / peak:.0%}) "
              f"| {eager:.1f} | {replay:.1f} ({len(recomputes)}, {random_ones}) |")


if __name__ == "__main__":
    main()
