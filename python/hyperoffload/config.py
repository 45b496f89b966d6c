"""OffloadConfig: what an OffloadSession offloads, with which planner, within which budget."""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import platform
import warnings
from typing import Optional, Union

import torch

from . import _C

MIB = 1 << 20  # MiB: 2**20 bytes; MB is 10**6 bytes, as in the CLI's --budget 512MB
INTERCEPTIONS = ("auto", "dispatch_mode")
_DEFAULTS = _C.defaults()
# Byte counts are 64-bit signed integers in the runtime.
MAX_BYTES = (1 << 63) - 1


def _byte_count(value, name: str) -> int:
    """An int in [0, MAX_BYTES]: TypeError naming `name` for another type, ValueError out of range.

    Used for the fields whose names are Python's own (``max_*_bytes``); the
    runtime's fields are checked in C++ (``_C.SessionOptions.validate``).
    """
    _int64(value, name)
    if value < 0:
        raise ValueError(f"{name} must be >= 0, got {value}")
    return value


def _int64(value, name: str) -> int:
    """An int a C++ int64 holds: TypeError naming `name` for another type, ValueError beyond 2**63 - 1.

    What only Python can check before a value reaches C++; the values
    themselves are checked there.
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value > MAX_BYTES:
        raise ValueError(f"{name} must be at most 2**63 - 1, got {value}")
    if value < -MAX_BYTES - 1:
        raise ValueError(f"{name} must be at least -2**63, got {value}")
    return value


def _bytes_from(mib: Optional[float], exact: Optional[int], what: str, mib_name: str = "mib") -> Optional[int]:
    """Bytes from `what`_mib (or its deprecated name `what`_mb, `mib_name`) or `what`_bytes."""
    if mib is not None and exact is not None:
        raise ValueError(f"give {what} in MiB or in bytes, not both")
    if exact is not None:
        return _byte_count(exact, f"{what}_bytes")
    if mib is not None:
        name = f"{what}_{mib_name}"
        if isinstance(mib, bool) or not isinstance(mib, (int, float)) or not math.isfinite(mib):
            raise ValueError(f"{name} must be a finite number, got {mib!r}")
        if mib < 0:
            raise ValueError(f"{name} must be >= 0, got {mib}")
        # Compared before converting: 1e303 MiB is a finite float whose bytes are not.
        if mib * MIB > MAX_BYTES:
            raise ValueError(f"{name} must be at most 2**63 - 1 bytes ({MAX_BYTES / MIB:.6g} MiB), got {mib}")
        return int(mib * MIB)  # rounded down: the budget is a limit
    return None


def _mib_or_deprecated_mb(mib: Optional[float], mb: Optional[float], what: str) -> tuple:
    """The MiB value and the name it was given under (the `_mb` spelling is deprecated)."""
    if mb is None:
        return mib, "mib"
    if mib is not None:
        raise ValueError(f"give {what}_mib, not also its old name {what}_mb")
    return mb, "mb"


def default_op_times_store() -> str:
    """Where OffloadConfig(op_times_store=True) keeps recorded op times.

    ``$HYPEROFFLOAD_CACHE_DIR/op_times``; without that variable,
    ``$XDG_CACHE_HOME/hyperoffload/op_times``, and without that,
    ``~/.cache/hyperoffload/op_times``.
    """
    cache = os.environ.get("HYPEROFFLOAD_CACHE_DIR")
    if not cache:
        xdg = os.environ.get("XDG_CACHE_HOME")
        cache = os.path.join(xdg if xdg else os.path.join(os.path.expanduser("~"), ".cache"), "hyperoffload")
    return os.path.join(cache, "op_times")


@functools.lru_cache(maxsize=None)
def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown cpu"


def _machine(device: Optional[str]) -> str:
    """What a warmup's op times are measured on: they are kept per machine (exec/op_time_store.h).

    The PyTorch version, the CPU and its thread count, and the CUDA device
    when the session's device is CUDA (or not yet known while CUDA is
    initialized: the current device; naming it would initialize CUDA
    otherwise). The runtime adds the backend it binds (host or cuda).
    """
    parts = [f"torch {torch.__version__}", f"{platform.machine()} {_cpu_model()}",
             f"{torch.get_num_threads()} thread(s)"]
    kind = torch.device(device).type if device is not None else None
    if kind == "cuda" or (kind is None and torch.cuda.is_initialized()):
        index = torch.device(device).index if device is not None else None
        index = torch.cuda.current_device() if index is None else index
        major, minor = torch.cuda.get_device_capability(index)
        parts.append(f"{torch.cuda.get_device_name(index)} (sm {major}.{minor})")
    return "; ".join(parts)


@dataclasses.dataclass(frozen=True)
class OffloadConfig:
    """Configuration of an :class:`~hyperoffload.OffloadSession`.

    Sizes are in MiB (2**20 bytes; fractions allowed) or, exactly, with the
    ``*_bytes`` alternatives.

    Attributes:
        max_resident_activation_mib: limit on the bytes of activations (storages
            produced inside a step) resident on the device at any time. ``None``:
            no limit — the session traces and replays but offloads nothing.
        max_offload_activation_mib: limit on the pinned host memory holding
            offloaded activations. ``None``: no limit.
        planner: ``"hybrid"`` (the default: offloads and recomputes, whichever
            costs the step less; never slower in simulation than ``"peak"``,
            whose plans are in its search space), ``"peak"`` (offload only,
            lowest stall), ``"recompute"`` (recompute only, activation
            checkpointing's stand-in) or ``"greedy"`` (any planner
            ``hyperoffload plan`` knows). Whatever the planner, a plan that
            would exceed the budget although the floor allows it is replaced by
            the ``"peak"`` planner's (a note in :meth:`OffloadSession.notes`
            says so). Recomputed ops are re-run bit for bit; ops that draw
            random numbers (dropout's mask, ``rand_like``, ``bernoulli``) are
            re-run with their generator's state as they first ran, so the RNG
            stream stays eager's (docs/PYTHON.md, "Recompute").
        copy_engines: 2 — device-to-host and host-to-device copies run on their
            own streams; 1 — one shared copy stream.
        max_resident_activation_bytes, max_offload_activation_bytes: the same
            limits in bytes (give one form of each).
        device: the device whose activations are offloaded (``"cuda:0"``,
            ``"cpu"``). ``None``: the device of the first tensor a step
            produces.
        rewarm_once: let the session warm up a second time, once, when the
            first step of a training loop differs from the later ones
            (typically because it creates the ``.grad`` tensors or the
            optimizer state): when the first replay after the warmup diverges,
            that step finishes without offloading (a RuntimeWarning) instead of
            raising :class:`~hyperoffload.DivergenceError`; when the warmup's
            plan cannot meet the budget, that is a RuntimeWarning instead of
            :class:`~hyperoffload.BudgetError`. Either way the next step warms
            up again; the second time, the error is raised.
        max_plans: the most plans the session keeps, one per step program
            (batch shape, first or later micro-batch, ...), the least
            recently used evicted. A step starts on the most recently used
            plan and, while it has offloaded nothing, switches to another
            cached plan whose traced step begins with the ops seen so far, or
            continues as a warmup whose plan joins the cache (docs/PYTHON.md,
            "Training loops").
        calibration_bytes: size of the warmup's copy-bandwidth calibration copy,
            used only for a copy direction the warmup step never used.
        copy_bandwidth_gib_per_s: plan for a copy link of this speed in both
            directions (GiB/s, > 0) instead of the one the warmup measured —
            to plan on the CPU for a GPU's PCIe link, or conservatively.
            ``None`` (the default): measured.
        emulate_copy_bandwidth: CPU sessions only: make every copy between the
            emulated device and the host take ``bytes / copy_bandwidth_gib_per_s``
            (a copy stream's thread waits out the rest; a fault waits on the
            step's own thread, as a synchronous demand page does), so a CPU step
            runs in time as on a device with that link — to check the
            simulator against the runtime, or a plan for a slow link, without
            a GPU. Requires ``copy_bandwidth_gib_per_s``. Default ``False``.
        op_times: how the warmup's measured op durations and copy
            bandwidths enter the plan: ``None`` (the default: the runtime's,
            ``"quantized"``) or ``"quantized"``: each rounded to the nearest
            power of two, so timing noise does not give the same step program
            another plan from run to run (``stats()["plan_fingerprint"]`` names
            the plan; exec/warmup_executor.h, Note [Reproducible plans]);
            ``"measured"``: as measured.
        op_times_store: with quantized op times, keep each step program's
            recorded times on disk, per machine, so that every later warmup
            of the same program — in this run or a later one, at any budget —
            plans from the same times and gets the same plan
            (``stats()["plan_fingerprint"]``). ``True`` (the default): in
            :func:`default_op_times_store`'s directory
            (``$HYPEROFFLOAD_CACHE_DIR/op_times``, else
            ``~/.cache/hyperoffload/op_times``); a path: in that directory;
            ``False``: nowhere, each warmup plans from its own times. The
            times stay those of the first run on the machine until the file
            is removed (exec/warmup_executor.h, Note [Reproducible plans]).
        record_timeline: record every replayed step's timeline
            (:meth:`OffloadSession.last_timeline`): op spans, stalls, faults
            and copies with their times, and the held device bytes over time,
            in the simulator's schema — to compare a measured step with
            ``hyperoffload simulate``'s. Costs two events per op. Default
            ``False``.
        interception: how a step's ops reach the session. ``"auto"`` (the
            default): a C++ dispatcher fallback just below PyTorch's Python key
            (~7 µs per replayed op on this project's machine), or the session's
            ``TorchDispatchMode`` where that is not available (PyTorch before
            2.13; while another session's step holds it). ``"dispatch_mode"``:
            always the ``TorchDispatchMode`` (~45 µs per op there), which sits
            among the other dispatch modes in the order they were entered and
            sees the ops of tensor subclasses such as DTensor before they do.
            docs/PYTHON.md, "How ops are intercepted".
    """

    # The runtime's defaults have one home, in C++ (_C.defaults()).
    max_resident_activation_mib: Optional[float] = None
    max_offload_activation_mib: Optional[float] = None
    planner: str = _DEFAULTS["planner"]
    copy_engines: int = _DEFAULTS["copy_engines"]
    max_resident_activation_bytes: Optional[int] = None
    max_offload_activation_bytes: Optional[int] = None
    device: Optional[Union[str, torch.device]] = None
    rewarm_once: bool = _DEFAULTS["rewarm_once"]
    max_plans: int = _DEFAULTS["max_plans"]
    calibration_bytes: int = _DEFAULTS["calibration_bytes"]
    interception: str = "auto"
    copy_bandwidth_gib_per_s: Optional[float] = None
    emulate_copy_bandwidth: bool = False
    record_timeline: bool = False
    op_times: Optional[str] = None
    op_times_store: Union[bool, str, os.PathLike] = True
    # Deprecated names of the *_mib fields (they always meant MiB; MB is 10**6
    # bytes everywhere in hyperoffload): a DeprecationWarning, same meaning.
    max_resident_activation_mb: Optional[float] = None
    max_offload_activation_mb: Optional[float] = None

    def __post_init__(self) -> None:
        for what in ("max_resident_activation", "max_offload_activation"):
            if getattr(self, f"{what}_mb") is not None:
                warnings.warn(f"OffloadConfig({what}_mb=...) is renamed {what}_mib: the value is MiB (2**20 bytes); "
                              f"MB means 10**6 bytes everywhere in hyperoffload", DeprecationWarning, stacklevel=3)
        # Validates eagerly, so a bad configuration fails where it is written:
        # a value of the wrong type is a TypeError, a wrong value a ValueError,
        # each naming the field (python/tests/test_properties.py checks both).
        # Python checks what only Python can — the types, the MiB spellings and
        # the device — and the runtime's one check of the values
        # (exec/session.h, validate_session_options) does the rest, at the end.
        self.budget_bytes  # noqa: B018
        self.host_capacity_bytes  # noqa: B018
        if not isinstance(self.planner, str):
            raise TypeError(f"planner must be a str, got {type(self.planner).__name__}")
        _int64(self.copy_engines, "copy_engines")
        if self.device is not None:
            if not isinstance(self.device, (str, torch.device)):
                raise TypeError(f"device must be a str or a torch.device, got {type(self.device).__name__}")
            try:
                torch.device(self.device)
            except (RuntimeError, ValueError) as error:
                raise ValueError(f"device {self.device!r} is not a device: {error}") from None
        if not isinstance(self.rewarm_once, bool):
            raise TypeError(f"rewarm_once must be a bool, got {type(self.rewarm_once).__name__}")
        _int64(self.max_plans, "max_plans")
        _int64(self.calibration_bytes, "calibration_bytes")
        if self.copy_bandwidth_gib_per_s is not None:
            value = self.copy_bandwidth_gib_per_s
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise TypeError(f"copy_bandwidth_gib_per_s must be a number, got {type(value).__name__}")
        if not isinstance(self.emulate_copy_bandwidth, bool):
            raise TypeError(f"emulate_copy_bandwidth must be a bool, got {type(self.emulate_copy_bandwidth).__name__}")
        if self.emulate_copy_bandwidth:
            if self.copy_bandwidth_gib_per_s is None:
                raise ValueError("emulate_copy_bandwidth=True needs copy_bandwidth_gib_per_s: the bandwidth of the "
                                 "link to emulate, in GiB/s")
            if self.device is not None and torch.device(self.device).type != "cpu":
                raise ValueError(f"emulate_copy_bandwidth applies to CPU sessions only, got device {self.device!r}")
        store = self.op_times_store
        if not isinstance(store, (bool, str, os.PathLike)):
            raise TypeError(f"op_times_store must be a bool or a path, got {type(store).__name__}")
        if not isinstance(store, bool) and not os.fspath(store):
            raise ValueError("op_times_store must not be an empty path (False: no store)")
        if not isinstance(self.record_timeline, bool):
            raise TypeError(f"record_timeline must be a bool, got {type(self.record_timeline).__name__}")
        if self.interception not in INTERCEPTIONS:
            raise ValueError(f"interception must be one of {', '.join(map(repr, INTERCEPTIONS))}, "
                             f"got {self.interception!r}")
        self._runtime_options(bind_device=False).validate()

    @property
    def budget_bytes(self) -> Optional[int]:
        """The resident activation limit in bytes, or None."""
        mib, name = _mib_or_deprecated_mb(self.max_resident_activation_mib, self.max_resident_activation_mb,
                                          "max_resident_activation")
        return _bytes_from(mib, self.max_resident_activation_bytes, "max_resident_activation", name)

    @property
    def host_capacity_bytes(self) -> Optional[int]:
        """The offloaded (pinned host) activation limit in bytes, or None."""
        mib, name = _mib_or_deprecated_mb(self.max_offload_activation_mib, self.max_offload_activation_mb,
                                          "max_offload_activation")
        return _bytes_from(mib, self.max_offload_activation_bytes, "max_offload_activation", name)

    @property
    def emulated_copy_bandwidth_gib_per_s(self) -> Optional[float]:
        """The bandwidth a CPU session's copies are paced to (GiB/s), or None."""
        return float(self.copy_bandwidth_gib_per_s) if self.emulate_copy_bandwidth else None

    def session_options(self):
        """The runtime session's options (``_C.SessionOptions``, one C++ struct) for this config."""
        return self._runtime_options(bind_device=True)

    def _runtime_options(self, bind_device: bool):
        """The options; with bind_device=False without the device, which names a CUDA index only once
        one is current (device_name), so that validation needs no device."""
        options = _C.SessionOptions()
        options.budget_bytes = self.budget_bytes
        options.host_capacity_bytes = self.host_capacity_bytes
        options.planner = self.planner
        options.copy_engines = self.copy_engines  # the setter's ValueError names the field
        if bind_device:
            options.device = self.device_name()
        options.rewarm_once = self.rewarm_once
        options.max_plans = self.max_plans
        options.calibration_bytes = self.calibration_bytes
        options.copy_bandwidth_gib_per_s = self.copy_bandwidth_gib_per_s
        options.emulated_copy_bandwidth_gib_per_s = self.emulated_copy_bandwidth_gib_per_s
        options.record_timeline = self.record_timeline
        if self.op_times is not None:
            if not isinstance(self.op_times, str):
                raise TypeError(f"op_times must be a str, got {type(self.op_times).__name__}")
            options.op_times = self.op_times  # the setter's ValueError names the field
        if bind_device and self.op_times_store is not False:
            directory = default_op_times_store() if self.op_times_store is True else os.fspath(self.op_times_store)
            options.op_time_store = (directory, _machine(self.device_name()))
        return options

    def device_name(self) -> Optional[str]:
        """The configured device as "type:index", or None."""
        if self.device is None:
            return None
        device = torch.device(self.device)
        if device.type == "cuda" and device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        return str(device)
