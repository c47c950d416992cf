"""Random-testing verifier: field arithmetic, modes, memoization, cache, backends."""

from __future__ import annotations

import json
import multiprocessing
import os
import sqlite3
import subprocess
import sys
from multiprocessing.connection import Connection
from pathlib import Path

import numpy as np
import pytest

from rewrite.builder import GraphBuilder
from rewrite.errors import BackendError, VerificationError
from rewrite.rules._helpers import op
from rewrite.verify import PRIME, VerdictCache, Verifier, cupy_works, field_const, get_backend
from rewrite.verify.field import MAX_CHUNK, FieldOps
from tests.rewrite.rule_fixtures import BACKENDS, rules_by_name, wrong_rules


def _pair(wrong: bool):
    def g(swap: bool):
        b = GraphBuilder("p")
        a, w, c = b.input("a", (4, 5)), b.param("w", (5, 6)), b.param("c", (6, 3))
        y = op(b, "mm", a, op(b, "mm", w, c)) if swap else op(b, "mm", op(b, "mm", a, w), c)
        return b.build([op(b, "tanh", y) if (wrong and swap) else y])

    return g(False), g(True)


def test_field_constants_are_exact_dyadic_rationals():
    half, two, eps = field_const(0.5), field_const(2.0), field_const(np.float32(1e-5))
    assert float(half) * float(two) % PRIME == 1.0
    assert field_const(-3.0) == PRIME - 3
    assert float(field_const(0.125)) * 8 % PRIME == 1
    assert 0 <= float(eps) < PRIME
    assert field_const(-np.inf) != field_const(np.inf)


def test_field_matmul_is_exact_beyond_one_chunk():
    rng = np.random.default_rng(0)
    k = MAX_CHUNK + 100
    a = rng.integers(0, PRIME, size=(2, k))
    b = rng.integers(0, PRIME, size=(k, 3))
    exact = [
        [sum(int(x) * int(y) for x, y in zip(a[i], b[:, j])) % PRIME for j in range(3)]
        for i in range(2)
    ]
    got = FieldOps(np, 0).matmul(a.astype(np.float64), b.astype(np.float64))
    assert got.tolist() == exact


def test_fast_mod_is_exact_on_the_whole_range():
    rng = np.random.default_rng(3)
    a = np.concatenate(
        [rng.integers(-(2**52), 2**52, size=20000), np.arange(-3 * PRIME, 3 * PRIME, 997)]
    )
    a = a.astype(np.float64)
    got = FieldOps(np, 0).mod(a)
    assert np.array_equal(got, np.mod(a, PRIME)) and got.min() >= 0 and got.max() < PRIME


def test_inverse_and_rsqrt_surrogate_identities():
    f = FieldOps(np, 1)
    x = np.arange(1, 1000, dtype=np.float64)
    assert np.all(f.mod(x * f.inv(x)) == 1)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("mode", ["field", "float"])
def test_equal_graphs_pass_and_wrong_graphs_fail(mode, backend):
    v = Verifier(mode=mode, tests=3, backend=backend)
    ok = v.check(*_pair(False))
    bad = v.check(*_pair(True))
    assert ok.ok and ok.mode == mode and ok.tests == 3
    assert not bad.ok and "differ" in bad.detail
    if mode == "field":
        assert 0 < ok.bound < 1e-10
    else:
        assert np.isnan(ok.bound)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("rule", wrong_rules(), ids=lambda r: r.name)
def test_wrong_rules_fail_random_testing_in_both_modes(rule, backend):
    for mode in ("field", "float"):
        graphs = [rule.sample_graph(s, lo=2, hi=6) for s in range(3)]
        assert not Verifier(mode=mode, backend=backend).check_rule(rule, graphs).ok


def test_rewrite_check_only_computes_new_nodes():
    rule = rules_by_name()["fuse_elementwise"]
    g = rule.sample_graph(0, lo=4, hi=8)
    v = Verifier(mode="field", tests=1)
    ev = v._evaluator("field", 0)
    ev.outputs(g)  # the parent was evaluated before (e.g. when it was itself checked)
    before = ev.misses
    child = rule.apply(g, rule.matches(g)[0])
    assert v.check_rewrite(g, child).ok
    assert ev.misses - before == len(child.delta.added)


