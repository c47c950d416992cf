"""IR graphs as PyTorch programs: the layer below measurement, search products and the importer.

* `rewrite.lowering.kernels`: the PyTorch call of every IR op (`torch_call`), read by both
  lowerings below.
* `rewrite.lowering.program`: `lower(graph, device)`, a graph as a `Program` of PyTorch kernel
  calls (what `rewrite.measure` times).
* `rewrite.lowering.module`: `to_module(graph, params)`, a graph as a ``torch.fx.GraphModule``
  with a model's real weights, checked (`rewrite.lowering.check`) before it is returned.
* `rewrite.lowering.tensors`: seeded random (or converted) tensors for a graph's inputs.
* `rewrite.lowering.source`: where an imported graph came from (`rewrite.from_torch` records
  it, `to_module` reads it).

It imports nothing of the search, the measurement or `rewrite.pytorch` (which re-exports
`to_module`, `check_module` and the kernel table for users). Importing it does not import torch.
"""
