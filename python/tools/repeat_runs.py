"""Runs one training loop under a session in N fresh processes: bit-identity with eager and the plan fingerprints.

The loop is issue 33's Llama case: a `transformers` Llama (3 layers, width 64,
batch 4x128), gradient accumulation 2 with clipping and AdamW inside the `with`
block, `planner` (default hybrid) at `fraction` (default 30%) of the largest
step's peak held by a session without a budget. Each process runs the loop
eagerly and under the session from the same weights and data, and reports
whether every loss, every gradient after every micro-batch and every final
weight is `torch.equal` to eager's, and the plan fingerprint after each
micro-batch (`stats()["plan_fingerprint"]`). The plans depend on measured op
times (Note [Reproducible plans] in src/hyperoffload/exec/warmup_executor.h),
so only fresh processes show whether they come out the same. The runs share
one op-time store, a fresh directory (HYPEROFFLOAD_CACHE_DIR), as one user's
runs share ~/.cache/hyperoffload; --no-store plans each warmup from its own
times (OffloadConfig(op_times_store=False)).

    PYTHONPATH=build/python OMP_NUM_THREADS=1 .venv/bin/python python/tools/repeat_runs.py --runs 20
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import subprocess
import sys
import tempfile
from collections import Counter

MICRO_BATCHES = 12
ACCUMULATE = 2


def one_run(planner: str, fraction: float, store: bool) -> dict:
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
    import torchvision_models  # noqa: F401  (before transformers: tests/torchvision_models.py says why)
    import torch
    import transformers

    import hyperoffload as ho

    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=3,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)
    base = transformers.LlamaForCausalLM(config)
    data = [torch.randint(0, 256, (4, 128)) for _ in range(MICRO_BATCHES)]

    def loop(session, on_micro_batch=None):
        model = copy.deepcopy(base)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
        losses, grads = [], []
        for index, ids in enumerate(data):
            with session if session is not None else torch.enable_grad():
                loss = model(input_ids=ids, labels=ids).loss / ACCUMULATE
                loss.backward()
                losses.append(loss.detach().clone())
                grads.append([p.grad.clone() for p in model.parameters() if p.grad is not None])
                if index % ACCUMULATE == ACCUMULATE - 1:
                    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                    optimizer.step()
                    optimizer.zero_grad()
            if on_micro_batch is not None:
                on_micro_batch()
        return losses, grads, [p.detach().clone() for p in model.parameters()]

    probe = ho.OffloadSession(ho.OffloadConfig(op_times_store=store))
    peaks = []
    loop(probe, lambda: peaks.append(probe.stats()["peak_held_bytes"]))
    session = ho.OffloadSession(ho.OffloadConfig(max_resident_activation_bytes=int(max(peaks) * fraction),
                                                 planner=planner, op_times_store=store))
    fingerprints = []
    got = loop(session, lambda: fingerprints.append(session.stats()["plan_fingerprint"]))
    eager = loop(None)
    same = (all(torch.equal(a, b) for a, b in zip(eager[0], got[0]))
            and all(torch.equal(a, b) for ga, gb in zip(eager[1], got[1]) for a, b in zip(ga, gb))
            and all(torch.equal(a, b) for a, b in zip(eager[2], got[2])))
    stats = session.stats()
    return {"bit_identical": same, "fingerprints": fingerprints, "warmups": stats["warmups"],
            "plan_hits": stats["plan_hits"]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--planner", default="hybrid")
    parser.add_argument("--fraction", type=float, default=0.3)
    parser.add_argument("--no-store", action="store_true", help="no op-time store: each warmup plans from its "
                        "own times")
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)  # a child process
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one_run(args.planner, args.fraction, not args.no_store)))
        return 0
    results = []
    cache = tempfile.TemporaryDirectory(prefix="repeat-runs-cache-")
    env = dict(os.environ, HYPEROFFLOAD_CACHE_DIR=cache.name)
    for run in range(args.runs):
        child = subprocess.run([sys.executable, __file__, "--one", "--planner", args.planner,
                                "--fraction", str(args.fraction)] + (["--no-store"] if args.no_store else []),
                               capture_output=True, text=True, check=False, env=env)
        if child.returncode != 0:
            print(f"run {run + 1}: exit {child.returncode}\n{child.stderr[-2000:]}", file=sys.stderr)
            return 1
        results.append(json.loads(child.stdout.strip().splitlines()[-1]))
        print(f"run {run + 1}: {'bit-identical' if results[-1]['bit_identical'] else 'DIFFERS FROM EAGER'}, "
              f"warmups {results[-1]['warmups']}, plan hits {results[-1]['plan_hits']}, final plan "
              f"{results[-1]['fingerprints'][-1]}")
    identical = sum(r["bit_identical"] for r in results)
    print(f"{identical} of {len(results)} runs bit-identical to eager")
    for position in range(MICRO_BATCHES):
        ways = Counter(r["fingerprints"][position] for r in results)
        print(f"micro-batch {position + 1}: {len(ways)} plan(s): "
              + ", ".join(f"{fp or '-'} x{count}" for fp, count in ways.most_common()))
    return 0 if identical == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