def test_check_many_batches_children_of_one_parent():
    rule = rules_by_name()["fuse_elementwise"]
    g = rule.sample_graph(1)
    children = [rule.apply(g, s) for s in rule.matches(g)]
    res = Verifier(mode="field").check_many(g, children)
    assert len(res) == len(children) and all(r.ok for r in res)


def test_signature_mismatch_is_a_clear_error():
    b = GraphBuilder("a")
    g1 = b.build([op(b, "exp", b.input("x", (2, 2)))])
    b = GraphBuilder("b")
    g2 = b.build([op(b, "exp", b.input("y", (2, 2)))])
    with pytest.raises(VerificationError, match="equal signatures"):
        Verifier().check(g1, g2)


def test_field_mode_rejects_ops_without_field_semantics_and_auto_falls_back(op_registry):
    from rewrite.ops import OpDef, register

    name = "test_only_softplus"  # a numpy implementation but no field semantics
    register(
        OpDef(name, lambda ins, a: (ins[0],), lambda xp, arrs, a: (xp.log1p(xp.exp(arrs[0])),))
    )

    def g(double_neg: bool):
        b = GraphBuilder("sp")
        x = b.input("x", (3, 4))
        x = op(b, "neg", op(b, "neg", x)) if double_neg else x
        return b.build([op(b, name, x)])

    with pytest.raises(VerificationError, match="finite-field"):
        Verifier(mode="field").check(g(False), g(True))
    res = Verifier(mode="auto").check(g(False), g(True))
    assert res.ok and res.mode == "float"


def test_max_pool_has_a_symmetric_field_surrogate():
    def g(swap: bool):
        b = GraphBuilder("mp")
        x = b.input("x", (1, 2, 4, 4))
        y = op(b, "max_pool2d", op(b, "relu", x), kernel=(3, 3), stride=(1, 1), padding=(1, 1))
        return b.build([op(b, "permute", y, dims=(0, 1, 3, 2)) if swap else y])

    v = Verifier(mode="field")
    assert v.check(g(False), g(False).copy()).ok
    assert not v.check(g(False), g(True)).ok


def test_float_mode_rejects_non_finite_outputs():
    def g(sqrt: bool):
        b = GraphBuilder("nan")
        x = b.input("x", (3, 3))
        return b.build([op(b, "sqrt" if sqrt else "abs", op(b, "log", x))])

    res = Verifier(mode="float").check(g(True), g(False))
    assert not res.ok and "inconclusive" in res.detail


def test_same_seed_repeats_and_seeds_matter():
    a, b = _pair(True)
    r1, r2 = Verifier(seed=5).check(a, b), Verifier(seed=5).check(a, b)
    assert r1.detail == r2.detail
    assert r1.detail != Verifier(seed=6).check(a, b).detail


def test_verdict_cache_is_shared_through_sqlite(tmp_path):
    path = tmp_path / "v.sqlite"
    a, b = _pair(False)
    first = Verifier(cache=VerdictCache(path)).check(a, b)
    second = Verifier(cache=VerdictCache(path)).check(a, b)
    assert not first.cached and second.cached and second.ok
    con = sqlite3.connect(path)
    rows = con.execute("SELECT ns, record FROM verdicts").fetchall()
    con.close()
    assert [ns for ns, _ in rows] == ["check"]
    rec = json.loads(rows[0][1])
    assert set(rec) == {"ok", "mode", "tests", "bound", "detail", "shapes"} and rec["ok"] is True
    code = (
        "import sys; from rewrite.verify import VerdictCache; c = VerdictCache(sys.argv[1]); "
        "print(len(c)); c.put('x', 'k', {'v': 1})"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(path)], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "1"
    assert VerdictCache(path).get("x", "k") == {"v": 1}


def _use_cache_in_child(cache: VerdictCache, parent_conn_id: int, pipe: Connection) -> None:
    try:
        cache.put("child", "k", {"pid": os.getpid()})
        pipe.send((id(cache._conn()) != parent_conn_id, cache.get("child", "k"), len(cache)))
    finally:
        pipe.close()


