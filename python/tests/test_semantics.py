"""What the session does with in-place ops, views, skip_offload regions, failures and divergence."""

from __future__ import annotations

import warnings

import pytest
import torch

import hyperoffload as ho


def accesses_of(trace: dict, name: str):
    """Per op of that name: its (storage, kind) accesses."""
    return [[(a["storage"], a["kind"]) for a in op["accesses"]] for op in trace["ops"] if op["name"] == name]


# ---- A small program with in-place ops and views -------------------------------------------


def make_weights(seed=5, width=64):
    generator = torch.Generator().manual_seed(seed)
    w1 = (torch.randn(width, width, generator=generator) / width**0.5).requires_grad_()
    w2 = (torch.randn(width, width, generator=generator) / width**0.5).requires_grad_()
    x = torch.randn(128, width, generator=generator)
    return w1, w2, x


def inplace_and_view_step(w1, w2, x, layers=6):
    """Activations modified in place (add_, relu_) and read through views (t, slicing)."""
    h = x
    kept = []
    for _ in range(layers):
        a = h @ w1
        a.add_(0.5)       # in place; nothing saved for backward is modified
        a.relu_()         # in place; saves its result
        t = a.t()         # a view (transpose)
        s = a[:, :16]     # a view (slicing)
        h = (t.t() @ w2).tanh() + s.mean(dim=1, keepdim=True)
        kept.append(s)
    loss = h.square().mean() + sum(k.mean() for k in kept)
    loss.backward()
    return loss.detach()


def run_program(session, steps=3, **kwargs):
    w1, w2, x = make_weights()
    results = []
    for _ in range(steps):
        w1.grad = w2.grad = None
        if session is None:
            loss = inplace_and_view_step(w1, w2, x, **kwargs)
        else:
            with session:
                loss = inplace_and_view_step(w1, w2, x, **kwargs)
        results.append((loss, w1.grad.clone(), w2.grad.clone()))
        with torch.no_grad():
            w1 -= 0.01 * w1.grad
            w2 -= 0.01 * w2.grad
    return results


def assert_same(expected, actual):
    for step, (e, a) in enumerate(zip(expected, actual)):
        for i, (et, at) in enumerate(zip(e, a)):
            assert torch.equal(et, at), f"step {step}, value {i}"


@pytest.fixture(scope="module")
def program_peak():
    session = ho.OffloadSession()
    run_program(session, steps=1)
    return session.unplanned_peak_bytes()


@pytest.mark.parametrize("planner", ["greedy", "peak"])
def test_in_place_ops_and_views_stay_correct_while_offloaded(program_peak, planner):
    eager = run_program(None)
    budget = program_peak // 2
    session = ho.OffloadSession(ho.OffloadConfig(max_resident_activation_bytes=budget, planner=planner))
    assert_same(eager, run_program(session))
    stats = session.stats()
    assert stats["kind"] == "replay"
    assert stats["offloaded_bytes"] > 0
    assert stats["peak_held_bytes"] <= budget


def test_in_place_ops_are_recorded_as_writes_and_views_share_their_storage():
    session = ho.OffloadSession()
    run_program(session, steps=1, layers=1)
    trace = session.trace()
    names = [op["name"] for op in trace["ops"]]
    # add_ and relu_ read and write the storage the matmul produced.
    (mm,) = [op for op in trace["ops"] if op["name"] == "aten::mm"][:1]
    produced = mm["accesses"][-1]
    assert produced["kind"] == "write"
    adds = accesses_of(trace, "aten::add_.Tensor")
    in_place = [(produced["storage"], "read"), (produced["storage"], "write")]
    assert adds[0] == in_place
    assert accesses_of(trace, "aten::relu_") == [in_place]
    # The backward sums the two gradients of `s` (read by h and by the loss)
    # and the two of `a` (through t and s) in place, as eager PyTorch does
    # (under a TorchDispatchMode it adds out of place): each add_ reads both and
    # writes the first.
    assert len(adds) == 3
    for accesses in adds[1:]:
        (first, _), (second, _), written = accesses
        assert first != second and written == (first, "write")
    # Views produce no storage: they only read the viewed one.
    assert "aten::t" in names and "aten::slice.Tensor" in names
    for name in ("aten::t", "aten::slice.Tensor", "aten::expand"):
        for accesses in accesses_of(trace, name):
            assert all(kind == "read" for _, kind in accesses), name
    assert accesses_of(trace, "aten::slice.Tensor")[0] == [(produced["storage"], "read")]


