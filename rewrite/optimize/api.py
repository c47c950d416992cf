"""`search(graph, ...)`: the entry point of the rewrite search (re-exported as `rewrite.search`)."""

from __future__ import annotations

import logging
import os
import time
import warnings
from collections.abc import Mapping, Sequence
from concurrent.futures import Executor
from typing import Any

import numpy as np

from rewrite.devices import load_device
from rewrite.errors import (
    PriorsError,
    SearchConfigError,
    SearchError,
)
from rewrite.ir import Graph
from rewrite.optimize.config import SearchConfig, knob_names
from rewrite.optimize.priors import PriorsFile, PriorsLike, RulePriors, read_priors_file
from rewrite.optimize.result import SearchResult
from rewrite.optimize.runner import default_rules, loop_deadline, make_verifier, mesh_rules
from rewrite.optimize.strategies import SearchProblem, get_strategy
from rewrite.rules.base import Rule

__all__ = [
    "coerce_config",
    "default_rules",
    "loop_deadline",
    "make_verifier",
    "search",
    "search_inputs",
]

logger = logging.getLogger(__name__)


def search_inputs(
    config: SearchConfig | Mapping[str, Any] | None, priors: PriorsLike
) -> tuple[SearchConfig, RulePriors]:
    """A search's ``config`` and ``priors`` arguments in the one form the engine takes.

    The one place the priors change form: a priors file is read (`read_priors_file`) into a
    `PriorsFile`, whose knobs merge into the config (`coerce_config`) and whose weights become
    a `RulePriors`; rule weights become a `RulePriors` as they are. Both go on unchanged to the
    engine, which resolves the weights to an array over its rules (`RulePriors.resolve`).

    Raises:
        SearchConfigError: As `coerce_config`.
        PriorsError: On an invalid priors file or weight.
    """
    if isinstance(priors, PriorsFile | str | os.PathLike):
        doc = priors if isinstance(priors, PriorsFile) else read_priors_file(priors)
        source = None if isinstance(priors, PriorsFile) else str(priors)
        return coerce_config(config, doc.search_config, source), RulePriors(doc.priors)
    return coerce_config(config, {}), RulePriors.coerce(priors)


def coerce_config(
    config: SearchConfig | Mapping[str, Any] | None,
    knobs: Mapping[str, Any],
    source: str | None = None,
) -> SearchConfig:
    """The config a search runs with, given ``config`` and the knobs of a tuned search (a priors
    file's ``search_config``, `PriorsFile.search_config`; ``{}`` for none).

    A priors file written by ``tuner export`` carries the knobs it was tuned with (the step
    budget included). The rule, from weakest to strongest: the defaults, then the file's knobs,
    then the knobs ``config`` names:

    - ``None``: the file's knobs over the defaults;
    - a dict of knobs: those knobs over the file's (``{"seed": 3}`` keeps every tuned knob);
    - a `SearchConfig`: used as given (it names every knob). Where it differs from the file's
      knobs a `UserWarning` names them, since the tuned values are then dropped; pass a dict of
      the knobs to change instead to keep the rest.

    Knobs this version does not know are ignored with a `UserWarning`. ``source`` names the
    priors file for messages.

    Raises:
        SearchConfigError: For a ``config`` of the wrong type, or an invalid knob; a knob the
            priors file holds is named as the file's, with the file.
    """
    if config is not None and not isinstance(config, SearchConfig | Mapping):
        raise SearchConfigError(
            f"config must be a SearchConfig, a dict of knobs or None, but got {config!r}."
        )
    known = set(knob_names())
    extra = sorted(set(knobs) - known)
    if extra:
        warnings.warn(
            f"The priors file's search_config holds knobs this version does not know: {extra}; "
            "they are ignored.",
            UserWarning,
            stacklevel=4,
        )
    from_file = {k: v for k, v in knobs.items() if k in known}
    given = config.to_dict() if isinstance(config, SearchConfig) else dict(config or {})
    _check_file_knobs({k: v for k, v in from_file.items() if k not in given}, source)
    if not isinstance(config, SearchConfig):
        return SearchConfig.from_dict({**from_file, **(config or {})})
    differ = {
        k: (v, getattr(config, k))
        for k, v in SearchConfig.from_dict(from_file, base=config).to_dict().items()
        if k in from_file and v != config.to_dict()[k]
    }
    if differ:
        shown = ", ".join(f"{k}: file {f!r}, config {c!r}" for k, (f, c) in differ.items())
        warnings.warn(
            f"The priors file's tuned search_config is overridden by the SearchConfig given "
            f"({shown}); the search uses the SearchConfig. To keep the tuned knobs, pass "
            "config=None, or a dict of only the knobs to change (e.g. {'seed': 1}).",
            UserWarning,
            stacklevel=4,
        )
    return config


def _check_file_knobs(knobs: Mapping[str, Any], source: str | None) -> None:
    """Refuse a priors file's invalid ``search_config`` knob, naming the file (the knobs
    ``config`` overrides are not checked: they are not used)."""
    for key, value in knobs.items():
        try:
            SearchConfig.from_dict({key: value})
        except SearchConfigError as err:
            where = f"the priors file {source!r}" if source else "the priors' search_config"
            raise SearchConfigError(
                f"Knob {key}={value!r} from {where} is invalid: {err} Fix or remove it in the "
                f"file (or export the priors again), or override it: config={{{key!r}: ...}}."
            ) from None


