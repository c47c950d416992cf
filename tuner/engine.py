"""One proposal step as a pure function of (settings, trials, n).

`propose` reads the trials and returns new configurations; it never mutates its inputs and keeps
no state between calls, so a tuner rebuilt from its trials proposes exactly what the original
would have. All randomness is seeded from ``(seed, position)`` inside a forked torch RNG, where
the proposal ``position`` is ``len(trials)`` unless the caller passes another: processes sharing a
study reserve distinct positions (`studies.allocation`), so two of them proposing on the same
trials still propose different configurations.

Sources of a proposal, in order:

1. The initial design, indexed by proposal position ``k = position + i``: position 0 is the
   space's default configuration (each parameter's default, else its center; Ax likewise starts
   from the center of the space; `TunerOptions.start_with_default`), later positions are the
   points of the space's scrambled Sobol sequence (`Space.sample_unit` with the tuner's seed).
   It is used while ``k < n_initial``, and continues while fewer than
   ``options.min_completed`` trials have completed. Configurations queued before the design
   can fill its first positions without using up its points (``design_offset`` of them besides
   the default; a warm-started study's related best, `studies.views.design_offset`): position
   ``k`` then proposes design point ``k - design_offset``, so the design still starts from the
   sequence's first points, the ones that cover the space most evenly.
2. The model: the surrogate is fitted on the COMPLETE trials and the acquisition function
   (qLogNEHVI, or qLogNEI for one objective) is maximized one point at a time (sequential greedy
   batches). RUNNING and WAITING trials, the batch's earlier points and the latest FAILED
   configurations are pending points, and so are the initial-design points of positions other
   processes have reserved but not filled yet (``reserved``: their configurations are known
   without asking them).

Points the surrogate suggests (`tuner.Fitted.suggested`, `Surrogate.suggestions`: a warm start's
related best, once the related study has shown it helps) come first at any position, design or
model, while untried; in the design they take the points of the positions they fill.

Failed trials never enter the model. Passing their configurations as pending points makes the
acquisition function treat them as already being evaluated: expected improvement at and near a
failed configuration is discounted (fading with the GP's length scales), without inventing an
outcome for it. A configuration already tried (in any state) is never proposed again.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import Tensor

from tuner.acquisition import build_acquisition, infer_reference, no_fused_kernel
from tuner.candidates import (
    KeySet,
    best_candidate,
    candidate_pool,
    candidates_from,
    fallback_point,
    starting_points,
)
from tuner.errors import SpaceExhaustedError, SurrogateError
from tuner.options import TunerOptions
from tuner.problem import Problem
from tuner.surrogate import Fitted, Surrogate, TrainingData
from tuner.threads import one_thread
from tuner.trial import Trial, TrialState

if TYPE_CHECKING:
    from spaces import Space

__all__ = [
    "Proposal",
    "ProposalContext",
    "default_n_initial",
    "derive_seed",
    "design_index",
    "propose",
]

logger = logging.getLogger(__name__)


def default_n_initial(dim: int) -> int:
    """Default size of the Sobol initial design: ``min(max(dim + 1, 5), 10)``."""
    return min(max(dim + 1, 5), 10)


def derive_seed(seed: int, n_trials: int) -> int:
    """Seed of the proposal made when ``n_trials`` trials exist (a 31-bit int)."""
    state = np.random.SeedSequence([int(seed) & 0xFFFFFFFF, int(n_trials)]).generate_state(1)
    return int(state[0]) & 0x7FFFFFFF


@dataclass(frozen=True)
class ProposalContext:
    """Everything a proposal depends on besides the trials."""

    space: Space
    problem: Problem
    surrogate: Surrogate
    options: TunerOptions
    reference_point: Mapping[str, float] | None
    seed: int
    n_initial: int


@dataclass(frozen=True)
class Proposal:
    """What `propose` returns.

    Attributes:
        configs: The new configurations.
        fitted: The surrogate's fit the model-based configurations came from (`Surrogate.fit`);
            None when every configuration came from the initial design.
    """

    configs: list[dict[str, Any]]
    fitted: Fitted | None = None


def propose(
    settings: ProposalContext,
    trials: Sequence[Trial],
    n: int,
    *,
    position: int | None = None,
    reserved: Sequence[int] = (),
    design_offset: int = 0,
) -> Proposal:
    """Propose ``n`` new configurations given the existing trials.

    Args:
        settings: Space, problem, surrogate, options, seed.
        trials: Every trial so far, in id order.
        n: Number of configurations, ``>= 1``.
        position: Proposal position of the first configuration (the others follow it): it
            seeds the proposal and indexes the initial design. Default ``len(trials)``.
        reserved: Positions other proposers hold (computing now, not among ``trials`` yet);
            their initial-design points are never proposed and are pending points.
        design_offset: Initial-design points that queued configurations stood in for
            (`design_index`): position ``k > design_offset`` proposes design point
            ``k - design_offset``.

    Returns:
        ``n`` distinct valid configurations, none equal to an existing trial's, and the fit
        they came from.

    Raises:
        SpaceExhaustedError: No untried configuration could be found.
        SurrogateError: The surrogate failed to fit.
    """
    space = settings.space
    t = len(trials) if position is None else int(position)
    seed = derive_seed(settings.seed, t)
    taken = KeySet(space.to_unit([tr.config for tr in trials]) if trials else None)
    completed = [tr for tr in trials if tr.state is TrialState.COMPLETE]
    use_model = len(completed) >= settings.options.min_completed
    index = [design_index(t + i, design_offset) for i in range(n)]
    sobol = _design(space, max(index) + 1, settings.seed, settings.options.start_with_default)
    in_flight = _in_flight(settings, reserved, use_model, taken, design_offset)
    # the design's positions come first: every one while the model is not used yet, those
    # inside the initial design unless the surrogate proposes there (`Surrogate.informed`)
    n_design = n if not use_model else min(n, max(settings.n_initial - t, 0))
    data, fitted, suggested = None, None, list[Tensor]()
    if use_model:
        data = settings.problem.training_data(space, completed, seed)
        informed, suggested, fitted = _consult(settings, data, n_design > 0, n_design < n)
        n_design = 0 if informed else n_design
    chosen: list[Tensor] = []
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        for i in range(n):
            while suggested and suggested[0] in taken:
                suggested.pop(0)
            x: Tensor | None = None
            if suggested:  # before the design's next point and the acquisition's
                x = suggested.pop(0)
            elif i >= n_design:
                break
            elif sobol[index[i]] not in taken:
                x = sobol[index[i]]
            chosen.append(_accept(x, space, taken, seed + i))
        if len(chosen) < n:
            assert data is not None and fitted is not None  # model positions: use_model
            q = n - len(chosen)
            extra = chosen + in_flight
            chosen += _model_batch(settings, data, fitted, trials, completed, extra, q, taken, seed)
    return Proposal(space.from_unit(candidates_from(chosen, space.dim)), fitted)


@one_thread()
def _consult(
    settings: ProposalContext, data: TrainingData, design: bool, model: bool
) -> tuple[bool, list[Tensor], Fitted | None]:
    """What the surrogate says before any point is chosen: whether it proposes within the
    initial design (`Surrogate.informed`, asked when the batch has ``design`` positions), the
    points to try first (``d``-dim each, best first: `Fitted.suggested`), and its fit when the
    batch has ``model`` positions or it is informed (else None: nothing is fitted for a
    surrogate that suggests nothing, `Surrogate.suggestions`)."""
    surrogate = settings.surrogate
    informed = design and surrogate.informed(data)
    fitted = surrogate.fit(data) if model or informed else None
    points = fitted.suggested if fitted is not None else surrogate.suggestions(data)
    return informed, [] if points is None else list(points), fitted


def design_index(position: int, design_offset: int) -> int:
    """The initial-design point proposal ``position`` proposes when ``design_offset`` queued
    configurations stood in for design points: ``position - design_offset`` past them (the
    design resumes at the first point they displaced), else ``position`` (a position a queued
    configuration holds is not proposed for)."""
    return position - design_offset if position > design_offset else position


def _in_flight(
    settings: ProposalContext,
    reserved: Sequence[int],
    use_model: bool,
    taken: KeySet,
    design_offset: int,
) -> list[Tensor]:
    """The initial-design points (``d``-dim each) other proposers will propose for their
    ``reserved`` positions, as far as they can be known here: positions inside the initial
    design, or every position while the model is not used yet. They are added to ``taken``."""
    known = [q for q in sorted(set(reserved)) if q < settings.n_initial or not use_model]
    if not known:
        return []
    space = settings.space
    index = [design_index(q, design_offset) for q in known]
    design = _design(space, max(index) + 1, settings.seed, settings.options.start_with_default)
    points = [design[j] for j in index if design[j] not in taken]
    for x in points:
        taken.add(x)
    return points


def _design(space: Space, n: int, seed: int, start_with_default: bool) -> Tensor:
    """The first ``n`` points of the initial design (``n x d``)."""
    if not start_with_default:
        return space.sample_unit(n, seed)
    default = space.to_unit([space.default()])
    return torch.cat([default, space.sample_unit(max(n - 1, 0), seed)])[:n]


def _accept(x: Tensor | None, space: Space, taken: KeySet, seed: int) -> Tensor:
    if x is None:
        x = fallback_point(space, taken, seed)
    if x is None:
        raise SpaceExhaustedError(
            "No untried configuration was found: the space looks exhausted. Widen the space or "
            "stop asking."
        )
    taken.add(x)
    return x


@one_thread()
def _model_batch(
    settings: ProposalContext,
    data: TrainingData,
    fitted: Fitted,
    trials: Sequence[Trial],
    completed: Sequence[Trial],
    chosen: Sequence[Tensor],
    q: int,
    taken: KeySet,
    seed: int,
) -> list[Tensor]:
    """``q`` points from the acquisition function of the surrogate's ``fitted`` model of
    ``data``, greedily, each pending for the next (the ``chosen`` points are pending too).
    BoTorch's fused qLogNEHVI kernel is neither compiled nor used
    (`tuner.acquisition.no_fused_kernel`).

    BLAS runs single-threaded here: the fits and the acquisition optimization make many calls on
    tiny arrays (L-BFGS-B's vector updates, small Cholesky factors), where a multi-threaded
    BLAS spends more time waking its threads than computing (`tuner.threads.one_thread`).
    """
    space, problem, options = settings.space, settings.problem, settings.options
    model = fitted.model
    if getattr(model, "num_outputs", data.Y.shape[-1]) != data.Y.shape[-1]:
        raise SurrogateError(
            f"The surrogate's model has {model.num_outputs} outputs but the tuner models "
            f"{data.Y.shape[-1]} outcomes {data.outcome_names}; see `Surrogate.fit`."
        )
    predicted = _posterior_mean(model, data.X)
    ref = infer_reference(
        problem, completed, settings.reference_point, options.ref_point_scale, predicted
    )
    pending = _pending(space, trials, options.max_failed_pending)
    pending = torch.cat([pending, candidates_from(chosen, space.dim)])
    out: list[Tensor] = []
    proposer, veto = fitted.proposer, fitted.veto

    def acquisition(m: Any) -> Any:
        return build_acquisition(m, problem, data.X, pending, ref, options.mc_samples, seed)

    with no_fused_kernel():
        acqf = acquisition(model)
        # The candidates: the optima of the proposer's acquisition (the fitted model's own by
        # default) and, under a veto, of the vetoing model's, whose best sets the bar
        # (`tuner.Fitted.veto`); the fitted model's acquisition ranks them all.
        finders = [acqf if proposer is None else acquisition(proposer)]
        guard = None
        if veto is not None:
            guard = (finders[0] if veto[0] is proposer else acquisition(veto[0]), veto[1])
            if guard[0] is not finders[0]:
                finders.append(guard[0])
        for j in range(q):
            if out:
                for a in dict.fromkeys([acqf, *finders]):
                    a.set_X_pending(torch.cat([pending, torch.stack(out)]))
            pool = []
            for f in finders:
                ics = starting_points(f, space, options, seed + 1 + j)
                pool.append(candidate_pool(f, space, ics, options))
            x = best_candidate(torch.cat(pool), acqf, taken, guard)
            out.append(_accept(x, space, taken, seed + 7919 + j))
    return out


def _posterior_mean(model: Any, X: Tensor) -> Tensor | None:
    """``n x m`` posterior mean at ``X``, or `None` when the posterior has no closed-form mean."""
    with torch.no_grad():
        try:
            return model.posterior(X).mean
        except (AttributeError, NotImplementedError):
            return None


def _pending(space: Space, trials: Sequence[Trial], max_failed: int) -> Tensor:
    """Inputs of RUNNING and WAITING trials, then of the latest ``max_failed`` FAILED ones."""
    live = [t.config for t in trials if t.state in (TrialState.RUNNING, TrialState.WAITING)]
    failed = [t.config for t in trials if t.state is TrialState.FAILED]
    failed = failed[len(failed) - max_failed :] if max_failed else []
    configs = live + failed
    return space.to_unit(configs) if configs else torch.empty(0, space.dim, dtype=torch.float64)