@pytest.mark.skipif("fork" not in multiprocessing.get_all_start_methods(), reason="needs fork")
def test_a_forked_process_opens_its_own_cache_connection(tmp_path):
    """A child forked after the parent used the cache never touches the parent's connection."""
    cache = VerdictCache(tmp_path / "v.sqlite")
    cache.put("parent", "k", {"v": 1})
    parent_conn = cache._conn()
    ctx = multiprocessing.get_context("fork")
    receive, send = ctx.Pipe(duplex=False)
    child = ctx.Process(target=_use_cache_in_child, args=(cache, id(parent_conn), send))
    child.start()
    send.close()
    own_conn, record, n = receive.recv()
    child.join(30)
    assert child.exitcode == 0
    assert own_conn and record == {"pid": child.pid} and n == 2
    assert cache._conn() is parent_conn and cache.get("child", "k") == {"pid": child.pid}


def test_verdict_cache_rejects_newer_format_and_ignores_corrupt_records(tmp_path):
    path = tmp_path / "v.sqlite"
    c = VerdictCache(path)
    c.put("ns", "k", {"ok": True})
    con = sqlite3.connect(path)
    (stored,) = con.execute("SELECT record FROM verdicts WHERE ns = 'ns' AND key = 'k'").fetchone()
    assert json.loads(stored) == {"ok": True}  # records are JSON text, never pickle
    con.execute("UPDATE verdicts SET record = '{broken' WHERE key = 'k'")
    con.execute("UPDATE meta SET v = '99' WHERE k = 'format_version'")
    con.commit()
    con.close()
    with pytest.raises(VerificationError, match="newer"):
        VerdictCache(path)
    con = sqlite3.connect(path)
    con.execute("UPDATE meta SET v = '1' WHERE k = 'format_version'")
    con.commit()
    con.close()
    assert VerdictCache(path).get("ns", "k") is None


def test_the_suite_keeps_its_caches_out_of_the_home_directory(tmp_path_factory):
    """`tests/conftest.py` points ``REWRITE_CACHE_DIR`` into the session's temporary tree."""
    from rewrite.verify import default_cache, default_cache_dir

    where = default_cache_dir().resolve()
    assert where.is_relative_to(tmp_path_factory.getbasetemp().resolve())
    assert not where.is_relative_to(Path.home().resolve())
    assert default_cache().path.resolve().is_relative_to(where)


def test_backend_selection(monkeypatch):
    assert get_backend("numpy").name == "numpy"
    monkeypatch.setenv("REWRITE_BACKEND", "numpy")
    assert get_backend().name == "numpy"
    with pytest.raises(BackendError, match="must be one of"):
        get_backend("tpu")
    if not cupy_works():
        monkeypatch.setenv("REWRITE_BACKEND", "cupy")
        with pytest.raises(BackendError, match="cupy"):
            get_backend()
        monkeypatch.delenv("REWRITE_BACKEND")
        assert get_backend().name == "numpy"


def test_bad_verifier_settings():
    with pytest.raises(VerificationError, match="mode must be"):
        Verifier(mode="exact")
    with pytest.raises(VerificationError, match="tests >= 1"):
        Verifier(tests=0)


@pytest.mark.slow
def test_whole_graph_check_of_gpt2(zoo_gpt2):
    rule = rules_by_name()["fuse_elementwise"]
    g = zoo_gpt2
    for site in rule.matches(g)[:3]:
        g = rule.apply(g, site) if rule.matches(g) else g
    child = g
    v = Verifier(mode="auto", tests=2)
    assert v.check(zoo_gpt2, child).ok
    bad = rules_by_name()["unfuse_attention"]
    assert v.check(zoo_gpt2, bad.apply(zoo_gpt2, bad.matches(zoo_gpt2)[0])).ok


