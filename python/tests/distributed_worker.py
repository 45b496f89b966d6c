"""One rank of a multi-process training run with one OffloadSession per rank.

Run by torchrun (python/tests/test_distributed.py):

    python -m torch.distributed.run --standalone --nproc_per_node 2 \\
        python/tests/distributed_worker.py --mode ddp --fraction 0.5 --steps 3 --out DIR

Every rank (gloo, CPU) builds the GPT-style decoder of models.py (same seed on
every rank, so the replicas start equal), feeds it its own batch, wraps it in
DistributedDataParallel (--mode ddp) or FSDP2's fully_shard (--mode fsdp2) and
trains --steps SGD steps three times from the same start:

  1. "eager": no session;
  2. "probe": an OffloadSession without a budget (traces and replays, offloads
     nothing); its unplanned activation peak sets the budget;
  3. "offload": an OffloadSession with a budget of --fraction of that peak.

Forward, loss and backward run inside ``with session:``; optimizer.step() runs
outside. Each session run's losses and every gradient (FSDP2: this rank's
shard) are compared bit for bit with the eager run's, and the rank writes
DIR/rank<R>.json with the comparison and each step's session stats.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import pathlib
import sys
import traceback
import warnings

import torch
import torch.distributed as dist
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import hyperoffload as ho  # noqa: E402
from models import GptDecoder  # noqa: E402

# A smaller GptDecoder than models.GPT_SHAPE keeps a 2-process run on a shared
# 2-core machine quick; same layout (embeddings, 2 pre-norm causal layers, head).
SHAPE = dict(vocab=128, context=16, width=32, heads=4, layers=2, ffn=128, batch=4)
STAT_KEYS = ("kind", "passthrough", "ops", "peak_resident_bytes", "peak_held_bytes", "budget_bytes", "offloaded_bytes", "d2h_count",
             "h2d_count", "h2d_bytes", "faults", "evictions", "end_restores", "resident_at_end_bytes")


def build(mode: str, rank: int):
    s = SHAPE
    torch.manual_seed(1)  # the same initial parameters on every rank
    model = GptDecoder(s["vocab"], s["context"], s["width"], s["heads"], s["layers"], s["ffn"])
    generator = torch.Generator().manual_seed(100 + rank)  # each rank its own batch
    tokens = torch.randint(0, s["vocab"], (s["batch"], s["context"] + 1), generator=generator)
    inputs, targets = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
    if mode == "ddp":
        from torch.nn.parallel import DistributedDataParallel
        for p in model.parameters():  # gradients exist before the first step: every step runs the same ops
            p.grad = torch.zeros_like(p)
        wrapped = DistributedDataParallel(model)
    elif mode == "fsdp2":
        from torch.distributed.fsdp import fully_shard
        for layer in model.blocks.layers:
            fully_shard(layer)
        wrapped = fully_shard(model)
    else:
        raise ValueError(mode)
    return wrapped, (inputs, targets)


def local(t: torch.Tensor) -> torch.Tensor:
    """This rank's part of a gradient (FSDP2's are DTensors)."""
    return t.to_local() if hasattr(t, "to_local") else t


def train(mode: str, rank: int, steps: int, session=None):
    model, (inputs, targets) = build(mode, rank)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    losses, grads, stats, warned = [], [], [], []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(steps):
            # DDP: the gradients exist and are zeroed in place; FSDP2: reset to
            # None, so every step makes the sharded gradients (retained by the step).
            optimizer.zero_grad(set_to_none=mode == "fsdp2")
            with session if session is not None else contextlib.nullcontext():
                logits = model(inputs)
                loss = nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
                loss.backward()
            losses.append(loss.detach().clone())
            grads.append([local(p.grad).detach().clone() for p in model.parameters()])
            stats.append({k: session.stats()[k] for k in STAT_KEYS} if session is not None else None)
            optimizer.step()
    warned = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    return losses, grads, stats, warned


def compare(eager, run):
    e_losses, e_grads = eager[0], eager[1]
    losses, grads = run[0], run[1]
    return {
        "losses": [float(l) for l in losses],
        "losses_equal": [bool(torch.equal(a, b)) for a, b in zip(e_losses, losses)],
        "grads_equal": [all(torch.equal(a, b) for a, b in zip(ea, eb)) and len(ea) == len(eb)
                        for ea, eb in zip(e_grads, grads)],
        "stats": run[2],
        "warnings": run[3],
    }


def collectives(trace: dict, schedule: dict) -> dict:
    """The collective ops of the traced step (c10d::, _c10d_functional::, fsdp::)
    and what became of the tracked storages they touch: a later op of the trace
    accessing one ("used_after"), a schedule action copying one after the
    collective ("moved_after"), or one the step ends holding ("retained"). All
    stay empty when every such buffer leaves the session at its collective (Note [Collective buffers], torch_session.cc)."""
    prefixes = ("c10d::", "_c10d_functional::", "fsdp::")
    ops = trace["ops"]
    first = {}  # storage -> index of the first collective touching it
    for index, op in enumerate(ops):
        if op["name"].startswith(prefixes):
            for access in op["accesses"]:
                first.setdefault(access["storage"], index)
    used_after = sorted({a["storage"] for index, op in enumerate(ops) for a in op["accesses"]
                         if a["storage"] in first and index > first[a["storage"]]})
    # The plan releases a storage after its last traced use; for one already
    # freed (handed back) a release is a no-op, a copy would not be.
    moved_after = [a for a in schedule["actions"] if a["storage"] in first and a["kind"].startswith("copy_")
                   and (a["op"] > first[a["storage"]] or (a["op"] == first[a["storage"]] and a["phase"] == "post"))]
    retained = sorted(s["id"] for s in trace["storages"] if s["id"] in first and s["retained"])
    return {"ops": sorted({op["name"] for op in ops if op["name"].startswith(prefixes)}),
            "tracked_storages": sorted(first), "used_after": used_after, "moved_after": moved_after,
            "retained": retained}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mode", choices=["ddp", "fsdp2"], required=True)
    parser.add_argument("--fraction", type=float, default=0.5)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--planner", default="peak")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()

    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
    rank, world = dist.get_rank(), dist.get_world_size()
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    result = {"rank": rank, "world_size": world, "mode": args.mode, "fraction": args.fraction, "steps": args.steps}
    try:
        eager = train(args.mode, rank, args.steps)
        result["eager_losses"] = [float(l) for l in eager[0]]
        probe = ho.OffloadSession()
        result["probe"] = compare(eager, train(args.mode, rank, args.steps, probe))
        peak = probe.unplanned_peak_bytes()
        result["probe_non_aten_ops"] = sorted({op["name"] for op in probe.trace()["ops"]
                                               if not op["name"].startswith("aten::")})
        if os.environ.get("HYPEROFFLOAD_WORKER_TRACES"):
            probe.save_trace(out / f"probe_trace_rank{rank}.json")
        budget = int(peak * args.fraction)
        result["unplanned_peak_bytes"] = peak
        result["budget_bytes"] = budget
        session = ho.OffloadSession(ho.OffloadConfig(max_resident_activation_bytes=budget, planner=args.planner))
        result["offload"] = compare(eager, train(args.mode, rank, args.steps, session))
        result["floor_bytes"] = session.floor_bytes()
        result["trace_ops"] = len(session.trace()["ops"])
        result["collectives"] = collectives(session.trace(), session.schedule())
        result["ok"] = True
    except Exception:  # reported in the JSON; the test prints it
        result["ok"] = False
        result["error"] = traceback.format_exc()
    out.mkdir(parents=True, exist_ok=True)
    (out / f"rank{rank}.json").write_text(json.dumps(result, indent=1))
    try:
        dist.barrier()
    finally:
        dist.destroy_process_group()
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
