"""A user's own model as a workload of the rewrite study.

A workload is a `rewrite.zoo` name or a *model reference*, a string naming a ``.py`` file, a
module, class or factory in it and the example inputs::

    "path/to/model.py:build(int64[1,128])"
    "nets.py:Encoder(float32[4,3,224,224], int64[4])"
    "hf.py:phi(int64[1,16], attention_mask=int64[1,16], use_cache=False)"

The attribute is an ``torch.nn.Module`` instance, or a class or function called without
arguments to make one. Each positional input is ``dtype[d0,d1,...]``: seeded random values
(integers in ``[0, n)``, where ``n`` is the smallest vocabulary of the model's ``nn.Embedding``
layers, 2 without one; floats standard normal). A keyword input is ``name=value``, the value a
tensor of that form or a Python literal (``False``, ``3``, ``0.5``, ``'eager'``, ``None``). A
model whose ``forward`` takes ``use_cache`` (a Hugging Face language model) gets
``use_cache=False`` unless the reference says otherwise: a cache object is no tensor the search
can hold. The model is put in eval mode, run once on the inputs (an input it cannot take is an
error naming it, before anything is calibrated) and imported with
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
_KEYWORD = re.compile(r"^(?P<name>[A-Za-z_]\w*)\s*=(?P<value>.*)$")
_LITERALS = (bool, int, float, str, type(None))
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
        kwargs: ``(name, value)`` of each keyword input: a ``(dtype, shape)`` tensor or a
            Python literal.
    """

    path: Path
    attr: str
    inputs: tuple[tuple[str, tuple[int, ...]], ...]
    kwargs: tuple[tuple[str, Any], ...] = ()

    @property
    def name(self) -> str:
        """``<file stem>:<attr>``, how tables name the workload."""
        return f"{self.path.stem}:{self.attr}"

    def __str__(self) -> str:
        shown = [_tensor_text(t) for t in self.inputs]
        shown += [
            f"{k}={_tensor_text(v) if isinstance(v, TensorSpec) else repr(v)}"
            for k, v in self.kwargs
        ]
        return f"{self.path}:{self.attr}({', '.join(shown)})"


class TensorSpec(tuple):  # type: ignore[type-arg]
    """A keyword input's tensor, ``(dtype, shape)`` (a tuple, told apart from a literal)."""

    __slots__ = ()


def _tensor_text(spec: tuple[str, tuple[int, ...]]) -> str:
    dtype, shape = spec
    return f"{dtype}[{','.join(map(str, shape))}]"


def is_model_ref(workload: str) -> bool:
    """Whether ``workload`` is a model reference rather than a zoo name."""
    return bool(_REF.match(workload))


def model_ref(target: str, inputs: list[str] | tuple[str, ...] | None = None) -> ModelRef:
    """Parse ``"file.py:Name(int64[1,128], use_cache=False)"``, or ``"file.py:Name"`` with
    ``inputs`` given apart (as ``tuner tune-model --inputs`` takes them, one item each); the path
    is made absolute.

    Raises:
        StudyError: For a malformed reference or input (quoted as given, with the fix), a missing
            file, an unknown dtype or a keyword given twice.
    """
    text = target.strip()
    if inputs is not None:
        if "(" in text:
            raise StudyError(
                f"Model {target!r} names its inputs and inputs={list(inputs)} were given too; "
                "give them once."
            )
        items = [str(i).strip() for i in inputs]
        m = _REF.match(f"{text}()")
    else:
        m = _REF.match(text)
        items = _split_inputs(m["inputs"]) if m is not None else []
    if m is None:
        raise StudyError(
            f"Model reference {target!r} is not of the form 'path/to/file.py:Name(int64[1,128])' "
            "(a .py file, a module, class or factory in it, and the example inputs)."
        )
    path = Path(m["path"]).expanduser().resolve()
    if not path.is_file():
        raise StudyError(f"Model file {str(path)!r} does not exist; check the path in {target!r}.")
    parsed: list[tuple[str, tuple[int, ...]]] = []
    keywords: dict[str, Any] = {}
    for item in items:
        km = _KEYWORD.match(item)
        if km is not None:
            if km["name"] in keywords:
                raise StudyError(f"Keyword input {km['name']!r} is given twice in {target!r}.")
            keywords[km["name"]] = _keyword_value(item, km["value"].strip())
        elif keywords:
            raise StudyError(
                f"Positional input {item!r} comes after keyword inputs {sorted(keywords)}; give "
                "the positional ones first, in order."
            )
        else:
            parsed.append(_tensor(item))
    if not parsed:
        raise StudyError(
            f"Model {target!r} has no example inputs; give one per positional argument, e.g. "
            "--inputs 'int64[1,128]'."
        )
    return ModelRef(path, m["attr"], tuple(parsed), tuple(keywords.items()))


