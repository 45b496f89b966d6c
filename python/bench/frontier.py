"""The race against `transformers`' own frontier: activation_checkpointing_enable(every_n_layers=N) (issue 35, part 3).

    PYTHONPATH=build/python OMP_NUM_THREADS=1 .venv/bin/python python/bench/frontier.py \\
        [--models gpt2,llama,bert,vit] [--points 1,2,3] [--rounds 7] [--seed 0]
        [--quick] [--offload] [--json PATH] [--plot PATH.svg]

Users who run out of memory write one line,
`model.activation_checkpointing_enable(every_n_layers=N)`; each N is a point
on the trade-off they already have: activation memory against step time. For
each model (training mode, dropout on, gradients set to None before each
step, the CPU, one intra-op thread) and each N this measures:

  checkpoint N  `transformers`' checkpointing of every N-th layer
                (torch.utils.checkpoint, non-reentrant, RNG state preserved);
                its activation memory is measured, not estimated: one step
                inside an OffloadSession with no budget gives the peak of the
                memory the step held for activations (peak_held_bytes);
  recompute N   OffloadSession(planner="recompute") on the unchanged model at
                that memory (max_resident_activation_bytes);
  hybrid N      OffloadSession(planner="hybrid") at that memory, on an
                emulated link (emulate_copy_bandwidth) as slow against compute
                as a GPU's: moving the whole eager activation peak one way
                takes twice the eager step (the ratio of the A100 link in the
                built-in demo), so offloading costs stall as on a GPU;

and eager, the model as written (the point at 100% of the memory). With
--offload (a CUDA device needed) everything runs on the GPU, hybrid on the
real link, and `activation_checkpointing_enable(every_n_layers=N,
offload=True)` is one more variant per point ("checkpoint N offload": its
saved activations in pinned host memory), timed on the same rounds; without
it the script runs on the CPU and says that offload=True was not measured.

Every session is checked against the two rules that decide whether its number
counts: each measured step holds at most its budget (peak_held_bytes), and a
step under the session gives gradients bit-identical to eager's from the same
weights, batch and RNG seed (torch.equal on every gradient). A budget below a
planner's floor raises BudgetError at the end of its warmup: "infeasible",
with the floor.

After each session's warmup and first replay, --rounds rounds run one step of
every variant, in a new random order per round (interleaved, so the machine's
noise hits all alike). Reported per point: the median step (min-max), the
speed of recompute and hybrid relative to checkpointing (its median over
theirs: 1.25 = 25% faster), and the better of the two as a ratio of
checkpointing's step (the issue's target is at most 0.85). --plot writes an
SVG per run: memory on x, median step time on y, the checkpointing frontier
and ours.

--quick: tiny models, 2 rounds (python/tests/test_frontier.py).
"""

from __future__ import annotations

import argparse
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

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "tests"))

import torchvision_models  # noqa: E402,F401  (before transformers, which imports torchvision)
import transformers  # noqa: E402

import hyperoffload as ho  # noqa: E402
from bench_steps import keep_freed_memory, measured_peak, step, write_atomically  # noqa: E402  (python/bench/bench_steps.py)

DEVICE = torch.device("cpu")  # main() sets cuda with --offload

transformers.logging.set_verbosity_error()

FULL = {
    "gpt2": dict(vocab=2048, seq=256, width=256, heads=4, layers=6, batch=4, dropout=0.1),
    "llama": dict(vocab=2048, seq=256, width=256, heads=4, kv_heads=2, layers=6, ffn=688, batch=4, dropout=0.1),
    "bert": dict(vocab=2048, seq=256, width=256, heads=4, layers=6, ffn=1024, batch=4, dropout=0.1),
    "vit": dict(image=128, patch=16, width=256, heads=4, layers=6, ffn=1024, batch=16, dropout=0.1, classes=10),
}
QUICK = {
    "gpt2": dict(vocab=128, seq=32, width=32, heads=2, layers=3, batch=2, dropout=0.1),
    "llama": dict(vocab=128, seq=32, width=32, heads=2, kv_heads=1, layers=3, ffn=64, batch=2, dropout=0.1),
    "bert": dict(vocab=128, seq=32, width=32, heads=2, layers=3, ffn=64, batch=2, dropout=0.1),
    "vit": dict(image=32, patch=8, width=32, heads=2, layers=3, ffn=64, batch=2, dropout=0.1, classes=10),
}
DESCRIPTIONS = {
    "gpt2": "transformers GPT2LMHeadModel (resid/embd/attn dropout)",
    "llama": "transformers LlamaForCausalLM (attention dropout)",
    "bert": "transformers BertForMaskedLM (hidden/attention dropout)",
    "vit": "transformers ViTForImageClassification (hidden/attention dropout)",
}


