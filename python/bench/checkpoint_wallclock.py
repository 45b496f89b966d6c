"""hyperoffload's recompute and hybrid plans against gradient checkpointing, in wall clock (issue 25, part 4).

    PYTHONPATH=build/python OMP_NUM_THREADS=1 .venv/bin/python python/bench/checkpoint_wallclock.py \\
        [--rounds 9] [--models hf_gpt2,hf_llama,gpt_decoder] [--looser 1.25,1.5] [--seed 0]
        [--quick] [--json PATH]
    .venv/bin/python python/bench/checkpoint_wallclock.py --combine run1.json run2.json ...

For each model in training mode with dropout on (forward, loss, loss.backward(),
gradients set to None before each step), on the CPU with one intra-op thread:

  eager        plain PyTorch;
  checkpoint   activation checkpointing: `transformers`' own
               gradient_checkpointing_enable(gradient_checkpointing_kwargs=
               {"use_reentrant": False}) on the `transformers` models, and
               torch.utils.checkpoint(use_reentrant=False) around each block
               on the test GPT model (python/tests/models.py, gpt_decoder);
               both restore the RNG state for their re-run (preserve_rng_state);
  session      an OffloadSession with no budget: its replays cost the
               interception alone (nothing is moved or re-run);
  recompute    OffloadSession(planner="recompute") at checkpointing's peak;
  hybrid       OffloadSession(planner="hybrid") at checkpointing's peak;
  recompute Fx planner="recompute" at F times checkpointing's peak (--looser,
               default 1.25,1.5): what recompute gains with some memory to spare.

Checkpointing's peak is measured, not estimated: one step of the checkpointed
model inside an OffloadSession with no budget (the tracker) gives the peak of
the device memory the step held for activations (stats()["peak_held_bytes"]);
the same for eager. That peak is the budget (max_resident_activation_bytes) of
the recompute and hybrid sessions. A budget below a planner's floor raises
BudgetError at the end of the warmup: the variant is reported "infeasible"
with the floor. After each session's warmup and one replay, --rounds rounds
run one step of every variant each, in a new random order per round
(interleaved, so the machine's noise hits all alike); the median and the
min-max of the step times are reported, the speed of each variant relative to
checkpointing (checkpoint's median / the variant's median: 1.15 = 15% faster),
the held peak each session's replays measured (the largest over rounds) and
the ops the recompute plan re-runs (its schedule's "recompute" actions by op
name). On this CPU an offload is a memcpy into the session's host pool (the
same RAM): a hybrid plan that offloads is cheap here and would not be on a GPU.

--quick runs tiny models, 2 rounds (python/tests/test_checkpoint_wallclock.py).
--json writes the results as one JSON document; --combine A.json B.json ...
pools the step times of such runs into one table per model (median, quartiles,
minimum; speed relative to checkpointing on the pooled medians and per run).
"""

from __future__ import annotations

import argparse
import collections
import copy
import json
import os
import random
import statistics
import sys
import warnings

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402
from torch import nn  # noqa: E402
from torch.utils.checkpoint import checkpoint  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "tests"))

import torchvision_models  # noqa: E402,F401  (before transformers, which imports torchvision)
import transformers  # noqa: E402

import hyperoffload as ho  # noqa: E402
from bench_steps import keep_freed_memory, measured_peak, step, write_atomically  # noqa: E402,F401  (python/bench/bench_steps.py)
from models import GptDecoder  # noqa: E402  (python/tests/models.py)

transformers.logging.set_verbosity_error()

FULL = {
    "hf_gpt2": dict(vocab=2048, context=256, width=256, heads=4, layers=6, batch=4, dropout=0.1),
    "hf_llama": dict(vocab=2048, context=256, width=256, heads=4, kv_heads=2, layers=6, ffn=688, batch=4,
                     attention_dropout=0.1),
    "gpt_decoder": dict(vocab=2048, context=256, width=256, heads=4, layers=6, ffn=1024, batch=4, dropout=0.1),
}
QUICK = {
    "hf_gpt2": dict(vocab=128, context=32, width=32, heads=2, layers=2, batch=2, dropout=0.1),
    "hf_llama": dict(vocab=128, context=32, width=32, heads=2, kv_heads=1, layers=2, ffn=64, batch=2,
                     attention_dropout=0.1),
    "gpt_decoder": dict(vocab=128, context=32, width=32, heads=2, layers=2, ffn=64, batch=2, dropout=0.1),
}
VARIANTS = ("eager", "checkpoint", "session", "recompute", "hybrid")


