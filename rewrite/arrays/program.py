"""Array programs: load them from their source, give them inputs, import them into the IR.

An array program is a Python function of arrays written with ``jax.numpy`` (or numpy) names.
`load_program(path)` runs a program file as it is written, with ``import jax.numpy as jnp``,
``from jax import numpy as jnp`` and ``import numpy as np`` bound to `rewrite.arrays.jnp` (the
namespace over PyTorch; nothing is installed in ``sys.modules``), and returns its entry
function (``kernel`` by default) with its ``arg_ranks`` when the file states them.

`import_program(fn, inputs)` imports a program into the IR: it runs ``fn`` once on the inputs
(so a construct the namespace lacks, or a Python error, is reported with the program's own line),
then exports it with `rewrite.from_torch` (through ``torch.export``). What cannot be imported is
an `ArrayProgramError` naming the construct: a ``jnp`` name the namespace lacks, an op the IR
has no converter for (e.g. ``jnp.diag`` of a vector, which builds a matrix), Python control flow
on array values, or an output that is not an array.
"""

from __future__ import annotations

import builtins
import traceback
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rewrite.arrays.namespace import jnp
from rewrite.errors import ArrayProgramError, OpaqueOpWarning, TorchImportError
from rewrite.ir import Graph

__all__ = ["ArrayProgram", "import_program", "load_program", "program_inputs"]


@dataclass(frozen=True)
class ArrayProgram:
    """A loaded array program.

    Attributes:
        name: The program's name (the file's stem).
        fn: Its entry function, taking arrays (``torch.Tensor``) and returning an array.
        arg_ranks: The rank of each argument, when the file states them (``arg_ranks = [...]``).
        path: The file it was loaded from.
    """

    name: str
    fn: Callable[..., Any]
    arg_ranks: tuple[int, ...] | None
    path: str


class _Jax:
    """What ``import jax`` gives a program: ``jax.numpy`` and nothing else."""

    numpy = jnp

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        raise ArrayProgramError(
            f"jax.{name} is not supported by rewrite.arrays: only jax.numpy (as jnp) is. Fix: "
            "write the program with jax.numpy functions."
        )


_MODULES: Mapping[str, Any] = {"jax": _Jax(), "jax.numpy": jnp, "numpy": jnp}


def _import(
    name: str,
    globals: Any = None,
    locals: Any = None,
    fromlist: Sequence[str] | None = (),
    level: int = 0,
) -> Any:
    """``__import__`` of a loaded program: jax, jax.numpy and numpy are the namespace."""
    if level == 0 and (name in _MODULES or name.startswith("jax.")):
        if name not in _MODULES:
            raise ArrayProgramError(
                f"import {name} is not supported by rewrite.arrays: only jax.numpy (as jnp) and "
                "numpy are. Fix: write the program with jax.numpy functions."
            )
        if name == "jax.numpy" and not fromlist:
            return _MODULES["jax"]  # ``import jax.numpy as jnp`` reads .numpy of the package
        return _MODULES[name]
    return builtins.__import__(name, globals, locals, fromlist or (), level)


def load_program(path: str | Path, entry: str = "kernel") -> ArrayProgram:
    """Load an array program file as it is written (see the module docstring).

    Args:
        path: A Python file defining ``entry``.
        entry: The name of the program's function.

    Returns:
        The `ArrayProgram`.

    Raises:
        ArrayProgramError: If the file is missing, does not run, or defines no function
            ``entry``.
    """
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as e:
        raise ArrayProgramError(
            f"cannot read array program {str(p)!r}: {e}. Fix: pass the path of a program file."
        ) from None
    scope: dict[str, Any] = {
        "__name__": f"rewrite_arrays_{p.stem}",
        "__file__": str(p),
        "__builtins__": {**vars(builtins), "__import__": _import},
    }
    try:
        exec(compile(text, str(p), "exec"), scope)
    except ArrayProgramError:
        raise
    except Exception as e:
        raise ArrayProgramError(
            f"array program {str(p)!r} failed to load: {type(e).__name__}: {e}{_where(e, p)}."
        ) from e
    fn = scope.get(entry)
    if not callable(fn):
        raise ArrayProgramError(
            f"array program {str(p)!r} defines no function {entry!r}; pass entry=<its name>."
        )
    ranks = scope.get("arg_ranks")
    return ArrayProgram(p.stem, fn, tuple(int(r) for r in ranks) if ranks else None, str(p))


def program_inputs(ranks: Sequence[int], size: int, seed: int = 0) -> list[Any]:
    """Seeded float32 inputs uniform in ``[0, 1)``, every dim of size ``size``.

    Args:
        ranks: The rank of each input (0: a 0-d tensor).
        size: The size of every dim.
        seed: Seed of the values.

    Returns:
        One ``torch.Tensor`` per rank.
    """
    import torch

    gen = torch.Generator().manual_seed(seed)
    return [torch.rand((size,) * int(r), generator=gen, dtype=torch.float32) for r in ranks]


def _where(e: BaseException, path: Path | None) -> str:
    """`` at <file>:<line>: <code>`` of the deepest frame of the program's file, or ``""``."""
    frames = traceback.extract_tb(e.__traceback__)
    mine = [f for f in frames if path is not None and f.filename == str(path)]
    if not mine:
        return ""
    f = mine[-1]
    return f" at {Path(f.filename).name}:{f.lineno}: {(f.line or '').strip()}"


