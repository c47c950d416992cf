"""Every graph the search reports verified has had every rewrite of its history checked, in one
process or across islands that rebuild each other's graphs from cached prefixes (issue 52).

Evidence is independent of the record under test: a check that passed is logged by
(rule, digest of the graph it rewrote, site), and a frontier graph's history must be covered
step by step by that log. Islands run on threads here (a thread is a worker: each keeps its own
cache of rebuilt graphs), handed out in rotation.
"""

from __future__ import annotations

import concurrent.futures as cf
import itertools
import threading
from pathlib import Path

import numpy as np
import pytest

from rewrite.builder import GraphBuilder
from rewrite.errors import SearchError
from rewrite.ir import Graph
from rewrite.optimize.api import search
from rewrite.optimize.config import SearchConfig
from rewrite.optimize.engine import Engine, Stochastic
from rewrite.optimize.parallel import EntrySpec, IslandTask, _Global, _restore, _Runtime, _spec
from rewrite.optimize.result import Step
from rewrite.optimize.state import Verification
from tests.rewrite.search_rules import TEST_RULES, WRONG_DROP_NEG


def _odd_chain() -> Graph:
    """A matrix chain ending in five negations: sound rules keep one, the planted rule drops
    it too, so the unsound graph is strictly cheaper than every sound one."""
    b = GraphBuilder("odd_chain")
    dims = [128, 8, 128, 8, 128, 8, 128]
    y = b.input("x", (dims[0], dims[1]))
    for i in range(1, len(dims) - 1):
        y = b.mm(y, b.param(f"w{i}", (dims[i], dims[i + 1])))
    for _ in range(5):
        y = b.neg(y)
    return b.build([y])


CHAIN = _odd_chain()
PLANTED = [*TEST_RULES, WRONG_DROP_NEG]


class _Rotating(cf.Executor):
    """Workers on threads, one more than the islands; each item runs at submission on the next
    worker in turn, so an island's next item lands on another worker than its last."""

    def __init__(self, islands: int) -> None:
        self.pools = [cf.ThreadPoolExecutor(1) for _ in range(islands + 1)]
        self.turn = itertools.cycle(self.pools)

    def submit(self, fn, /, *args, **kwargs):  # type: ignore[override]
        fut = next(self.turn).submit(fn, *args, **kwargs)
        cf.wait([fut])
        return fut

    def shutdown(self, wait: bool = True, **kwargs) -> None:  # type: ignore[override]
        for p in self.pools:
            p.shutdown(wait=wait, **kwargs)


@pytest.fixture
def passed(monkeypatch: pytest.MonkeyPatch) -> set[tuple[str, bytes, object]]:
    """Every region check that passed, as (rule name, digest of the graph before, site)."""
    log: set[tuple[str, bytes, object]] = set()
    lock = threading.Lock()
    check = Engine.check_site

    def logged(self, rule, graph, site) -> bool:
        ok = check(self, rule, graph, site)
        if ok:
            with lock:
                log.add((rule.name, graph.digest, site))
        return ok

    monkeypatch.setattr(Engine, "check_site", logged)
    return log


def _covered(sol, rules, passed) -> bool:
    """Whether every step of ``sol``'s history has a passing check in ``passed``."""
    by_name = {r.name: r for r in rules}
    g = CHAIN
    for step in sol.steps:
        if (step.rule, g.digest, step.site) not in passed:
            return False
        g = by_name[step.rule].apply(g, step.site)
    return True


def _task(rules, seed: int = 0) -> IslandTask:
    from rewrite.serialize import to_json

    cfg = SearchConfig(seed=seed, verify_rate=0.0, epsilon=0.0)
    return IslandTask(
        run_id=f"test-{seed}",
        graph_json=to_json(CHAIN),
        rules=rules,
        prior=np.full(len(rules), 1.0 / len(rules)),
        config=cfg.to_dict(),
        device="h100",
        verify_cache=None,
        strategy=Stochastic(),
        island=0,
        seed=seed,
        steps=0,
        seconds=None,
        state=None,
    )


def _chk(tag: str):
    return (tag, None, None)  # the record runs whatever check it is handed


def test_the_record_verifies_oldest_first_and_shares_progress_with_its_ancestors() -> None:
    grand = Verification(0, 1, (_chk("a"),))
    parent = Verification.extend(grand, [_chk("b"), _chk("c")])
    child = Verification.extend(parent, [_chk("d")])
    ran: list[str] = []
    failing = {"c"}

    def check(rule, graph, site) -> bool:
        ran.append(rule)
        return rule not in failing

    assert not child.verify(check) and ran == ["a", "b", "c"]
    assert (grand.upto, parent.upto, child.upto) == (1, 2, 0)  # child catches up on next verify
    assert grand.verified and not parent.verified
    ran.clear()
    failing = {"d"}
    assert not child.verify(check) and ran == ["c", "d"]  # passed steps are not rerun
    assert parent.verified and child.upto == 3
    sibling = Verification(0, 3, (_chk("f"),), Verification(0, 2, (_chk("g"), _chk("h"))))
    assert sibling.parent is not None
    sibling.advance(2)  # another island reported the prefix verified
    assert sibling.parent is None and sibling.verify(check) and ran[-1] == "f"


def test_a_record_without_the_checks_of_its_unverified_steps_is_refused() -> None:
    with pytest.raises(SearchError, match="parent"):
        Verification(0, 3, (_chk("c"),))  # steps 0 and 1 would go unchecked
    with pytest.raises(SearchError, match="upto <= length"):
        Verification(4, 3)
    assert Verification(2, 3, (_chk("c"),)).parent is None  # verified prefix: no parent needed