# ---- Models: (eager model, checkpointed callable, batch, loss) ------------------------------


def _hf_loss(model, tokens):
    return model(input_ids=tokens, labels=tokens).loss  # the model shifts the labels itself


def _hf_pair(model):
    """The model and a copy with `transformers`' non-reentrant gradient checkpointing."""
    model.config.use_cache = False
    model.train()
    checkpointed = copy.deepcopy(model)
    with warnings.catch_warnings():  # transformers 5 deprecates the name for activation_checkpointing_enable
        warnings.simplefilter("ignore", FutureWarning)
        checkpointed.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    checkpointed.train()
    return model, checkpointed


def build_hf_gpt2(s):
    torch.manual_seed(11)
    config = transformers.GPT2Config(
        vocab_size=s["vocab"], n_positions=s["context"], n_embd=s["width"], n_layer=s["layers"],
        n_head=s["heads"], resid_pdrop=s["dropout"], embd_pdrop=s["dropout"], attn_pdrop=s["dropout"])
    model, checkpointed = _hf_pair(transformers.GPT2LMHeadModel(config))
    tokens = torch.randint(0, s["vocab"], (s["batch"], s["context"]))
    return model, lambda: _hf_loss(model, tokens), lambda: _hf_loss(checkpointed, tokens), [model, checkpointed]


def build_hf_llama(s):
    torch.manual_seed(12)
    config = transformers.LlamaConfig(
        vocab_size=s["vocab"], hidden_size=s["width"], intermediate_size=s["ffn"],
        num_hidden_layers=s["layers"], num_attention_heads=s["heads"], num_key_value_heads=s["kv_heads"],
        max_position_embeddings=s["context"], attention_dropout=s["attention_dropout"])
    model, checkpointed = _hf_pair(transformers.LlamaForCausalLM(config))
    tokens = torch.randint(0, s["vocab"], (s["batch"], s["context"]))
    return model, lambda: _hf_loss(model, tokens), lambda: _hf_loss(checkpointed, tokens), [model, checkpointed]


def build_gpt_decoder(s):
    torch.manual_seed(1)
    model = GptDecoder(s["vocab"], s["context"], s["width"], s["heads"], s["layers"], s["ffn"], s["dropout"])
    model.train()
    tokens = torch.randint(0, s["vocab"], (s["batch"], s["context"] + 1))
    inputs, targets = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()

    def loss_of(logits):
        return nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))

    def checkpointed_forward():
        # GptDecoder.forward with each TransformerEncoderLayer run under torch.utils.checkpoint.
        positions = torch.arange(inputs.shape[1])
        x = model.token(inputs) + model.position(positions)
        mask = model.mask[: inputs.shape[1], : inputs.shape[1]]
        for layer in model.blocks.layers:
            x = checkpoint(layer, x, mask, use_reentrant=False)  # src_mask positionally
        return loss_of(model.head(model.norm(x)))

    return model, lambda: loss_of(model(inputs)), checkpointed_forward, [model]


BUILDERS = {"hf_gpt2": build_hf_gpt2, "hf_llama": build_hf_llama, "gpt_decoder": build_gpt_decoder}
DESCRIPTIONS = {
    "hf_gpt2": "transformers GPT2LMHeadModel, resid/embd/attn dropout",
    "hf_llama": "transformers LlamaForCausalLM, attention_dropout",
    "gpt_decoder": "test GPT model (python/tests/models.py GptDecoder), dropout",
}


# ---- Steps ---------------------------------------------------------------------------------


MATMULS = ("aten::addmm", "aten::mm", "aten::bmm", "aten::baddbmm")


def forward_ms(trace) -> "float | None":
    """The traced time of the step's forward: its ops up to the loss (nll_loss_forward), inclusive."""
    total = 0.0
    for op in trace["ops"]:
        total += op["duration_ms"]
        if op["name"] == "aten::nll_loss_forward":
            return total
    return None