# ---- Models: (model, loss of a model) -------------------------------------------------------


def build(name, s):
    """The model in training mode and a function giving the loss of any copy of it on one fixed batch."""
    torch.manual_seed(20 + sorted(FULL).index(name))
    if name == "gpt2":
        model = transformers.GPT2LMHeadModel(transformers.GPT2Config(
            vocab_size=s["vocab"], n_positions=s["seq"], n_embd=s["width"], n_layer=s["layers"], n_head=s["heads"],
            resid_pdrop=s["dropout"], embd_pdrop=s["dropout"], attn_pdrop=s["dropout"]))
    elif name == "llama":
        model = transformers.LlamaForCausalLM(transformers.LlamaConfig(
            vocab_size=s["vocab"], hidden_size=s["width"], intermediate_size=s["ffn"],
            num_hidden_layers=s["layers"], num_attention_heads=s["heads"], num_key_value_heads=s["kv_heads"],
            max_position_embeddings=s["seq"], attention_dropout=s["dropout"]))
    elif name == "bert":
        model = transformers.BertForMaskedLM(transformers.BertConfig(
            vocab_size=s["vocab"], hidden_size=s["width"], num_hidden_layers=s["layers"],
            num_attention_heads=s["heads"], intermediate_size=s["ffn"], max_position_embeddings=s["seq"],
            hidden_dropout_prob=s["dropout"], attention_probs_dropout_prob=s["dropout"]))
    else:
        model = transformers.ViTForImageClassification(transformers.ViTConfig(
            image_size=s["image"], patch_size=s["patch"], hidden_size=s["width"], num_hidden_layers=s["layers"],
            num_attention_heads=s["heads"], intermediate_size=s["ffn"], num_labels=s["classes"],
            hidden_dropout_prob=s["dropout"], attention_probs_dropout_prob=s["dropout"]))
    if hasattr(model.config, "use_cache"):
        model.config.use_cache = False
    model.to(DEVICE).train()
    if name == "vit":
        pixels = torch.randn(s["batch"], 3, s["image"], s["image"]).to(DEVICE)
        labels = torch.randint(0, s["classes"], (s["batch"],)).to(DEVICE)
        return model, lambda m: m(pixel_values=pixels, labels=labels).loss
    tokens = torch.randint(0, s["vocab"], (s["batch"], s["seq"])).to(DEVICE)
    return model, lambda m: m(input_ids=tokens, labels=tokens).loss  # the causal models shift the labels


def checkpointed(model, every_n_layers, offload=False):
    """A copy of the model with `transformers`' checkpointing of every N-th layer."""
    copied = copy.deepcopy(model)
    copied.activation_checkpointing_enable(every_n_layers=every_n_layers, offload=offload)
    copied.train()
    return copied


def gradients_after_one_step(model, loss_of, session=None, seed=1234):
    """The gradients of one step from a fixed RNG seed (dropout masks alike)."""
    for p in model.parameters():
        p.grad = None
    torch.manual_seed(seed)
    if session is None:
        loss_of(model).backward()
    else:
        with session:
            loss_of(model).backward()
    return [None if p.grad is None else p.grad.clone() for p in model.parameters()]


def bit_identical(a, b):
    return len(a) == len(b) and all((x is None and y is None) or (x is not None and y is not None and torch.equal(x, y))
                                    for x, y in zip(a, b))


# ---- One model ----------------------------------------------------------------------------


