"""End to end: does the rewritten model run faster than what a user would run instead?

Six models built from Hugging Face configs (random seeded weights, real tensors, nothing
downloaded): GPT-2 124M at sequence 256, BERT-base at 128, a 2-layer Llama at width 2048 (the
TinyLlama shape, sequence 256), ViT-B/16 at 224, ResNet-50 at 224, T5-small's encoder at 128;
batch 1, float32, on the CPU (or ``--device cuda``). For each, one run, every arm timed interleaved (round robin, so the
machine's drift falls on all arms alike):

* ``eager``: the original module;
* ``compile``: ``torch.compile(module)`` (Inductor, default options): the baseline (Inductor's
  on-disk graph cache is off, so every arm's compile seconds are a first compilation's);
* ``optimize``: ``rewrite.optimize_module(module, ...)`` run eagerly (the original itself when no
  rewritten graph measured faster);
* ``backend``: ``torch.compile(module, backend=rewrite.backend(...))``: the verified search on the
  captured graph, then Inductor (or the rewritten graph eagerly, whichever measured fastest);
* with ``--priors FILE`` (e.g. the demo's ``demo-priors.json``) the two rewrite arms again with
  those tuned priors (``optimize_tuned``, ``backend_tuned``); the default priors are uniform.

Reported per model and arm: median latency, the speedup over ``compile`` (its median over the
arm's) with a 95% bootstrap interval over the rounds' paired ratios
(`rewrite.stats.paired_ratio_interval`), compile and search seconds, the rules of the chosen graph
and how the backend ran it. Repeated with one torch thread and with all threads (``--threads
1,0``). Prints a table per thread count and writes ``benchmarks/results/bench_e2e.json`` (run ``cpu`` or ``cuda``)
(machine, versions, seeds, every timed call).

Targets (issue 34): the backend never slower than ``compile`` beyond noise on any model; at least
1.05x faster (interval above 1) on three of the six on CPU.

Usage: ``python -m benchmarks.bench_e2e [--models gpt2,resnet] [--threads 1,0] [--repeats 15]
[--priors demo-priors.json] [--device cuda --threads 0]`` (on a GPU the thread count is the
search's and the CPU side's; ``benchmarks/gpu_checks.sh`` runs it with the other GPU checks).
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import argparse  # noqa: E402
import logging  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from collections.abc import Callable  # noqa: E402
from typing import Any  # noqa: E402

import torch  # noqa: E402

import rewrite  # noqa: E402
from benchmarks._common import machine_info, round_floats, write_results  # noqa: E402
from rewrite.measurement import time_callables  # noqa: E402
from rewrite.pytorch import dynamo  # noqa: E402
from rewrite.stats import paired_ratio_interval  # noqa: E402

SEED = 0


def _gpt2() -> tuple[Any, tuple[Any, ...], dict[str, Any]]:
    import transformers

    cfg = transformers.GPT2Config()
    return transformers.GPT2LMHeadModel(cfg), _tokens(cfg.vocab_size, 256), {"use_cache": False}


def _bert() -> tuple[Any, tuple[Any, ...], dict[str, Any]]:
    import transformers

    cfg = transformers.BertConfig()
    return transformers.BertModel(cfg), _tokens(cfg.vocab_size, 128), {}


def _llama() -> tuple[Any, tuple[Any, ...], dict[str, Any]]:
    import transformers

    cfg = transformers.LlamaConfig(
        hidden_size=2048,
        intermediate_size=5632,
        num_hidden_layers=2,
        num_attention_heads=32,
        num_key_value_heads=4,
        vocab_size=32000,
    )
    return transformers.LlamaForCausalLM(cfg), _tokens(32000, 256), {"use_cache": False}


def _vit() -> tuple[Any, tuple[Any, ...], dict[str, Any]]:
    import transformers

    return transformers.ViTModel(transformers.ViTConfig()), _image(), {}


def _resnet() -> tuple[Any, tuple[Any, ...], dict[str, Any]]:
    import transformers

    return transformers.ResNetModel(transformers.ResNetConfig()), _image(), {}


def _t5() -> tuple[Any, tuple[Any, ...], dict[str, Any]]:
    import transformers

    cfg = transformers.T5Config(  # t5-small
        d_model=512, d_kv=64, d_ff=2048, num_layers=6, num_heads=8, feed_forward_proj="relu"
    )
    return transformers.T5EncoderModel(cfg), _tokens(cfg.vocab_size, 128), {}


def _tokens(vocab: int, seq: int) -> tuple[Any, ...]:
    gen = torch.Generator().manual_seed(SEED)
    return (torch.randint(0, vocab, (1, seq), generator=gen),)


def _image() -> tuple[Any, ...]:
    gen = torch.Generator().manual_seed(SEED)
    return (torch.randn(1, 3, 224, 224, generator=gen),)


MODELS: dict[str, Callable[[], tuple[Any, tuple[Any, ...], dict[str, Any]]]] = {
    "gpt2": _gpt2,
    "bert": _bert,
    "llama": _llama,
    "vit": _vit,
    "resnet": _resnet,
    "t5": _t5,
}


def build(name: str, device: str = "cpu") -> tuple[Any, tuple[Any, ...], dict[str, Any]]:
    """The model ``name`` in eval mode with seeded weights on ``device``, its inputs (there too)
    and keyword inputs."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(SEED)
        model, args, kwargs = MODELS[name]()
    args = tuple(a.to(device) if isinstance(a, torch.Tensor) else a for a in args)
    return model.eval().to(device), args, kwargs