def recompute_ops(session) -> dict:
    """What the plan re-runs per step: by op name, RNG-replayed ones, and its traced time.

    traced_ms is the warmup's measured time of the re-run ops (one per action);
    distinct_ops how many traced ops that is, most_reruns the most times one op
    is re-run in a step (an op re-run for several dropped results, or inside
    several recompute chains).
    """
    schedule, trace = session.schedule(), session.trace()
    ops = trace["ops"]
    names = collections.Counter()
    per_op = collections.Counter()
    random_ones = 0
    traced = matmul = 0.0
    for action in schedule["actions"]:
        if action["kind"] != "recompute":
            continue
        op = ops[action["source_op"]]
        names[op["name"]] += 1
        per_op[action["source_op"]] += 1
        random_ones += bool(op.get("rng_replay"))
        traced += op["duration_ms"]
        matmul += op["duration_ms"] if op["name"] in MATMULS else 0.0
    return {"count": sum(names.values()), "rng_replay": random_ones, "by_op": dict(names.most_common()),
            "distinct_ops": len(per_op), "most_reruns": max(per_op.values(), default=0),
            "traced_ms": traced, "matmul_traced_ms": matmul, "forward_traced_ms": forward_ms(trace)}


def run_model(name, shape, rounds, log, looser=()):
    _, eager_loss, checkpoint_loss, modules = BUILDERS[name](shape)
    result = {"model": name, "description": DESCRIPTIONS[name], "shape": shape, "rounds": rounds}
    eager_peak = measured_peak(eager_loss, modules)
    checkpoint_peak = measured_peak(checkpoint_loss, modules)
    result["eager_peak_held_bytes"] = eager_peak
    result["checkpoint_peak_held_bytes"] = checkpoint_peak
    budget = checkpoint_peak
    result["budget_bytes"] = budget

    calls = {"eager": (eager_loss, None), "checkpoint": (checkpoint_loss, None)}
    sessions = {"session": ho.OffloadSession()}
    budgets = {"session": None}
    for planner in ("recompute", "hybrid"):
        budgets[planner] = budget
    for factor in looser:
        budgets[f"recompute {factor:g}x"] = int(budget * factor)
    for variant, variant_budget in budgets.items():
        if variant_budget is not None:
            sessions[variant] = ho.OffloadSession(ho.OffloadConfig(
                max_resident_activation_bytes=variant_budget, planner=variant.split()[0]))
    result["variants"] = list(VARIANTS) + [v for v in budgets if v not in VARIANTS]
    variants = {}
    for variant in result["variants"]:
        info = {"budget_bytes": budgets.get(variant)}
        if variant in calls:
            variants[variant] = calls[variant]
        else:
            session = sessions[variant]
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    step(eager_loss, modules, session)  # warmup
                    step(eager_loss, modules, session)  # first replay (or a re-warmup)
                    if session.next_step_kind != "replay" or session.stats()["kind"] != "replay":
                        step(eager_loss, modules, session)
            except ho.BudgetError as error:
                info.update(feasible=False, floor_bytes=session.floor_bytes(), error=str(error).splitlines()[0])
                result[variant] = info
                log(f"  {variant}: infeasible at {budgets[variant] / 2**20:.2f} MiB, floor "
                    f"{(session.floor_bytes() or 0) / 2**20:.2f} MiB")
                continue
            plan = session.plan_summary()
            info.update(feasible=True, floor_bytes=session.floor_bytes(),
                        planned_peak_bytes=plan["planned_peak_bytes"] if plan else None,
                        unplanned_peak_bytes=session.unplanned_peak_bytes())
            if variant != "session":
                info["recomputes"] = recompute_ops(session)
                info["plan_offloaded_bytes"] = plan["offloaded_bytes"]
            variants[variant] = (eager_loss, session)
        result[variant] = info

    times = {v: [] for v in variants}
    held = {v: [] for v in variants}
    recompute_ms = {v: [] for v in variants}
    wait_ms = {v: [] for v in variants}
    order = list(variants)
    for _ in range(rounds):
        random.shuffle(order)
        for variant in order:
            loss_fn, session = variants[variant]
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                times[variant].append(step(loss_fn, modules, session))
            if session is not None:
                stats = session.stats()
                held[variant].append(stats["peak_held_bytes"])
                recompute_ms[variant].append(stats.get("recompute_ms", 0.0))
                wait_ms[variant].append(stats["memory_wait_ms"])
                result[variant]["offloaded_bytes"] = stats["offloaded_bytes"]
                result[variant].setdefault("step_kinds", collections.Counter())[stats["kind"]] += 1

    checkpoint_median = statistics.median(times["checkpoint"])
    for variant, t in times.items():
        info = result.setdefault(variant, {})
        ordered = sorted(t)
        info["feasible"] = info.get("feasible", True)
        info["step_ms"] = t
        info["median_ms"] = statistics.median(t)
        info["min_ms"], info["max_ms"] = ordered[0], ordered[-1]
        info["vs_checkpoint"] = checkpoint_median / info["median_ms"]
        if held[variant]:
            info["peak_held_bytes"] = max(held[variant])
            info["recompute_ms_median"] = statistics.median(recompute_ms[variant])
            info["memory_wait_ms_median"] = statistics.median(wait_ms[variant])
            info["step_kinds"] = dict(info["step_kinds"])
    return result


