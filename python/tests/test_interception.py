"""How a step's ops reach the session: the C++ dispatcher fallback and the TorchDispatchMode.

On PyTorch 2.13 a session intercepts ops with a boxed dispatcher fallback just
below the Python key (python/src/interception.h, Note [Op interception]); its
TorchDispatchMode takes over where the fallback is unavailable. Both see
every op PyTorch runs; they differ only where a TorchDispatchMode itself makes
PyTorch run other ops.
"""

from __future__ import annotations

import threading
from collections import Counter

import pytest
import torch

import hyperoffload as ho
from conftest import assert_bit_identical, train
from hyperoffload._compat import TorchDispatchMode
from models import CASES

FALLBACK = "dispatcher_fallback"
MODE = "dispatch_mode"


def fallback_available() -> bool:
    probe = ho.OffloadSession()
    with probe:  # an empty step
        return probe.interception == FALLBACK


pytestmark = pytest.mark.skipif(not fallback_available(), reason="no C++ dispatcher fallback on this PyTorch")


def one_op_step(w, x):
    return torch.tanh(x @ w)


def weights():
    generator = torch.Generator().manual_seed(7)
    return torch.randn(32, 32, generator=generator), torch.randn(16, 32, generator=generator)


def op_view(trace: dict):
    """The trace without timings: each op's name and (storage, kind) accesses; each storage's size and retention."""
    ops = [(op["name"], [(a["storage"], a["kind"]) for a in op["accesses"]]) for op in trace["ops"]]
    storages = [(s["size_bytes"], s["retained"]) for s in trace["storages"]]
    return ops, storages


def test_a_step_intercepts_in_cpp_and_between_steps_nothing_does():
    session = ho.OffloadSession()
    assert session.interception is None
    w, x = weights()
    with session:
        assert session.interception == FALLBACK
        y = one_op_step(w, x)
    assert session.interception is None
    assert torch.equal(y, torch.tanh(x @ w))
    assert [op["name"] for op in session.trace()["ops"]] == ["aten::mm", "aten::tanh"]
    # After the step no op reaches it: a second step traces only its own ops (a replay).
    one_op_step(w, x)
    with session:
        one_op_step(w, x)
    assert session.stats()["kind"] == "replay" and session.stats()["ops"] == 2


@pytest.mark.parametrize("case", ["gpt_decoder", "vit"])
def test_both_interceptions_train_bit_identically_and_differ_only_where_a_mode_changes_pytorch(case):
    build = CASES[case].build
    eager = train(build, steps=2)
    names = {}
    for interception in ("auto", MODE):
        session = ho.OffloadSession(ho.OffloadConfig(interception=interception))
        assert_bit_identical(eager, train(build, session, steps=2))
        assert session.stats()["kind"] == "replay"
        names[interception] = Counter(op["name"] for op in session.trace()["ops"])
    # Under any TorchDispatchMode PyTorch runs a slightly different program
    # (at::impl::dispatch_mode_enabled()): composite kernels such as aten::linear
    # on a 3-d input add the bias out of place (aten::add instead of add_) and
    # reshape with aten::view, and autograd adds aten::detach calls. Below the
    # Python key, the fallback sees the program eager PyTorch runs.
    only_fallback = names["auto"] - names[MODE]
    only_mode = names[MODE] - names["auto"]
    assert set(only_fallback) <= {"aten::add_.Tensor", "aten::_reshape_alias"}
    assert set(only_mode) <= {"aten::add.Tensor", "aten::view", "aten::detach"}
    assert only_fallback["aten::add_.Tensor"] == only_mode["aten::add.Tensor"] > 0
    assert only_fallback["aten::_reshape_alias"] == only_mode["aten::view"]
    assert only_mode["aten::detach"] > 0


class CountingMode(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.names = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.append(str(func._schema.name))
        return func(*args, **(kwargs or {}))


def test_a_dispatch_mode_inside_the_step_sees_the_ops_first_and_the_session_still_sees_them():
    w, x = weights()
    alone = ho.OffloadSession()
    with alone:
        held = one_op_step(w, x)
    session = ho.OffloadSession()
    with session:
        with CountingMode() as mode:
            y = one_op_step(w, x)
    assert torch.equal(y, held)
    assert mode.names == ["aten::mm", "aten::tanh"]
    assert op_view(session.trace()) == op_view(alone.trace())


def test_a_step_inside_another_sessions_step_uses_the_dispatch_mode_and_both_see_every_op():
    w, x = weights()
    outer, inner = ho.OffloadSession(), ho.OffloadSession()
    with outer:
        a = x @ w
        with inner:
            assert outer.interception == FALLBACK and inner.interception == MODE
            b = torch.tanh(a)
        c = b.sum()
    assert torch.equal(c, torch.tanh(x @ w).sum())
    assert [op["name"] for op in outer.trace()["ops"]] == ["aten::mm", "aten::tanh", "aten::sum"]
    # The inner step sees only its own op; `a` was made before it: not an activation of it.
    assert [op["name"] for op in inner.trace()["ops"]] == ["aten::tanh"]
    assert [s["size_bytes"] for s in inner.trace()["storages"]] == [16 * 32 * 4]


def test_steps_on_two_threads_at_once_each_see_only_their_own_ops():
    w, x = weights()
    first, second = ho.OffloadSession(), ho.OffloadSession()
    entered, finished = threading.Event(), threading.Event()
    seen = {}

    def other_thread():
        with first:
            seen["first"] = first.interception
            torch.relu(x)
            entered.set()
            finished.wait(timeout=60)
            torch.neg(x)

    thread = threading.Thread(target=other_thread)
    thread.start()
    assert entered.wait(timeout=60)
    try:
        with second:
            seen["second"] = second.interception
            one_op_step(w, x)
    finally:
        finished.set()
        thread.join(timeout=60)
    # The first step holds the fallback; the second, meanwhile, its dispatch mode.
    assert seen == {"first": FALLBACK, "second": MODE}
    assert [op["name"] for op in first.trace()["ops"]] == ["aten::relu", "aten::neg"]
    assert [op["name"] for op in second.trace()["ops"]] == ["aten::mm", "aten::tanh"]
    # With both steps over, the next one gets the fallback again.
    assert fallback_available()


def test_a_step_of_another_program_inside_the_fallback_continues_as_a_warmup():
    # The session's switch to a warmup (a plan per step program, docs/PYTHON.md,
    # "Training loops") happens inside the fallback, from an op's hook.
    w, x = weights()
    session = ho.OffloadSession(ho.OffloadConfig(rewarm_once=False))
    with session:
        one_op_step(w, x)
    with session:
        torch.relu(x @ w)  # the replay expected aten::tanh after aten::mm
    assert session.stats()["kind"] == "warmup"
    assert [op["name"] for op in session.trace()["ops"]] == ["aten::mm", "aten::relu"]
    # From an op the autograd engine runs: the warmup's backward() made its
    # gradient with aten::ones_like; given one, the next op is SumBackward0's
    # aten::expand.
    v = w.clone().requires_grad_()
    gradient = torch.ones(())
    session = ho.OffloadSession(ho.OffloadConfig(rewarm_once=False))
    with session:
        torch.tanh(x @ v).sum().backward()
    assert "aten::ones_like" in [op["name"] for op in session.trace()["ops"]]
    with session:
        torch.tanh(x @ v).sum().backward(gradient)
    assert session.stats()["kind"] == "warmup"
    assert "aten::expand" in [op["name"] for op in session.trace()["ops"]]