class _ProgramModule:
    """Factory of the ``torch.nn.Module`` whose forward calls a program (what is exported)."""

    @staticmethod
    def wrap(fn: Callable[..., Any], name: str) -> Any:
        import torch

        class Program(torch.nn.Module):
            def forward(self, *args: Any) -> Any:
                return fn(*args)

        Program.__name__ = Program.__qualname__ = (
            "".join(p[:1].upper() + p[1:] for p in name.replace("-", "_").split("_") if p)
            or "Program"
        )
        return Program()


def _run_once(fn: Callable[..., Any], inputs: Sequence[Any], name: str) -> None:
    """Run ``fn`` eagerly, so a failure names the program's line, and check its output."""
    import torch

    try:
        out = fn(*inputs)
    except ArrayProgramError:
        raise
    except Exception as e:
        path = getattr(getattr(fn, "__code__", None), "co_filename", None)
        raise ArrayProgramError(
            f"array program {name!r} failed on its example inputs: {type(e).__name__}: "
            f"{e}{_where(e, Path(path) if path else None)}. Fix: check that it runs on "
            "torch tensors with jax.numpy semantics (JAX's functional updates x.at[i].set(v) "
            "have no tensor method; write jnp.where or a jnp.stack of the rows instead)."
        ) from e
    leaves = out if isinstance(out, tuple | list) else (out,)
    if not leaves or not all(isinstance(x, torch.Tensor) for x in leaves):
        raise ArrayProgramError(
            f"array program {name!r} returns {type(out).__name__}, but it must return an array "
            "(or a tuple of arrays). Fix: return jnp.asarray(value)."
        )


def import_program(
    fn: Callable[..., Any],
    inputs: Sequence[Any],
    name: str | None = None,
    domains: str | Sequence[str | None] | None = None,
) -> tuple[Graph, Any]:
    """Import an array program into the IR (see the module docstring).

    Args:
        fn: The program, a function of arrays (e.g. `ArrayProgram.fn`).
        inputs: Example ``torch.Tensor`` inputs, one per argument; they fix the shapes.
        name: The graph's name (default: the function's name).
        domains: A promise about the inputs' values, which rules may rely on: one of
            `rewrite.ops.special.DOMAINS` (``"positive"``, ``"nonnegative"``) for every input,
            or one (or None) per input. Each promised input is read through an ``assume``
            node; the rewritten program is then exact only on inputs that keep the promise.

    Returns:
        ``(graph, module)``: the imported `Graph` and the ``torch.nn.Module`` calling ``fn`` that
        was exported (keep it alive while the graph is turned back into PyTorch:
        `rewrite.to_module` checks against it).

    Raises:
        ArrayProgramError: Naming the construct that cannot be imported.
    """
    import torch

    from rewrite.torch_import import from_torch

    name = str(name or getattr(fn, "__name__", "program"))
    bad = [i for i, x in enumerate(inputs) if not isinstance(x, torch.Tensor)]
    if bad:
        raise ArrayProgramError(
            f"array program {name!r}: inputs {bad} are not torch.Tensors (got "
            f"{[type(inputs[i]).__name__ for i in bad]}). Fix: pass tensors, e.g. "
            "torch.as_tensor(x) (a Python number: a 0-d tensor)."
        )
    _run_once(fn, inputs, name)
    module = _ProgramModule.wrap(fn, name)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", OpaqueOpWarning)
        try:
            graph = from_torch(module, tuple(inputs), name=name)
        except TorchImportError as e:
            raise ArrayProgramError(f"array program {name!r} cannot be imported: {e}") from e
    if any(issubclass(w.category, OpaqueOpWarning) for w in caught):
        raise ArrayProgramError(f"array program {name!r} cannot be imported: {_opaque(graph)}")
    if domains is not None:
        graph = _assumed(graph, module, inputs, _domains(domains, len(inputs), name))
    return graph, module


def _domains(domains: Any, n: int, name: str) -> list[str | None]:
    from rewrite.ops.special import DOMAINS

    per = [domains] * n if isinstance(domains, str) else list(domains)
    bad = [d for d in per if d is not None and d not in DOMAINS]
    if len(per) != n or bad:
        raise ArrayProgramError(
            f"array program {name!r}: domains must be one of {DOMAINS} or one (or None) per "
            f"input ({n}), but got {domains!r}."
        )
    return per


def _assumed(graph: Graph, module: Any, inputs: Sequence[Any], domains: list[str | None]) -> Graph:
    """``graph`` with every promised input read through an ``assume`` node."""
    from rewrite.builder import GraphEditor
    from rewrite.lowering.source import record_source, source_of

    ed = GraphEditor(graph)
    for nid, d in zip(graph.inputs, domains):
        if d is not None:
            v = graph.node(nid).out(0)
            ed.replace(v, ed.add_node("assume", [v], {"domain": d}).out(0))
    out = ed.finish()
    src = source_of(graph)
    record_source(out, module, tuple(inputs), {}, src.out_spec if src else None)
    return out


def _opaque(graph: Graph) -> str:
    """What the graph's opaque nodes are, with the converters' reasons."""
    seen: dict[str, str] = {}
    for node in graph:
        if node.op == "opaque":
            seen.setdefault(node.attrs["target"], node.attrs["reason"])
    listing = "; ".join(f"{t} ({r})" for t, r in sorted(seen.items()))
    return (
        f"it uses ops the IR does not import: {listing}. Fix: write that part with the "
        "operations rewrite.arrays supports (rewrite.arrays.SUPPORTED), or add a converter to "
        "rewrite.torch_converters."
    )
