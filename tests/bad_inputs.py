"""The check every bad-input table runs (tests/*/test_bad_inputs.py): the call raises the
expected error class, and its message names the value and the fix (the needles)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest


def assert_refused(
    call: Callable[..., Any], args: Sequence[Any], error: type[Exception], needles: Sequence[str]
) -> str:
    """Run ``call(*args)``, expect ``error`` whose message holds every needle; the message."""
    with pytest.raises(error) as info:
        call(*args)
    text = str(info.value)
    for needle in needles:
        assert needle in text, (needle, text)
    return text
