"""Real models built offline from configs and imported with `rewrite.from_torch`.

Models come from Hugging Face ``transformers`` classes built from a config, so nothing is
downloaded and no network is needed, with or without ``HF_HUB_OFFLINE``; building one leaves the
environment as it was. GPT-2, BERT, a LLaMA-family decoder, T5's encoder, ViT and a
ResNet-style CNN. Each has a ``small`` size (2 layers or stages, narrow; real random weights on
the CPU, seeded) and a ``full`` size (GPT-2 124M, BERT-base, a Llama-3-8B-shaped decoder in
bfloat16, the encoder of T5 v1.1 base, ViT-B/16, ResNet-50) whose parameters live on the
``meta`` device (no memory, no init time); buffers are materialized on the CPU first so constant
folding still sees their values.

Example:
    >>> g = zoo.build("gpt2")                           # small
    >>> g = zoo.build("gpt2", size="full", seq_len=256)
    >>> g = zoo.build("llama-full", num_hidden_layers=4)  # config fields override
"""

from __future__ import annotations

import contextlib
import difflib
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from rewrite.errors import RewriteError
from rewrite.ir import Graph

__all__ = ["SIZES", "ZooModel", "build", "input_kind", "model", "names"]

SIZES = ("small", "full")


@dataclass(frozen=True)
class _Spec:
    config_class: str
    model_class: str
    input_kind: str  # "tokens" | "image"
    small: dict[str, Any]
    full: dict[str, Any]
    full_defaults: dict[str, Any] = field(default_factory=dict)  # batch/seq_len/image_size/dtype
    small_defaults: dict[str, Any] = field(default_factory=dict)
    kwargs: dict[str, Any] = field(default_factory=dict)


_SMALL_TX = {
    "num_hidden_layers": 2,
    "hidden_size": 64,
    "num_attention_heads": 4,
    "intermediate_size": 128,
}
_SPECS: dict[str, _Spec] = {
    "gpt2": _Spec(
        "GPT2Config",
        "GPT2LMHeadModel",
        "tokens",
        small={
            "n_layer": 2,
            "n_embd": 64,
            "n_head": 4,
            "vocab_size": 1000,
            "n_positions": 128,
            "bos_token_id": 0,
            "eos_token_id": 0,
        },
        full={},
        full_defaults={"seq_len": 512},
        small_defaults={"seq_len": 16},
        kwargs={"use_cache": False},
    ),
    "bert": _Spec(
        "BertConfig",
        "BertModel",
        "tokens",
        small={**_SMALL_TX, "vocab_size": 1000},
        full={},
        full_defaults={"seq_len": 512},
        small_defaults={"seq_len": 16},
    ),
    "llama": _Spec(
        "LlamaConfig",
        "LlamaForCausalLM",
        "tokens",
        small={**_SMALL_TX, "num_key_value_heads": 2, "vocab_size": 1000},
        full={
            "hidden_size": 4096,
            "intermediate_size": 14336,
            "num_hidden_layers": 32,
            "num_attention_heads": 32,
            "num_key_value_heads": 8,
            "vocab_size": 128256,
            "max_position_embeddings": 8192,
            "rope_theta": 500000.0,
            "rms_norm_eps": 1e-5,
        },
        full_defaults={"seq_len": 1024, "dtype": "bfloat16"},
        small_defaults={"seq_len": 16},
        kwargs={"use_cache": False},
    ),
    "t5": _Spec(
        "T5Config",
        "T5EncoderModel",
        "tokens",
        small={
            "d_model": 64,
            "d_kv": 16,
            "d_ff": 128,
            "num_layers": 2,
            "num_heads": 4,
            "vocab_size": 1000,
            "feed_forward_proj": "gated-gelu",
        },
        full={  # T5 v1.1 base's encoder
            "d_model": 768,
            "d_kv": 64,
            "d_ff": 2048,
            "num_layers": 12,
            "num_heads": 12,
            "vocab_size": 32128,
            "feed_forward_proj": "gated-gelu",
        },
        full_defaults={"seq_len": 512},
        small_defaults={"seq_len": 16},
    ),
    "vit": _Spec(
        "ViTConfig",
        "ViTModel",
        "image",
        small={**_SMALL_TX, "image_size": 32, "patch_size": 8},
        full={},
        full_defaults={"image_size": 224},
        small_defaults={"image_size": 32},
    ),
    "resnet": _Spec(
        "ResNetConfig",
        "ResNetModel",
        "image",
        small={
            "embedding_size": 16,
            "hidden_sizes": [16, 32],
            "depths": [1, 1],
            "layer_type": "bottleneck",
        },
        full={},
        full_defaults={"image_size": 224},
        small_defaults={"image_size": 64},
    ),
}
_RUN_KEYS = ("batch", "seq_len", "image_size", "dtype", "device", "seed")


