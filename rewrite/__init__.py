"""The rewrite search being tuned: tensor-graph IR, rules, verification, cost model and search."""

from __future__ import annotations

from lazyimport import lazy_exports
from rewrite import ops
from rewrite.builder import GraphBuilder, GraphEditor
from rewrite.costmodel import COST_FIELDS, CostVector, cost, node_cost, peak_memory
from rewrite.devices import DeviceProfile, device_names, load_device
from rewrite.errors import (
    ArrayProgramError,
    BackendError,
    CostModelError,
    EvaluationError,
    GraphError,
    MatchError,
    MeasureError,
    ModuleError,
    ModuleMismatchError,
    OpaqueOpWarning,
    PriorsError,
    RewriteError,
    RuleError,
    RuleRejectedError,
    SearchConfigError,
    SearchError,
    SerializationError,
    ShapeError,
    TorchImportError,
    UnknownOpError,
    VerificationError,
)
from rewrite.ir import ConstArray, Graph, GraphDelta, Node, TensorType, Value
from rewrite.measurement import Measurement, calibrate, measure
from rewrite.mesh_cost import ShardedCost, shard_cost
from rewrite.optimize import (
    PriorsFile,
    RulePriors,
    SearchConfig,
    SearchResult,
    Solution,
    Step,
    SuiteResult,
    read_priors_file,
    search,
    search_suite,
)
from rewrite.prove import ProofResult, prove_rule
from rewrite.pytorch import OptimizeReport, backend, optimize_module, to_module
from rewrite.reference import evaluate, random_inputs, random_params
from rewrite.rules import Rule, RuleRegistry, Site, catalogue, default_registry
from rewrite.serialize import from_json, load, save, to_json, to_text
from rewrite.verify import CheckResult, VerdictCache, Verifier, default_cache

__all__ = [
    # IR
    "ConstArray",
    "Graph",
    "GraphBuilder",
    "GraphDelta",
    "GraphEditor",
    "Node",
    "TensorType",
    "Value",
    "ops",
    # persistence and display
    "from_json",
    "load",
    "save",
    "to_json",
    "to_text",
    # reference semantics
    "evaluate",
    "random_inputs",
    "random_params",
    # cost model
    "COST_FIELDS",
    "CostVector",
    "DeviceProfile",
    "cost",
    "device_names",
    "load_device",
    "node_cost",
    "peak_memory",
    "ShardedCost",
    "shard_cost",
    # measurement
    "Measurement",
    "calibrate",
    "measure",
    # rules and verification
    "CheckResult",
    "ProofResult",
    "Rule",
    "RuleRegistry",
    "Site",
    "VerdictCache",
    "Verifier",
    "catalogue",
    "default_cache",
    "default_registry",
    "prove_rule",
    # search
    "PriorsFile",
    "RulePriors",
    "SearchConfig",
    "SearchResult",
    "Solution",
    "Step",
    "SuiteResult",
    "read_priors_file",
    "search",
    "search_suite",
    # import, and back to PyTorch
    "from_torch",
    "zoo",
    "zoo_tensat",
    "OptimizeReport",
    "backend",
    "optimize_module",
    "to_module",
    # errors
    "ArrayProgramError",
    "BackendError",
    "CostModelError",
    "EvaluationError",
    "GraphError",
    "MatchError",
    "MeasureError",
    "ModuleError",
    "ModuleMismatchError",
    "OpaqueOpWarning",
    "PriorsError",
    "RewriteError",
    "RuleError",
    "RuleRejectedError",
    "SearchConfigError",
    "SearchError",
    "SerializationError",
    "ShapeError",
    "TorchImportError",
    "UnknownOpError",
    "VerificationError",
]


# torch and transformers are heavy: import them only when the importer is used.
__getattr__, __dir__ = lazy_exports(
    __name__, {"from_torch": "rewrite.torch_import"}, submodules=("zoo", "zoo_tensat")
)