def _first_call(fn: Callable[[], Any], device: str) -> float:
    t0 = time.perf_counter()
    with torch.no_grad():
        fn()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return time.perf_counter() - t0


def run_model(name: str, repeats: int, priors: str | None, device: str = "cpu") -> dict[str, Any]:
    """Every arm of one model on ``device``, timed interleaved; the row of the results file."""
    model, args, kwargs = build(name, device)
    fns: dict[str, Callable[[], Any]] = {"eager": lambda: model(*args, **kwargs)}
    info: dict[str, dict[str, Any]] = {"eager": {}}

    torch._dynamo.reset()
    compiled = torch.compile(model)
    info["compile"] = {"compile_s": _first_call(lambda: compiled(*args, **kwargs), device)}
    fns["compile"] = lambda: compiled(*args, **kwargs)

    for tag, pri in (("", None), ("_tuned", priors)):
        if tag and pri is None:
            continue
        t0 = time.perf_counter()
        with torch.no_grad():
            opt, report = rewrite.optimize_module(model, args, kwargs, priors=pri, seed=SEED)
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        fns[f"optimize{tag}"] = lambda o=opt, t=tensors: o(*t)
        info[f"optimize{tag}"] = {
            "total_s": time.perf_counter() - t0,
            "seconds": dict(report.seconds),
            "chosen": report.chosen,
            "reason": report.reason,
            "rules": dict(report.rules),
            "predicted_speedup": report.predicted_speedup,
        }
        torch._dynamo.reset()
        dynamo.history.clear()
        backend = torch.compile(model, backend=rewrite.backend(priors=pri, cache=False))
        compile_s = _first_call(lambda b=backend: b(*args, **kwargs), device)
        fns[f"backend{tag}"] = lambda b=backend: b(*args, **kwargs)
        records = list(dynamo.history)
        info[f"backend{tag}"] = {
            "compile_s": compile_s,
            "graphs": [
                {
                    "rewritten": r.rewritten,
                    "runner": r.runner,
                    "reason": r.reason,
                    "rules": r.rules,
                    "predicted_speedup": r.predicted_speedup,
                    "measured": r.measured,
                    "seconds": r.seconds,
                }
                for r in records
            ],
        }
    timed = time_callables(fns, device, repeats=repeats, warmup=2, seed=SEED)
    base = timed["compile"].times
    arms = {}
    for arm, m in timed.items():
        iv = paired_ratio_interval(base, m.times, SEED)
        arms[arm] = {
            "latency": m.latency,
            "clock": m.clock,
            "speedup_vs_compile": iv.to_dict(),
            "times": list(m.times),
            **info.get(arm, {}),
        }
    return {"model": name, "device": device, "threads": torch.get_num_threads(), "arms": arms}


