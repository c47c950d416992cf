"""One AutoParallel run on the CPU, for `bench_plans --part autoparallel` (run in a subprocess).

AutoParallel (meta-pytorch/autoparallel) is not a dependency: point ``--src`` at a checkout of
its source (it needs ``pulp`` on the path too). Nothing of it is committed here. What this
script adds, so that AutoParallel runs on a machine without a GPU:

* a fake process group over the mesh (as AutoParallel's own examples do);
* the H100 entry of AutoParallel's device table for its compute estimates (it asks the GPU's
  name otherwise) and its ``h100_topo_config`` NCCL topology (8 per node, 50 GB/s per GPU
  across nodes: the same links as ``h100-gt``);
* DTensor sharding strategies for the CPU flash-attention ops (replicated, batch-split or
  head-split, like the CUDA kernels' strategies): without them AutoParallel falls back to
  replicating attention, which no GPU run would do.

It prints one JSON line: seconds to trace and build the integer program, seconds to solve it,
the objective, and per parameter (``*`` for layer indices) the placements chosen.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time


def _cpu_attention_strategies() -> None:
    import torch
    from torch.distributed.tensor import DTensor
    from torch.distributed.tensor._op_schema import RuntimeSchemaInfo
    from torch.distributed.tensor._ops.utils import expand_to_full_mesh_op_strategy
    from torch.distributed.tensor.placement_types import Replicate, Shard

    aten = torch.ops.aten

    def forward(op_schema):  # outputs (out, logsumexp), inputs (q, k, v)
        mesh = op_schema.get_mesh_from_args()
        options = [[Replicate()] * 5, [Shard(0)] * 5, [Shard(1)] * 5]
        return expand_to_full_mesh_op_strategy(mesh, op_schema, options, input_index=2)

    def backward(op_schema):  # outputs (gq, gk, gv), inputs (g, q, k, v, out, logsumexp)
        mesh = op_schema.get_mesh_from_args()
        options = [[Replicate()] * 9, [Shard(0)] * 9, [Shard(1)] * 9]
        return expand_to_full_mesh_op_strategy(mesh, op_schema, options, input_index=3)

    prop = DTensor._op_dispatcher.sharding_propagator
    prop.register_op_strategy(
        aten._scaled_dot_product_flash_attention_for_cpu.default, forward, RuntimeSchemaInfo(3)
    )
    prop.register_op_strategy(
        aten._scaled_dot_product_flash_attention_for_cpu_backward.default,
        backward,
        RuntimeSchemaInfo(6),
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--src", required=True)
    ap.add_argument("--mesh", default="8")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=8192)
    args = ap.parse_args()
    sys.path.insert(0, args.src)

    import autoparallel.cost_models.compute_estimation as ce
    import torch
    from autoparallel._testing.models.llama3 import Transformer, TransformerModelArgs
    from autoparallel.api import AutoParallel
    from autoparallel.cost_models.collective_runtime_estimation import set_nccl_topo_config
    from autoparallel.cost_models.nccl_cost_model import h100_topo_config
    from torch.distributed.fsdp import MixedPrecisionPolicy
    from torch.distributed.tensor.placement_types import Replicate, Shard
    from torch.testing._internal.distributed.fake_pg import FakeStore

    shape = tuple(int(x) for x in args.mesh.split(","))
    world = math.prod(shape)
    h100 = next(limit for limit in ce.DEVICE_LIMITS if limit.name == "H100")
    ce._get_device_limit = lambda: h100
    set_nccl_topo_config(
        h100_topo_config(num_nodes=max(1, world // 8), gpus_per_node=min(8, world))
    )
    _cpu_attention_strategies()
    torch.distributed.init_process_group("fake", store=FakeStore(), rank=0, world_size=world)
    names = ("dp", "tp")[: len(shape)]
    mesh = torch.distributed.device_mesh.init_device_mesh("cpu", shape, mesh_dim_names=names)
    cfg = TransformerModelArgs(dim=4096, n_layers=args.layers, n_heads=32, n_kv_heads=8,
                               ffn_dim_multiplier=1.3, multiple_of=1024, rope_theta=500000,
                               vocab_size=128256, max_seq_len=args.seq)  # fmt: skip
    with torch.device("meta"):
        model = Transformer(cfg)

    def input_fn():
        return torch.randint(0, 128256, (args.batch, args.seq), device="cpu")

    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    t0 = time.perf_counter()
    with AutoParallel(model, input_fn, mesh, mp, repeated_subgraphs=True) as autop:
        autop.add_input_constraints([(Shard(0),) + (Replicate(),) * (len(shape) - 1)])
        autop.add_parameter_memory_constraint(low=None, high=None)
        t1 = time.perf_counter()
        placement = autop.optimize_placement(verbose=False)
        t2 = time.perf_counter()
        import pulp

        objective = pulp.value(autop.sharding_optimizer.prob.objective)
        params = [n for n, _ in model.named_parameters()]
        holders = [n for n in autop.gm.graph.nodes if n.op == "placeholder"]
        chosen: dict[str, list[str]] = {}
        for name, node in zip(params, holders):
            key = ".".join("*" if part.isdigit() else part for part in name.split("."))
            pl = "".join(str(p).replace("Shard(dim=", "S(").replace("Replicate()", "R")
                         for p in placement[node].output_specs.placements)  # fmt: skip
            if pl not in chosen.setdefault(key, []):
                chosen[key].append(pl)
    print(json.dumps({"mesh": list(shape), "layers": args.layers, "batch": args.batch,
                      "trace_build_s": round(t1 - t0, 2), "solve_s": round(t2 - t1, 2),
                      "objective": objective, "placements": chosen}))  # fmt: skip


if __name__ == "__main__":
    main()
