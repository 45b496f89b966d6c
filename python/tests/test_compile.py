"""torch.compile'd models inside a session step run eagerly, with the session's guarantees.

Decision (docs/PYTHON.md, "torch.compile"): inside a step every torch.compile'd
callable runs its original Python code eagerly (hyperoffload._compile_check sets
Dynamo's stance to force_eager for the step), so the session traces and
offloads it like the uncompiled model: bit-identical to eager, within the
budget, replayed. Outside the step it compiles and runs compiled as usual.
Entering a step from code that itself runs compiled raises HyperoffloadError.
"""

from __future__ import annotations

import pytest
import torch

import hyperoffload as ho
from conftest import StepResult, activation_peak, assert_bit_identical, train
from hyperoffload import _compile_check
from models import CASES

STEPS = 3


class CountingBackend:
    """A Dynamo backend that counts compilations and calls of the compiled graphs (and runs them as aot_eager)."""

    def __init__(self):
        self.compiles = 0
        self.calls = 0

    def __call__(self, gm, example_inputs):
        from torch._dynamo.backends.common import aot_autograd
        from torch._dynamo.backends.debugging import boxed_nop

        self.compiles += 1

        def count(graph, inputs):
            inner = boxed_nop(graph, inputs)

            def run(args):
                self.calls += 1
                return inner(args)

            run._boxed_call = True
            return run

        return aot_autograd(fw_compiler=count, bw_compiler=count)(gm, example_inputs)


@pytest.fixture(scope="module")
def gpt():
    build = CASES["gpt_decoder"].build
    eager = train(build, steps=STEPS)
    peak, _ = activation_peak(build)
    return build, eager, peak


def compiled_build(build, **compile_kwargs):
    """The model case with its model torch.compile'd, compiled and run once outside any session."""

    def make():
        model, batch, loss_fn = build()
        compiled = torch.compile(model, **compile_kwargs)
        probe = loss_fn(compiled, batch)  # compiles (forward and backward) outside the session
        probe.backward()
        for p in model.parameters():
            p.grad = None
        return compiled, batch, loss_fn

    return make


# ---- The scope itself ------------------------------------------------------------------------


def test_the_step_scope_forces_eager_and_restores_the_previous_stance():
    assert _compile_check.current_stance() == "default"
    end = _compile_check.check_step_start()
    assert _compile_check.current_stance() == "force_eager"
    end()
    assert _compile_check.current_stance() == "default"
    with torch.compiler.set_stance("fail_on_recompile"):
        end = _compile_check.check_step_start()
        assert _compile_check.current_stance() == "force_eager"
        end()
        assert _compile_check.current_stance() == "fail_on_recompile"
    assert _compile_check.current_stance() == "default"


def test_the_session_forces_eager_for_its_steps_and_restores_the_stance_however_they_end():
    session = ho.OffloadSession()
    with session:
        inside = _compile_check.current_stance()
    assert inside == "force_eager", "session.py does not call hyperoffload._compile_check.check_step_start()"
    assert _compile_check.current_stance() == "default"
    with pytest.raises(ZeroDivisionError):
        with session:
            raise ZeroDivisionError
    assert _compile_check.current_stance() == "default"


# ---- Compiled models in a session ---------------------------------------------------------------


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "inductor"])
def test_a_compiled_model_trains_bit_identically_within_half_the_peak(gpt, backend):
    build, eager, peak = gpt
    budget = peak // 2
    session = ho.OffloadSession(ho.OffloadConfig(max_resident_activation_bytes=budget, planner="peak"))
    results = train(compiled_build(build, backend=backend), session, steps=STEPS)
    # Inside the step the compiled model runs its Python code eagerly: the same
    # aten ops as the uncompiled model, so bit-identical to it (also for
    # inductor, whose own kernels would round differently) and the same peak.
    assert_bit_identical(eager, results)
    assert [r.stats["kind"] for r in results] == ["warmup", "replay", "replay"]
    assert session.unplanned_peak_bytes() == peak
    for step, r in enumerate(results):
        assert r.stats["peak_held_bytes"] <= budget, f"step {step}"
        assert r.stats["offloaded_bytes"] > 0
    assert all(r.stats["d2h_count"] > 0 and r.stats["faults"] == 0 for r in results[1:])
    assert all(op["name"].startswith("aten::") for op in session.trace()["ops"])


def test_compiled_graphs_do_not_run_inside_a_step_and_still_run_outside(gpt):
    build, eager, peak = gpt
    backend = CountingBackend()
    model, batch, loss_fn = build()
    compiled = torch.compile(model, backend=backend)
    loss_fn(compiled, batch).backward()
    compiles, calls = backend.compiles, backend.calls
    assert compiles >= 1 and calls >= 2 * compiles  # a forward and a backward graph per compiled frame ran
    session = ho.OffloadSession(ho.OffloadConfig(max_resident_activation_bytes=peak // 2))
    for p in model.parameters():
        p.grad = torch.zeros_like(p)  # as in `peak`'s step: the gradients are not activations
    for _ in range(STEPS):
        model.zero_grad(set_to_none=False)
        with session:
            loss_fn(compiled, batch).backward()
        assert session.stats()["offloaded_bytes"] > 0
    assert (backend.compiles, backend.calls) == (compiles, calls), "a compiled graph ran inside a step"
    # Outside, the same compiled graphs run again (nothing was marked skipped):
    loss_fn(compiled, batch).backward()
    assert (backend.compiles, backend.calls) == (compiles, 2 * calls)


def test_a_model_compiled_for_the_first_time_inside_a_step_compiles_later_outside():
    # On PyTorch 2.13 Dynamo's own fallback under a dispatch mode marks the code
    # "skip" for good (pytorch/pytorch#190286); the step's force_eager stance
    # keeps Dynamo out of the step, so the model compiles at its first call outside.
    backend = CountingBackend()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.GELU(), torch.nn.Linear(64, 16))
    compiled = torch.compile(model, backend=backend)
    x = torch.randn(8, 16)
    expected = model(x)
    session = ho.OffloadSession()
    with session:
        inside = compiled(x)
    assert torch.equal(inside, expected)
    assert backend.compiles == 0 and session.stats()["ops"] > 0
    compiled(x)
    assert backend.compiles == 1 and backend.calls == 1


def test_fullgraph_and_a_fail_on_recompile_stance_work_inside_a_step(gpt):
    build, eager, peak = gpt
    budget = peak // 2
    session = ho.OffloadSession(ho.OffloadConfig(max_resident_activation_bytes=budget))
    model, batch, loss_fn = build()
    head = torch.nn.Linear(64, 64)
    compiled_head = torch.compile(head, backend="aot_eager", fullgraph=True)
    x = torch.randn(4, 64)
    compiled_head(x).sum().backward()
    with torch.compiler.set_stance("fail_on_recompile"):
        for _ in range(2):
            with session:
                y = compiled_head(x).sum()
                y.backward()
            assert session.stats()["ops"] > 0
    assert _compile_check.current_stance() == "default"


def test_entering_a_step_inside_compiled_code_raises_a_clear_error():
    session = ho.OffloadSession()

    def step(x):
        with session:
            return (x * 2).sum()

    with pytest.raises(ho.HyperoffloadError, match="inside a torch.compile'd function"):
        torch.compile(step, backend="eager")(torch.randn(4))
    assert not session.in_step
    assert _compile_check.current_stance() == "default"
    # The same function, kept out of compilation, runs its step.
    assert torch.compiler.disable(step)(torch.ones(4)).item() == 8.0
