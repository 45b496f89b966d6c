"""OffloadSession and skip_offload: PyTorch ops into hyperoffload's runtime.

A session intercepts every op of a step in C++: a boxed dispatcher fallback on
the dispatch key just below PyTorch's Python key, enabled for the step's thread
(python/src/interception.h, Note [Op interception]). Where that is not
available (PyTorch before 2.13, or while another session's step holds it) a
``TorchDispatchMode`` intercepts instead, at the Python key. Either way each op
goes to the C++ runtime (``hyperoffload._C``), which finds its storages, keeps
track of the ones produced inside the step and moves their bytes: the first
step is the warmup (trace + online eviction), every later step replays the plan
made from it. See docs/PYTHON.md.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import json
import logging
import os
import types
import warnings
import weakref
from typing import Callable, Iterator, Optional

import torch
from torch.utils._pytree import tree_flatten, tree_unflatten

from . import _C, _compile_check
from ._compat import TorchDispatchMode, current_dispatch_mode, suspended_mode
from .config import OffloadConfig
from .errors import HyperoffloadError

_LOG = logging.getLogger("hyperoffload")

# Sessions not yet closed. At interpreter exit they are closed while Python is
# still whole: the runtime's copy threads are joined, its recorded calls and
# tensors dropped on the main thread with the GIL. Left to finalization, a
# session still alive could be torn down from another thread (a collective's
# worker holding the last reference) that must take the GIL while the
# interpreter is being finalized, which aborts the process
# ("terminate called without an active exception"; docs/PYTHON.md,
# "Multi-process training").
_LIVE_SESSIONS: "weakref.WeakSet[OffloadSession]" = weakref.WeakSet()


@atexit.register
def _close_live_sessions() -> None:
    for session in list(_LIVE_SESSIONS):
        try:
            if session.in_step:  # exiting from inside a step: stop intercepting, keep every tensor's data
                session._rt.detach()
                session._rt.abort_step()
                session._in_step = False
            session.close()
        except Exception:  # noqa: BLE001 - exiting: nothing left to report to
            pass


def _size(n: Optional[int]) -> str:
    """Bytes in binary units, as the CLI prints them (1.50 MiB)."""
    if n is None:
        return "none"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{int(value)} B" if unit == "B" else f"{value:.2f} {unit}"
        value /= 1024
    return f"{n} B"  # unreachable


def _step_part(stats: dict) -> str:
    """The last step's measured peaks: held (device memory in time) and resident."""
    if stats.get("kind") is None or stats.get("passthrough"):
        return ""
    return (f"; last step ({stats['kind']}): held peak {_size(stats['peak_held_bytes'])}, "
            f"resident peak {_size(stats['peak_resident_bytes'])}, "
            f"{stats['memory_wait_ms']:.3f} ms waiting for memory")


def _plans_part(stats: dict) -> str:
    """The plan cache so far: plans cached, hits, misses, warmups."""
    if "plans_cached" not in stats or stats.get("kind") is None:
        return ""
    return (f"; plans: {stats['plans_cached']} cached, {stats['plan_hits']} hits, {stats['plan_misses']} misses, "
            f"{stats['warmups']} warmups")


def _summary_line(plan: Optional[dict], stats: dict) -> str:
    fingerprint = stats.get("plan_fingerprint")
    return _plan_and_step_line(plan, stats) + _plans_part(stats) + (f"; plan {fingerprint}" if fingerprint else "")


def _plan_and_step_line(plan: Optional[dict], stats: dict) -> str:
    if plan is None:
        if stats.get("kind") is None:
            return "hyperoffload: no step traced yet; the next step is the warmup"
        return "hyperoffload: no plan (the last warmup did not end in one); the next step warms up again"
    budget = plan["budget_bytes"]
    head = f"hyperoffload: planned {plan['ops']} ops with {plan['planner']}"
    if budget is None:
        return (f"{head}: no budget, nothing offloaded; activation peak {_size(plan['unplanned_peak_bytes'])}"
                + _step_part(stats))
    return (f"{head}: budget {_size(budget)}, floor {_size(plan['floor_bytes'])}, "
            f"peak {_size(plan['unplanned_peak_bytes'])} -> {_size(plan['planned_peak_bytes'])}; "
            f"offloads {_size(plan['offloaded_bytes'])} "
            f"({plan['offload_count']} {'copy' if plan['offload_count'] == 1 else 'copies'}), "
            f"recomputes {_size(plan['recomputed_bytes'])}; simulated overhead {plan['overhead_percent']:.1f}% "
            f"({plan['stall_ms']:.3f} ms stall on {plan['compute_ms']:.3f} ms of compute)" + _step_part(stats))