def _check_rules(rules: Sequence[Rule]) -> list[Rule]:
    rules = list(rules)
    if not rules or not all(isinstance(r, Rule) for r in rules):
        raise SearchError(
            f"rules must be a non-empty list of rewrite.rules Rule objects, got {rules!r}."
        )
    names = [r.name for r in rules]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise SearchError(f"rule names must be distinct, but {dupes} repeat.")
    return rules


def search(
    graph: Graph,
    config: SearchConfig | Mapping[str, Any] | None = None,
    priors: PriorsLike = None,
    device: Any = "h100",
    executor: Executor | None = None,
    *,
    rules: Sequence[Rule] | None = None,
    verify_cache: Any = "default",
    measure: bool | str = False,
    saturation: Any = None,
) -> SearchResult:
    """Search for rewrites of ``graph`` that trade off the configured cost objectives.

    Args:
        graph: The input graph (e.g. ``rewrite.zoo.build("gpt2")``).
        config: A `SearchConfig`, a dict of its knobs, or None. A priors file's
            ``search_config`` is merged in by the rule of `coerce_config`: a dict's knobs over
            the file's over the defaults; a `SearchConfig` is used as given, with a warning
            when it differs from the file's.
        priors: Rule firing priors: a `RulePriors`, a dict of weights, a tuned search (the path
            of a priors file as ``tuner export`` writes it, or its `PriorsFile`), or None
            (uniform). A tuned search's knobs merge into the config (`search_inputs`).
        device: Cost-model device profile (``"h100"``, ``"h200"``, ``"a100"``, ``"cpu"``, a JSON
            path or a `DeviceProfile`).
        executor: Run islands through this `concurrent.futures.Executor` (e.g. a Dask client's
            ``get_executor()``); None runs in this process when ``config.workers == 1`` and in a
            local process pool otherwise.
        rules: The rules to search with (default: the verified catalogue of `rewrite.rules`).
        verify_cache: Verdict cache of the random tests (see `make_verifier`).
        measure: Re-time the input and the final Pareto graphs in PyTorch and store predicted
            against measured speedups in `SearchResult.measured` (`SearchResult.measure`):
            True for CUDA when present else the CPU, a torch device name, or ``"compile"``
            (CUDA when present else the CPU, every graph compiled whole by ``torch.compile``:
            speedups over the compiled input). Not counted in ``time_budget``.
        saturation: E-graph limits of ``strategy="saturate"``: a
            `rewrite.optimize.saturate.SaturationLimits`, a dict of its fields, or None
            (Tensat's defaults). Ignored by the other strategies.

    Returns:
        A `SearchResult`. With a ``time_budget`` the whole call (rule gate, search and final
        checks) ends within it, give or take one op evaluation; graphs whose whole-graph check
        did not fit are reported with ``checked="regions"``.

    Raises:
        SearchError: If ``graph`` is not a `Graph`, the rules are unusable, or a worker failed.
        SearchConfigError: On an invalid config or an objective the cost model does not know.
        PriorsError: On invalid priors or priors naming a rule outside ``rules``.
    """
    t0 = time.perf_counter()
    if not isinstance(graph, Graph):
        raise SearchError(f"search needs a rewrite Graph, but got {type(graph).__name__}.")
    _check_measure(measure)
    cfg, pri = search_inputs(config, priors)
    device = load_device(device)  # once per search: every cost call gets this profile
    given = _check_rules(default_rules(cfg.max_fusion_size) if rules is None else rules)
    rule_list = mesh_rules(given, cfg.devices)
    if not rule_list:
        raise SearchError(
            f"Every rule given is a sharding rule, and those need a mesh of at least 2 devices, "
            f"but config.devices is {cfg.devices}; pass SearchConfig(devices=2) or other rules."
        )
    prior = _mesh_prior(pri, given, rule_list)
    _check_objectives(cfg)
    problem = SearchProblem(
        graph=graph,
        rules=rule_list,
        prior=prior,
        config=cfg,
        device=device,
        verify_cache=verify_cache,
        executor=executor,
        from_catalogue=rules is None,
        saturation=saturation,
        t0=t0,
    )
    return _measured(get_strategy(cfg.strategy).run(problem), measure)


def _check_measure(measure: Any) -> None:
    if not (isinstance(measure, bool | str) or measure is None):
        raise SearchConfigError(
            f"search's measure must be True, False, 'compile' or a torch device name like 'cpu', "
            f"but got {measure!r}."
        )


def _measured(result: SearchResult, measure: bool | str) -> SearchResult:
    if measure is False or measure is None:
        return result
    seed = int(result.config.get("seed", 0))
    if measure == "compile":
        result.measure(None, seed=seed, compile=True)
    else:
        result.measure(None if measure is True else measure, seed=seed)
    return result


def _mesh_prior(pri: RulePriors, given: Sequence[Rule], used: Sequence[Rule]) -> np.ndarray:
    """Priors resolved over every rule ``given`` (so a file naming a sharding rule stays valid on
    one device), restricted to the rules ``used`` and renormalized."""
    full = dict(zip((r.name for r in given), pri.resolve([r.name for r in given])))
    prior = np.array([full[r.name] for r in used])
    if not prior.sum() > 0:
        raise PriorsError(
            f"The rule priors give zero weight to every rule this search can use "
            f"({[r.name for r in used]}); give one of them a positive weight."
        )
    return prior / prior.sum()


def _check_objectives(cfg: SearchConfig) -> None:
    from rewrite.costmodel import COST_FIELDS

    bad = [o for o in cfg.objectives if o not in COST_FIELDS]
    if bad:
        raise SearchConfigError(
            f"objectives {bad} are not cost-vector entries; choose from {list(COST_FIELDS)}."
        )
