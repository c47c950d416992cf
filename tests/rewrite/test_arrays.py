"""The array front end: the jax.numpy namespace, loading programs, importing them, handing back."""

from __future__ import annotations

import textwrap

import pytest
import torch

from rewrite.arrays import SUPPORTED, import_program, jnp, load_program, optimize, program_inputs
from rewrite.errors import ArrayProgramError


def _program(tmp_path, body: str, name: str = "prog", header: str = "import jax.numpy as jnp"):
    path = tmp_path / f"{name}.py"
    path.write_text(f"{header}\n\narg_ranks = [2, 2]\n\n\n{textwrap.dedent(body)}")
    return load_program(path)


# ---------------------------------------------------------------- the namespace
def test_namespace_has_jax_numpy_semantics():
    a = torch.arange(12.0).reshape(3, 4)
    assert torch.equal(jnp.sum(a, axis=0), a.sum(0))
    assert jnp.sum(a, axis=(0, 1), keepdims=True).shape == (1, 1)
    assert torch.equal(jnp.max(a, axis=1), a.amax(1))  # values only, as jnp.max
    assert torch.equal(jnp.trace(a[:, :3]), a[:, :3].diagonal().sum())
    assert torch.equal(jnp.transpose(a), a.T)
    assert jnp.stack([a, a], axis=1).shape == (3, 2, 4)
    assert torch.equal(jnp.dot(a, jnp.ones(4)), a @ torch.ones(4))
    assert jnp.reshape(a, (4, 3)).shape == (4, 3)
    assert torch.equal(jnp.maximum(a, 5.0), a.clamp(min=5.0))
    assert jnp.float32 is torch.float32 and jnp.pi > 3.14
    assert {"diag", "trace", "einsum", "stack", "power"} <= set(SUPPORTED)


def test_namespace_names_what_it_lacks():
    with pytest.raises(ArrayProgramError, match=r"jnp\.linalg is not supported.*holds: abs"):
        jnp.linalg  # noqa: B018
    with pytest.raises(ArrayProgramError, match="jnp.dot of arrays of rank 3 and 2"):
        jnp.dot(torch.ones(2, 2, 2), torch.ones(2, 2))


# ---------------------------------------------------------------- loading
@pytest.mark.parametrize(
    "header", ["import jax.numpy as jnp", "from jax import numpy as jnp", "import numpy as jnp"]
)
def test_load_program_runs_the_file_as_written(tmp_path, header):
    prog = _program(tmp_path, "def kernel(A, B):\n    return jnp.trace(A @ B.T)\n", header=header)
    assert prog.name == "prog" and prog.arg_ranks == (2, 2)
    a, b = program_inputs(prog.arg_ranks, 5, seed=1)
    assert torch.allclose(prog.fn(a, b), (a * b).sum())


def test_load_program_errors_name_the_problem(tmp_path):
    with pytest.raises(ArrayProgramError, match="cannot read array program"):
        load_program(tmp_path / "missing.py")
    with pytest.raises(ArrayProgramError, match="defines no function 'kernel'"):
        _program(tmp_path, "def other(A):\n    return A\n")
    with pytest.raises(ArrayProgramError, match=r"jax\.lax is not supported"):
        _program(tmp_path, "def kernel(A):\n    return A\n", header="import jax.lax")
    with pytest.raises(ArrayProgramError, match=r"failed to load: NameError.*prog.py:6"):
        _program(tmp_path, "y = undefined_name\n")


def test_program_inputs_are_seeded_and_shaped():
    a, s = program_inputs([2, 0], 4, seed=3)
    b, _ = program_inputs([2, 0], 4, seed=3)
    assert a.shape == (4, 4) and s.shape == () and torch.equal(a, b)
    assert float(a.min()) >= 0.0 and float(a.max()) < 1.0