def _compute_stream(device: str) -> int:
    """The CUDA stream PyTorch runs `device`'s kernels on (the runtime's compute stream)."""
    return int(torch.cuda.current_stream(torch.device(device)).cuda_stream)


class _StepMode(TorchDispatchMode):
    """Reports every op of one step to the runtime, where the C++ fallback cannot.

    ``__torch_dispatch__`` is the runtime's own C++ ``dispatch`` bound to the
    instance as a method: PyTorch looks the attribute up on the mode object
    (and accepts only a plain method, not a classmethod), so each op goes
    from the dispatcher straight into C++ (``Runtime.dispatch`` reports the op,
    runs it and reports its results) with no Python frame of ours.
    """

    def __init__(self, session: "OffloadSession") -> None:
        super().__init__()
        self.session = session
        self._rt = session._rt
        self.__torch_dispatch__ = types.MethodType(session._rt.dispatch, self)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # replaced per instance in __init__
        return self._rt.dispatch(self, func, types, args, kwargs)


class _ClosedRuntime:
    """Stands in for the runtime of a closed session: any use raises a clear error."""

    def __getattr__(self, name: str):
        raise HyperoffloadError(
            "this OffloadSession is closed (close() freed its pinned host memory and device buffers); "
            "create a new OffloadSession to train further")