def _rules(arm: dict[str, Any]) -> str:
    rules: dict[str, int] = dict(arm.get("rules", {}))
    for g in arm.get("graphs", []):
        for r, n in g["rules"].items():
            rules[r] = rules.get(r, 0) + n
    top = sorted(rules.items(), key=lambda kv: -kv[1])[:3]
    return ", ".join(f"{r} x{n}" for r, n in top) or "-"


def _runner(arm: dict[str, Any]) -> str:
    graphs = arm.get("graphs")
    if graphs is None:
        if "chosen" not in arm:
            return "-"
        return "original" if arm["chosen"] < 0 else "rewritten"
    return "; ".join(g["runner"] for g in graphs) or "-"


def print_table(rows: list[dict[str, Any]]) -> None:
    """One line per model and arm: latency, speedup over torch.compile, seconds, rules."""
    print("| model | arm | median ms | vs compile (95% CI) | compile/search s | runs as | rules |")
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        for arm, a in row["arms"].items():
            iv = a["speedup_vs_compile"]
            secs = a.get("compile_s", a.get("total_s"))
            print(
                f"| {row['model']} | {arm} | {a['latency'] * 1e3:.1f} | "
                f"{iv['value']:.3f} [{iv['low']:.3f}, {iv['high']:.3f}] | "
                f"{'-' if secs is None else f'{secs:.0f}'} | {_runner(a) if arm != 'compile' else '-'} "
                f"| {_rules(a) if arm not in ('eager', 'compile') else '-'} |"
            )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--threads", default="1,0", help="comma list; 0 = all cores")
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--priors", default=None, help="a tuned priors file (tuner export)")
    parser.add_argument("--device", default="cpu", help="torch device: cpu or cuda")
    parser.add_argument(
        "--run", default=None, help="run name in results/bench_e2e.json (default: the device)"
    )
    args = parser.parse_args(argv)
    names = [m for m in args.models.split(",") if m]
    unknown = sorted(set(names) - set(MODELS))
    if unknown:
        parser.error(f"unknown models {unknown}; choose from {sorted(MODELS)}")
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        parser.error(f"--device {args.device!r}: no CUDA device here; use --device cpu")
    if args.priors is not None and not os.path.exists(args.priors):
        parser.error(f"--priors {args.priors!r} does not exist; run `make run` to write one")
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    # every compilation cold, as a user's first: Inductor's on-disk cache would serve the
    # backend's compilation of the captured graph from the compile arm's
    torch._inductor.config.fx_graph_cache = False
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    machine = machine_info()
    run = args.run or args.device.split(":")[0]
    results: list[dict[str, Any]] = []
    settings = {
        "models": names,
        "threads": args.threads,
        "repeats": args.repeats,
        "priors": args.priors,
        "device": args.device,
        "seed": SEED,
    }
    for threads in [int(t) for t in args.threads.split(",")]:
        torch.set_num_threads(threads or os.cpu_count() or 1)
        rows = []
        for name in names:
            print(f"== {name}, {torch.get_num_threads()} threads", flush=True)
            rows.append(run_model(name, args.repeats, args.priors, args.device))
            results.append(rows[-1])
            payload = {"settings": settings, "results": results}
            write_results("bench_e2e", round_floats(payload), machine=machine, run=run)
        where = "CPU" if args.device == "cpu" else torch.cuda.get_device_name(args.device)
        print(f"\n{torch.get_num_threads()} torch threads, {where}, batch 1, float32:")
        print_table(rows)
    print(f"\nwrote run {run!r} of benchmarks/results/bench_e2e.json")


if __name__ == "__main__":
    main()
