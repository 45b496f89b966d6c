"""`torch.multiprocessing.spawn` with DDP on gloo, sessions alive at exit (python/tests/test_spawn_exit.py).

    python spawn_worker.py PORT [mlp|gpt2]

Each of 2 ranks trains a DDP model under a hybrid session at half its
unplanned peak, checks its losses equal eager's, and exits with its sessions
still alive in a module global (as a script that keeps them at top level
does). `mlp`: an MLP, 5 steps, the process group destroyed. `gpt2`: a
`transformers` GPT-2, 10 micro-batches with gradient accumulation 2
(`no_sync` on the first), clipping and AdamW inside the session's block,
`zero_grad(set_to_none=False)`, and the process group never destroyed (as
many scripts leave it).
"""

from __future__ import annotations

import contextlib
import datetime
import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

import hyperoffload as ho

KEPT = []  # alive until the interpreter exits
# DDP rebuilds its gradient buckets after the first iteration: steps 1-3 are
# distinct programs (three warmups), the rest replay.
STEPS = 5


def train(session=None):
    torch.manual_seed(0)
    model = nn.parallel.DistributedDataParallel(
        nn.Sequential(*[m for _ in range(4) for m in (nn.Linear(64, 64), nn.ReLU())]))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(256, 64, generator=torch.Generator().manual_seed(dist.get_rank()))
    losses = []
    for _ in range(STEPS):
        optimizer.zero_grad()
        with session if session is not None else torch.enable_grad():
            loss = model(x).square().mean()
            loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def train_gpt2(session=None, steps=10, accumulate=2):
    import torchvision_models  # noqa: F401, PLC0415 - before transformers (torchvision_models.py)
    import transformers  # noqa: PLC0415 - only this variant needs it

    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=128, n_positions=64, n_embd=64, n_layer=2, n_head=2)
    model = nn.parallel.DistributedDataParallel(transformers.GPT2LMHeadModel(config))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    generator = torch.Generator().manual_seed(dist.get_rank())
    losses = []
    for step in range(steps):
        ids = torch.randint(0, 128, (4, 32), generator=generator)
        last = (step + 1) % accumulate == 0
        with model.no_sync() if not last else contextlib.nullcontext():
            with session if session is not None else contextlib.nullcontext():
                loss = model(input_ids=ids, labels=ids).loss / accumulate
                loss.backward()
                if last:
                    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                    optimizer.step()
                    optimizer.zero_grad(set_to_none=False)
        losses.append(loss.item())
    return losses


def worker(rank: int, world: int, port: int, variant: str = "mlp") -> None:
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=60))
    run = train if variant == "mlp" else train_gpt2
    eager = run()
    probe = ho.OffloadSession()
    run(probe)
    budget = probe.unplanned_peak_bytes() // 2
    session = ho.OffloadSession(ho.OffloadConfig(max_resident_activation_bytes=budget, planner="hybrid"))
    losses = run(session)
    assert losses == eager, (losses, eager)
    stats = session.stats()
    assert stats["kind"] == "replay" and stats["peak_held_bytes"] <= budget, (stats, budget, session.notes())
    KEPT.extend([probe, session])
    dist.barrier()
    if variant == "mlp":
        dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(worker, args=(2, int(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else "mlp"), nprocs=2, join=True)
    print("spawn ok")