def test_parameters_and_inputs_are_left_alone():
    w1, w2, x = make_weights()
    session = ho.OffloadSession()
    with torch.no_grad(), session:
        y = (x @ w1).relu() @ w2
    trace = session.trace()
    # Two storages: the two matmul results (relu's too) — never w1, w2 or x.
    sizes = sorted(s["size_bytes"] for s in trace["storages"])
    assert sizes == [128 * 64 * 4] * 3
    assert [op["name"] for op in trace["ops"]] == ["aten::mm", "aten::relu", "aten::mm"]
    assert trace["ops"][0]["accesses"] == [{"storage": trace["ops"][0]["accesses"][0]["storage"], "kind": "write"}]
    # The result the user holds is retained; it keeps its data after the step.
    retained = [s for s in trace["storages"] if s["retained"]]
    assert len(retained) == 1
    assert torch.equal(y, (x @ w1).relu() @ w2)


def held_step(w1, x):
    """Four results made early and held past the step; a chain of temporaries after them."""
    held = [(x @ w1 + i).sin() for i in range(4)]
    h = x
    for _ in range(12):
        h = torch.tanh(h @ w1) + 1
    return held, h.sum()


def test_storages_are_identified_by_storage_not_by_address():
    w1, _, x = make_weights()
    w1 = w1.detach()
    session = ho.OffloadSession()
    addresses = []
    with session:
        for _ in range(4):
            y = x @ w1  # the previous result dies first: its address is free again
            addresses.append(y.data_ptr())
            del y
    if len(set(addresses)) == len(addresses):
        pytest.skip("PyTorch's allocator handed out no address twice")
    trace = session.trace()
    # Four results, four storages, although addresses repeat.
    assert [op["name"] for op in trace["ops"]] == ["aten::mm"] * 4
    assert len(trace["storages"]) == 4
    assert all(op["accesses"] == [{"storage": i, "kind": "write"}] for i, op in enumerate(trace["ops"]))


def test_an_op_that_gives_a_tracked_storage_new_memory_stops_tracking_it():
    w1, _, x = make_weights()
    w1 = w1.detach()
    x2 = torch.cat([x, x])

    def body():
        h = torch.tanh(x @ w1)
        others = [torch.sin(h + i) for i in range(6)]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # PyTorch deprecates resizing a non-empty out=
            torch.mm(x2, w1, out=h)  # resizes h: its storage gets new memory
        return h.clone(), sum(t.sum() for t in others)

    expected = body()
    session = ho.OffloadSession(ho.OffloadConfig(max_resident_activation_bytes=100_000))
    for _ in range(3):
        with session:
            result = body()
        assert torch.equal(result[0], expected[0]) and torch.equal(result[1], expected[1])
    stats = session.stats()
    assert stats["kind"] == "replay" and stats["offloaded_bytes"] > 0
    names = [op["name"] for op in session.trace()["ops"]]
    assert "aten::mm.out" in names


def test_tensors_held_after_the_step_keep_their_data():
    w1, _, x = make_weights()
    w1 = w1.detach()
    expected_held, expected_total = held_step(w1, x)
    probe = ho.OffloadSession(ho.OffloadConfig(max_resident_activation_bytes=1, rewarm_once=False))
    with pytest.raises(ho.BudgetError):
        with probe:
            probe_results = held_step(w1, x)  # held past the step, as below
    del probe_results
    session = ho.OffloadSession(ho.OffloadConfig(max_resident_activation_bytes=probe.floor_bytes()))
    for step in range(3):
        with session:
            held, total = held_step(w1, x)
        stats = session.stats()
        if step == 0:
            # The warmup evicted the oldest storages — the held ones — and
            # brought them back at the end of the step.
            assert stats["end_restores"] > 0
        # Retained: the four held results and the total.
        assert sum(s["retained"] for s in session.trace()["storages"]) == 5
        for e, h in zip(expected_held, held):
            assert torch.equal(e, h)
        assert torch.equal(total, expected_total)
        assert stats["peak_held_bytes"] <= probe.floor_bytes()


