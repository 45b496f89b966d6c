"""RNG replay: ops that draw random numbers are recomputed bit for bit.

An op tagged nondeterministic_seeded (the CPU dropout's mask,
hyperoffload::dropout_noise; native_dropout on a GPU; bernoulli, rand_like,
attention with dropout_p) is recomputable with `rng_replay` (trace format v3).
When a replay first runs one that the plan re-runs later, the session saves the
state of the generator it draws from (the default generator of its device, or
its generator= argument); a recompute runs with that state and puts the
caller's state back (Note [RNG replay] in python/src/rng_replay.h). So with
planner="recompute" at a budget that forces dropout outputs to be re-run, in
every step the loss, every gradient, torch.get_rng_state() and an explicit
generator's state equal eager's exactly.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import hyperoffload as ho
import models

STEPS = 3


def run(build, session=None, steps=STEPS, generator=None):
    """Training steps (no optimizer: gradients are compared, weights stay put), the RNG seeded once:
    (loss, gradients, CPU RNG state, explicit generator's state, stats) per step."""
    model, batch, loss_fn = build()
    model.train()
    torch.manual_seed(1234)
    if generator is not None:
        generator.manual_seed(99)
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    results = []
    for _ in range(steps):
        for p in model.parameters():
            p.grad.zero_()
        if session is None:
            loss = loss_fn(model, batch)
            loss.backward()
        else:
            with session:
                loss = loss_fn(model, batch)
                loss.backward()
        results.append((loss.detach().clone(), [p.grad.clone() for p in model.parameters()], torch.get_rng_state(),
                        generator.get_state() if generator is not None else None,
                        session.stats() if session is not None else None))
    return results


def assert_same(eager, results):
    for index, (e, r) in enumerate(zip(eager, results)):
        assert torch.equal(r[0], e[0]), f"step {index}: loss {r[0].item()!r} != {e[0].item()!r}"
        for p, (g, eg) in enumerate(zip(r[1], e[1])):
            assert torch.equal(g, eg), f"step {index}: gradient of parameter {p} differs"
        assert torch.equal(r[2], e[2]), f"step {index}: the CPU RNG stream differs from eager's"
        if e[3] is not None:
            assert torch.equal(r[3], e[3]), f"step {index}: the explicit generator's stream differs from eager's"


def budget_for(build, fraction, generator=None):
    """`fraction` of the unplanned activation peak, or just above the floor where that is higher."""
    session = ho.OffloadSession()
    run(build, session, steps=1, generator=generator)
    peak = session.unplanned_peak_bytes()
    probe = ho.OffloadSession(ho.OffloadConfig(max_resident_activation_bytes=1, planner="recompute"))
    with pytest.warns(RuntimeWarning):
        run(build, probe, steps=1, generator=generator)
    return max(int(peak * fraction), int(probe.floor_bytes() * 1.15))


def replayed_random_recomputes(session):
    """Names of the ops marked rng_replay that the plan re-runs."""
    ops = session.trace()["ops"]
    return sorted({ops[a["source_op"]]["name"] for a in session.schedule()["actions"]
                   if a["kind"] == "recompute" and ops[a["source_op"]].get("rng_replay")})


def check_recomputes_bit_identically(build, fraction=0.4, generator=None, interception=None, wanted=None,
                                     or_skip=None):
    """Trains STEPS steps under planner="recompute" and asserts them bit-identical to eager.

    Which ops the plan re-runs depends on the op durations its warmup measured,
    so on a loaded machine (ctest -j2 beside the planner property tests) a plan
    at `fraction` of the peak may re-run other ops than the random ones. Then
    the same check runs again at a lower budget, down to just above the floor,
    until a plan re-runs an op that draws random numbers (and `wanted(session,
    replayed)` holds): every attempt must be bit-identical. When none does, the
    test fails, or with `or_skip` (a case whose measured times may rightly never
    favour the random ops) skips saying so.
    """
    eager = run(build, generator=generator)
    for attempt in (fraction, fraction / 2, 0.0):  # 0.0: 1.15x the floor (budget_for)
        session, replayed = _recompute_session(build, eager, attempt, generator, interception)
        if replayed and (wanted is None or wanted(session, replayed)):
            return session, replayed
    message = f"no plan re-ran the random ops looked for; the last re-ran {replayed}: {session.notes()}"
    if or_skip:
        pytest.skip(f"{or_skip} (every attempt bit-identical to eager): {message}")
    raise AssertionError(message)


def _recompute_session(build, eager, fraction, generator, interception):
    budget = budget_for(build, fraction, generator)
    # Each attempt's warmup measures its own op times (no op-time store): a retry should not inherit the times
    # that gave the last attempt a plan without the random ops.
    options = dict(max_resident_activation_bytes=budget, planner="recompute", op_times_store=False)
    if interception is not None:
        options["interception"] = interception
    session = ho.OffloadSession(ho.OffloadConfig(**options))
    results = run(build, session, generator=generator)
    assert_same(eager, results)
    kinds = [r[4]["kind"] for r in results]
    # Steps 2 and 3 replay. Under heavy load step 2 has been seen, twice in
    # about ten full runs and never alone, to leave its plan and warm up again;
    # the plan's note says why (exec/session.h), and the steps stay
    # bit-identical either way (assert_same above), which is what this file
    # tests. So: the first step warms up, the last replays, and at most one
    # step in between warms up.
    assert kinds[0] == "warmup" and kinds[-1] == "replay" and kinds.count("warmup") <= 2, (kinds, session.notes())
    assert session.trace()["version"] == 3
    last_warmup = max(step for step, kind in enumerate(kinds) if kind == "warmup")
    for step, r in enumerate(results[last_warmup + 1:], start=last_warmup + 1):
        stats = r[4]
        assert stats["recompute_count"] == session.plan_summary()["recompute_count"] > 0, f"step {step}"
        assert stats["peak_held_bytes"] <= budget, f"step {step}"
    return session, replayed_random_recomputes(session)


# ---- models with dropout ----------------------------------------------------------------


# The ViT's plans re-run its dropouts on a quiet machine, but its dropout ops' measured times swing by powers of two
# (0.03 to 0.25 ms in one warmup), and under load (ctest -j2) the times can make every plan at all three budgets
# prefer other re-runs: 2 of 3 full make-test runs on 2026-12-06, and 3 of 13 runs of this file alone, where nine
# budgets failed as well under load. That is the planner choosing by the times it measured, not a wrong result;
# the GPT decoder's plans re-run dropout every time, and the dropout chain and the transformers models below check
# RNG replay too.
SKIP_WITHOUT_DROPOUT_RERUNS = {"vit": "the ViT's measured op times gave no plan that re-runs dropout"}


@pytest.mark.parametrize("name", ["gpt_decoder", "vit"])
def test_dropout_in_small_models_is_recomputed_bit_identically(name):
    build = lambda: models.CASES[name].build(dropout=0.1)  # noqa: E731
    _, replayed = check_recomputes_bit_identically(build, wanted=lambda _, r: "hyperoffload::dropout_noise" in r,
                                                   or_skip=SKIP_WITHOUT_DROPOUT_RERUNS.get(name))
    assert "hyperoffload::dropout_noise" in replayed


@pytest.mark.parametrize("name", ["hf_gpt2", "hf_bert", "hf_vit"])
def test_dropout_in_transformers_models_in_training_mode_is_recomputed_bit_identically(name):
    hf_models = pytest.importorskip("hf_models")
    _, replayed = check_recomputes_bit_identically(hf_models.HF_CASES[name].build,
                                                   wanted=lambda _, r: any("dropout" in n for n in r))
    assert any("dropout" in n for n in replayed), replayed


# ---- hand-written random ops --------------------------------------------------------------


class HandWritten(nn.Module):
    """Per layer: rand_like noise and a functional bernoulli mask (recomputable with RNG replay) and,
    in the middle, a hand-written bernoulli_ mask (in place: not recomputable, but its draws stay in
    the stream); `generator`: all draw from it."""

    def __init__(self, width=64, layers=6, generator=None):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(width, width) for _ in range(layers))
        self.generator = generator

    def forward(self, x):
        g = self.generator
        for index, layer in enumerate(self.layers):
            x = torch.tanh(layer(x))
            x = x * (torch.rand(x.shape, generator=g) if g is not None else torch.rand_like(x))
            x = x * torch.bernoulli(torch.full_like(x, 0.9), generator=g)
            if index == len(self.layers) // 2:
                x = x * torch.empty_like(x).bernoulli_(0.8, generator=g)
        return x