def run_model(name, shape, points, rounds, log, offload=False):
    model, loss_of = build(name, shape)
    result = {"model": name, "description": DESCRIPTIONS[name], "shape": shape, "rounds": rounds, "points": []}
    eager_call = lambda: loss_of(model)  # noqa: E731
    eager_peak = measured_peak(eager_call, [model])
    eager_ms = statistics.median(step(eager_call, [model]) for _ in range(3))
    # The emulated link (CPU only): the whole eager activation peak one way in twice the eager step.
    link_gib_per_s = eager_peak / (2 * eager_ms / 1e3) / 2**30 if DEVICE.type == "cpu" else None
    result.update(eager_peak_held_bytes=eager_peak, link_gib_per_s=link_gib_per_s)
    reference = gradients_after_one_step(model, loss_of)

    variants = {"eager": (eager_call, [model], None, None)}
    for n in points:
        ckpt = checkpointed(model, n)
        call = (lambda m: lambda: loss_of(m))(ckpt)
        budget = measured_peak(call, [ckpt])
        point = {"every_n_layers": n, "budget_bytes": budget, "fraction_of_eager": budget / eager_peak}
        result["points"].append(point)
        variants[f"checkpoint {n}"] = (call, [ckpt], None, None)
        if offload:
            moved = checkpointed(model, n, offload=True)
            moved_call = (lambda m: lambda: loss_of(m))(moved)
            point["offload_budget_bytes"] = measured_peak(moved_call, [moved])
            variants[f"checkpoint {n} offload"] = (moved_call, [moved], None, None)
        for planner in ("recompute", "hybrid"):
            config = dict(max_resident_activation_bytes=budget, planner=planner)
            if planner == "hybrid" and link_gib_per_s is not None:
                config.update(copy_bandwidth_gib_per_s=link_gib_per_s, emulate_copy_bandwidth=True)
            session = ho.OffloadSession(ho.OffloadConfig(**config))
            info = point.setdefault(planner, {})
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    step(eager_call, [model], session)  # warmup
                    step(eager_call, [model], session)  # first replay
            except ho.BudgetError:
                info.update(feasible=False, floor_bytes=session.floor_bytes())
                log(f"  {planner} at every_n_layers={n} ({budget / 2**20:.2f} MiB): infeasible, floor "
                    f"{(session.floor_bytes() or 0) / 2**20:.2f} MiB")
                continue
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                got = gradients_after_one_step(model, loss_of, session)
            # The planner's note names the plan it chose (e.g. "recompute-only, segment re-runs (...)").
            plan_notes = [note for note in session.notes() if note.startswith(f"{planner}:")]
            info.update(feasible=True, floor_bytes=session.floor_bytes(),
                        bit_identical=bit_identical(reference, got), kinds=[], within_budget=True,
                        plan_note=plan_notes[-1] if plan_notes else None)
            variants[f"{planner} {n}"] = (eager_call, [model], session, budget)

    times = {v: [] for v in variants}
    order = list(variants)
    for _ in range(rounds):
        random.shuffle(order)
        for variant in order:
            call, modules, session, budget = variants[variant]
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                times[variant].append(step(call, modules, session))
            if session is not None:
                stats = session.stats()
                info = next(p for p in result["points"] if p["every_n_layers"] == int(variant.split()[1]))
                info = info[variant.split()[0]]
                info["kinds"].append(stats["kind"])
                info["peak_held_bytes"] = max(info.get("peak_held_bytes", 0), stats["peak_held_bytes"])
                info["within_budget"] = info["within_budget"] and stats["peak_held_bytes"] <= budget

    def summary(t):
        return {"median_ms": statistics.median(t), "min_ms": min(t), "max_ms": max(t), "step_ms": t}

    result["eager"] = summary(times["eager"])
    for point in result["points"]:
        n = point["every_n_layers"]
        point["checkpoint"] = summary(times[f"checkpoint {n}"])
        if offload:
            point["checkpoint_offload"] = summary(times[f"checkpoint {n} offload"])
        best = None
        for planner in ("recompute", "hybrid"):
            info = point[planner]
            if not info["feasible"]:
                continue
            info.update(summary(times[f"{planner} {n}"]))
            info["vs_checkpoint"] = point["checkpoint"]["median_ms"] / info["median_ms"]
            counts = (info["bit_identical"] and info["within_budget"]
                      and all(kind == "replay" for kind in info["kinds"]))
            info["counts"] = counts
            if counts and (best is None or info["median_ms"] < point[best]["median_ms"]):
                best = planner
        point["best"] = best
        point["best_ratio"] = None if best is None else point[best]["median_ms"] / point["checkpoint"]["median_ms"]
    return result


