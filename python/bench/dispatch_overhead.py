"""Per-op dispatch overhead of an OffloadSession versus plain eager PyTorch.

    PYTHONPATH=build/python .venv/bin/python python/bench/dispatch_overhead.py [--repeats 30] [--model gpt_decoder]

Times one training step (forward, cross-entropy, backward) of a model from
python/tests/models.py on the CPU, one intra-op thread, in these modes:

  eager          plain PyTorch
  empty mode     a TorchDispatchMode that only calls the op (PyTorch's own cost
                 of intercepting ops in Python: the floor for any such layer)
  empty RF       a thread-local RecordFunction callback taking every op's
                 inputs and outputs and doing nothing (the floor of that hook)
  empty fallback the session's C++ dispatcher fallback with no session: every
                 op boxed and run below the key (the floor of the C++ path)
  warmup         the first step of a fresh session (trace + online eviction)
  replay         later steps of a session without a budget (nothing moves),
                 ops intercepted by the C++ fallback
  replay, mode   the same through the session's TorchDispatchMode
                 (OffloadConfig(interception="dispatch_mode"): its fallback
                 where the C++ one is not available)
  replay 50%     later steps of a session at half the activation peak (copies
                 run on the HostBackend's copy threads), C++ fallback

and reports the median step time (with quartiles) and the overhead per op against
eager. The modes run round-robin, one step each per round, --repeats rounds
(warmups: one fresh session each), so machine noise hits every mode alike; the
overhead is paired: the median (and quartiles) over rounds of the mode's step
time minus eager's in the same round, divided by the session's ops per step
(those the C++ fallback sees; under a TorchDispatchMode PyTorch runs a few more,
docs/PYTHON.md, "How ops are intercepted").
"""

from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import sys
import time

import torch

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "python" / "tests"))

import hyperoffload as ho  # noqa: E402
from hyperoffload import _C  # noqa: E402
from hyperoffload._compat import TorchDispatchMode  # noqa: E402
from models import CASES  # noqa: E402


class EmptyMode(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


class EmptyFallback:
    def __enter__(self):
        if not _C._empty_fallback(True):
            raise SystemExit("the C++ dispatcher fallback is not available on this PyTorch")
        return self

    def __exit__(self, *exc):
        _C._empty_fallback(False)
        return False


class EmptyRecordFunction:
    def __enter__(self):
        _C._empty_record_function(True)
        return self

    def __exit__(self, *exc):
        _C._empty_record_function(False)
        return False


def make(name):
    model, batch, loss_fn = CASES[name].build()
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    return model, batch, loss_fn


def one_step(model, batch, loss_fn, context, clock=time.perf_counter) -> float:
    for p in model.parameters():
        p.grad.zero_()
    start = clock()
    with context:
        loss = loss_fn(model, batch)
        loss.backward()
    return clock() - start


class Nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="gpt_decoder", choices=sorted(CASES))
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--clock", choices=["wall", "thread"], default="wall",
                        help="wall: elapsed time; thread: the CPU time of the thread running the step (forward and "
                             "backward run on it on the CPU), unaffected by waiting for a core on a loaded machine "
                             "but blind to the runtime's copy threads")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    torch.set_num_threads(1)
    model, batch, loss_fn = make(args.model)

    for _ in range(3):  # allocator and kernel warm-up
        one_step(model, batch, loss_fn, Nothing())

    probe = ho.OffloadSession()
    one_step(model, batch, loss_fn, probe)
    ops = probe.stats()["ops"]
    budget = probe.unplanned_peak_bytes() // 2

    replay = ho.OffloadSession()
    one_step(model, batch, loss_fn, replay)
    with_mode = ho.OffloadSession(ho.OffloadConfig(interception="dispatch_mode"))
    one_step(model, batch, loss_fn, with_mode)
    tight = ho.OffloadSession(ho.OffloadConfig(max_resident_activation_bytes=budget))
    one_step(model, batch, loss_fn, tight)
    check = ho.OffloadSession()
    with check:  # an empty step
        if check.interception != "dispatcher_fallback":
            raise SystemExit("the C++ dispatcher fallback is not available on this PyTorch")
    modes = {
        "eager": lambda: Nothing(),
        "empty mode": lambda: EmptyMode(),
        "empty RF": lambda: EmptyRecordFunction(),
        "empty fallback": lambda: EmptyFallback(),
        "warmup": lambda: ho.OffloadSession(),
        "replay": lambda: replay,
        "replay, mode": lambda: with_mode,
        "replay 50%": lambda: tight,
    }
    # Round-robin over the modes, so machine noise (a shared 2-core VM) hits all alike.
    rows = {name: [] for name in modes}
    clock = time.perf_counter if args.clock == "wall" else time.thread_time
    for _ in range(args.repeats):
        for name, context in modes.items():
            rows[name].append(one_step(model, batch, loss_fn, context(), clock))
    moved = tight.stats()["offloaded_bytes"]

    def median_and_quartiles(samples, scale):
        q = statistics.quantiles(samples, n=4)
        return statistics.median(samples) * scale, (q[0] * scale, q[2] * scale)

    results = {}
    for name, samples in rows.items():
        step_ms, step_quartiles = median_and_quartiles(samples, 1e3)
        paired = [t - e for t, e in zip(samples, rows["eager"])]
        overhead, overhead_quartiles = median_and_quartiles(paired, 1e6 / ops)
        results[name] = dict(step_ms=step_ms, step_ms_quartiles=step_quartiles, overhead_us_per_op=overhead,
                             overhead_us_per_op_quartiles=overhead_quartiles)
    if args.json:
        print(json.dumps(dict(model=args.model, ops=ops, repeats=args.repeats, clock=args.clock, torch=torch.__version__,
                              offloaded_bytes_at_50=moved, results=results), indent=1))
        return 0
    print(f"model {args.model}: {ops} ops per step, median of {args.repeats} steps ({args.clock} clock), "
          f"torch {torch.__version__}, 1 thread; at 50% the replay offloads {moved / 2**20:.2f} MiB per step")
    print(f"{'mode':<15} {'step ms':>8} {'quartiles':>13} {'overhead us/op':>15} {'quartiles':>13}")
    for name, r in results.items():
        low, high = r["step_ms_quartiles"]
        op_low, op_high = r["overhead_us_per_op_quartiles"]
        print(f"{name:<15} {r['step_ms']:>8.2f} {f'{low:.2f}-{high:.2f}':>13} {r['overhead_us_per_op']:>15.1f} "
              f"{f'{op_low:.1f}-{op_high:.1f}':>13}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