class OffloadSession:
    """Offloads the activations of a training step, step after step.

    ::

        session = hyperoffload.OffloadSession(
            hyperoffload.OffloadConfig(max_resident_activation_mib=512, planner="peak"))
        for batch in loader:
            with session:          # step 1: warmup; later steps: replay the plan
                loss = model(batch).sum()
                loss.backward()
            optimizer.step()

    Every ``with`` block is one step. Activations are the storages the step's ops
    produce; parameters, inputs and anything made outside the step are left
    alone. An exception inside the step aborts it (every tensor keeps its data)
    and is re-raised; the next step is of the same kind.
    """

    def __init__(self, config: Optional[OffloadConfig] = None) -> None:
        self.config = config if config is not None else OffloadConfig()
        self._rt = _C.Runtime(self.config.session_options(), compute_stream=_compute_stream)
        self._in_step = False
        # The step's TorchDispatchMode; None while the C++ fallback intercepts (or between steps).
        self._mode: Optional[_StepMode] = None
        # Ends the step's torch.compile scope (_compile_check: compiled callables run eagerly in a step).
        self._end_compile_scope: Optional[Callable[[], None]] = None
        _LIVE_SESSIONS.add(self)

    # ---- The whole run ----------------------------------------------------------------

    def close(self) -> None:
        """Frees what the session holds across steps: its pinned host pool, its device buffers.

        Call it after the last step (or use ``with session.run():``). Closing
        twice is fine; using the session afterwards raises HyperoffloadError.
        Inside a step it raises: end the step first.
        """
        if isinstance(self._rt, _ClosedRuntime):
            return
        if self._in_step:
            raise HyperoffloadError("close() inside a step: end the step (leave its `with session:` block) first")
        runtime, self._rt = self._rt, _ClosedRuntime()
        _LIVE_SESSIONS.discard(self)
        del runtime  # the C++ session and its pinned pool go with the last reference

    @property
    def closed(self) -> bool:
        return isinstance(self._rt, _ClosedRuntime)

    @contextlib.contextmanager
    def run(self) -> Iterator["OffloadSession"]:
        """The whole training run as a context: closes the session at its end, however it ends.

        ::

            with hyperoffload.OffloadSession(config).run() as session:
                for batch in loader:
                    with session:      # one step
                        ...
        """
        try:
            yield self
        finally:
            if not self._in_step:
                self.close()

    # ---- Steps -------------------------------------------------------------------

    def __enter__(self) -> "OffloadSession":
        if self._in_step:
            raise HyperoffloadError("a step of this session is already running (steps do not nest)")
        end_compile_scope = _compile_check.check_step_start()  # raises inside compiled code
        try:
            self._rt.begin_step()
        except BaseException:
            end_compile_scope()
            raise
        if self.config.interception == "dispatch_mode" or not self._rt.attach():
            mode = _StepMode(self)
            try:
                mode.__enter__()
            except BaseException:
                self._rt.abort_step()
                end_compile_scope()
                raise
            self._mode = mode
        self._in_step = True
        self._end_compile_scope = end_compile_scope
        return self

    def __exit__(self, exc_type, exc, traceback) -> bool:
        mode, self._mode = self._mode, None
        self._in_step = False
        if mode is not None:
            mode.__exit__(None, None, None)
        self._rt.detach()
        try:
            if exc_type is not None:
                self._rt.abort_step()
            else:
                self._rt.end_step()
                if _LOG.isEnabledFor(logging.INFO) and self._rt.stats()["kind"] == "warmup":
                    _LOG.info("%s", self.summary())
        finally:
            end_compile_scope, self._end_compile_scope = self._end_compile_scope, None
            if end_compile_scope is not None:
                end_compile_scope()
            for message in self._rt.take_warnings():
                warnings.warn(message, RuntimeWarning, stacklevel=2)
        return False

    @property
    def in_step(self) -> bool:
        return self._in_step

    @property
    def interception(self) -> Optional[str]:
        """How the running step's ops reach the session: ``"dispatcher_fallback"`` (C++),
        ``"dispatch_mode"`` (the session's TorchDispatchMode), or None between steps."""
        if not self._in_step:
            return None
        return "dispatcher_fallback" if self._rt.intercepting else "dispatch_mode"

    # ---- What the session recorded and measured ---------------------------------------

    def trace(self) -> Optional[dict]:
        """The warmup step's trace as a ``hyperoffload.trace`` document, or None before one."""
        text = self._rt.trace_json()
        return None if text is None else json.loads(text)

    def schedule(self) -> Optional[dict]:
        """The plan being replayed as a ``hyperoffload.schedule`` document, or None before one."""
        text = self._rt.schedule_json()
        return None if text is None else json.loads(text)

    def save_trace(self, path: "os.PathLike[str] | str", meta: Optional[dict] = None) -> None:
        """Writes the trace file (atomically) for ``hyperoffload plan/validate/compare``.

        ``meta``: an optional JSON-serialisable object stored under ``"meta"``
        (readers ignore unknown keys).
        """
        text = self._rt.trace_json()
        if text is None:
            raise HyperoffloadError("no trace yet: the session has not completed a warmup step")
        if meta is not None:
            document = json.loads(text)
            document["meta"] = meta
            text = json.dumps(document, indent=1)
        _C.write_file_atomically(os.fspath(path), text)

    def save_schedule(self, path: "os.PathLike[str] | str") -> None:
        """Writes the replayed schedule (atomically), for ``hyperoffload validate``."""
        text = self._rt.schedule_json()
        if text is None:
            raise HyperoffloadError("no schedule yet: the session has not planned a warmup step")
        _C.write_file_atomically(os.fspath(path), text)

    def stats(self) -> dict:
        """Measurements of the last completed step.

        Keys: ``kind`` ("warmup", "replay", or None before any step ran with
        tracked tensors), ``peak_held_bytes`` (peak of the device memory the
        step held for activations in time — resident ones, buffers still read
        by a copy to host, outputs reserved before their op runs: what an
        out-of-memory depends on, and what stays within the budget),
        ``peak_resident_bytes`` (peak of resident activation bytes: a buffer
        counts until its release, not until its copy has read it),
        ``memory_wait_ms`` (time the step's thread waited for copies to finish
        so their memory could be reused), ``over_budget_allocations``
        (allocations that went over the budget with no copy left to wait for:
        memory the plan does not know of; a note says so),
        ``offloaded_bytes`` (= ``d2h_bytes``),
        ``faults``, ``fault_bytes``, ``d2h_count``, ``h2d_count``, ``h2d_bytes``,
        ``peak_host_bytes``, ``resident_at_end_bytes``, ``evictions`` (warmup),
        ``end_restores``, ``ops``, ``step_ms``, ``budget_bytes``, ``device``,
        ``steps`` (completed steps) and ``passthrough`` (the last step finished
        without offloading after a divergence or a failed op); and the plan
        cache so far (docs/PYTHON.md, "Training loops"): ``plans_cached``,
        ``plan_hits`` (steps that ended as a replay of a cached plan),
        ``plan_misses`` (steps no cached plan served: each warmup, each replay
        that diverged after it had offloaded), ``warmups``, ``plan_switches``
        (replays that switched to another cached plan mid-step, also hits) and
        ``plan_evictions``; ``plan_fingerprint``: 16 hex digits naming the plan
        now in use (None before one), the same in every run for the same plan
        (OffloadConfig(op_times=...)).
        """
        return self._rt.stats()

    def plan_summary(self) -> Optional[dict]:
        """What the last warmup decided, or None before a plan.

        Keys: ``planner``, ``ops``, ``storages``, ``budget_bytes``,
        ``floor_bytes``, ``unplanned_peak_bytes``, ``planned_peak_bytes`` (the
        plan's op-granular peak), ``offloaded_bytes`` and ``offload_count`` (the
        plan's copies to host per step), ``recomputed_bytes``, and the plan's
        simulated cost on the warmup's measured op times and copy bandwidths:
        ``compute_ms``, ``stall_ms``, ``overhead_percent``; ``notes``.
        """
        return self._rt.plan_summary()

    def summary(self) -> str:
        """One line: budget, floor, peak before and after, bytes offloaded and
        recomputed, the plan's simulated overhead, the last step's measured
        held and resident peaks and memory wait, and the plan cache (plans
        cached, hits, misses, warmups).

        The session logs the same line at INFO level on the ``hyperoffload``
        logger after every warmup step
        (``logging.basicConfig(level=logging.INFO)`` shows it).
        """
        return _summary_line(self._rt.plan_summary(), self._rt.stats())

    def last_timeline(self) -> Optional[dict]:
        """The last replayed step's timeline, with ``OffloadConfig(record_timeline=True)``; else None.

        Keys: ``spans`` (dicts with ``kind`` — "op", "stall", "fault",
        "copy_d2h", "copy_h2d", "recompute" — ``lane`` ("compute", "copy0",
        "copy1"), ``op`` (the traced op index), ``storage`` (traced id, -1 for
        none), ``bytes``, ``start_ms``, ``end_ms``, milliseconds from the
        step's start), ``memory`` ((ms, held device bytes) at every change) and
        ``budget_bytes``: the simulator's timeline schema (docs/SIMULATOR.md).
        """
        return self._rt.last_timeline()

    def unplanned_peak_bytes(self) -> Optional[int]:
        """Peak activation bytes of the traced step with nothing offloaded, or None before a trace."""
        return self._rt.unplanned_peak_bytes()

    def floor_bytes(self) -> Optional[int]:
        """The lowest peak any schedule reaches on the trace (computed when there is a budget)."""
        return self._rt.floor_bytes()

    def notes(self) -> list:
        """Remarks of the warmup (bandwidth calibration) and the planner."""
        return list(self._rt.notes())

    @property
    def device(self) -> Optional[torch.device]:
        """The device the session is bound to, or None before the first tracked tensor."""
        name = self._rt.device()
        return None if name is None else torch.device(name)

    @property
    def next_step_kind(self) -> str:
        """``"warmup"`` or ``"replay"``."""
        return self._rt.next_step_kind()


