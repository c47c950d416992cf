"""The planner's search: sharding actions, costed by the training-step model, under a memory cap.

Two beam searches, both driven by the actions of `rewrite.plans.actions` and their priors:

1. `search_layout` finds a block's tensor-parallel layout for a tensor-parallel degree ``t``,
   starting from every weight replicated, among the layouts DTensor's parallel styles can
   express (no sharding change inside a module, splits only on ``nn.Linear`` weights). Its
   objective is the block's per-device
   forward-and-backward seconds on one microbatch (compute, tensor-parallel collectives, and the
   all-reduce of gradients left partial on the axis), times ``1 + bytes / capacity`` for the
   block's parameter states and kept activations on a device: a layout that splits compute
   without communicating wins, and among equals the one that stores less.
2. `search_strategy` starts from replicated data parallelism over every device (DDP) and moves
   through strategies. A strategy's score is its modeled tokens/s per device when its peak
   memory fits the cap, and that times ``(cap / peak) ** 4`` when it does not (so that a state
   over the cap can still lead to one under it). Each round expands every state in the beam by
   every move its actions offer (or, with ``moves_per_state``, a sample drawn in proportion to the
   actions' priors), keeps the ``beam`` best, and stops when a round finds nothing better or the
   time budget is spent. The best state under the cap is the result.

Both are deterministic for a given seed.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rewrite.devices import DeviceProfile, load_device
from rewrite.errors import PlanError
from rewrite.plans.actions import (
    BLOCK_ACTIONS,
    DEFAULT_PRIORS,
    PLAN_ACTIONS,
    PlanContext,
)
from rewrite.plans.cluster import collective_time, link_of
from rewrite.plans.convert import (
    _fused_problems,
    _move_problems,
    _param_problems,
    dtensor_problems,
)
from rewrite.plans.experts import _kv_heads, megatron_layout
from rewrite.plans.graphcost import Options, graph_cost
from rewrite.plans.layout import ModelLayout
from rewrite.plans.propagate import Propagation, propagate
from rewrite.plans.sharding import Sharding
from rewrite.plans.step import StepCost, step_cost
from rewrite.plans.strategy import Strategy, TPLayout

__all__ = ["SearchOutcome", "block_objective", "search_layout", "search_strategy"]


#: Factor on the objective of a layout DTensor cannot express: the search may pass through one
#: (a state between two expressible ones) but does not return it.
_INEXPRESSIBLE = 4.0


def _check_priors(priors: Mapping[str, float] | None) -> dict[str, float]:
    merged = dict(DEFAULT_PRIORS)
    for k, v in (priors or {}).items():
        if k not in merged:
            raise PlanError(f"Unknown sharding action {k!r} in priors; known: {sorted(merged)}.")
        if not (isinstance(v, int | float) and math.isfinite(v) and v >= 0):
            raise PlanError(f"The prior of {k!r} must be a finite number >= 0, but got {v!r}.")
        merged[k] = float(v)
    return merged


def _sample(
    moves: list[tuple[str, Any]],
    priors: Mapping[str, float],
    k: int | None,
    rng: np.random.Generator,
) -> list[Any]:
    """``k`` moves drawn without replacement in proportion to their action's prior (all when
    ``k`` is None or covers them; moves of zero-prior actions are dropped)."""
    moves = [(a, m) for a, m in moves if priors.get(a, 1.0) > 0]
    if k is None or k >= len(moves):
        return [m for _, m in moves]
    w = np.array([priors.get(a, 1.0) for a, _ in moves], dtype=float)
    idx = rng.choice(len(moves), size=k, replace=False, p=w / w.sum())
    return [moves[i][1] for i in sorted(idx)]


# ------------------------------------------------------------------------------ block search
def block_objective(
    layout: ModelLayout,
    lay: TPLayout,
    t: int,
    b: int,
    p: DeviceProfile,
    options: Options,
    expressible: bool = True,
) -> float:
    """A block's per-device seconds times ``1 + bytes / capacity`` under ``lay`` on ``t``
    devices (see the module docstring); infinite, with ``expressible``, for a layout DTensor's
    parallel styles cannot express (`rewrite.plans.convert.dtensor_problems`)."""
    prop, name, problems = _propagated(layout, lay, t, b)
    penalty = _INEXPRESSIBLE if expressible and problems else 1.0
    c = graph_cost(prop, p, options, name)
    link = link_of({"tp": t}, ("tp",), p)
    eff = float(p.training.get("link_efficiency", 0.8))
    comm = sum(
        collective_time(x.kind, x.nbytes, link, eff) for x in (*c.fwd_comm, *c.bwd_comm)
    ) + sum(
        collective_time("all_reduce", n * 4, link, eff)
        for n, axes in c.grad_partial.values()
        if "tp" in axes
    )
    seconds = c.fwd + c.bwd + comm
    bytes_ = c.param_numel * 16 / 8 + c.saved["none"]
    return penalty * seconds * (1 + bytes_ / p.memory_capacity)


def search_layout(
    layout: ModelLayout,
    t: int,
    b: int = 1,
    device: str | DeviceProfile = "h100-gt",
    options: Options | None = None,
    priors: Mapping[str, float] | None = None,
    beam: int = 3,
    moves_per_state: int | None = None,
    seed: int = 0,
    expressible: bool = True,
) -> tuple[TPLayout, int]:
    """Search a block's tensor-parallel layout for degree ``t`` from all-replicated.

    Args:
        layout: The model.
        t: Tensor-parallel degree.
        b: Samples per microbatch the block is costed at.
        device: Device profile.
        options: Numerics (default bf16, eager, the layout's causality).
        priors: Action priors (`DEFAULT_PRIORS` for the ones left out).
        beam: Beam width.
        moves_per_state: Moves evaluated per state (None: all).
        seed: Seed of the move sampling.
        expressible: Return only layouts DTensor's parallel styles can express.

    Returns:
        ``(best layout, evaluations)``. The rest of the model (embedding, head) gets the
        vocabulary split of `megatron_layout`.
    """
    p = load_device(device)
    opts = options or Options(causal=layout.causal)
    pri = _check_priors(priors)
    rng = np.random.default_rng(seed)
    graph = layout.graphs_at(b)[0]
    rest = megatron_layout(layout).rest
    seen: dict[Any, float] = {}

    def score(lay: TPLayout) -> float:
        key = lay.key()
        if key not in seen:
            seen[key] = block_objective(layout, lay, t, b, p, opts, expressible)
        return seen[key]

    def ok(lay: TPLayout) -> bool:
        return not expressible or _expressible(layout, lay, t, b)

    start = TPLayout({}, rest, False)
    frontier = [(score(start), start)]
    best = frontier[0]
    stale = 0
    for _ in range(4 * len(graph.params()) + 4):
        moves = [(a.name, m) for _, s in frontier for a in BLOCK_ACTIONS for m in a.moves(s, graph)]
        cands = {m.key(): m for m in _sample(moves, pri, moves_per_state, rng)}
        scored = sorted(((score(m), m) for m in cands.values()), key=lambda x: x[0])
        if not scored:
            break
        better = [x for x in scored if x[0] < best[0] - 1e-12 and ok(x[1])]
        if better:
            best, stale = better[0], 0
        else:
            stale += 1
        if stale >= 2:
            break
        frontier = scored[:beam]
    return best[1], len(seen)


def _propagated(
    layout: ModelLayout, lay: TPLayout, t: int, b: int
) -> tuple[Propagation, str, bool]:
    """Block ``b``'s graph propagated under ``lay`` on ``t`` devices, its hidden input's name,
    and whether DTensor's parallel styles cannot express it (a move inside the block, a
    parameter split no style gives, a fused split `apply` does not regroup)."""
    block, _ = layout.graphs_at(b)
    name = block.input_names[0]
    seeds = {
        n.attrs["name"]: Sharding.split(n.type.rank, lay.block[n.attrs["name"]], "tp")
        for n in block.params()
        if n.attrs["name"] in lay.block
    }
    rank = block.input_types[0].rank
    hidden = Sharding.replicated(rank)
    if lay.sequence_parallel and rank >= 2:
        hidden = hidden.with_dim(1, ("tp",))
    seeds[name] = hidden
    prop = propagate(block, {"tp": t}, seeds, frozenset({name}))
    problems = bool(
        _move_problems(prop, block, "block")
        or _param_problems(lay.block, layout.block_modules, layout.module_fqn)
        or _fused_problems(prop, layout)
    )
    return prop, name, problems


def _expressible(layout: ModelLayout, lay: TPLayout, t: int, b: int) -> bool:
    return not _propagated(layout, lay, t, b)[2]


# ------------------------------------------------------------------------------ plan search
@dataclass
class SearchOutcome:
    """What `search_strategy` found.

    Attributes:
        strategy: The best strategy under the cap (None when nothing fits).
        cost: Its cost.
        steps: Strategies evaluated.
        seconds: Wall time of the search.
        rounds: Beam rounds run.
        history: Per round, the best feasible tokens/s so far.
    """

    strategy: Strategy | None
    cost: StepCost | None
    steps: int
    seconds: float
    rounds: int
    history: list[float] = field(default_factory=list)


def _key(st: Strategy) -> tuple[Any, ...]:
    return (
        tuple(st.mesh.items()), st.tp, st.pp, st.cp, st.fsdp, st.replicate,
        st.layout.key() if st.layout else None, st.checkpoint, st.microbatches, st.schedule,
        st.virtual_stages, st.reshard_after_forward,
    )  # fmt: skip


def _start(n: int | Mapping[str, int], numerics: Mapping[str, Any]) -> tuple[Strategy, bool]:
    if isinstance(n, int):
        return Strategy({"dp": n}, replicate=("dp",), **numerics), False
    mesh = dict(n)
    return Strategy(mesh, replicate=tuple(mesh), **numerics), True


def search_strategy(
    layout: ModelLayout,
    mesh: int | Mapping[str, int],
    device: str | DeviceProfile = "h100-gt",
    memory_cap: float | None = None,
    priors: Mapping[str, float] | None = None,
    beam: int = 4,
    moves_per_state: int | None = None,
    time_budget: float = 60.0,
    seed: int = 0,
    numerics: Mapping[str, Any] | None = None,
    on_round: Callable[[int, float], None] | None = None,
    sequence_parallel: str = "auto",
) -> SearchOutcome:
    """Search a strategy from replicated data parallelism (see the module docstring).

    Args:
        layout: The model with its global batch.
        mesh: A device count (the search factors it), or named axes (the search gives each a
            role: with a fixed mesh, the axis named ``tp`` may be tensor parallel, ``pp``
            pipeline, ``cp`` context parallel, the others data parallel).
        device: Device profile.
        memory_cap: Bytes per device (default the profile's capacity).
        priors: Action priors.
        beam: Beam width.
        moves_per_state: Moves evaluated per state per round (None: all).
        time_budget: Seconds after which no new round starts.
        seed: Seed of the move sampling.
        numerics: ``precision``, ``float8``, ``compile``, ``async_tp`` for every strategy.
        on_round: Called with ``(round, best tokens/s)`` after each round.
        sequence_parallel: One of `rewrite.plans.convert.SEQUENCE_PARALLEL`.

    Raises:
        PlanError: On bad priors or a mesh the batch cannot split over.
    """
    t0 = time.perf_counter()
    p = load_device(device)
    cap = float(memory_cap or p.memory_capacity)
    pri = _check_priors(priors)
    rng = np.random.default_rng(seed)
    nums = dict(numerics or {})
    opts = Options(nums.get("precision", "bf16"), bool(nums.get("float8", False)),
                   bool(nums.get("compile", False)), layout.causal)  # fmt: skip
    start, fixed = _start(mesh, nums)
    ctx = PlanContext(
        layout.n_blocks, layout.batch, p.links()[0], _kv_heads(layout), layout.seq,
        _TPLayouts(layout, mesh, p, opts, pri, seed), fixed,
    )  # fmt: skip
    if fixed:
        start = _assign_fixed(start, ctx)
    scores = _Scores(layout, p, cap)
    best, history, rounds = _beam_search(
        start, ctx, scores, pri, (beam, moves_per_state), rng, t0 + time_budget, on_round
    )
    st = best[1]
    return SearchOutcome(
        st, scores.costs[_key(st)][1] if st else None, len(scores.costs),
        time.perf_counter() - t0, rounds, history,
    )  # fmt: skip


class _TPLayouts:
    """The tensor-parallel layout of each degree ``t`` (searched on first use, then kept)."""

    def __init__(
        self,
        layout: ModelLayout,
        mesh: int | Mapping[str, int],
        p: DeviceProfile,
        opts: Options,
        pri: Mapping[str, float],
        seed: int,
    ) -> None:
        self.layout, self.mesh, self.p, self.opts, self.pri, self.seed = (
            layout, mesh, p, opts, pri, seed
        )  # fmt: skip
        self.found: dict[int, TPLayout] = {}

    def __call__(self, t: int) -> TPLayout:
        layout = self.layout
        if t not in self.found:
            b = max(1, layout.batch // max(1, (_count(self.mesh) // t)))
            lay = search_layout(layout, t, min(b, 2), self.p, self.opts, self.pri, seed=self.seed)[
                0
            ]
            if lay.sequence_parallel and dtensor_problems(
                layout, Strategy({"tp": t}, tp="tp", layout=lay)
            ):
                lay = TPLayout(
                    lay.block, lay.rest, False
                )  # the model's ends need the whole sequence
            self.found[t] = lay
        return self.found[t]


class _Scores:
    """Each strategy's score (tokens/s, discounted beyond the memory cap) and cost, computed
    once per strategy (`_key`)."""

    def __init__(self, layout: ModelLayout, p: DeviceProfile, cap: float) -> None:
        self.layout, self.p, self.cap = layout, p, cap
        self.costs: dict[Any, tuple[float, StepCost | None]] = {}

    def score(self, st: Strategy) -> float:
        key = _key(st)
        if key not in self.costs:
            try:
                c = step_cost(self.layout, st, self.p)
                s = c.tokens_per_second * min(1.0, self.cap / c.peak_memory) ** 4
                self.costs[key] = (s, c)
            except PlanError:
                self.costs[key] = (0.0, None)
        return self.costs[key][0]

    def feasible(self, st: Strategy) -> bool:
        c = self.costs[_key(st)][1]
        return c is not None and c.peak_memory <= self.cap


def _beam_search(
    start: Strategy,
    ctx: PlanContext,
    scores: _Scores,
    pri: Mapping[str, float],
    width: tuple[int, int | None],
    rng: np.random.Generator,
    deadline: float,
    on_round: Callable[[int, float], None] | None,
) -> tuple[tuple[float, Strategy | None], list[float], int]:
    """Beam rounds from ``start`` until no round improves or ``deadline`` passes; ``width`` is
    ``(beam, moves_per_state)``.

    Returns:
        ``((score, strategy), history, rounds)``: the best feasible strategy (None: none was
        feasible), the best score after each round, and the rounds run.
    """
    beam, moves_per_state = width
    frontier = [(scores.score(start), start)]
    best = frontier[0] if scores.feasible(start) else (0.0, None)
    history, rounds = [], 0
    while time.perf_counter() < deadline:
        rounds += 1
        moves = [(a.name, m) for _, s in frontier for a in PLAN_ACTIONS for m in a.moves(s, ctx)]
        cands = {_key(m): m for m in _sample(moves, pri, moves_per_state, rng)}
        scored = sorted(((scores.score(m), m) for m in cands.values()), key=lambda x: -x[0])
        improved = False
        for s, m in scored:
            if scores.feasible(m) and s > best[0] * (1 + 1e-9):
                best, improved = (s, m), True
        top = scored[:beam]
        if not top or (top[0][0] <= frontier[0][0] * (1 + 1e-9) and not improved):
            history.append(best[0])
            break
        frontier = top
        history.append(best[0])
        if on_round:
            on_round(rounds, best[0])
    return best, history, rounds


def _count(mesh: int | Mapping[str, int]) -> int:
    return mesh if isinstance(mesh, int) else math.prod(mesh.values())


def _assign_fixed(st: Strategy, ctx: PlanContext) -> Strategy:
    """With a mesh the user named: data parallel on every axis to start with."""
    return st