def test_a_replay_from_an_unverified_cached_parent_keeps_the_parents_checks() -> None:
    """The bug: a graph rebuilt from a cached, unverified parent lost the parent's pending
    checks, so `verify` passed it on its own rewrites and its report claimed every step."""
    task = _task(PLANTED)
    rt = _Runtime(task)
    engine = _restore(rt, task)
    root = engine.root
    by_name = {r.name: r for r in PLANTED}
    bad_site = WRONG_DROP_NEG.matches(root.graph)[0]
    bad = engine.rewrite(
        root.graph,
        root.cost,
        engine.sites_of(root),
        PLANTED.index(WRONG_DROP_NEG),
        engine.sites_of(root)[WRONG_DROP_NEG.name].index(bad_site),
    )
    assert bad is not None
    g, c, sites, site = bad
    parent = engine.entry(
        root, g, c, sites, [Step(WRONG_DROP_NEG.name, site)], [(WRONG_DROP_NEG, root.graph, site)]
    )
    assert parent is not None and not parent.verified
    rt.remember(parent)  # an unverified parent in this worker's cache
    good = by_name["test_mm_assoc_left"]
    good_site = good.matches(parent.graph)[0]
    child_steps = (*parent.steps, Step(good.name, good_site))
    spec = EntrySpec(child_steps, 0, (1.0, 1.0), True)  # another island's unverified child
    child = rt.rebuild(spec, engine)
    assert child is not None and not child.verified
    assert _spec(child).verified_upto == 0  # nothing verified is reported as verified
    assert not engine.verify(child)  # the planted step is checked, and fails
    assert not child.verified and _spec(child).verified_upto == 0


def test_the_reported_progress_of_another_island_is_shared_through_the_record() -> None:
    """A report that a prefix is verified advances the cached prefix's own record."""
    task = _task(TEST_RULES)
    rt = _Runtime(task)
    engine = _restore(rt, task)
    root = engine.root
    rule = TEST_RULES[2]  # test_neg_neg
    sites = engine.sites_of(root)
    g, c, table, site = engine.rewrite(root.graph, root.cost, sites, 2, 0)
    parent = engine.entry(root, g, c, table, [Step(rule.name, site)], [(rule, root.graph, site)])
    assert parent is not None
    rt.remember(parent)
    nxt = rule.matches(parent.graph)[0]
    spec = EntrySpec((*parent.steps, Step(rule.name, nxt)), 1, (1.0, 1.0), True)
    child = rt.rebuild(spec, engine)
    assert child is not None and not child.verified and _spec(child).verified_upto == 1
    assert parent.verified  # the other island checked the prefix: one record, shared


@pytest.mark.parametrize("workers", [2, 4])
def test_a_planted_unsound_rewrite_is_never_reported_verified(workers: int, passed) -> None:
    """An unsound rule that looks profitable, no sampled checks (only the frontier's), no final
    whole-graph check: whatever the islands rebuild, no reported graph holds the planted rule."""
    for seed in range(4):
        cfg = SearchConfig(
            max_steps=240,
            workers=workers,
            island_steps=8,
            epsilon=0.0,
            seed=seed,
            verify_rate=0.0,
            final_check=False,
            alpha=10.0,
            tau=5.0,
        )
        res = search(CHAIN, cfg, rules=PLANTED, verify_cache=None, executor=_Rotating(workers))
        assert res.pareto
        for sol in res.pareto:
            assert WRONG_DROP_NEG.name not in sol.rules
            assert _covered(sol, PLANTED, passed)


@pytest.mark.parametrize("workers", [2, 4])
@pytest.mark.parametrize("verify_rate", [0.0, 1.0])
def test_every_frontier_graph_has_every_step_verified(
    workers: int, verify_rate: float, passed, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Property over seeded parallel searches (the planted rule among the rules): every graph
    an island reports to the others as a frontier improvement, and every reported graph, has
    as many verified steps as its history, and each step's check passed (in whichever island).
    """
    reported: list[EntrySpec] = []
    merge = _Global.merge

    def logged(self, island, specs) -> None:
        reported.extend(specs)
        merge(self, island, specs)

    monkeypatch.setattr(_Global, "merge", logged)
    for seed in range(4):
        cfg = SearchConfig(
            max_steps=160,
            workers=workers,
            island_steps=6,
            epsilon=0.0,
            seed=seed,
            verify_rate=verify_rate,
            final_check=False,
            alpha=10.0,
            tau=5.0,
        )
        res = search(CHAIN, cfg, rules=PLANTED, verify_cache=None, executor=_Rotating(workers))
        assert res.pareto and any(s.steps for s in res.pareto)
        for sol in res.pareto:
            assert _covered(sol, PLANTED, passed), sol.rules
    assert reported and all(s.verified_upto == len(s.steps) for s in reported)


def test_a_planted_unsound_rewrite_on_the_process_pool(tmp_path: Path) -> None:
    """The same on the default pool of forked processes (their checks cannot be logged here:
    the planted rule must simply never be reported)."""
    cfg = SearchConfig(
        max_steps=160,
        workers=2,
        island_steps=8,
        epsilon=0.0,
        seed=1,
        verify_rate=0.0,
        final_check=False,
    )
    res = search(CHAIN, cfg, rules=PLANTED, verify_cache=str(tmp_path / "v.sqlite"))
    assert res.pareto
    assert all(WRONG_DROP_NEG.name not in s.rules for s in res.pareto)