# ---- skip_offload ---------------------------------------------------------------------


def _tensors(tree) -> tuple:
    leaves, _ = tree_flatten(tree)
    return tuple(leaf for leaf in leaves if isinstance(leaf, torch.Tensor))


def _active_runtime() -> "Optional[_C.Runtime]":
    """The runtime that sees this thread's ops first, if its step is tracking.

    A session's TorchDispatchMode on top of the mode stack sees them before the
    C++ fallback (below every mode); under another mode, only the fallback's
    session counts (a mode's session then sees the region's inner ops).
    """
    mode = current_dispatch_mode()
    rt = mode._rt if isinstance(mode, _StepMode) else _C.intercepting_runtime()
    return rt if rt is not None and rt.tracking else None


@contextlib.contextmanager
def _suspended(rt: "_C.Runtime"):
    """Runs the block without `rt`'s interception (on this thread): ops go past the session."""
    if not rt.intercepting:
        with suspended_mode():
            yield
        return
    excluded = _C.exclude_interception(True)
    try:
        yield
    finally:
        _C.exclude_interception(excluded)


class _OpaqueCall:
    """One call of a skip_offload function whose backward is opaque too."""

    def __init__(self, fn, rt, forward_info, backward_info, flat, spec, tensor_positions):
        self.fn = fn
        self.rt = rt
        self.forward_info = forward_info
        self.backward_info = backward_info
        self.flat = flat
        self.spec = spec
        self.tensor_positions = tensor_positions
        self.inner_inputs: tuple = ()
        self.inner_outputs: tuple = ()
        self.out_flat: list = []
        self.out_spec = None
        self.out_positions: list = []