@dataclass(frozen=True)
class ZooModel:
    """A built (not yet imported) zoo model.

    Attributes:
        name: ``"<model>-<size>"``.
        module: The ``torch.nn.Module`` in eval mode.
        args: Example positional inputs.
        kwargs: Example keyword inputs (e.g. ``use_cache=False``).
        constants: Non-persistent buffer values by name (for meta-device modules).
    """

    name: str
    module: Any
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    constants: dict[str, Any]

    def to_graph(self) -> Graph:
        """Import the module with `rewrite.from_torch`."""
        from rewrite.torch_import import from_torch

        return from_torch(
            self.module, self.args, self.kwargs, name=self.name, constants=self.constants
        )


def names() -> list[str]:
    """Names of the zoo models (each available in `SIZES`)."""
    return sorted(_SPECS)


def input_kind(name: str) -> str:
    """``"tokens"`` (sized by ``seq_len``) or ``"image"`` (sized by ``image_size``) for a zoo
    model name (suffix allowed).

    Raises:
        RewriteError: On an unknown model.
    """
    return _SPECS[_split_name(name, None)[0]].input_kind


def _split_name(name: str, size: str | None) -> tuple[str, str]:
    if not isinstance(name, str):
        raise RewriteError(
            f"a zoo model name must be a string, but got {name!r} of type {type(name).__name__}; "
            f"pick one of {names()}, e.g. zoo.build('gpt2')."
        )
    head, _, tail = name.rpartition("-")
    base, suffix = (head, tail) if head and tail in SIZES else (name, "")
    if base not in _SPECS:
        key = "".join(c for c in base.lower() if c.isalnum())
        close = [n for n in names() if n == key] or difflib.get_close_matches(key, names(), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else "."
        raise RewriteError(
            f"unknown zoo model {name!r}: the models are {names()}, each optionally suffixed "
            f"-small or -full (e.g. 'gpt2-full'){hint}"
        )
    chosen = size or suffix or "small"
    if chosen not in SIZES:
        raise RewriteError(f"zoo model size must be one of {SIZES}, but got size={size!r}.")
    if suffix and size and suffix != size:
        raise RewriteError(
            f"zoo model {name!r} names size {suffix!r} but size={size!r} was passed; "
            "give the size once."
        )
    return base, chosen


def model(name: str, **overrides: Any) -> ZooModel:
    """Build a zoo model without importing it (see `build` for the arguments).

    The weights are seeded by ``seed``; the caller's global torch RNG state is left unchanged.
    """
    import torch
    import transformers

    base, size = _split_name(name, overrides.pop("size", None))
    spec = _SPECS[base]
    run = {**(spec.small_defaults if size == "small" else spec.full_defaults)}
    run.update({k: overrides.pop(k) for k in _RUN_KEYS if k in overrides})
    _check_run(run, name)
    config = getattr(transformers, spec.config_class)(
        **(spec.small if size == "small" else spec.full)
    )
    for k, v in overrides.items():
        if not hasattr(config, k):
            raise RewriteError(
                f"zoo override {k!r} is neither a run option {_RUN_KEYS} nor a field of {spec.config_class}; "
                "check the spelling against the transformers config."
            )
        _check_override(k, v, getattr(config, k), spec.config_class)
        try:
            setattr(config, k, v)
        except (TypeError, ValueError) as err:
            raise RewriteError(
                f"zoo override {k}={v!r} is refused by {spec.config_class}: "
                f"{' '.join(str(err).split())}. Pass a value of the field's type."
            ) from None
    _check_positions(config, run, name)
    if spec.input_kind == "image" and hasattr(config, "image_size") and "image_size" in run:
        config.image_size = run["image_size"]  # ViT sizes its position embeddings by it
    device = run.get("device", "cpu" if size == "small" else "meta")
    dtype = getattr(torch, run.get("dtype", "float32"))
    make = getattr(transformers, spec.model_class)
    # Weights come from the CPU generator, seeded here; fork_rng restores the caller's state.
    with (
        torch.random.fork_rng(devices=[]),
        _params_on_meta(device == "meta"),
        _quiet_transformers(),
    ):
        torch.random.default_generator.manual_seed(run.get("seed", 0))
        module = make(config).to(dtype).eval()
    constants = _non_persistent_buffers(module) if device == "meta" else {}
    if device == "meta":
        module = module.to("meta")
    args = _example_inputs(spec, config, run, device, dtype)
    return ZooModel(f"{base}-{size}", module, args, dict(spec.kwargs), constants)


def build(name: str, **overrides: Any) -> Graph:
    """Build a zoo model from its config and import it.

    Args:
        name: One of `names()`, optionally suffixed ``-small`` or ``-full``.
        **overrides: ``size`` (``"small"`` or ``"full"``, default small), run options ``batch``
            (default 1), ``seq_len`` / ``image_size``, ``dtype`` (torch dtype name), ``device``
            (``"cpu"`` or ``"meta"``; default cpu for small, meta for full), ``seed``, and any
            field of the model's transformers config (e.g. ``n_layer=4``).

    Returns:
        The imported `Graph`.

    Raises:
        RewriteError: On an unknown model, size or override; a run option of the wrong type or
            range (``batch``, ``seq_len``, ``image_size`` ints >= 1; ``seq_len`` within the
            model's positions); a count or size override below 1.
    """
    return model(name, **overrides).to_graph()


_DTYPES = ("float32", "float64", "float16", "bfloat16")
_DEVICES = ("cpu", "meta")
#: Config fields that count or size something (layers, heads, widths, positions): ints >= 1.
_COUNT_FIELD = re.compile(
    r"^(n_(layer|embd|head|inner|positions|ctx)|num_\w+|\w*_size|d_(model|kv|ff)|"
    r"max_position_embeddings|vocab_size)$"
)


def _check_run(run: dict[str, Any], name: str) -> None:
    """Refuse run options (``batch``, ``seq_len``, ``image_size``, ``seed``, ``dtype``,
    ``device``) of the wrong type or range, before anything is built."""
    for key in ("batch", "seq_len", "image_size"):
        if key in run:
            v = run[key]
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise RewriteError(
                    f"zoo run option {key} must be an int >= 1, but got {key}={v!r} for {name!r}; "
                    f"e.g. zoo.build({name!r}, {key}=16)."
                )
    seed = run.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise RewriteError(f"zoo run option seed must be an int >= 0, but got seed={seed!r}.")
    dtype = run.get("dtype", "float32")
    if dtype not in _DTYPES:
        raise RewriteError(
            f"zoo run option dtype must be one of {_DTYPES} (a torch floating dtype's name), "
            f"but got dtype={dtype!r}."
        )
    device = run.get("device", "cpu")
    if device not in _DEVICES:
        raise RewriteError(
            f"zoo run option device must be one of {_DEVICES}, but got device={device!r}: zoo "
            "models are built on the CPU (small) or without memory on 'meta' (full)."
        )


def _check_override(key: str, value: Any, current: Any, config_class: str) -> None:
    """Refuse a config override whose type differs from the field's, or a count below 1."""
    if isinstance(current, bool) or not isinstance(current, int):
        return
    if _COUNT_FIELD.match(key) and (
        isinstance(value, bool) or not isinstance(value, int) or value < 1
    ):
        raise RewriteError(
            f"zoo override {key} counts or sizes part of the model, so it must be an int >= 1, "
            f"but got {key}={value!r} ({config_class} has {key}={current})."
        )
    if isinstance(value, bool) or not isinstance(value, int):
        raise RewriteError(
            f"zoo override {key} must be an int like {config_class}'s {key}={current}, but got "
            f"{value!r} of type {type(value).__name__}."
        )


def _check_positions(config: Any, run: dict[str, Any], name: str) -> None:
    """Refuse a ``seq_len`` past the model's learned positions (it would fail only when run)."""
    limit = getattr(config, "n_positions", None) or getattr(config, "max_position_embeddings", None)
    seq_len = run.get("seq_len")
    if seq_len is None or not isinstance(limit, int) or seq_len <= limit:
        return
    field_name = "n_positions" if hasattr(config, "n_positions") else "max_position_embeddings"
    raise RewriteError(
        f"zoo model {name!r} has {limit} positions ({field_name}={limit}), but seq_len={seq_len} "
        f"asks for more. Use seq_len <= {limit}, or raise the model's positions too: "
        f"zoo.build({name!r}, seq_len={seq_len}, {field_name}={seq_len})."
    )


def _example_inputs(
    spec: _Spec, config: Any, run: dict[str, Any], device: str, dtype: Any
) -> tuple[Any, ...]:
    import torch

    batch = run.get("batch", 1)
    if spec.input_kind == "tokens":
        gen = torch.Generator().manual_seed(run.get("seed", 0))
        ids = torch.randint(0, config.vocab_size, (batch, run["seq_len"]), generator=gen)
        return (ids.to(device),)
    size = run["image_size"]
    if hasattr(config, "image_size"):
        config.image_size = size
    return (
        torch.zeros(
            batch, getattr(config, "num_channels", 3), size, size, dtype=dtype, device=device
        ),
    )


def _non_persistent_buffers(module: Any) -> dict[str, Any]:
    out = {}
    for prefix, mod in module.named_modules():
        for bname in getattr(mod, "_non_persistent_buffers_set", ()):
            buf = mod._buffers.get(bname)
            if buf is not None and buf.device.type != "meta":
                out[f"{prefix}.{bname}" if prefix else bname] = buf.detach().clone()
    return out


@contextlib.contextmanager
def _params_on_meta(enabled: bool) -> Iterator[None]:
    """Create parameters on ``meta`` while buffers stay real (no weight memory or init time)."""
    import torch

    if not enabled:
        yield
        return
    original: Callable[..., Any] = torch.nn.Module.register_parameter

    def register(self: Any, name: str, param: Any) -> None:
        original(self, name, param)
        if param is not None and param.device.type != "meta":
            p = self._parameters[name]
            self._parameters[name] = type(p)(p.to("meta"), requires_grad=p.requires_grad)

    torch.nn.Module.register_parameter = register  # type: ignore[method-assign]
    try:
        yield
    finally:
        torch.nn.Module.register_parameter = original  # type: ignore[method-assign]


@contextlib.contextmanager
def _quiet_transformers() -> Iterator[None]:
    from transformers.utils import logging as hf_logging

    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        yield
    finally:
        hf_logging.set_verbosity(level)
