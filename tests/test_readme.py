"""README's ask/tell example runs as printed (issue 36: its ``evaluate`` was undefined and a bare
``except Exception`` turned the NameError into failed trials, so it printed ``[]``)."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def _block(heading: str) -> str:
    """The first python code block after ``heading``."""
    text = README.read_text()
    after = text[text.index(heading) :]
    match = re.search(r"```python\n(.*?)```", after, re.DOTALL)
    assert match is not None, f"no python block after {heading!r}"
    return match.group(1)


def test_ask_tell_example_prints_a_pareto_set() -> None:
    code = _block("## The ask/tell tuner")
    assert "for _ in range(20):" in code
    code = code.replace("for _ in range(20):", "for _ in range(3):")  # the Sobol design only
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(code, str(README), "exec"), {"__name__": "readme"})
    shown = printed.getvalue().strip()
    assert shown.startswith("[(") and "'latency'" in shown, shown
