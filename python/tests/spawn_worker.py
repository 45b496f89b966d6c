"""`torch.multiprocessing.spawn` with DDP on gloo, sessions alive at exit (python/tests/test_spawn_exit.py).

    python spawn_worker.py PORT

Each of 2 ranks trains a DDP MLP 5 steps under a hybrid session at half its
unplanned peak, checks its losses equal eager's, and exits with its sessions
still alive in a module global (as a script that keeps them at top level
does): the process group is destroyed, the sessions are not closed.
"""

from __future__ import annotations

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


def worker(rank: int, world: int, port: int) -> None:
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=60))
    eager = train()
    probe = ho.OffloadSession()
    train(probe)
    budget = probe.unplanned_peak_bytes() // 2
    session = ho.OffloadSession(ho.OffloadConfig(max_resident_activation_bytes=budget, planner="hybrid"))
    losses = train(session)
    assert losses == eager, (losses, eager)
    stats = session.stats()
    assert stats["kind"] == "replay" and stats["peak_held_bytes"] <= budget, (stats, budget, session.notes())
    KEPT.extend([probe, session])
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(worker, args=(2, int(sys.argv[1])), nprocs=2, join=True)
    print("spawn ok")