# ---------------------------------------------------------------- importing
def test_import_keeps_the_program_as_written(tmp_path):
    prog = _program(
        tmp_path,
        """
        def kernel(A, B):
            rows = jnp.stack([2.0 * a + b for a, b in zip(A, B)], axis=0)
            return jnp.sum(jnp.diag(jnp.dot(A, B))) + jnp.max(rows)
        """,
    )
    graph, _ = import_program(prog.fn, program_inputs(prog.arg_ranks, 3), prog.name)
    ops = {n.op for n in graph}
    assert {"diagonal", "matmul", "concat", "amax", "slice"} <= ops
    assert "opaque" not in ops


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            "def kernel(A, B):\n    return A.cumsum(0)\n",
            r"ops the IR does not import: aten\.cumsum",
        ),
        ("def kernel(A, B):\n    return A.at[0].set(B[0])\n", r"prog\.py:7.*x\.at\[i\]\.set"),
        ("def kernel(A, B):\n    return A if A.sum() > 0 else B\n", "control flow"),
        ("def kernel(A, B):\n    return 3.0\n", "returns float, but it must return an array"),
        ("def kernel(A, B):\n    return jnp.cumsum(A)\n", r"jnp\.cumsum is not supported"),
    ],
)
def test_import_names_the_construct_it_cannot_take(tmp_path, body, message):
    prog = _program(tmp_path, body)
    with pytest.raises(ArrayProgramError, match=message):
        import_program(prog.fn, program_inputs(prog.arg_ranks, 3), prog.name)


def test_import_reads_promised_inputs_through_assume_nodes(tmp_path):
    prog = _program(tmp_path, "def kernel(A, B):\n    return jnp.exp(jnp.log(A + B))\n")
    xs = program_inputs(prog.arg_ranks, 3)
    graph, _ = import_program(prog.fn, xs, prog.name, domains=["positive", None])
    assumed = [n for n in graph if n.op == "assume"]
    assert [n.attrs["domain"] for n in assumed] == ["positive"]
    with pytest.raises(ArrayProgramError, match="domains must be one of"):
        import_program(prog.fn, xs, prog.name, domains="real")


def test_import_refuses_non_tensor_inputs():
    with pytest.raises(ArrayProgramError, match=r"inputs \[1\] are not torch.Tensors"):
        import_program(lambda a, b: a * b, [torch.ones(2), 2.0])


# ---------------------------------------------------------------- handing back
def _trace_program(tmp_path, backend: str, measure: bool):  # noqa: ANN202
    prog = _program(tmp_path, "def kernel(A, B):\n    return jnp.trace(A @ B.T) * 1\n")
    a, b = program_inputs(prog.arg_ranks, 16, seed=2)
    out = optimize(
        prog.fn, [a, b], name=prog.name, config={"max_steps": 40}, measure=measure,
        backend=backend, repeats=5,
    )  # fmt: skip
    return prog, out


def test_optimize_hands_back_the_rewritten_program_through_torch_compile(tmp_path):
    prog, out = _trace_program(tmp_path, "eager", measure=False)
    assert out.rewritten and out.predicted_speedup > 2
    assert "matmul" not in {n.op for n in out.graph} and "diagonal" not in {n.op for n in out.graph}
    assert set(out.proofs.values()) == {"proved"} and out.proofs.keys() == out.rules.keys()
    c, d = program_inputs(prog.arg_ranks, 16, seed=5)
    got = out(c, d)
    assert got.shape == () and torch.allclose(got, prog.fn(c, d), rtol=1e-5)
    assert out.to_dict()["rewritten"] is True


def test_optimize_relies_on_a_promised_domain_only_when_given(tmp_path):
    prog = _program(tmp_path, "def kernel(A, B):\n    return jnp.exp(jnp.log(A) - jnp.log(B))\n")
    xs = program_inputs(prog.arg_ranks, 8, seed=1)
    kw = {"config": {"max_steps": 20}, "measure": False, "backend": "eager"}
    assert not optimize(prog.fn, xs, **kw).rewritten  # exp(log a) = a needs a > 0
    out = optimize(prog.fn, xs, domains="positive", **kw)
    assert out.rules == {"exp_of_log_ratio": 1} and out.domains == "positive"
    assert torch.allclose(out(*xs), xs[0] / xs[1], rtol=1e-5)