# ---- Report -----------------------------------------------------------------------------


def mib(n):
    return f"{n / 2**20:.2f}"


def cell(info):
    if not info.get("feasible", False):
        return f"infeasible (floor {mib(info.get('floor_bytes') or 0)} MiB)"
    flags = []
    if not info["bit_identical"]:
        flags.append("NOT bit-identical")
    if not info["within_budget"]:
        flags.append(f"over budget: {mib(info['peak_held_bytes'])} MiB")
    if any(kind != "replay" for kind in info["kinds"]):
        flags.append("steps: " + ",".join(sorted(set(info["kinds"]))))
    text = f"{info['median_ms']:.1f} ({info['min_ms']:.1f}-{info['max_ms']:.1f}), {info['vs_checkpoint']:.2f}x"
    return text + ("" if not flags else " [" + "; ".join(flags) + "]")


def report(results, log):
    for r in results:
        log(f"\n{r['model']}: {r['description']} {r['shape']}; {r['rounds']} interleaved rounds, 1 thread; "
            f"eager {r['eager']['median_ms']:.1f} ms ({r['eager']['min_ms']:.1f}-{r['eager']['max_ms']:.1f}), "
            f"activations {mib(r['eager_peak_held_bytes'])} MiB; hybrid's link "
            + ("the device's" if r["link_gib_per_s"] is None else f"{r['link_gib_per_s']:.3f} GiB/s (emulated)"))
        log("| every_n_layers | memory MiB (of eager) | checkpoint ms, median (min-max) | recompute ms, vs checkpoint "
            "| hybrid ms, vs checkpoint | better of ours / checkpoint |")
        log("|---|---|---|---|---|---|")
        for p in r["points"]:
            c = p["checkpoint"]
            best = "-" if p["best"] is None else f"**{p['best_ratio']:.2f}** ({p['best']})"
            log(f"| {p['every_n_layers']} | {mib(p['budget_bytes'])} ({100 * p['fraction_of_eager']:.0f}%) "
                f"| {c['median_ms']:.1f} ({c['min_ms']:.1f}-{c['max_ms']:.1f}) | {cell(p['recompute'])} "
                f"| {cell(p['hybrid'])} | {best} |")
            if "checkpoint_offload" in p:
                o = p["checkpoint_offload"]
                log(f"|   offload=True | {mib(p['offload_budget_bytes'])} | {o['median_ms']:.1f} "
                    f"({o['min_ms']:.1f}-{o['max_ms']:.1f}) | | | |")
    if DEVICE.type == "cpu":
        log("\n(on the CPU: activation_checkpointing_enable(offload=True) not measured; --offload on a CUDA device "
            "measures it)")