def hand_written(generator=None):
    def build():
        torch.manual_seed(5)
        model = HandWritten(generator=generator)
        x = torch.randn(64, 64)
        return model, (x,), lambda model, batch: model(*batch).square().mean()
    return build


def test_hand_written_rand_like_and_bernoulli_are_recomputed_bit_identically():
    _, replayed = check_recomputes_bit_identically(hand_written(), fraction=0.3)
    assert replayed, replayed


def test_an_explicit_generator_is_replayed_and_its_stream_matches_eager():
    generator = torch.Generator().manual_seed(99)
    _, replayed = check_recomputes_bit_identically(hand_written(generator), fraction=0.3, generator=generator,
                                                   wanted=lambda _, r: "aten::rand.generator" in r)
    assert "aten::rand.generator" in replayed, replayed


def test_dropout_is_replayed_under_the_sessions_dispatch_mode_too():
    # interception="dispatch_mode": the recorded call is the OpOverload and its
    # Python arguments (PyCall); the CPU dropout decomposes into in-place ops
    # there, so the random ops replayed are the hand-written ones.
    _, replayed = check_recomputes_bit_identically(hand_written(), fraction=0.3, interception="dispatch_mode")
    assert replayed, replayed


def test_a_recompute_chain_runs_through_a_dropout():
    # Dropout between two linears: re-running the second linear's input needs
    # the dropout output, which needs the mask re-drawn: a chain of recomputes
    # of one phase through hyperoffload::dropout_noise. The layers widen to
    # 512 and back, so the noise of the wide ones is among the largest
    # storages: with all layers 64 wide, the op times measured on one machine
    # made every recompute plan keep the noise and re-run only what follows it.
    class Chain(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleList(nn.Linear(64 if i % 2 == 0 else 512, 512 if i % 2 == 0 else 64)
                                        for i in range(6))

        def forward(self, x):
            for layer in self.layers:
                x = nn.functional.dropout(torch.tanh(layer(x)), 0.2, training=True)
            return x

    def build():
        torch.manual_seed(6)
        return Chain(), (torch.randn(128, 64),), lambda model, batch: model(*batch).square().mean()

    def chained_through_dropout(session, replayed):
        """Re-runs that read what an earlier re-run of their phase regenerated, written by a dropout mask."""
        ops, count = session.trace()["ops"], 0
        writes = [{a["storage"] for a in op["accesses"] if a["kind"] == "write"} for op in ops]
        reads = [{a["storage"] for a in op["accesses"] if a["kind"] == "read"} for op in ops]
        phase, regenerated = None, set()
        for action in session.schedule()["actions"]:
            if (action["op"], action["phase"]) != phase:
                phase, regenerated = (action["op"], action["phase"]), set()
            if action["kind"] == "recompute":
                k = action["source_op"]
                if reads[k] & regenerated and any(ops[j]["name"] == "hyperoffload::dropout_noise"
                                                  for j in range(len(ops)) if writes[j] & reads[k]):
                    count += 1
                regenerated |= writes[k]
        return count

    session, replayed = check_recomputes_bit_identically(
        build, fraction=0.3,
        wanted=lambda session, r: "hyperoffload::dropout_noise" in r and chained_through_dropout(session, r) > 0)
    assert "hyperoffload::dropout_noise" in replayed
    assert chained_through_dropout(session, replayed) > 0, \
        "no recompute reads what an earlier one of its phase regenerated"


def test_eager_dropout_outside_a_session_is_pytorchs():
    # The AutogradCPU kernel hyperoffload registers for aten::dropout calls
    # PyTorch's own composite kernel outside a session's step.
    torch.manual_seed(7)
    x = torch.randn(32, 32)
    mine = nn.functional.dropout(x, 0.3, training=True)
    torch.manual_seed(7)
    x = torch.randn(32, 32)
    noise = torch.empty_like(x).bernoulli_(0.7).div_(0.7)
    assert torch.equal(mine, x * noise)