def _tensor(item: str) -> tuple[str, tuple[int, ...]]:
    """``(dtype, shape)`` of an input written ``dtype[d0,d1,...]``.

    Raises:
        StudyError: Quoting ``item`` as given, with the fix.
    """
    im = _INPUT.match(item.replace(" ", ""))
    if im is None or im["dtype"] not in _DTYPES:
        hint = ""
        if "(" in item:
            fixed = item.replace("(", "[").replace(")", "]").replace(" ", "")
            hint = f" Shapes go in square brackets: {fixed!r}."
        raise StudyError(
            f"Input {item!r} is not 'dtype[d0,d1,...]' with a dtype among {list(_DTYPES)}, "
            f"e.g. 'int64[1,128]' or 'float32[1,3,224,224]' (keyword inputs: "
            f"'name=value', e.g. 'use_cache=False').{hint}"
        )
    shape = tuple(int(d) for d in im["shape"].split(",")) if im["shape"] else ()
    if any(d < 1 for d in shape):
        raise StudyError(f"Input {item!r} has a dimension below 1.")
    return im["dtype"], shape


def _keyword_value(item: str, value: str) -> Any:
    """A keyword input's value: a tensor ``dtype[...]`` or a Python literal.

    Raises:
        StudyError: For anything else, quoting ``item``.
    """
    import ast

    if _INPUT.match(value.replace(" ", "")):
        return TensorSpec(_tensor(value))
    try:
        literal = ast.literal_eval(value)
    except (ValueError, SyntaxError):
        literal = ...
    if isinstance(literal, _LITERALS):
        return literal
    raise StudyError(
        f"Keyword input {item!r} has a value that is neither a tensor 'dtype[d0,...]' nor a "
        "Python literal (True, False, None, a number, a quoted string), e.g. 'use_cache=False' "
        "or 'attention_mask=int64[1,128]'."
    )


def _split_inputs(text: str) -> list[str]:
    """Split ``"int64[1,128], float32[2,3], mode='a,b'"`` at the commas outside brackets,
    parentheses and quotes."""
    out, depth, quote, cur = [], 0, "", ""
    for ch in text:
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        else:
            depth += (ch in "[(") - (ch in "])")
        if ch == "," and depth == 0 and not quote:
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


def example_inputs(ref: ModelRef, module: Any) -> tuple[list[Any], dict[str, Any]]:
    """Seeded example inputs of the reference's shapes, positional and keyword (module
    docstring): ``use_cache=False`` added for a ``forward`` that takes ``use_cache``."""
    import inspect

    import torch

    vocab = [m.num_embeddings for m in module.modules() if isinstance(m, torch.nn.Embedding)]
    high = min(vocab) if vocab else 2
    gen = torch.Generator().manual_seed(INPUT_SEED)

    def tensor(dtype: str, shape: tuple[int, ...]) -> Any:
        dt = getattr(torch, dtype)
        if dt.is_floating_point:
            return torch.randn(shape, generator=gen).to(dt)
        if dt == torch.bool:
            return torch.randint(0, 2, shape, generator=gen).bool()
        return torch.randint(0, high, shape, generator=gen, dtype=dt)

    args = [tensor(d, s) for d, s in ref.inputs]
    kwargs = {k: tensor(*v) if isinstance(v, TensorSpec) else v for k, v in ref.kwargs}
    try:
        takes = inspect.signature(module.forward).parameters
    except (TypeError, ValueError):
        takes = inspect.Signature().parameters
    if "use_cache" in takes and "use_cache" not in kwargs:
        kwargs["use_cache"] = False
    return args, kwargs


@functools.lru_cache(maxsize=8)
def user_graph(workload: str) -> Graph:
    """The graph of a model reference, imported once per process.

    Raises:
        StudyError: For a bad reference, a model without weights (on ``meta``), inputs the model
            cannot run on, or a model `rewrite` cannot import (the import's message says why and
            how to fix it).
    """
    import torch

    from rewrite.errors import RewriteError
    from rewrite.pytorch.optimize import check_runs, module_device
    from rewrite.torch_import import from_torch

    ref = model_ref(workload)
    module = load_module(ref)
    try:
        module_device(module)
        args, kwargs = example_inputs(ref, module)
        check_runs(module, tuple(args), kwargs)
    except RewriteError as err:
        raise StudyError(f"{ref.name}: {err}") from None
    try:
        with torch.no_grad():
            return from_torch(module, args, kwargs, name=ref.name)
    except RewriteError as err:
        raise StudyError(f"Importing {ref.name} for the search failed: {err}") from err
