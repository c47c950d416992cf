"""Random-testing equivalence checks of graphs: whole graphs, rewrites and rule regions.

`Verifier.check(a, b)` evaluates both graphs on the same random inputs ``tests`` times and
compares every output. In ``field`` mode (default) values live in ``F_p`` (see
`rewrite.verify.field`): equality is exact and one test falsely accepts a wrong graph with
probability at most ``d / p`` (``d`` the degree bound, estimated per graph); ``tests`` independent
tests give the reported ``bound = (d / p) ** tests``. Free integer inputs are drawn from a set of
size ``r`` (`rewrite.verify.sources.int_range`), which makes the per-test bound ``d / min(p, r)``;
with an index or bool input (drawn from a small set) no bound is claimed (``bound = nan``). In
``float`` mode the reference implementations run in the declared dtypes (inputs standard normal,
parameters uniform in ``[0.5, 1.5]`` so variances and norms stay valid) and outputs are compared
with dtype-aware tolerances (`TOLERANCES`); non-finite outputs make the check inconclusive, which
rejects; no bound is claimed (``bound = nan``). ``mode="auto"`` uses the field and falls back to
float when a graph holds an op without field semantics.

Cheap checks for a search: `check_rewrite(parent, child)` reuses the memoized values of every
node the child shares with its parent (one `Evaluator` per test seed, kept across calls), and
`check_site(rule, graph, site)` tests just the rewritten region: the matched nodes are cut out
with fresh inputs at their boundary, rewritten by the rule, and the two small graphs compared.
Verdicts are cached in a `VerdictCache` keyed by the two graphs' hashes and the settings.

Shape-reduced checks (``reduce=True``; the default of `check_site`): both graphs are rebuilt at
the sizes of one size map that keeps every size relation of either graph
(`rewrite.verify.reduce`), and the reduced pair is tested instead, so the cost follows the
graphs' structure, not the model's width. The result says which instantiation was tested
(``shapes``): ``"reduced"``, ``"real"`` (nothing to reduce, or no size map keeps the relations
and the real pair fits ``max_bytes``), or ``"none"`` (neither: nothing was run, ``ok`` is False).
A ``deadline`` stops a check between two node evaluations (``shapes="none"`` as well).

Not thread-safe (evaluators hold memos); give each worker process its own `Verifier` and share
the on-disk cache.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import math
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from rewrite.errors import MatchError, ShapeReductionError, VerificationError
from rewrite.ir import Graph
from rewrite.verify.backend import Backend, get_backend
from rewrite.verify.batched import BatchedFieldOps
from rewrite.verify.cache import VerdictCache
from rewrite.verify.degree import degree_bound
from rewrite.verify.field import PRIME, SEMANTICS_VERSION, FieldOps
from rewrite.verify.interp import DeadlineExceeded, Evaluator, FloatOps
from rewrite.verify.reduce import reduce_pair
from rewrite.verify.region import region_graphs
from rewrite.verify.sources import free_int_range, index_bounds, restricted_sources

if TYPE_CHECKING:
    from rewrite.rules.base import Rule, Site

__all__ = ["MODES", "SHAPES", "TOLERANCES", "CheckResult", "Verifier"]

_log = logging.getLogger(__name__)

#: Check modes.
MODES = ("field", "float", "auto")
#: What a check tested: the graphs' own sizes, a shape-reduced instantiation, or nothing.
SHAPES = ("real", "reduced", "none")
#: Version of the shape reduction; part of the cache key of reduced verdicts.
_REDUCED = "|reduced1"
#: ``(rtol, atol relative to the output's max magnitude)`` per dtype in float mode.
TOLERANCES = {
    "float64": (1e-9, 1e-9),
    "float32": (2e-4, 2e-4),
    "float16": (2e-2, 2e-2),
    "bfloat16": (2e-2, 2e-2),
}


@dataclass(frozen=True)
class CheckResult:
    """Outcome of one equivalence check.

    Attributes:
        ok: Whether every test agreed on every output.
        mode: ``"field"`` or ``"float"`` (the mode actually used).
        tests: Number of random tests run.
        bound: Probability bound of a false accept (``nan`` when none is claimed: float mode,
            or an index or bool input drawn from a small set).
        detail: Why the check failed (first mismatch), empty when ok.
        cached: Whether the verdict came from the cache.
        seconds: Wall time of the check.
        shapes: The instantiation tested (`SHAPES`): ``"real"``, ``"reduced"`` (the bound is then
            about the reduced pair), or ``"none"`` when nothing was run (``ok`` is False and
            ``detail`` says why).
    """

    ok: bool
    mode: str
    tests: int
    bound: float
    detail: str = ""
    cached: bool = False
    seconds: float = field(default=0.0, compare=False)
    shapes: str = "real"

    def __bool__(self) -> bool:
        return self.ok

    @property
    def checked(self) -> bool:
        """Whether a test ran (a failed one included): False for ``shapes="none"``."""
        return self.shapes != "none"


class Verifier:
    """Random-testing verifier (see the module docstring).

    Args:
        mode: ``"field"``, ``"float"`` or ``"auto"``.
        tests: Number of independent random tests per check (``>= 1``).
        seed: Base seed; test ``i`` uses seed ``seed + i``.
        backend: ``"numpy"``, ``"cupy"``, ``"auto"``, a `Backend`, or None (``REWRITE_BACKEND``).
        cache: Verdict cache, or None for no caching.
        memo_bytes: Memo budget per test evaluator.
        batch_tests: In field mode, run all tests in one pass with a leading test axis
            (`BatchedFieldOps`; identical results, fewer array calls).
        max_bytes: When a shape-reduced check was asked for and the graphs do not reduce, the
            largest estimated working set (``8 * tests`` bytes per element of every value) of a
            check at the real shapes; beyond it nothing is run (``shapes="none"``).

    Raises:
        VerificationError: On an unknown mode or ``tests < 1``.
        BackendError: If the requested backend is unusable.
    """

    def __init__(
        self,
        mode: str = "auto",
        tests: int = 2,
        seed: int = 0,
        backend: str | Backend | None = None,
        cache: VerdictCache | None = None,
        memo_bytes: int = 256 << 20,
        batch_tests: bool = True,
        max_bytes: int = 256 << 20,
    ) -> None:
        if mode not in MODES:
            raise VerificationError(f"mode must be one of {MODES}, but got {mode!r}.")
        if tests < 1:
            raise VerificationError(f"`tests >= 1` must hold, but got {tests=}.")
        self.mode, self.tests, self.seed = mode, tests, seed
        self.backend = backend if isinstance(backend, Backend) else get_backend(backend)
        self.cache = cache
        self.memo_bytes = memo_bytes
        self.batch_tests = batch_tests
        self.max_bytes = max_bytes
        self._evals: dict[tuple[str, int], Evaluator] = {}
        self._reductions: dict[Any, Graph] = {}  # reduced graphs by (hash, size map)

    # ------------------------------------------------------------------ internals
    def _evaluator(self, mode: str, i: int) -> Evaluator:
        ev = self._evals.get((mode, i))
        if ev is None:
            xp, seed = self.backend.xp, self.seed + i
            sem = FieldOps(xp, seed) if mode == "field" else FloatOps(xp, seed)
            ev = self._evals[(mode, i)] = Evaluator(sem, self.memo_bytes)
        return ev

    def _key(self, a: Graph, b: Graph, mode: str) -> str:
        lo, hi = sorted((a.hash, b.hash))
        return f"{lo}|{hi}|{mode}|{self.tests}|{self.seed}|v{SEMANTICS_VERSION}"

    def _batched(self) -> Evaluator:
        ev = self._evals.get(("field-batched", self.tests))
        if ev is None:
            sem = BatchedFieldOps(self.backend.xp, [self.seed + i for i in range(self.tests)])
            ev = self._evals[("field-batched", self.tests)] = Evaluator(sem, self.memo_bytes)
        return ev

    def _outputs(
        self, a: Graph, b: Graph, mode: str, deadline: float | None
    ) -> Iterator[tuple[list[Any], list[Any]]]:
        """Per test, both graphs' outputs (all tests in one batched pass in field mode)."""
        bounds = index_bounds(a, b)  # both graphs must see the same index values
        if mode == "field" and self.tests > 1 and self.batch_tests:
            ev = self._batched()
            xs, ys = ev.outputs(a, bounds, deadline), ev.outputs(b, bounds, deadline)
            for i in range(self.tests):
                yield (
                    [x[min(i, x.shape[0] - 1)] for x in xs],
                    [y[min(i, y.shape[0] - 1)] for y in ys],
                )
            return
        for i in range(self.tests):
            ev = self._evaluator(mode, i)
            yield ev.outputs(a, bounds, deadline), ev.outputs(b, bounds, deadline)

    def _run(self, a: Graph, b: Graph, mode: str, deadline: float | None) -> CheckResult:
        for i, (xs, ys) in enumerate(self._outputs(a, b, mode, deadline)):
            for j, (x, y, t) in enumerate(zip(xs, ys, a.output_types)):
                bad = self._mismatch(x, y, t.dtype, mode)
                if bad:
                    bound = _bound(a, b, mode, self.tests)
                    return CheckResult(False, mode, i + 1, bound, f"output {j}, test {i}: {bad}")
        return CheckResult(True, mode, self.tests, _bound(a, b, mode, self.tests))

    def _mismatch(self, x: Any, y: Any, dtype: str, mode: str) -> str:
        b = self.backend
        x, y = b.asnumpy(x), b.asnumpy(y)
        if x.shape != y.shape:
            return f"shapes differ: {x.shape} vs {y.shape}"
        if mode == "field" or x.dtype.kind in "biu":
            diff = x != y
        else:
            rtol, atol = TOLERANCES.get(dtype, (1e-4, 1e-4))
            xf, yf = x.astype(np.float64), y.astype(np.float64)
            if not (np.isfinite(xf).all() and np.isfinite(yf).all()):
                return (
                    "non-finite outputs (inf/nan): the float check is inconclusive, so it rejects"
                )
            scale = max(
                float(np.max(np.abs(xf), initial=0.0)),
                float(np.max(np.abs(yf), initial=0.0)),
                1e-30,
            )
            diff = ~np.isclose(xf, yf, rtol=rtol, atol=atol * scale)
        if not diff.any():
            return ""
        idx = tuple(int(i) for i in np.argwhere(diff)[0])
        return f"{int(diff.sum())} of {diff.size} elements differ, first at {idx}: {x[idx]!r} vs {y[idx]!r}"

    def _lookup(self, keys: Sequence[str], t0: float) -> CheckResult | None:
        """A cached verdict under the first of ``keys`` that has one."""
        if self.cache is None:
            return None
        for key in keys:
            rec = self.cache.get("check", key)
            if rec is not None:
                return CheckResult(
                    rec["ok"],
                    rec["mode"],
                    rec["tests"],
                    rec["bound"],
                    rec["detail"],
                    True,
                    time.perf_counter() - t0,
                    rec.get("shapes", "real"),
                )
        return None

    def _store(self, key: str, res: CheckResult) -> None:
        if self.cache is not None:
            rec = {k: getattr(res, k) for k in ("ok", "mode", "tests", "bound", "detail", "shapes")}
            self.cache.put("check", key, rec)

    def _pair(self, a: Graph, b: Graph) -> tuple[tuple[Graph, Graph] | None, str]:
        """The pair a reduced check tests: reduced, else real if it fits ``max_bytes``, else
        None with the reason."""
        try:
            red = reduce_pair(a, b, cache=self._reductions)
            why = "no size can shrink (every size is pinned)"
        except ShapeReductionError as err:
            red, why = None, f"no shape-reduced instantiation ({err})"
        if red is not None:
            return red, ""
        need = 8 * self.tests * sum(t.numel for g in (a, b) for n in g for t in n.types)
        if need <= self.max_bytes:
            return (a, b), ""
        _log.debug("check not run: %s", why)
        return None, (
            f"{why}, and a check at the real shapes needs about {need >> 20} MiB, over "
            f"max_bytes={self.max_bytes >> 20} MiB; raise Verifier(max_bytes=...) to run it."
        )

    def _decide(self, a: Graph, b: Graph, deadline: float | None, mode: str) -> CheckResult:
        if mode != "auto":
            return self._run(a, b, mode, deadline)
        try:
            return self._run(a, b, "field", deadline)
        except VerificationError:
            return self._run(a, b, "float", deadline)

    # ------------------------------------------------------------------ public
    def check(
        self,
        a: Graph,
        b: Graph,
        *,
        reduce: bool = False,
        deadline: float | None = None,
        mode: str | None = None,
    ) -> CheckResult:
        """Whether ``a`` and ``b`` compute the same outputs on the same inputs.

        Args:
            a: A graph.
            b: A graph with the same input names/types and output types.
            reduce: Test a shape-reduced instantiation of the pair (see the module docstring).
            deadline: `time.perf_counter` value after which the check stops (``shapes="none"``).
            mode: This check's mode (one of `MODES`), or None for the verifier's: ``"float"``
                for rewrites by rules that are not exact in the field (`Rule.exact`).

        Returns:
            The `CheckResult` (cached verdicts are returned with ``cached=True``; a reduced check
            reuses a cached real-shape verdict).

        Raises:
            VerificationError: If the signatures differ, or an op has no semantics in the mode.
        """
        t0 = time.perf_counter()
        if (
            a.input_types != b.input_types
            or a.input_names != b.input_names
            or a.output_types != b.output_types
        ):
            raise VerificationError(
                f"graphs must have equal signatures to be compared, but got inputs "
                f"{list(zip(a.input_names, map(str, a.input_types)))} -> {list(map(str, a.output_types))} and "
                f"{list(zip(b.input_names, map(str, b.input_types)))} -> {list(map(str, b.output_types))}."
            )
        mode = mode or self.mode
        if mode not in MODES:
            raise VerificationError(f"mode must be one of {MODES}, but got {mode!r}.")
        key = self._key(a, b, mode)
        hit = self._lookup((key, key + _REDUCED) if reduce else (key,), t0)
        if hit is not None:
            return hit
        if a.digest == b.digest:
            res = CheckResult(True, "field" if mode != "float" else "float", 0, 0.0)
            self._store(key, res)
            return res
        x, y = a, b
        if reduce:
            pair, why = self._pair(a, b)
            if pair is None:
                return CheckResult(False, mode, 0, math.nan, why, False, 0.0, "none")
            x, y = pair
        shapes = "real" if x is a else "reduced"
        try:
            with _blas_threads(1 if shapes == "reduced" else None):
                res = self._decide(x, y, deadline, mode)
        except DeadlineExceeded:
            res, shapes = CheckResult(False, mode, 0, math.nan, "the deadline passed"), "none"
        res = dataclasses.replace(res, seconds=time.perf_counter() - t0, shapes=shapes)
        if shapes == "none":
            return res
        self._store(key + _REDUCED if shapes == "reduced" else key, res)
        return res

    def check_rewrite(
        self, parent: Graph, child: Graph, *, reduce: bool = False, deadline: float | None = None
    ) -> CheckResult:
        """Check a rewritten graph against its parent (only the child's new nodes are computed
        when the parent was checked or evaluated by this verifier before; with ``reduce``, when
        the pair reduces with the size map of an earlier check of the parent)."""
        return self.check(parent, child, reduce=reduce, deadline=deadline)

    def check_many(
        self, parent: Graph, children: Iterable[Graph], *, reduce: bool = False
    ) -> list[CheckResult]:
        """Check a batch of candidate children of one parent; the parent is evaluated once."""
        return [self.check(parent, c, reduce=reduce) for c in children]

    def check_site(
        self, rule: Rule, graph: Graph, site: Site, *, reduce: bool = True
    ) -> CheckResult:
        """Check one rule application by testing only the rewritten region (in float mode
        for a rule that is not exact in the field, `Rule.exact`).

        The region pair is checked shape-reduced by default (``reduce``), so the cost follows
        the region's structure, not its tensor sizes. A rule whose precondition reads the
        surrounding graph is checked on the whole graph instead.

        Raises:
            MatchError: If ``site`` does not match ``graph``.
        """
        mode = None if rule.exact else "float"
        try:
            before, after = region_graphs(rule, graph, site)
        except MatchError:
            rule.match_of(graph, site)  # re-raise for a stale site
            return self.check(graph, rule.apply(graph, site), reduce=reduce, mode=mode)
        return self.check(before, after, reduce=reduce, mode=mode)

    def check_rule(self, rule: Rule, graphs: Sequence[Graph]) -> CheckResult:
        """Apply ``rule`` at every site of each sample graph and check each result.

        Returns:
            The first failing result, or the last passing one.

        Raises:
            VerificationError: If no graph holds a site.
        """
        last: CheckResult | None = None
        mode = None if rule.exact else "float"
        for g in graphs:
            for site in rule.matches(g):
                last = self.check(g, rule.apply(g, site), mode=mode)
                if not last.ok:
                    return last
        if last is None:
            raise VerificationError(
                f"rule {rule.name!r} has no site in the given graphs; nothing was checked."
            )
        return last


@functools.cache
def _blas_controller() -> Any:
    from threadpoolctl import ThreadpoolController

    return ThreadpoolController()


def _blas_threads(n: int | None) -> Any:
    """A context limiting BLAS to ``n`` threads (None: unchanged). Reduced checks multiply
    tiny matrices, which threaded BLAS slows down by orders of magnitude on a busy machine."""
    if n is None:
        return contextlib.nullcontext()
    return _blas_controller().limit(limits=n, user_api="blas")


def _bound(a: Graph, b: Graph, mode: str, tests: int) -> float:
    if mode != "field" or restricted_sources(a, b):
        return math.nan
    d = max(degree_bound(a), degree_bound(b))
    size = min(PRIME, free_int_range(a, b) or PRIME)  # integers from a smaller set: weaker bound
    return min(1.0, d / size) ** tests
