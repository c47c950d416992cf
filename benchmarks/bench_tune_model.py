"""`tuner tune-model` on Hugging Face models that are not in the zoo: time, and the gain of the
exported priors over the defaults and over the priors it started from (the main job's export).

Each model here is a factory ``tune-model`` can be pointed at, e.g.::

    tuner tune-model benchmarks/bench_tune_model.py:qwen2 --inputs "int64[1,32]" \\
        --from demo-priors.json --trials 10

The benchmark runs `rewrite_tuner.tune_model.tune_model` on each model with several tuner seeds
(a fresh study each), prints a table (wall seconds by phase; the best trial against the defaults
and against the given priors on 6 fresh search seeds: difference of ``anytime_hv`` with its 95%
interval; what was exported) and writes ``benchmarks/results/bench_tune_model.json``.

Usage: ``python -m benchmarks.bench_tune_model --priors demo-priors.json [--models qwen2,phi3]
[--seeds 3] [--trials 10]`` (``make run`` writes ``demo-priors.json``).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

#: Small configurations (2 layers, width 128, vocabulary 1000), like the zoo's small models.
_SMALL = {
    "num_hidden_layers": 2,
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 1000,
    "max_position_embeddings": 256,
    "bos_token_id": 0,
    "eos_token_id": 0,
    "pad_token_id": 0,
}
INPUTS = ["int64[1,32]"]


def _causal_lm(config_name: str, model_name: str, **extra: Any) -> Any:
    import torch
    import transformers

    config = getattr(transformers, config_name)(**{**_SMALL, **extra})
    torch.manual_seed(0)
    lm = getattr(transformers, model_name)(config)

    class CausalLM(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lm = lm

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            return self.lm(input_ids=ids, use_cache=False).logits

    return CausalLM()


def qwen2() -> Any:
    """A small Qwen2 (grouped-query attention, RMS norm, SwiGLU, biased Q/K/V)."""
    return _causal_lm("Qwen2Config", "Qwen2ForCausalLM")


def phi3() -> Any:
    """A small Phi-3 (fused QKV and gate/up projections)."""
    return _causal_lm("Phi3Config", "Phi3ForCausalLM")


def mistral() -> Any:
    """A small Mistral (sliding-window attention)."""
    return _causal_lm("MistralConfig", "MistralForCausalLM")


MODELS = {"qwen2": qwen2, "phi3": phi3, "mistral": mistral}


def run_one(model: str, seed: int, priors: str, trials: int, tmp: Path) -> dict[str, Any]:
    """One fresh tune-model study of ``model`` with tuner seed ``seed``."""
    from rewrite_tuner.tune_model import tune_model

    t0 = time.perf_counter()
    res = tune_model(
        f"{Path(__file__).resolve()}:{model}",
        INPUTS,
        priors=priors,
        trials=trials,
        storage=f"sqlite:///{tmp / f'{model}-{seed}.db'}",
        seed=seed,
        out=tmp / f"{model}-{seed}.json",
    )
    wall = time.perf_counter() - t0
    first = next(iter(res.validation.objectives))
    training = res.validation.training
    row: dict[str, Any] = {
        "model": model,
        "tuner_seed": seed,
        "wall_s": wall,
        "seconds": res.seconds,
        "chosen": res.validation.chosen,
        "shown": res.validation.shown,
        "exported": res.exported is not None,
        "verdict": res.verdict,
        "vs_defaults": training.overall[first]["difference"] if training else None,
        "vs_given": res.against_given.overall[first]["difference"] if res.against_given else None,
        "candidates": res.validation.candidates,  # each: trial, values, training diffs, beats
    }
    print(f"  {model} seed {seed}: {wall:.0f} s; {res.verdict}", flush=True)
    return row


def _fmt(d: dict[str, float] | None) -> str:
    if d is None:
        return "(is the given priors)"
    return f"{d['value']:+.3f} [{d['low']:+.3f}, {d['high']:+.3f}]"


def main() -> None:
    # imported here: `tuner tune-model` imports this file by path, for its model factories
    from benchmarks._common import machine_info, write_results

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--priors", default="demo-priors.json", help="priors file to start from")
    ap.add_argument("--models", default="qwen2,phi3")
    ap.add_argument("--seeds", type=int, default=3, help="tuner seeds (fresh studies) per model")
    ap.add_argument("--trials", type=int, default=10)
    args = ap.parse_args()
    if not os.path.exists(args.priors):
        ap.error(f"--priors {args.priors!r} does not exist; `make run` writes demo-priors.json")
    names = [m for m in args.models.split(",") if m]
    unknown = sorted(set(names) - set(MODELS))
    if unknown:
        ap.error(f"unknown models {unknown}; choose from {sorted(MODELS)}")
    warnings.filterwarnings("ignore")
    machine = machine_info()
    rows: list[dict[str, Any]] = []
    settings = {"priors": args.priors, "trials": args.trials, "inputs": INPUTS, "sizes": _SMALL}
    with tempfile.TemporaryDirectory() as tmp:
        for model in names:
            for seed in range(args.seeds):
                rows.append(run_one(model, seed, args.priors, args.trials, Path(tmp)))
                write_results("bench_tune_model", {**settings, "rows": rows}, machine=machine)
    print(
        f"\n{'model':8} {'seed':>4} {'wall s':>7}  {'vs defaults':24} {'vs given priors':24} exported"
    )
    for r in rows:
        print(
            f"{r['model']:8} {r['tuner_seed']:>4} {r['wall_s']:>7.0f}  {_fmt(r['vs_defaults']):24} "
            f"{_fmt(r['vs_given']):24} {'yes' if r['exported'] else 'no'}"
        )
    print("\nwrote benchmarks/results/bench_tune_model.json")


if __name__ == "__main__":
    main()
