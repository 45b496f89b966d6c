"""Reproducible plans (issue 33, part 3; Note [Reproducible plans] in exec/warmup_executor.h): the same script run
in fresh processes gets the same plan fingerprint at every step, because every warmup of a step program after the
first on a machine plans from the op times the first recorded (OffloadConfig.op_times_store)."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest
import torch

import hyperoffload as ho

# A transformers GPT-2 with dropout, accumulation 2 and the optimizer inside the block, hybrid at 40% of the
# largest micro-batch's peak: four step programs (the first micro-batch, which creates the gradients; later
# first and second micro-batches; the optimizer's step), the second's warmup continuing a replay.
SCRIPT = r"""
import copy, json, os, sys
sys.path.insert(0, os.environ["TESTS_DIR"])
import torchvision_models  # noqa: F401  (before transformers: tests/torchvision_models.py says why)
import torch
import hyperoffload as ho
from hf_models import build_gpt2

torch.manual_seed(0)
base, batch, loss_fn = build_gpt2()
data = [batch] * 6

def loop(session, on_micro_batch):
    model = copy.deepcopy(base)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    torch.manual_seed(1)
    out = []
    for index, b in enumerate(data):
        with session if session is not None else torch.enable_grad():
            loss = loss_fn(model, b) / 2
            loss.backward()
            out.append([loss.detach().clone()] + [p.grad.clone() for p in model.parameters() if p.grad is not None])
            if index % 2 == 1:
                optimizer.step()
                optimizer.zero_grad()
        on_micro_batch()
    return out

probe = ho.OffloadSession()
peaks = []
loop(probe, lambda: peaks.append(probe.stats()["peak_held_bytes"]))
session = ho.OffloadSession(ho.OffloadConfig(max_resident_activation_bytes=int(max(peaks) * 0.4), planner="hybrid"))
fingerprints = []
got = loop(session, lambda: fingerprints.append(session.stats()["plan_fingerprint"]))
eager = loop(None, lambda: None)
same = all(torch.equal(a, b) for ga, gb in zip(got, eager) for a, b in zip(ga, gb))
notes = [n for n in session.notes() if n.startswith("op times")]
print(json.dumps({"same": same, "fingerprints": fingerprints, "kinds": session.stats()["warmups"], "notes": notes}))
"""


def run_script() -> dict:
    env = dict(os.environ, TESTS_DIR=os.path.dirname(__file__), OMP_NUM_THREADS="1")
    child = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, check=False,
                           timeout=600)
    assert child.returncode == 0, child.stderr[-3000:]
    return json.loads(child.stdout.strip().splitlines()[-1])


def test_the_same_script_gets_the_same_plans_in_every_run():
    store = pathlib.Path(os.environ["HYPEROFFLOAD_CACHE_DIR"]) / "op_times"
    runs = [run_script() for _ in range(3)]
    for run in runs:
        assert run["same"], "a run differs from eager"
    first = runs[0]["fingerprints"]
    assert all(fp is not None for fp in first[1:]), first  # the first micro-batch warms up
    for index, run in enumerate(runs[1:], start=2):
        assert run["fingerprints"] == first, f"run {index}: {run['fingerprints']} != {first}"
    # The first run recorded each program's times (its probe session, whose warmups came first); the later runs
    # planned from them and recorded nothing.
    recorded = sorted(store.glob("op-times-*.json"))
    assert recorded, "nothing recorded"
    for run in runs[1:]:
        assert run["notes"] and all("as an earlier warmup of this step program recorded them" in note
                                    for note in run["notes"]), run["notes"]
    assert sorted(store.glob("op-times-*.json")) == recorded


def step(session: ho.OffloadSession) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    with session:
        model(torch.randn(32, 64)).sum().backward()


def test_the_store_is_where_the_config_says(tmp_path):
    default = pathlib.Path(os.environ["HYPEROFFLOAD_CACHE_DIR"]) / "op_times"
    assert ho.config.default_op_times_store() == str(default)
    step(ho.OffloadSession(ho.OffloadConfig(op_times_store=False)))
    assert not default.exists()
    step(ho.OffloadSession(ho.OffloadConfig(op_times_store=tmp_path / "mine")))
    assert len(list((tmp_path / "mine").glob("op-times-*.json"))) == 1
    assert not default.exists()
    step(ho.OffloadSession(ho.OffloadConfig(op_times="measured")))  # measured times: no store
    assert not default.exists()
    session = ho.OffloadSession()
    step(session)
    [written] = default.glob("op-times-*.json")
    record = json.loads(written.read_text())
    assert record["format"] == "hyperoffload.op_times"
    assert record["machine"].startswith(f"torch {torch.__version__}; ")
    assert record["op_count"] == len(record["durations_ms"]) == session.trace()["ops"].__len__()


def test_a_bad_store_value_fails_where_it_is_written():
    with pytest.raises(TypeError, match="op_times_store must be a bool or a path, got int"):
        ho.OffloadConfig(op_times_store=1)
    with pytest.raises(ValueError, match="op_times_store must not be an empty path"):
        ho.OffloadConfig(op_times_store="")
