"""A user's own model as a workload of the rewrite study.

A workload is a `rewrite.zoo` name or a *model reference*, a string naming a ``.py`` file, a
module, class or factory in it and the example inputs::

    "path/to/model.py:build(int64[1,128])"
    "nets.py:Encoder(float32[4,3,224,224], int64[4])"

The attribute is an ``torch.nn.Module`` instance, or a class or function called without
arguments to make one. Each input is ``dtype[d0,d1,...]``: seeded random values (integers in
``[0, n)``, where ``n`` is the smallest vocabulary of the model's ``nn.Embedding`` layers, 2
without one; floats standard normal). The model is put in eval mode and imported with
`rewrite.torch_import.from_torch`, once per process (`user_graph`): a study's context stores the
reference, never the model, and each worker rebuilds the graph from it.
"""

from __future__ import annotations

import functools
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from studies.errors import StudyError

if TYPE_CHECKING:
    from rewrite.ir import Graph

__all__ = ["ModelRef", "is_model_ref", "model_ref", "user_graph"]

_REF = re.compile(r"^(?P<path>.+\.py):(?P<attr>[A-Za-z_][\w.]*)\((?P<inputs>.*)\)$")
_INPUT = re.compile(r"^(?P<dtype>[a-z0-9]+)\[(?P<shape>\d+(?:\s*,\s*\d+)*)?\]$")
_DTYPES = ("float32", "float64", "float16", "bfloat16", "int64", "int32", "bool")
#: Seed of the example inputs (their values do not matter to the import, only their shapes).
INPUT_SEED = 0


@dataclass(frozen=True)
class ModelRef:
    """A parsed model reference (see the module docstring).

    Attributes:
        path: The ``.py`` file, absolute.
        attr: The attribute in it (dotted names allowed).
        inputs: ``(dtype, shape)`` of each positional example input.
    """

    path: Path
    attr: str
    inputs: tuple[tuple[str, tuple[int, ...]], ...]

    @property
    def name(self) -> str:
        """``<file stem>:<attr>``, how tables name the workload."""
        return f"{self.path.stem}:{self.attr}"

    def __str__(self) -> str:
        shown = ", ".join(f"{d}[{','.join(map(str, s))}]" for d, s in self.inputs)
        return f"{self.path}:{self.attr}({shown})"


def is_model_ref(workload: str) -> bool:
    """Whether ``workload`` is a model reference rather than a zoo name."""
    return bool(_REF.match(workload))


def model_ref(target: str, inputs: list[str] | tuple[str, ...] | None = None) -> ModelRef:
    """Parse ``"file.py:Name(int64[1,128])"``, or ``"file.py:Name"`` with ``inputs`` given
    apart (as ``tuner tune-model --inputs`` takes them); the path is made absolute.

    Raises:
        StudyError: For a malformed reference or input, a missing file or an unknown dtype.
    """
    text = target.strip()
    if inputs is not None:
        if "(" in text:
            raise StudyError(
                f"Model {target!r} names its inputs and inputs={list(inputs)} were given too; "
                "give them once."
            )
        text = f"{text}({', '.join(inputs)})"
    m = _REF.match(text)
    if m is None:
        raise StudyError(
            f"Model reference {target!r} is not of the form 'path/to/file.py:Name(int64[1,128])' "
            "(a .py file, a module, class or factory in it, and the example inputs)."
        )
    path = Path(m["path"]).expanduser().resolve()
    if not path.is_file():
        raise StudyError(f"Model file {str(path)!r} does not exist; check the path in {target!r}.")
    parsed = []
    for item in _split_inputs(m["inputs"]):
        im = _INPUT.match(item.replace(" ", ""))
        if im is None or im["dtype"] not in _DTYPES:
            raise StudyError(
                f"Input {item!r} of {target!r} is not 'dtype[d0,d1,...]' with a dtype among "
                f"{list(_DTYPES)}, e.g. 'int64[1,128]' or 'float32[1,3,224,224]'."
            )
        shape = tuple(int(d) for d in im["shape"].split(",")) if im["shape"] else ()
        if any(d < 1 for d in shape):
            raise StudyError(f"Input {item!r} of {target!r} has a dimension below 1.")
        parsed.append((im["dtype"], shape))
    if not parsed:
        raise StudyError(
            f"Model {target!r} has no example inputs; give one per positional argument, e.g. "
            "--inputs 'int64[1,128]'."
        )
    return ModelRef(path, m["attr"], tuple(parsed))


def _split_inputs(text: str) -> list[str]:
    """Split ``"int64[1,128], float32[2,3]"`` at the commas outside brackets."""
    out, depth, cur = [], 0, ""
    for ch in text:
        depth += (ch == "[") - (ch == "]")
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur.strip())
    return out


def load_module(ref: ModelRef) -> Any:
    """The ``torch.nn.Module`` a reference names, in eval mode.

    Raises:
        StudyError: If the file fails to import, the attribute is missing, or it is not (and
            does not make) a module.
    """
    import torch

    from studies.errors import StudyFileError
    from studies.loader import import_file

    key = "__tuner_model__" + "".join(c if c.isalnum() else "_" for c in str(ref.path))
    module = sys.modules.get(key)  # imported once per process
    if module is None:
        try:
            module = import_file(ref.path, key, "model file")
        except StudyFileError as err:
            raise StudyError(str(err)) from err
    obj: Any = module
    for part in ref.attr.split("."):
        if not hasattr(obj, part):
            names = sorted(n for n in vars(module) if not n.startswith("_"))
            raise StudyError(f"{str(ref.path)!r} has no {ref.attr!r}; it defines {names}.")
        obj = getattr(obj, part)
    if not isinstance(obj, torch.nn.Module):
        if not callable(obj):
            raise StudyError(f"{ref.name} is a {type(obj).__name__}, not a module or factory.")
        try:
            obj = obj()
        except Exception as err:
            raise StudyError(
                f"Calling {ref.name}() to make the model failed with {type(err).__name__}: {err}. "
                "Name a module instance, or a class or function that takes no arguments."
            ) from err
        if not isinstance(obj, torch.nn.Module):
            raise StudyError(
                f"{ref.name}() returned a {type(obj).__name__}, not a torch.nn.Module."
            )
    return obj.eval()


def example_inputs(ref: ModelRef, module: Any) -> list[Any]:
    """Seeded example inputs of the reference's shapes (module docstring)."""
    import torch

    vocab = [m.num_embeddings for m in module.modules() if isinstance(m, torch.nn.Embedding)]
    high = min(vocab) if vocab else 2
    gen = torch.Generator().manual_seed(INPUT_SEED)
    out = []
    for dtype, shape in ref.inputs:
        dt = getattr(torch, dtype)
        if dt.is_floating_point:
            out.append(torch.randn(shape, generator=gen).to(dt))
        elif dt == torch.bool:
            out.append(torch.randint(0, 2, shape, generator=gen).bool())
        else:
            out.append(torch.randint(0, high, shape, generator=gen, dtype=dt))
    return out


@functools.lru_cache(maxsize=8)
def user_graph(workload: str) -> Graph:
    """The graph of a model reference, imported once per process.

    Raises:
        StudyError: For a bad reference or a model `rewrite` cannot import (the import's
            message says why and how to fix it).
    """
    import torch

    from rewrite.errors import RewriteError
    from rewrite.torch_import import from_torch

    ref = model_ref(workload)
    module = load_module(ref)
    try:
        with torch.no_grad():
            return from_torch(module, example_inputs(ref, module), name=ref.name)
    except RewriteError as err:
        raise StudyError(f"Importing {ref.name} for the search failed: {err}") from err
