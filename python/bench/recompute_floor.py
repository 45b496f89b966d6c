"""How low recompute alone can go, against checkpointing's memory (issue 35, part 2).

For the four transformer models of frontier.py (GPT-2, Llama, BERT, ViT;
`transformers`' checkpointing of every layer) and torchvision's ResNet-50
(torch.utils.checkpoint around every Bottleneck block), this measures:

* checkpointing's activation memory, as a session measures it (the budget
  frontier.py races at, every_n_layers=1);
* from one traced step, the recompute-only limit (what an op touches plus what
  cannot be regenerated: `hyperoffload compare` prints it) and the peak the
  recompute planner reaches when it plans for checkpointing's memory, with the
  in-place units of the trace (Note [In-place units] in ir/trace.h) and with
  them taken out (every in-place op unmarked, as before units), so the gain is
  the units' alone.

    PYTHONPATH=build/python OMP_NUM_THREADS=1 .venv/bin/python python/bench/recompute_floor.py \\
        [--quick] [--costs measured|bytes] [--json out.json]

Which plan the recompute planner picks depends on the op times: with the times
measured in the traced step (the default) a loaded machine can make another
plan the quickest from run to run (on one, DTR's walk with local costs,
which re-ran some GPT-2 ops three times where the plan of a quiet run re-ran
each once). `--costs bytes` plans with each op's time set from the bytes it
touches (1 µs + 10 ns per KB), the same on every machine, so the plan, and
how often it re-runs an op, is reproducible: the test uses it.

The CLI is $HYPEROFFLOAD_CLI, else build/bin/hyperoffload. Results go to
stdout as a Markdown table (BENCHMARKS.md has one).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import warnings

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "tests"))

from torchvision_models import torchvision  # noqa: E402  (before transformers, which imports torchvision)

import hyperoffload as ho  # noqa: E402
from bench_steps import measured_peak, step, write_atomically  # noqa: E402
import frontier  # noqa: E402

CLI = os.environ.get("HYPEROFFLOAD_CLI", os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, "build",
                                                      "bin", "hyperoffload"))
RESNET = {"full": dict(batch=8, image=128), "quick": dict(batch=2, image=32)}


class CheckpointedBlock(torch.nn.Module):
    """A block re-run in backward by torch.utils.checkpoint (non-reentrant)."""

    def __init__(self, block):
        super().__init__()
        self.block = block

    def forward(self, x):
        return torch.utils.checkpoint.checkpoint(self.block, x, use_reentrant=False)


def resnet50(shape):
    torch.manual_seed(30)
    model = torchvision.models.resnet50(num_classes=10).train()
    images = torch.randn(shape["batch"], 3, shape["image"], shape["image"])
    labels = torch.arange(shape["batch"]) % 10
    return model, lambda m: torch.nn.functional.cross_entropy(m(images), labels)


def checkpointed_resnet(model):
    import copy

    copied = copy.deepcopy(model)
    for layer in (copied.layer1, copied.layer2, copied.layer3, copied.layer4):
        for i in range(len(layer)):
            layer[i] = CheckpointedBlock(layer[i])
    return copied.train()


def without_units(trace: dict) -> dict:
    """The trace with every in-place follower unmarked (an op that reads and writes one storage)."""
    out = json.loads(json.dumps(trace))
    for op in out["ops"]:
        written = {a["storage"] for a in op["accesses"] if a["kind"] == "write"}
        read = {a["storage"] for a in op["accesses"] if a["kind"] == "read"}
        if op.get("recomputable") and written & read:
            op["recomputable"] = False
            op.pop("rng_replay", None)
    return out


def unit_of(trace: dict, op: int) -> list:
    """The ops a recompute of `op` re-runs: op alone, or for an in-place follower its unit (the op that made the
    storage, then each follower up to `op`; Note [In-place units] in ir/trace.h)."""
    ops = trace["ops"]
    unit = [op]
    while True:
        accesses = ops[unit[0]]["accesses"]
        written = {a["storage"] for a in accesses if a["kind"] == "write"}
        rewritten = written & {a["storage"] for a in accesses if a["kind"] == "read"}
        if not rewritten:
            return unit
        (storage,) = rewritten
        # The op before unit[0] that wrote the storage made the version it rewrote.
        unit.insert(0, next(k for k in range(unit[0] - 1, -1, -1)
                            if any(a["storage"] == storage and a["kind"] == "write" for a in ops[k]["accesses"])))


def most_reruns(trace: dict, schedule: dict) -> int:
    """The most times one traced op runs again in a step under `schedule` (0: nothing re-run)."""
    counts = {}
    for action in schedule["actions"]:
        if action["kind"] == "recompute":
            for op in unit_of(trace, action["source_op"]):
                counts[op] = counts.get(op, 0) + 1
    return max(counts.values(), default=0)


def recompute_at(trace: dict, budget: int) -> dict:
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "trace.json")
        with open(path, "w") as f:
            json.dump(trace, f)
        out = subprocess.run([CLI, "compare", path, "--budget", str(budget), "--planners", "recompute", "--json"],
                             check=True, capture_output=True, text=True).stdout
        schedule_path = os.path.join(directory, "schedule.json")
        subprocess.run([CLI, "plan", path, "--budget", str(budget), "--planner", "recompute", "-o", schedule_path],
                       check=True, capture_output=True, text=True)
        with open(schedule_path) as f:
            schedule = json.load(f)
    result = json.loads(out)
    plan = result["results"][0]
    return {"limit_bytes": result["recompute_only_limit"]["bytes"], "peak_bytes": plan["op_peak_bytes"],
            "feasible": plan["feasible"], "unplanned_bytes": result["trace"]["unplanned_peak_bytes"],
            "recomputes": plan["recompute_count"], "most_reruns": most_reruns(trace, schedule)}


def with_byte_costs(trace: dict) -> dict:
    """The trace with each op's duration from the bytes it reads and writes (see the module's docstring)."""
    out = json.loads(json.dumps(trace))
    sizes = {s["id"]: s["size_bytes"] for s in out["storages"]}
    for op in out["ops"]:
        op["duration_ms"] = 1e-3 + 1e-8 * sum(sizes[a["storage"]] for a in op["accesses"])
    return out


def measure(name, model, loss_of, checkpointed, log, costs="measured"):
    call = lambda: loss_of(model)  # noqa: E731
    ckpt = checkpointed(model)
    budget = measured_peak(lambda: loss_of(ckpt), [ckpt])
    probe = ho.OffloadSession()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        step(call, [model], probe)
    trace = probe.trace()
    if costs == "bytes":
        trace = with_byte_costs(trace)
    followers = sum(1 for op in trace["ops"] if op.get("recomputable") and
                    {a["storage"] for a in op["accesses"] if a["kind"] == "write"} &
                    {a["storage"] for a in op["accesses"] if a["kind"] == "read"})
    row = {"model": name, "checkpoint_bytes": budget, "followers": followers,
           "with_units": recompute_at(trace, budget), "without_units": recompute_at(without_units(trace), budget)}
    log(f"{name}: checkpoint {budget / 2**20:.2f} MiB, {followers} followers, "
        f"with units {row['with_units']}, without {row['without_units']}")
    return row


def mib(n):
    return f"{n / 2**20:.2f}"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny shapes (the test)")
    parser.add_argument("--json", help="also write the results here")
    parser.add_argument("--costs", choices=("measured", "bytes"), default="measured",
                        help="op times for planning: as measured in the traced step, or from the bytes each op touches")
    args = parser.parse_args(argv)
    log = lambda text: print(text, file=sys.stderr, flush=True)  # noqa: E731
    shapes = frontier.QUICK if args.quick else frontier.FULL
    rows = []
    for name in ("gpt2", "llama", "bert", "vit"):
        model, loss_of = frontier.build(name, shapes[name])
        rows.append(measure(name, model, loss_of, lambda m: frontier.checkpointed(m, 1), log, args.costs))
    model, loss_of = resnet50(RESNET["quick" if args.quick else "full"])
    rows.append(measure("resnet50", model, loss_of, checkpointed_resnet, log, args.costs))
    print("| model | checkpoint (every layer) | in-place followers | recompute-only limit: before → with units "
          "| recompute planner's peak at the checkpoint budget: before → with units "
          "| recompute actions; most runs of one op again: before → with units |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        w, wo = r["with_units"], r["without_units"]
        mark = lambda d: "" if d["feasible"] else " (over)"  # noqa: E731
        print(f"| {r['model']} | {mib(r['checkpoint_bytes'])} MiB | {r['followers']} | {mib(wo['limit_bytes'])} → "
              f"{mib(w['limit_bytes'])} MiB | {mib(wo['peak_bytes'])}{mark(wo)} → {mib(w['peak_bytes'])}{mark(w)} "
              f"MiB | {wo['recomputes']} → {w['recomputes']}; {wo['most_reruns']}× → {w['most_reruns']}× |")
    if args.json:
        write_atomically(args.json, json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