def test_seeded_check_repeats_exactly_in_a_fresh_process():
    code = (
        "from tests.rewrite.test_verify import _pair; from rewrite.verify import Verifier; "
        "print(Verifier(seed=11, tests=2).check(*_pair(True)).detail)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == Verifier(seed=11, tests=2).check(*_pair(True)).detail


@pytest.mark.parametrize("name", sorted(rules_by_name()))
def test_batched_tests_equal_separate_tests(name):
    from rewrite.verify.batched import BatchedFieldOps
    from rewrite.verify.interp import Evaluator

    rule = rules_by_name()[name]
    g = rule.sample_graph(5)
    for graph in (g, rule.apply(g, rule.matches(g)[0])):
        batched = Evaluator(BatchedFieldOps(np, [3, 4])).outputs(graph)
        for t, seed in enumerate((3, 4)):
            single = Evaluator(FieldOps(np, seed)).outputs(graph)
            for xb, x in zip(batched, single):
                assert np.array_equal(xb[min(t, xb.shape[0] - 1)], x)


@pytest.mark.parametrize("mode", ["field", "float"])
def test_wrong_integer_rule_fails_random_testing(mode):
    from tests.rewrite.test_prove import wrong_int_square

    rule = wrong_int_square()
    graphs = [rule.sample_graph(s, lo=2, hi=6) for s in range(3)]
    res = Verifier(mode=mode).check_rule(rule, graphs)
    assert not res.ok and "differ" in res.detail


def _embed_or_cast(index: bool, neg: bool):
    """``embedding(w, ids)`` (ids index) or ``cast(ids)`` (ids free), optionally negated twice."""
    b = GraphBuilder("ints")
    ids = b.input("ids", (2, 3), dtype="int64")
    if index:
        y = op(b, "embedding", b.param("w", (5, 3)), op(b, "reshape", ids, shape=(6,)))
    else:
        y = op(b, "cast", ids, dtype="float32")
    return b.build([op(b, "neg", op(b, "neg", y)) if neg else y])


def test_integer_inputs_are_wide_unless_they_index():
    from rewrite.verify.interp import Evaluator
    from rewrite.verify.sources import WIDE_INT, index_bounds

    for index in (True, False):
        g = _embed_or_cast(index, False)
        assert index_bounds(g) == ({("input", "ids"): 5} if index else {})
        ev = Evaluator(FieldOps(np, 0))
        ev.outputs(g)
        ids = ev.source(g.node(g.inputs[0]), "key")
        assert ids.dtype == np.int64
        if index:
            assert ids.min() >= 0 and ids.max() < 5
        else:
            assert -WIDE_INT <= ids.min() < 0 and 2 < ids.max() < WIDE_INT


def test_bound_is_claimed_for_free_integers_only():
    free = Verifier(mode="field").check(_embed_or_cast(False, False), _embed_or_cast(False, True))
    assert free.ok and 0 < free.bound < 1e-6
    index = Verifier(mode="field").check(_embed_or_cast(True, False), _embed_or_cast(True, True))
    assert index.ok and np.isnan(index.bound)


def test_field_norms_are_exact_at_large_sizes():
    h = 65536  # (x * x).sum over H terms near 2**40 exceeds 2**53 unless reduced first

    def g(decomposed: bool):
        b = GraphBuilder("rms")
        x = b.input("x", (2, h))
        if not decomposed:
            return b.build([b.rms_norm(x, normalized_shape=(h,), eps=2.0**-20)])
        ms = b.mean(b.mul(x, x), dims=(1,), keepdim=True)
        return b.build([b.mul(x, b.rsqrt(b.add(ms, np.float32(2.0**-20))))])

    assert Verifier(mode="field", tests=2).check(g(False), g(True)).ok
    assert Verifier(mode="field", tests=2, batch_tests=False).check(g(False), g(True)).ok


def _folded_bias_graph():
    """``x @ W2.T + (v @ W1.T + b)[24:]``: a linear whose bias is a slice of a 1-D linear, as
    a merged product's folded bias is (Phi at sequence length 16, issue 52)."""
    b = GraphBuilder("folded_bias")
    x = b.input("x", (1, 6, 24))
    v = b.param("v", (24,))
    merged = b.linear(v, b.param("w1", (120, 24)), b.param("b1", (120,)))
    bias = b.slice(merged, dim=0, start=24, end=120, step=1)
    return b.build([b.linear(x, b.param("w2", (96, 24)), bias)])


def test_a_linear_of_a_vector_runs_batched_as_per_test():
    """The batched tests aligned a 1-D linear input with the weight's rank, so the product got
    a spurious unit axis: ``(tests, 1, N)`` instead of ``(tests, N)``, and the linear reading it
    failed to broadcast (`ValueError` from the whole-graph check of a Phi model)."""
    from rewrite.verify.batched import BatchedFieldOps
    from rewrite.verify.interp import Evaluator

    g = _folded_bias_graph()
    batched = Evaluator(BatchedFieldOps(np, [3, 4])).outputs(g)
    for t, seed in enumerate((3, 4)):
        single = Evaluator(FieldOps(np, seed)).outputs(g)
        assert np.array_equal(batched[0][t], single[0])
    assert Verifier(mode="field", tests=2, seed=0).check(g, g).ok
