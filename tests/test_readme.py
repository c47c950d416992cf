"""README's code runs as printed: every python block, each under its section's heading.

Slow parts are shrunk by exact text replacements (fewer loop rounds, a smaller GPT-2), each
asserted to match so that an edit to README that drops the replaced text fails here."""

from __future__ import annotations

import contextlib
import io
import re
import sys
import types
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"

#: The heading above each python block of README, in order; one test per block.
HEADINGS = (
    "### `spaces`",
    "### `rewrite`",
    "### The ask/tell tuner",
    "### `structure`",
    "### `studies`",
    "### A faster model you can run",
)


def _blocks() -> list[tuple[str, str]]:
    """Every python block of README with the nearest heading above it."""
    text = README.read_text()
    found = []
    for match in re.finditer(r"```python\n(.*?)```", text, re.DOTALL):
        headings = re.findall(r"^#+ .*$", text[: match.start()], re.MULTILINE)
        found.append((headings[-1] if headings else "", match.group(1)))
    return found


def _block(heading: str) -> str:
    """The python block under ``heading``."""
    matches = [code for head, code in _blocks() if head.startswith(heading)]
    assert len(matches) == 1, f"expected one python block under {heading!r}, got {len(matches)}"
    return matches[0]


def _shrink(code: str, *replacements: tuple[str, str]) -> str:
    for old, new in replacements:
        assert old in code, f"README's example no longer contains {old!r}"
        code = code.replace(old, new)
    return code


def _run(code: str, module: str = "readme") -> tuple[str, dict]:
    """Execute ``code`` as module ``module`` (registered, so worker processes can unpickle
    what it defines); return what it printed and its namespace."""
    mod = types.ModuleType(module)
    sys.modules[module] = mod
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed):
            exec(compile(code, str(README), "exec"), mod.__dict__)
    finally:
        del sys.modules[module]
    return printed.getvalue(), mod.__dict__


def test_readme_stays_a_product_page() -> None:
    # details go to docs/*.md; the README says what the project does, how to run it, what it gains
    assert len(README.read_text().splitlines()) < 450


def test_every_python_block_is_tested() -> None:
    heads = [head for head, _ in _blocks()]
    assert len(heads) == len(HEADINGS)
    for head, expected in zip(heads, HEADINGS, strict=True):
        assert head.startswith(expected), (head, expected)


def test_spaces_example() -> None:
    _, ns = _run(_block("### `spaces`"))
    assert ns["X"].shape[0] == 8


def test_rewrite_example(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    printed, ns = _run(_block("### `rewrite`"))
    assert "latency" in printed and ns["result"].pareto


def test_ask_tell_example_prints_a_pareto_set() -> None:
    code = _shrink(_block("### The ask/tell tuner"), ("for _ in range(20):", "for _ in range(3):"))
    printed, _ = _run(code)  # the Sobol design only
    shown = printed.strip()
    assert shown.startswith("[(") and "'latency'" in shown, shown


def test_structure_example() -> None:
    code = _shrink(_block("### `structure`"), ("for _ in range(12):", "for _ in range(9):"))
    printed, ns = _run(code)  # one checkpoint: the first at 8 completed trials
    assert printed.split(" - ")[0].strip() in {"flat", "network"}, printed
    assert len(ns["tuner"].trials) == 9


def test_studies_example(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    code = _shrink(
        _block("### `studies`"),
        ("study.optimize(40, n_workers=2)", "study.optimize(4, n_workers=2)"),
    )
    _, ns = _run(code, "readme_studies")
    assert len(ns["study"].to_dataframe()) == 4
    assert (tmp_path / "priors.json").exists()


def test_faster_model_example_runs_on_a_small_gpt2() -> None:
    small = "transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=1000)"
    code = _shrink(
        _block("### A faster model you can run"),
        ("transformers.GPT2Config()", small),
        ("50257", "1000"),
    )
    printed, ns = _run(code)
    assert "original" in printed  # the report's table starts with the original
    assert ns["logits"].shape == (1, 256, 1000)