def _computed(graph) -> list[str]:  # noqa: ANN001
    return sorted(n.op for n in graph if n.op not in ("input", "assume", "const"))


def test_the_default_search_finds_the_lerp_and_the_square_of_a_scaled_root(tmp_path):
    """STENSO's github_8 (a loop of linear interpolations) and synth_6 (``(sqrt(A) + sqrt(A)) **
    2``), small: the search on the eager profile reaches ``A * (x - y) + y`` and ``4 * A``."""
    from rewrite.pytorch import default_profile

    kw = {"measure": False, "backend": "eager", "domains": "positive",
          "profile": default_profile(torch.device("cpu"))}  # fmt: skip
    loop = "    return jnp.stack([(x * a + (1.0 - a) * y) for a in A], axis=0)\n"
    lerp = _program(tmp_path, f"def kernel(A, x, y):\n{loop}")
    a, x, y = program_inputs([2, 1, 1], 6, seed=3)
    out = optimize(lerp.fn, [a, x, y], **kw)
    assert {"stack_of_rows", "lerp_form"} <= out.rules.keys()
    assert _computed(out.graph) == ["add", "mul", "sub"]
    assert torch.allclose(out(a, x, y), lerp.fn(a, x, y), rtol=1e-5)
    square = "    return jnp.power(jnp.sqrt(A) + jnp.sqrt(A), 2)\n"
    root = _program(tmp_path, f"def kernel(A):\n{square}")
    (a,) = program_inputs([2], 8, seed=4)
    out = optimize(root.fn, [a], **kw)
    assert {"pow_of_scaled", "sqrt_squared"} <= out.rules.keys() and _computed(out.graph) == ["mul"]
    assert torch.allclose(out(a), 4 * a, rtol=1e-5)


def test_optimize_searches_by_equality_saturation_when_asked(tmp_path):
    from rewrite.pytorch import default_profile

    pytest.importorskip("egglog")
    prog = _program(tmp_path, "def kernel(A, B):\n    return jnp.trace(A @ B.T) * 1\n")
    a, b = program_inputs(prog.arg_ranks, 16, seed=2)
    out = optimize(
        prog.fn, [a, b], config={"strategy": "saturate", "time_budget": 10.0}, measure=False,
        backend="eager", profile=default_profile(torch.device("cpu"), compiled=True),
    )  # fmt: skip
    assert out.rewritten and "diagonal_of_matmul" in out.rules
    assert "matmul" not in {n.op for n in out.graph}
    assert torch.allclose(out(a, b), prog.fn(a, b), rtol=1e-5)


@pytest.mark.slow
def test_optimize_with_inductor_keeps_only_what_measures_faster(tmp_path):
    prog, out = _trace_program(tmp_path, "inductor", measure=True)
    assert out.measured_speedup is not None and out.candidates
    assert out.rewritten == (out.measured_speedup.low > 1.0)
    c, d = program_inputs(prog.arg_ranks, 16, seed=7)
    assert torch.allclose(out(c, d), prog.fn(c, d), rtol=1e-5)


def test_each_handed_back_function_has_its_own_code_object():
    """torch.compile caches, and limits recompilations (8), per code object: a wrapper shared by
    every handed-back program would run eagerly after the eighth."""
    from rewrite import GraphBuilder
    from rewrite.arrays.rewritten import as_function
    from rewrite.lowering.module import to_module
    from rewrite.rules import op

    fns = []
    for k in (2.0, 3.0):
        b = GraphBuilder(f"scale{int(k)}")
        x = b.input("x", (4,))
        gm = to_module(b.build([op(b, "mul", x, b.const(k, "float32"))]), {})
        fns.append(as_function(gm, f"scale{int(k)}"))
    assert fns[0].__code__ is not fns[1].__code__
    x = torch.arange(4.0)
    assert torch.equal(fns[0](x), 2 * x) and torch.equal(fns[1](x), 3 * x)
