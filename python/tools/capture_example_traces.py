"""Captures the example traces in examples/traces/ from the Python tests' models.

    PYTHONPATH=build/python .venv/bin/python python/tools/capture_example_traces.py [--out examples/traces] [--tries 5]

For each model (python/tests/models.py: gpt_decoder, resnet18, vit;
python/tests/dtr_models.py: dtr_resnet32, dtr_densenet, dtr_unet,
dtr_inception, dtr_transformer — DTR's model families, issue 26; and, when
`transformers` is installed, python/tests/hf_models.py: hf_gpt2, hf_llama,
hf_bert, hf_vit — built from config objects with random weights, nothing
downloaded) it runs one step without a budget to measure the unplanned
activation peak, then a session with a budget of half that peak, and saves that
session's warmup trace with a `meta` object describing the model, its shapes and
how the trace was taken. The op durations and copy bandwidths are measured on the
machine that runs it (CPU, one intra-op thread, the HostBackend).

On a shared machine other processes stretch op durations and copies (a copy
worker that loses its core measures a bandwidth ten times too low), so each
model is captured `--tries` times (default 5): the step is deterministic, so the
tries trace the same ops, storages and accesses (checked), and the trace saved
takes each measured quantity at its least disturbed — every op's shortest
duration and each direction's highest bandwidth over the tries, as a benchmark
takes the minimum of its repetitions. `meta.tries` says how many were taken and
`meta.load_average_1min` how loaded the machine was.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import pathlib
import platform
import sys

import torch

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "python" / "tests"))

import hyperoffload as ho  # noqa: E402
from conftest import train  # noqa: E402  (also sets one thread and deterministic algorithms)
from models import CASES  # noqa: E402
from dtr_models import DTR_CASES  # noqa: E402

try:
    import transformers
    from hf_models import HF_CASES, config_of  # sets HF_HUB_OFFLINE=1: nothing is downloaded
except ImportError:  # the Hugging Face models are optional
    transformers, HF_CASES = None, {}


def least_disturbed(traces: list[dict]) -> dict:
    """The first trace with every op's shortest duration and each direction's highest bandwidth of `traces`."""
    def structure(trace: dict) -> tuple:
        ops = [(op["name"], op.get("recomputable", False), json.dumps(op.get("accesses"))) for op in trace["ops"]]
        return json.dumps(ops), json.dumps(trace["storages"]), trace["memory_limit_bytes"]

    first = traces[0]
    for i, other in enumerate(traces[1:], start=2):
        if structure(other) != structure(first):
            raise SystemExit(f"try {i} traced a different step than try 1 (ops, storages or accesses differ)")
    merged = copy.deepcopy(first)
    for index, op in enumerate(merged["ops"]):
        op["duration_ms"] = min(trace["ops"][index]["duration_ms"] for trace in traces)
    for key in ("d2h_bandwidth_gbps", "h2d_bandwidth_gbps"):
        merged[key] = max(trace[key] for trace in traces)
    return merged


def capture(name: str, out: pathlib.Path, tries: int) -> pathlib.Path:
    attempts = [capture_once(name) for _ in range(tries)]
    document = least_disturbed([session.trace() for session, _ in attempts])
    meta = attempts[0][1]
    meta.update(tries=tries, kept="every op's shortest duration and each direction's highest bandwidth over the tries",
                load_average_1min=round(os.getloadavg()[0], 2))
    document["meta"] = meta
    path = out / f"{name}.json"
    ho._C.write_file_atomically(os.fspath(path), json.dumps(document, indent=1))
    return path


def capture_once(name: str) -> tuple[ho.OffloadSession, dict]:
    hf = name in HF_CASES
    case = HF_CASES[name] if hf else DTR_CASES[name] if name in DTR_CASES else CASES[name]
    probe = ho.OffloadSession()
    train(case.build, probe, steps=1)
    peak = probe.unplanned_peak_bytes()
    budget = peak // 2
    session = ho.OffloadSession(ho.OffloadConfig(max_resident_activation_bytes=budget, planner="peak"))
    results = train(case.build, session, steps=2)
    meta = dict(case.description)
    meta.update(
        source="hyperoffload Python session (python/tools/capture_example_traces.py)",
        step="forward + cross-entropy + backward; parameter gradients exist before the step and are accumulated "
             "in place (not traced); the SGD update runs outside the step",
        tracked="storages produced inside the step (activations, gradient temporaries); parameters and the batch "
                "are not in the trace",
        dtype="float32",
        device="cpu (HostBackend), torch.set_num_threads(1)",
        torch=torch.__version__,
        machine=platform.machine(),
        unplanned_peak_bytes=peak,
        budget="memory_limit_bytes = 50% of the unplanned peak",
        warmup_peak_resident_bytes=results[0].stats["peak_resident_bytes"],
        replay_peak_resident_bytes=results[1].stats["peak_resident_bytes"],
        warmup_peak_held_bytes=results[0].stats["peak_held_bytes"],
        replay_peak_held_bytes=results[1].stats["peak_held_bytes"],
        replay_offloaded_bytes=results[1].stats["offloaded_bytes"],
    )
    if name in DTR_CASES:
        meta.update(
            source_models="python/tests/dtr_models.py",
            step="forward + cross-entropy + backward in training mode (BatchNorm batch statistics; dropout on, "
                 "its mask op marked rng_replay: recomputable by RNG replay, trace format v3); parameter "
                 "gradients exist before the step and are accumulated in place (not traced); the SGD update runs "
                 "outside the step",
            parameters=sum(p.numel() for p in case.build()[0].parameters()),
        )
    if hf:
        model = case.build()[0]
        meta.update(
            model_class=f"transformers.{type(model).__name__}",
            config=config_of(model),
            parameters=sum(p.numel() for p in model.parameters()),
            transformers=transformers.__version__,
            step="forward + the model's own loss (labels passed to the model) + backward, in training mode with "
                 "dropout on (torch.manual_seed before building; dropout draws from the CPU generator); parameter "
                 "gradients exist before the step and are accumulated in place (not traced); the SGD update runs "
                 "outside the step",
        )
    return session, meta


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=pathlib.Path, default=REPO / "examples" / "traces")
    parser.add_argument("--tries", type=int, default=5, help="captures per model; the least disturbed is kept")
    parser.add_argument("models", nargs="*", default=sorted(CASES) + sorted(DTR_CASES) + sorted(HF_CASES))
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    known = set(CASES) | set(DTR_CASES) | set(HF_CASES)
    for name in args.models:
        if name not in known:
            raise SystemExit(f"unknown model {name!r}; known: {', '.join(sorted(known))}")
        print(capture(name, args.out, max(1, args.tries)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