class _Opaque(torch.autograd.Function):
    """Runs a region as one op forward and one op backward (a nested backward)."""

    @staticmethod
    def forward(ctx, call: _OpaqueCall, *tensors):
        call.rt.begin(call.forward_info, tensors, None)
        try:
            with _suspended(call.rt), torch.enable_grad():
                inner = tuple(t.detach().requires_grad_(t.requires_grad) for t in tensors)
                flat = list(call.flat)
                for position, tensor in zip(call.tensor_positions, inner):
                    flat[position] = tensor
                args, kwargs = tree_unflatten(flat, call.spec)
                out = call.fn(*args, **kwargs)
                out_flat, call.out_spec = tree_flatten(out)
                call.out_positions = [i for i, leaf in enumerate(out_flat) if isinstance(leaf, torch.Tensor)]
                call.inner_outputs = tuple(out_flat[i] for i in call.out_positions)
                results = tuple(t.detach() for t in call.inner_outputs)
                call.out_flat = out_flat
        except BaseException:
            call.rt.op_failed()
            raise
        call.inner_inputs = inner
        call.rt.end(results)
        ctx.call = call
        return results

    @staticmethod
    def backward(ctx, *grads):
        call: _OpaqueCall = ctx.call
        ctx.call = None
        report = _active_runtime() is call.rt
        if report:
            reads = tuple(g for g in grads if g is not None) + call.inner_inputs + call.inner_outputs
            call.rt.begin(call.backward_info, reads, None)
        try:
            with (_suspended(call.rt) if report else contextlib.nullcontext()):
                pairs = [(o, g) for o, g in zip(call.inner_outputs, grads) if o.requires_grad and g is not None]
                if pairs:
                    torch.autograd.backward([o for o, _ in pairs], [g for _, g in pairs])
                input_grads = tuple(t.grad if t.requires_grad else None for t in call.inner_inputs)
        except BaseException:
            if report:
                call.rt.op_failed()
            raise
        finally:
            call.inner_inputs = call.inner_outputs = ()
        if report:
            call.rt.end(tuple(g for g in input_grads if g is not None))
        return (None,) + input_grads


def skip_offload(fn: Optional[Callable] = None, *, name: Optional[str] = None):
    """Runs a function as one opaque op of the step.

    Inside a session step its inner ops are neither traced nor offloaded; the
    session sees one op (named ``name`` or the function's qualified name) whose
    inputs are the function's tensor arguments and whose outputs are its tensor
    results. Use it for dynamic regions — code whose ops differ from step to
    step — so replays still match the warmup. When gradients flow through a
    tensor argument, the backward of the region is one opaque op too
    (``<name>.backward``). Activations the region uses must be passed as
    arguments (it may read them only while they are on the device). Outside a
    session step the function runs as is.

    Usable as ``@skip_offload`` or ``@skip_offload(name="router")``.
    """

    def decorate(function: Callable) -> Callable:
        op_name = name or f"{function.__module__}.{function.__qualname__}"
        # The region may write its arguments in place; its backward only reads
        # what it saved and produces gradients.
        forward_info = _C.OpInfo(op_name, [], True)
        backward_info = _C.OpInfo(op_name + ".backward", [], False)

        @functools.wraps(function)
        def wrapper(*args, **kwargs):
            rt = _active_runtime()
            if rt is None:
                return function(*args, **kwargs)
            flat, spec = tree_flatten((args, kwargs))
            positions = [i for i, leaf in enumerate(flat) if isinstance(leaf, torch.Tensor)]
            tensors = tuple(flat[i] for i in positions)
            if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
                call = _OpaqueCall(function, rt, forward_info, backward_info, flat, spec, positions)
                results = _Opaque.apply(call, *tensors)
                out_flat = list(call.out_flat)
                for position, tensor in zip(call.out_positions, results):
                    out_flat[position] = tensor
                return tree_unflatten(out_flat, call.out_spec)
            rt.begin(forward_info, tensors, None)
            try:
                with _suspended(rt):
                    out = function(*args, **kwargs)
            except BaseException:
                rt.op_failed()
                raise
            rt.end(_tensors(out))
            return out

        return wrapper

    return decorate(fn) if fn is not None else decorate