# ---- skip_offload ---------------------------------------------------------------------------


@ho.skip_offload
def dynamic_region(h, w, repeats):
    """Data-dependent op count: without skip_offload a replay would diverge."""
    for _ in range(repeats):
        h = torch.tanh(h @ w)
    return h


def region_step(w1, w2, x, repeats, region):
    h = (x @ w1).relu()
    h = region(h, w2, repeats)
    loss = (h @ w1).square().mean()
    loss.backward()
    return loss.detach()


def test_skip_offload_regions_are_one_op_forward_and_backward():
    def run(session, region):
        w1, w2, x = make_weights()
        out = []
        for step, repeats in enumerate([2, 3, 1]):
            w1.grad = w2.grad = None
            if session is None:
                loss = region_step(w1, w2, x, repeats, region)
            else:
                with session:
                    loss = region_step(w1, w2, x, repeats, region)
            out.append((loss, w1.grad.clone(), w2.grad.clone()))
        return out

    eager = run(None, dynamic_region.__wrapped__)
    session = ho.OffloadSession(ho.OffloadConfig(rewarm_once=False))
    assert_same(eager, run(session, dynamic_region))
    assert session.stats()["kind"] == "replay"
    names = [op["name"] for op in session.trace()["ops"]]
    qualname = f"{__name__}.dynamic_region"
    assert names.count(qualname) == 1
    assert names.count(qualname + ".backward") == 1
    assert "aten::tanh" not in names and "aten::tanh_backward" not in names
    # Its tensor arguments are its inputs and its result a new storage.
    region = session.trace()["ops"][names.index(qualname)]
    kinds = [a["kind"] for a in region["accesses"]]
    assert kinds.count("write") >= 2  # the result, and the argument it may have written
    # Outside a session step the function runs as is.
    w1, w2, x = make_weights()
    assert torch.equal(dynamic_region(x, w2, 2), torch.tanh(torch.tanh(x @ w2) @ w2))


def test_skip_offload_without_gradients_is_one_op():
    w1, w2, x = make_weights()
    session = ho.OffloadSession()
    with torch.no_grad(), session:
        h = (x @ w1).relu()
        out = dynamic_region(h, w2, 3)
    assert torch.equal(out, dynamic_region.__wrapped__((x @ w1).relu(), w2, 3))
    names = [op["name"] for op in session.trace()["ops"]]
    assert names == ["aten::mm", "aten::relu", f"{__name__}.dynamic_region"]


# ---- Failures -------------------------------------------------------------------------------


class Boom(Exception):
    pass


def failing_step(w1, w2, x, fail_at=None, held=None, first=torch.tanh):
    h = x
    for layer in range(8):
        if layer == fail_at:
            raise Boom(f"user code failed at layer {layer}")
        h = (first if layer == 0 else torch.tanh)(h @ (w1 if layer % 2 else w2))
        if held is not None:
            held.append(h)
    loss = h.square().mean()
    if loss.requires_grad:
        loss.backward()
    return loss.detach()


@pytest.fixture(scope="module")
def failing_step_peak():
    """Unplanned peak of failing_step with gradients: the saved activations of
    8 layers are alive at the loss, so half of it needs offloading."""
    w1, w2, x = make_weights()
    session = ho.OffloadSession()
    with session:
        failing_step(w1, w2, x)
    return session.unplanned_peak_bytes()


def fresh_step(session, w1, w2, x, **kwargs):
    """failing_step in `session` with the gradients reset first, so every step
    runs the same ops; returns the loss and both gradients."""
    w1.grad = w2.grad = None
    with session:
        loss = failing_step(w1, w2, x, **kwargs)
    return loss, w1.grad.clone(), w2.grad.clone()


def eager_step(w1, w2, x):
    w1.grad = w2.grad = None
    loss = failing_step(w1, w2, x)
    return loss, w1.grad.clone(), w2.grad.clone()


