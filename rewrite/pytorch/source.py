"""Where an imported graph came from: the module and the call `rewrite.from_torch` captured.

`from_torch` records, for every graph it returns, the module it exported (weakly: the record
never keeps a model alive) and the shape of its call: the example positional and keyword
arguments (non-tensor ones such as ``use_cache=False`` included) and the structure of its outputs.
`to_module` reads the record to take the weights from the module, to call the module on new inputs
when it checks a rewritten graph against it, and to give the rewritten module the original's
output structure (a Hugging Face ``ModelOutput``, a tuple, a tensor).
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["TorchSource", "as_called", "record_source", "source_of"]


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


# graph uid -> its source; a weakref finalizer drops the entry when the module dies.
_SOURCES: dict[int, TorchSource] = {}


def record_source(
    graph_uid: int, module: Any, args: Sequence[Any], kwargs: Mapping[str, Any], out_spec: Any
) -> None:
    """Record that the graph with `Graph.uid` ``graph_uid`` was imported from ``module``."""
    _SOURCES[graph_uid] = TorchSource(weakref.ref(module), tuple(args), dict(kwargs), out_spec)
    weakref.finalize(module, _SOURCES.pop, graph_uid, None)


def source_of(graph: Any) -> TorchSource | None:
    """The `TorchSource` of a graph `rewrite.from_torch` returned (while its module is alive),
    else None."""
    src = _SOURCES.get(graph.uid)
    return src if src is not None and src.module is not None else None


def as_called(module: Any, args: Sequence[Any], kwargs: Mapping[str, Any]) -> Any:
    """``module`` behind the calling convention of `rewrite.to_module`'s modules: a
    ``torch.nn.Module`` whose forward takes the tensor inputs of the example ``(args, kwargs)``
    positionally and calls ``module`` with the example's other arguments (``use_cache=False``).
    Its parameters are ``module``'s (registered as the submodule ``original``)."""
    import torch

    source = TorchSource(weakref.ref(module), tuple(args), dict(kwargs), None)

    class AsCalled(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.original = module

        def forward(self, *tensors: Any) -> Any:
            return source.call(tensors)

    return AsCalled()
