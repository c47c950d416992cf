"""Where an imported graph came from: the module and the call `rewrite.from_torch` captured.

`from_torch` records, for every graph it returns, the module it exported (weakly: the record
never keeps a model alive) and the shape of its call: the example positional and keyword
arguments (non-tensor ones such as ``use_cache=False`` included) and the structure of its outputs.
`to_module` reads the record to take the weights from the module, to call the module on new inputs
when it checks a rewritten graph against it, and to give the rewritten module the original's
output structure (a Hugging Face ``ModelOutput``, a tuple, a tensor).
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["TorchSource", "as_called", "clear_sources", "record_source", "source_of"]


@dataclass(frozen=True)
class TorchSource:
    """The module a graph was imported from, and how it was called.

    Attributes:
        module_ref: Weak reference to the ``torch.nn.Module``.
        args: The example positional inputs.
        kwargs: The example keyword inputs.
        out_spec: The pytree spec of the module's outputs, or None when unknown.
    """

    module_ref: Any
    args: tuple[Any, ...]
    kwargs: Mapping[str, Any]
    out_spec: Any

    @property
    def module(self) -> Any:
        """The module, or None once it was garbage-collected."""
        return self.module_ref()

    @classmethod
    def of(cls, module: Any) -> TorchSource:
        """A source for ``module`` called with the graph's inputs as positional arguments."""
        return cls(weakref.ref(module), (), {}, None)

    def call(self, tensors: Sequence[Any]) -> Any:
        """Call the module with ``tensors`` in place of the example's tensor inputs, in the
        order the graph's inputs have (the tensor leaves of ``(args, kwargs)``); with no example
        recorded, as positional arguments."""
        import torch
        import torch.utils._pytree as pytree

        if not self.args and not self.kwargs:
            return self.module(*tensors)
        leaves, spec = pytree.tree_flatten((self.args, dict(self.kwargs)))
        it = iter(tensors)
        leaves = [next(it) if isinstance(x, torch.Tensor) else x for x in leaves]
        args, kwargs = pytree.tree_unflatten(leaves, spec)
        return self.module(*args, **kwargs)


# graph uid -> its source, for live graphs of live modules only: weakref finalizers drop the
# entry when the graph or the module dies, so the table never outgrows what can be looked up.
_SOURCES: dict[int, TorchSource] = {}


def record_source(
    graph: Any, module: Any, args: Sequence[Any], kwargs: Mapping[str, Any], out_spec: Any
) -> None:
    """Record that ``graph`` (a `rewrite.Graph`) was imported from ``module``, for as long as
    both live."""
    uid = graph.uid
    _SOURCES[uid] = TorchSource(weakref.ref(module), tuple(args), dict(kwargs), out_spec)
    on_module = weakref.finalize(module, _SOURCES.pop, uid, None)
    weakref.finalize(graph, _forget, uid, on_module)


def _forget(uid: int, on_module: weakref.finalize) -> None:
    """The graph died: drop its entry and the module's finalizer for it."""
    _SOURCES.pop(uid, None)
    on_module.detach()


def clear_sources() -> None:
    """Forget every recorded source (`source_of` then returns None for every graph)."""
    _SOURCES.clear()


def source_of(graph: Any) -> TorchSource | None:
    """The `TorchSource` of a graph `rewrite.from_torch` returned (while its module is alive),
    else None."""
    src = _SOURCES.get(graph.uid)
    return src if src is not None and src.module is not None else None


def as_called(
    module: Any, args: Sequence[Any], kwargs: Mapping[str, Any], runner: Any = None
) -> Any:
    """An `OptimizedModule`: ``runner`` (a module of `rewrite.to_module`, which takes the tensor
    inputs of the example ``(args, kwargs)`` positionally), or ``module`` itself when
    ``runner`` is None, called as ``module`` is."""
    return optimized_module_type()(module, args, kwargs, runner)


def _convention(
    example: TorchSource, args: tuple[Any, ...], kwargs: Mapping[str, Any]
) -> list[Any]:
    """The tensor inputs, in the example's leaf order, of a call made in either convention:
    the original module's (``fast(ids, use_cache=False)``; keyword arguments left out take the
    example's values) or the tensors positionally (``fast(ids, mask)``).

    Raises:
        ModuleError: On a keyword the example did not have, a non-tensor value other than the
            example's, or a count of positional inputs that fits neither convention.
    """
    import torch
    import torch.utils._pytree as pytree

    from rewrite.errors import ModuleError

    leaves, spec = pytree.tree_flatten((example.args, dict(example.kwargs)))
    n_tensors = sum(isinstance(x, torch.Tensor) for x in leaves)
    if not kwargs and len(args) == n_tensors and len(args) != len(example.args):
        return list(args)  # the tensors positionally
    unknown = sorted(set(kwargs) - set(example.kwargs))
    if unknown:
        raise ModuleError(
            f"this module was optimized for a call with keyword arguments "
            f"{sorted(example.kwargs)}, but got {unknown}; optimize it again with them in the "
            "example."
        )
    if len(args) != len(example.args):
        raise ModuleError(
            f"this module takes {len(example.args)} positional inputs as in its example (or its "
            f"{n_tensors} tensor inputs positionally), but got {len(args)}."
        )
    merged = {**example.kwargs, **kwargs}
    got, got_spec = pytree.tree_flatten((tuple(args), merged))
    if got_spec != spec:
        raise ModuleError(
            "the inputs do not have the structure of the example this module was optimized for "
            f"({spec}); pass inputs of the example's structure."
        )
    out = []
    paths = [k for k, _ in pytree.tree_flatten_with_path((example.args, dict(example.kwargs)))[0]]
    for want, have, path in zip(leaves, got, paths):
        if isinstance(want, torch.Tensor):
            out.append(have)
        elif have is not want and have != want:
            where = pytree.keystr(path[1:])  # ['use_cache'], or [0] for a positional input
            positional = getattr(path[0], "idx", None) == 0
            what = "positional input " + where if positional else where.strip("[]'")
            raise ModuleError(
                f"this module was optimized for {what}={want!r}, but got {have!r}; optimize it "
                "again with that value in the example."
            )
    return out


@functools.cache
def optimized_module_type() -> type:
    """The class `rewrite.optimize_module` returns (defined on first use: torch loads lazily);
    also reachable as ``rewrite.lowering.source.OptimizedModule``."""
    import torch

    class OptimizedModule(torch.nn.Module):
        """A module called as the module it was optimized from.

        It accepts the original's calling convention (``fast(ids, use_cache=False)``; keyword
        arguments left out take the example's values, and non-tensor ones must equal them) and
        the tensor inputs positionally (``fast(ids)``). ``runner`` computes the result: a
        rewritten module (`rewrite.to_module`), or the original itself (``original``).
        """

        def __init__(
            self, module: Any, args: Sequence[Any], kwargs: Mapping[str, Any], runner: Any
        ) -> None:
            super().__init__()
            self.example = TorchSource(weakref.ref(module), tuple(args), dict(kwargs), None)
            if runner is None:
                self.original = module
            else:
                self.rewritten = runner

        def forward(self, *args: Any, **kwargs: Any) -> Any:
            tensors = _convention(self.example, args, kwargs)
            if "rewritten" in self._modules:
                return self.rewritten(*tensors)
            return self.example.call(tensors)

    OptimizedModule.__module__ = __name__
    OptimizedModule.__qualname__ = "OptimizedModule"
    return OptimizedModule


def __getattr__(name: str) -> Any:
    if name == "OptimizedModule":
        return optimized_module_type()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