def plot(results, path):
    """One SVG, a panel per model: memory (MiB) on x, median step (ms) on y; checkpointing and ours."""
    width, height, pad = 360, 260, 48
    panels = []
    for i, r in enumerate(results):
        ckpt = [(p["budget_bytes"] / 2**20, p["checkpoint"]["median_ms"]) for p in r["points"]]
        ckpt.append((r["eager_peak_held_bytes"] / 2**20, r["eager"]["median_ms"]))
        ours = [(p["budget_bytes"] / 2**20, p[p["best"]]["median_ms"]) for p in r["points"] if p["best"]]
        xs = [x for x, _ in ckpt + ours]
        ys = [y for _, y in ckpt + ours]
        x0, x1 = 0.0, max(xs) * 1.05
        y0, y1 = 0.0, max(ys) * 1.1

        def at(x, y):
            return (i * width + pad + (x - x0) / (x1 - x0) * (width - 2 * pad),
                    height - pad - (y - y0) / (y1 - y0) * (height - 2 * pad))

        def line(points, colour):
            pts = sorted(points)
            coords = " ".join("{:.1f},{:.1f}".format(*at(x, y)) for x, y in pts)
            dots = "".join('<circle cx="{:.1f}" cy="{:.1f}" r="3" fill="{}"/>'.format(*at(x, y), colour)
                           for x, y in pts)
            return f'<polyline points="{coords}" fill="none" stroke="{colour}" stroke-width="2"/>{dots}'

        ox, oy = at(x0, y0)
        ex, _ = at(x1, y0)
        _, ty = at(x0, y1)
        panels.append(
            f'<line x1="{ox:.1f}" y1="{oy:.1f}" x2="{ex:.1f}" y2="{oy:.1f}" stroke="#333"/>'
            f'<line x1="{ox:.1f}" y1="{oy:.1f}" x2="{ox:.1f}" y2="{ty:.1f}" stroke="#333"/>'
            f'<text x="{ox:.1f}" y="{ty - 8:.1f}" font-size="12">{r["model"]}: step ms against activation MiB</text>'
            f'<text x="{ex:.1f}" y="{oy + 28:.1f}" font-size="10" text-anchor="end">{x1:.1f} MiB</text>'
            f'<text x="{ox - 4:.1f}" y="{ty + 4:.1f}" font-size="10" text-anchor="end">{y1:.0f}</text>'
            + line(ckpt, "#c44") + (line(ours, "#36c") if ours else ""))
    legend = ('<text x="8" y="{0}" font-size="11" fill="#c44">red: transformers checkpointing '
              '(every_n_layers 1, 2, 3, and eager)</text><text x="8" y="{1}" font-size="11" fill="#36c">'
              'blue: hyperoffload, the better of recompute and hybrid at each point\'s memory</text>'
              ).format(height + 14, height + 30)
    svg = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width * max(1, len(results))}" height="{height + 40}">'
           + "".join(panels) + legend + "</svg>\n")
    write_atomically(path, svg)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="gpt2,llama,bert,vit")
    parser.add_argument("--points", default="1,2,3", help="every_n_layers values (comma-separated)")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--seed", type=int, default=0, help="seed of the round order")
    parser.add_argument("--quick", action="store_true", help="tiny models, 2 rounds")
    parser.add_argument("--offload", action="store_true",
                        help="on a CUDA device: everything on the GPU, and checkpointing with offload=True too")
    parser.add_argument("--json", help="write the results as JSON to this path")
    parser.add_argument("--plot", help="write the frontiers as SVG to this path")
    args = parser.parse_args(argv)
    names = [n for n in args.models.split(",") if n]
    unknown = [n for n in names if n not in FULL]
    if unknown:
        parser.error(f"unknown model(s) {unknown}; known: {sorted(FULL)}")
    try:
        points = [int(p) for p in args.points.split(",") if p.strip()]
    except ValueError:
        parser.error(f"--points: not a comma-separated list of integers: {args.points!r}")
    if not points or any(p < 1 for p in points):
        parser.error("--points: every_n_layers values must be at least 1")
    rounds = 2 if args.quick else args.rounds
    if rounds < 1:
        parser.error("--rounds must be at least 1")
    global DEVICE
    if args.offload:
        if not torch.cuda.is_available():
            print("frontier.py: --offload needs a CUDA device; none is available", file=sys.stderr)
            raise SystemExit(2)
        DEVICE = torch.device("cuda")
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
        results.append(run_model(name, shapes[name], points, rounds, log, offload=args.offload))
    report(results, log)
    document = {"torch": torch.__version__, "transformers": transformers.__version__, "threads": 1,
                "malloc": malloc, "quick": args.quick, "device": DEVICE.type, "results": results}
    if args.json:
        write_atomically(args.json, json.dumps(document, indent=1))
    if args.plot:
        plot(results, args.plot)
    return document


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