# ---- Report ----------------------------------------------------------------------------


def mib(n):
    return "-" if n is None else f"{n / 2**20:.2f}"


def report(results, log):
    for r in results:
        log(f"\n{r['model']}: {r['description']} {r['shape']}; {r['rounds']} interleaved rounds, 1 thread")
        log(f"held activation peak: eager {mib(r['eager_peak_held_bytes'])} MiB, checkpointing "
            f"{mib(r['checkpoint_peak_held_bytes'])} MiB (the budget)")
        log(f"| variant | step ms, median (min-max) | vs checkpoint | held peak MiB | recomputes (RNG replay) "
            f"| recompute ms | offloaded MiB | memory wait ms |")
        log("|---|---|---|---|---|---|---|---|")
        for variant in r["variants"]:
            info = r.get(variant, {})
            if not info.get("feasible", True):
                log(f"| {variant} | infeasible, floor {mib(info['floor_bytes'])} MiB | | | | | | |")
                continue
            peak = info.get("peak_held_bytes")
            if variant == "eager":
                peak = r["eager_peak_held_bytes"]
            elif variant == "checkpoint":
                peak = r["checkpoint_peak_held_bytes"]
            rec = info.get("recomputes")
            log(f"| {variant} | {info['median_ms']:.1f} ({info['min_ms']:.1f}-{info['max_ms']:.1f}) "
                f"| {info['vs_checkpoint']:.2f}x | {mib(peak)} "
                f"| {'' if rec is None else str(rec['count']) + ' (' + str(rec['rng_replay']) + ')'} "
                f"| {info.get('recompute_ms_median', 0.0):.1f} | {mib(info.get('offloaded_bytes', 0))} "
                f"| {info.get('memory_wait_ms_median', 0.0):.1f} |")
        extra = {v: r[v]["median_ms"] - r["eager"]["median_ms"] for v in r["variants"] if "median_ms" in r[v]}
        log("median step time over eager's: " + ", ".join(f"{v} {ms:+.1f} ms" for v, ms in extra.items()))
        for variant in r["variants"][3:]:
            rec = r[variant].get("recomputes")
            if rec and rec["count"]:
                forward = rec["forward_traced_ms"]
                log(f"{variant} re-runs {rec['count']} ops per step ({rec['distinct_ops']} distinct, one up to "
                    f"{rec['most_reruns']}x), {rec['traced_ms']:.1f} ms traced ({rec['matmul_traced_ms']:.1f} ms "
                    f"of it matmuls; the whole forward to the loss is {forward or 0.0:.1f} ms traced): "
                    + ", ".join(f"{op} x{n}" for op, n in rec["by_op"].items()))


def _span(values, fmt="{:.0f}"):
    low, high = min(values), max(values)
    return fmt.format(low) if low == high else fmt.format(low) + "-" + fmt.format(high)


