"""Shared setup of the Python tests: determinism, model step helpers, the CLI path."""

from __future__ import annotations

import os
import pathlib
import sys
from typing import Callable, List, Optional, Tuple

import pytest
import torch

sys.path.insert(0, os.path.dirname(__file__))

# Before anything imports transformers, which imports torchvision when it is
# installed (torchvision_models.py says why that needs care on the CPU torch).
import torchvision_models  # noqa: E402,F401

import hyperoffload as ho  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _op_times_store_per_test(tmp_path_factory, monkeypatch):
    """Each test its own op-time store (OffloadConfig.op_times_store's default directory, under
    HYPEROFFLOAD_CACHE_DIR): sessions within a test share recorded op times, as in one user's runs,
    and no test reads another's or the user's ~/.cache. Subprocesses inherit the variable."""
    monkeypatch.setenv("HYPEROFFLOAD_CACHE_DIR", str(tmp_path_factory.mktemp("hyperoffload-cache")))


def load_bench(name: str):
    """The benchmark script python/bench/<name>.py as a module (its main() is what its test runs)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, REPO / "python" / "bench" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module

# Bit-identical results need the same kernels in the same order: one intra-op
# thread (the runtime's copy threads run beside it) and deterministic algorithms.
# On a GPU, cuBLAS is deterministic only with a fixed workspace configuration, and
# under use_deterministic_algorithms PyTorch refuses its matrix products without
# one; it is read when cuBLAS first starts, after this (test_cuda.py).
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
torch.set_num_threads(1)
torch.use_deterministic_algorithms(True)


def cli_path() -> pathlib.Path:
    """The hyperoffload CLI: $HYPEROFFLOAD_CLI (set by ctest), else build/bin/hyperoffload."""
    path = pathlib.Path(os.environ.get("HYPEROFFLOAD_CLI", REPO / "build" / "bin" / "hyperoffload"))
    if not path.exists():
        pytest.skip(f"the hyperoffload CLI is not built ({path})")
    return path


class StepResult:
    def __init__(self, loss: torch.Tensor, grads: List[torch.Tensor], stats: Optional[dict]):
        self.loss = loss
        self.grads = grads
        self.stats = stats


def train(build: Callable, session: Optional[ho.OffloadSession] = None, steps: int = 3,
          set_to_none: bool = False) -> List[StepResult]:
    """Runs `steps` SGD steps of a model case, each step's forward and backward in `session`.

    With set_to_none=False the gradients exist before the first step (zeros) and
    are zeroed in place between steps, so every step runs the same ops; with
    True they are reset to None and each step creates them.
    """
    model, batch, loss_fn = build()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    if not set_to_none:
        for p in model.parameters():
            p.grad = torch.zeros_like(p)
    results = []
    for _ in range(steps):
        optimizer.zero_grad(set_to_none=set_to_none)
        if session is None:
            loss = loss_fn(model, batch)
            loss.backward()
            stats = None
        else:
            with session:
                loss = loss_fn(model, batch)
                loss.backward()
            stats = session.stats()
        results.append(StepResult(loss.detach().clone(), [p.grad.clone() for p in model.parameters()], stats))
        optimizer.step()
    return results


def assert_bit_identical(expected: List[StepResult], actual: List[StepResult]) -> None:
    assert len(expected) == len(actual)
    for step, (e, a) in enumerate(zip(expected, actual)):
        assert torch.equal(e.loss, a.loss), f"step {step}: loss {a.loss.item()!r} != {e.loss.item()!r}"
        assert len(e.grads) == len(a.grads)
        for index, (eg, ag) in enumerate(zip(e.grads, a.grads)):
            assert torch.equal(eg, ag), f"step {step}: gradient of parameter {index} differs"


def activation_peak(build: Callable) -> Tuple[int, dict]:
    """Unplanned peak of activation bytes of one step, from a session without a budget (and its trace)."""
    session = ho.OffloadSession()
    train(build, session, steps=1)
    return session.unplanned_peak_bytes(), session.trace()


def recompute_budgets_until_a_plan(build: Callable, fractions, note: str) -> bool:
    """Trains the case `build` (train, above) under planner="recompute" at each of `fractions` of its activation
    peak in turn and checks every budget: each step bit-identical to eager, the first a warmup, the others replays
    that re-run ops and hold at most the budget. Stops at the first budget whose session's notes contain `note`
    (the kind of plan the caller looks for: which budget gets it depends on the op times the warmup measures) and
    returns True; False when no budget got one.
    """
    peak, _ = activation_peak(build)
    eager = train(build)
    for fraction in fractions:
        budget = int(peak * fraction)
        # Each budget's warmup measures its own op times (no op-time store): a retry should not inherit the times
        # that gave the last budget no such plan.
        session = ho.OffloadSession(ho.OffloadConfig(max_resident_activation_bytes=budget, planner="recompute",
                                                     op_times_store=False))
        results = train(build, session)
        try:
            assert_bit_identical(eager, results)
        except AssertionError as error:
            raise AssertionError(f"{fraction:.0%}: {error}") from None
        assert [r.stats["kind"] for r in results] == ["warmup"] + ["replay"] * (len(results) - 1), \
            (fraction, session.notes())
        for step, r in enumerate(results[1:], start=1):
            assert r.stats["recompute_count"] > 0, f"{fraction:.0%}, step {step}"
            assert r.stats["peak_held_bytes"] <= budget, f"{fraction:.0%}, step {step}"
        if any(note in n for n in session.notes()):
            return True
    return False