def assert_recovered_with_offloading(session, budget):
    """The last step was a replay that offloaded and brought data back, or dropped and recomputed it (the hybrid
    planner picks either, by the warmup's op times), within the budget."""
    stats = session.stats()
    assert stats["kind"] == "replay" and not stats["passthrough"]
    assert (stats["offloaded_bytes"] > 0 and stats["h2d_count"] > 0) or stats["recompute_count"] > 0
    assert stats["peak_held_bytes"] <= budget


def test_a_step_that_raises_midway_is_aborted_and_the_next_step_is_correct():
    w1, w2, x = make_weights()
    eager = []
    for _ in range(2):
        w1.grad = w2.grad = None
        eager.append((failing_step(w1, w2, x), w1.grad.clone(), w2.grad.clone()))

    probe = ho.OffloadSession(ho.OffloadConfig(max_resident_activation_bytes=1, rewarm_once=False))
    with pytest.raises(ho.BudgetError):
        with probe:
            failing_step(w1, w2, x)
    w1.grad = w2.grad = None
    budget = max(probe.floor_bytes(), probe.unplanned_peak_bytes() // 3)
    session = ho.OffloadSession(ho.OffloadConfig(max_resident_activation_bytes=budget))

    def step(fail_at=None, held=None):
        w1.grad = w2.grad = None
        with session:
            loss = failing_step(w1, w2, x, fail_at, held)
        return loss, w1.grad.clone(), w2.grad.clone()

    # A warmup that raises: the exception passes through, the next step warms up.
    held = []
    with pytest.raises(Boom, match="layer 6"):
        step(fail_at=6, held=held)
    assert session.next_step_kind == "warmup"
    # Activations made before the failure (some of them offloaded then) kept their data.
    h = x
    for layer, tensor in enumerate(held):
        h = torch.tanh(h @ (w1 if layer % 2 else w2))
        assert torch.equal(tensor, h.detach()), f"layer {layer}"
    assert_same(eager[:1], [step()])
    assert session.stats()["kind"] == "warmup"
    # A replay that raises, then a correct replay.
    with pytest.raises(Boom):
        step(fail_at=3)
    assert session.next_step_kind == "replay"
    assert_same(eager[:1], [step()])
    assert_recovered_with_offloading(session, budget)


def test_a_failing_op_aborts_the_step_and_the_session_recovers(failing_step_peak):
    w1, w2, x = make_weights()
    eager = eager_step(w1, w2, x)
    budget = failing_step_peak // 2
    session = ho.OffloadSession(ho.OffloadConfig(max_resident_activation_bytes=budget))
    assert_same([eager], [fresh_step(session, w1, w2, x)])
    assert session.stats()["kind"] == "warmup" and session.stats()["evictions"] > 0
    wrong = torch.ones(3, 3)
    w1.grad = w2.grad = None
    with pytest.raises(RuntimeError, match="size mismatch|shapes cannot be multiplied|must match"):
        with session:
            h = torch.tanh(x @ w2)  # the traced step's first two ops
            h @ wrong  # the traced step's third op, which raises here
    assert torch.equal(h, torch.tanh(x @ w2))
    assert session.next_step_kind == "replay"
    assert_same([eager], [fresh_step(session, w1, w2, x)])
    assert_recovered_with_offloading(session, budget)


def test_a_replay_that_ends_holding_a_tensor_the_warmup_freed_is_a_divergence(failing_step_peak):
    w1, w2, x = make_weights()
    eager = eager_step(w1, w2, x)
    budget = failing_step_peak // 2
    session = ho.OffloadSession(ho.OffloadConfig(max_resident_activation_bytes=budget))

    def dropped_step():
        w1.grad = w2.grad = None
        with session:
            failing_step(w1, w2, x)  # its result is dropped: freed before the end
        return w1.grad.clone(), w2.grad.clone()

    dropped_step()
    w1.grad = w2.grad = None
    with pytest.raises(ho.DivergenceError, match="ends holding 1 tensor"):
        with session:
            kept = failing_step(w1, w2, x)
    assert kept.shape == ()  # it has memory (fresh), though not the step's data
    assert_same([eager[1:]], [dropped_step()])
    assert_recovered_with_offloading(session, budget)


def test_a_step_of_another_program_warms_up_and_each_program_replays_its_plan(failing_step_peak):
    # It differs at op 1 (sigmoid, not tanh), before the replay acted: the step
    # continues as a warmup; afterwards each program replays its own plan
    # (docs/PYTHON.md, "Training loops"). Step 3 (tanh) starts on the most
    # recent plan (sigmoid) and switches at op 1; from step 4 on the session
    # has seen that sigmoid follows tanh and tanh sigmoid (exec/session.h, Note
    # [Next program]), so steps 4 and 5 start on their own plan: one switch.
    w1, w2, x = make_weights()
    eager = eager_step(w1, w2, x)
    budget = failing_step_peak // 2
    session = ho.OffloadSession(ho.OffloadConfig(max_resident_activation_bytes=budget, rewarm_once=False))
    kinds = []
    for first in (torch.tanh, torch.sigmoid, torch.tanh, torch.sigmoid, torch.tanh):
        result = fresh_step(session, w1, w2, x, first=first)
        kinds.append(session.stats()["kind"])
        assert session.stats()["peak_held_bytes"] <= budget
        if first is torch.tanh:
            assert_same([eager], [result])
    assert kinds == ["warmup", "warmup", "replay", "replay", "replay"]
    stats = session.stats()
    assert (stats["plans_cached"], stats["plan_hits"], stats["plan_misses"], stats["warmups"],
            stats["plan_switches"]) == (2, 3, 2, 2, 1)
    assert_recovered_with_offloading(session, budget)


def test_the_first_replay_may_diverge_once_then_the_session_warms_up_again(failing_step_peak):
    # PyTorch 1.13's zero_grad() keeps the .grad tensors: step 1 creates them,
    # later steps add into them — other ops than the warmup's.
    def run(session, steps=5):
        w1, w2, x = make_weights()
        results, kinds = [], []
        for _ in range(steps):
            if w1.grad is not None:
                w1.grad.zero_()
                w2.grad.zero_()
            if session is None:
                loss = failing_step(w1, w2, x)
            else:
                with session:
                    loss = failing_step(w1, w2, x)
                stats = session.stats()
                kinds.append("passthrough" if stats["passthrough"] else stats["kind"])
            results.append((loss, w1.grad.clone(), w2.grad.clone()))
        return results, kinds

    eager, _ = run(None)
    budget = failing_step_peak // 2
    session = ho.OffloadSession(ho.OffloadConfig(max_resident_activation_bytes=budget))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        results, kinds = run(session)
    assert_same(eager, results)
    # Step 2 adds into .grad where step 1 created it: it differs in backward,
    # after the replay offloaded, so it continues as a warmup from there
    # (docs/PYTHON.md, "Training loops"); no warning, no step without offloading.
    assert kinds == ["warmup", "warmup", "replay", "replay", "replay"]
    assert_recovered_with_offloading(session, budget)
    assert not [w for w in caught if issubclass(w.category, RuntimeWarning)]
    stats = session.stats()
    assert (stats["plans_cached"], stats["plan_hits"], stats["plan_misses"], stats["warmups"]) == (2, 3, 2, 2)
    # Another program is one more plan, not an error.
    w1, _, x = make_weights()
    with session:
        torch.sigmoid(x @ w1)
    assert session.stats()["kind"] == "warmup" and session.stats()["plans_cached"] == 3


def test_a_budget_below_the_floor_reports_both():
    w1, w2, x = make_weights()
    w1, w2 = w1.detach(), w2.detach()
    # By default the first warmup only warns (a first step may hold more than
    # the later ones) and warms up again; the second one raises.
    session = ho.OffloadSession(ho.OffloadConfig(max_resident_activation_bytes=1000))
    with pytest.warns(RuntimeWarning, match="below the unavoidable floor .* the next step warms up again"):
        with session:
            failing_step(w1, w2, x)
    with pytest.raises(ho.BudgetError, match="below the unavoidable floor"):
        with session:
            failing_step(w1, w2, x)
    for planner in ("greedy", "peak"):
        config = ho.OffloadConfig(max_resident_activation_bytes=1000, planner=planner,
                                  rewarm_once=False)
        session = ho.OffloadSession(config)
        with pytest.raises(ho.BudgetError) as raised:
            with session:
                failing_step(w1, w2, x)
        message = str(raised.value)
        floor = session.floor_bytes()
        assert floor is not None and floor > 1000
        assert "the budget of 1000 B (1000 bytes) is below the unavoidable floor" in message
        assert f"({floor} bytes, reached at op" in message
        assert session.next_step_kind == "warmup"
        assert session.trace() is not None and session.schedule() is None


def test_a_session_is_bound_to_one_device():
    with pytest.raises(ho.DeviceMismatchError, match="CPU or CUDA tensors; the session would be bound to meta"):
        ho.OffloadSession(ho.OffloadConfig(device="meta"))
    session = ho.OffloadSession()
    w1, _, x = make_weights()
    with session:
        x @ w1
    assert session.device == torch.device("cpu")
    # Meta tensors have no memory: left alone (the ops are traced all the same).
    session = ho.OffloadSession()
    for _ in range(2):
        with session:
            y = x @ w1
            meta = torch.empty(4, 4, device="meta") + 1
    assert session.stats()["kind"] == "replay"
    assert meta.device.type == "meta" and torch.equal(y, x @ w1)
    assert len(session.trace()["storages"]) == 1


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_cpu_session_rejects_gpu_tensors():
    session = ho.OffloadSession(ho.OffloadConfig(device="cpu"))
    with pytest.raises(ho.DeviceMismatchError, match="offloads cpu tensors.*produced a tensor on cuda"):
        with session:
            torch.ones(4, device="cuda") * 2


# ---- Configuration and the session object ----------------------------------------------------


def test_configuration_errors_are_value_errors():
    with pytest.raises(ValueError, match="not both"):
        ho.OffloadConfig(max_resident_activation_mib=1, max_resident_activation_bytes=1)
    with pytest.raises(ValueError, match=">= 0"):
        ho.OffloadConfig(max_resident_activation_mib=-1)
    with pytest.raises(ValueError, match="copy_engines"):
        ho.OffloadConfig(copy_engines=3)
    with pytest.raises(ValueError, match="interception must be one of 'auto', 'dispatch_mode', got 'python'"):
        ho.OffloadConfig(interception="python")
    with pytest.raises(ValueError, match='unknown planner "clairvoyant"'):
        ho.OffloadSession(ho.OffloadConfig(planner="clairvoyant"))
    config = ho.OffloadConfig(max_resident_activation_mib=1.5, max_offload_activation_mib=2)
    assert config.budget_bytes == 3 << 19
    assert config.host_capacity_bytes == 2 << 20


def test_steps_do_not_nest_and_an_empty_step_is_fine():
    session = ho.OffloadSession()
    with session:
        pass
    assert session.stats()["kind"] is None
    assert session.trace() is None and session.schedule() is None
    with pytest.raises(ho.HyperoffloadError, match="do not nest"):
        with session:
            with session:
                pass
    w1, _, x = make_weights()
    with session:
        y = x @ w1
    assert torch.equal(y, x @ w1)
    assert session.stats()["kind"] == "warmup"


def test_ops_before_the_first_tracked_output_are_traced_in_order_with_the_step():
    # The device is that of the first storage a step produces; the ops run
    # before it (here two views of the batch, whose outputs share the batch's
    # storage) are held in the binding's step log and re-fed to the runtime
    # once it exists. So the first session's trace starts with them, each an
    # op with no accesses, followed by the mul that produced the first tracked
    # storage: view, t, mul, in that order, as eager ran them.
    x = torch.randn(8, 4)
    session = ho.OffloadSession(ho.OffloadConfig())
    with session:
        y = x.view(32).view(4, 8).t()
        z = y * 2
    ops = session.trace()["ops"]
    assert [op["name"] for op in ops[:4]] == ["aten::view", "aten::view", "aten::t", "aten::mul.Tensor"]
    assert [op["accesses"] for op in ops[:3]] == [[], [], []]
    assert torch.equal(z, x.view(32).view(4, 8).t() * 2)