def combine(paths, log):
    """Pools the step times of several --json runs (same models and variants) into one table per model."""
    documents = []
    for path in paths:
        with open(path) as f:
            documents.append(json.load(f))
    by_model = collections.defaultdict(list)
    for document in documents:
        for r in document["results"]:
            by_model[r["model"]].append(r)
    for model, runs in by_model.items():
        if any(r["shape"] != runs[0]["shape"] for r in runs):
            raise SystemExit(f"{model}: the runs have different shapes")
        rounds = sum(r["rounds"] for r in runs)
        log(f"\n{model}: {runs[0]['description']} {runs[0]['shape']}; {len(runs)} runs, {rounds} interleaved "
            f"rounds in all, 1 thread; held activation peak: eager {mib(runs[0]['eager_peak_held_bytes'])} MiB, "
            f"checkpointing {mib(runs[0]['checkpoint_peak_held_bytes'])} MiB")
        log("| variant | step ms, median (IQR) [min] | vs checkpoint | vs checkpoint per run | held peak MiB "
            "| recomputes per step (RNG replay) | re-run ms, traced |")
        log("|---|---|---|---|---|---|---|")
        pooled = {}
        variants = list(dict.fromkeys(v for r in runs for v in r["variants"]))
        for variant in variants:
            pooled[variant] = [t for r in runs for t in r.get(variant, {}).get("step_ms", [])]
        checkpoint = statistics.median(pooled["checkpoint"])
        for variant in variants:
            infos = [r[variant] for r in runs if variant in r]
            if not all(info["feasible"] for info in infos):
                floors = [info["floor_bytes"] for info in infos if not info["feasible"]]
                log(f"| {variant} | infeasible in {len(floors)} of {len(infos)} runs, floor "
                    f"{_span([f / 2**20 for f in floors], '{:.2f}')} MiB | | | | | |")
                continue
            t = pooled[variant]
            q1, _, q3 = statistics.quantiles(t, n=4) if len(t) > 1 else (t[0], t[0], t[0])
            median = statistics.median(t)
            per_run = ", ".join(f"{info['vs_checkpoint']:.2f}" for info in infos)
            if variant in ("eager", "checkpoint"):
                peaks = [r[f"{variant}_peak_held_bytes"] for r in runs]
            else:
                peaks = [info["peak_held_bytes"] for info in infos]
            recs = [info["recomputes"] for info in infos if "recomputes" in info]
            rec = "" if not recs else (f"{_span([x['count'] for x in recs])} "
                                       f"({_span([x['rng_replay'] for x in recs])})")
            traced = "" if not recs else _span([x["traced_ms"] for x in recs])
            log(f"| {variant} | {median:.0f} ({q1:.0f}-{q3:.0f}) [{min(t):.0f}] | {checkpoint / median:.2f}x "
                f"| {per_run} | {_span([p / 2**20 for p in peaks], '{:.2f}')} | {rec} | {traced} |")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--models", default="hf_gpt2,hf_llama,gpt_decoder")
    parser.add_argument("--quick", action="store_true", help="tiny models, 2 rounds")
    parser.add_argument("--json", help="write the results as JSON to this path")
    parser.add_argument("--seed", type=int, default=0, help="seed of the round order")
    parser.add_argument("--combine", nargs="+", metavar="JSON",
                        help="print one table per model pooling these --json runs, and run nothing")
    parser.add_argument("--looser", default="1.25,1.5",
                        help="also run planner='recompute' at these multiples of checkpointing's peak "
                             "(comma-separated, each > 1; '' for none)")
    args = parser.parse_args(argv)
    if args.combine:
        combine(args.combine, lambda line: print(line, flush=True))
        return {"combined": args.combine}
    names = [n for n in args.models.split(",") if n]
    unknown = [n for n in names if n not in BUILDERS]
    if unknown:
        parser.error(f"unknown model(s) {unknown}; known: {sorted(BUILDERS)}")
    try:
        looser = [float(f) for f in args.looser.split(",") if f.strip()]
    except ValueError:
        parser.error(f"--looser: not a comma-separated list of numbers: {args.looser!r}")
    if any(not f > 1 for f in looser):
        parser.error("--looser: every multiple must be above 1")
    rounds = 2 if args.quick else args.rounds
    if rounds < 1:
        parser.error("--rounds must be at least 1")
    torch.set_num_threads(1)
    malloc = keep_freed_memory()  # before any tensor: every variant runs on the same malloc
    random.seed(args.seed)
    shapes = QUICK if args.quick else FULL

    def log(line):
        print(line, flush=True)

    log(malloc)
    results = []
    for name in names:
        log(f"{name} ...")
        results.append(run_model(name, shapes[name], rounds, log, looser))
    report(results, log)
    document = {"torch": torch.__version__, "transformers": transformers.__version__, "threads": 1,
                "malloc": malloc, "quick": args.quick, "results": results}
    if args.json:
        write_atomically(args.json, json.dumps(document, indent=1))
    return document


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
