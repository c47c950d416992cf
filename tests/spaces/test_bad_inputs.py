"""Bad inputs to `spaces` (issue 36): each is refused with a `SpaceError` that names the value and
the fix, instead of a silent wrong result."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from spaces import Float, Int, Space, SpaceError
from spaces.params import MAX_INT_MAGNITUDE
from tests.bad_inputs import assert_refused


def _space() -> Space:
    return Space({"x": Float(0.0, 1.0), "k": Int(0, 10)})


#: (id, call, error class, substrings the message must hold: the value and the fix)
SPACES: list[tuple[str, Callable[[], Any], type[Exception], tuple[str, ...]]] = [
    (
        "int-high-beyond-2**53",  # sampled -9223372036854775808
        lambda: Int(0, 10**30),
        SpaceError,
        ("high=1000000000000000000000000000000", "[-2**53, 2**53]", "log=True"),
    ),
    (
        "int-low-beyond-2**53",
        lambda: Int(-(2**60), 0),
        SpaceError,
        (f"low={-(2**60)}", "Float(low, high, log=True)"),
    ),
    (
        "from-unit-nan",  # decoded to the midpoint
        lambda: _space().from_unit(np.array([[math.nan, 0.5]])),
        SpaceError,
        ("X[0, 0]", "'x'", "nan", "Drop or repair"),
    ),
    (
        "from-unit-inf",
        lambda: _space().from_unit(np.array([[0.5, 0.5], [0.1, math.inf]])),
        SpaceError,
        ("X[1, 1]", "'k'", "inf", "Drop or repair"),
    ),
    (
        "sample-more-than-memory",  # issue 52: a raw allocator error
        lambda: _space().sample(10**12, seed=0),
        SpaceError,
        ("sample(n=1000000000000)", "GiB", "free", "at a time"),
    ),
]


@pytest.mark.parametrize(
    ("call", "error", "needles"), [c[1:] for c in SPACES], ids=[c[0] for c in SPACES]
)
def test_bad_space_input_is_refused_with_value_and_fix(
    call: Callable[[], Any], error: type[Exception], needles: tuple[str, ...]
) -> None:
    assert_refused(call, (), error, needles)


def test_int_at_the_largest_magnitude_samples_and_decodes_in_range() -> None:
    space = Space({"k": Int(-MAX_INT_MAGNITUDE, MAX_INT_MAGNITUDE)})
    values = [c["k"] for c in space.sample(64, seed=0)]
    assert all(-MAX_INT_MAGNITUDE <= v <= MAX_INT_MAGNITUDE for v in values)
    assert len(set(values)) > 60  # spread over the range, not one clipped value
    ends = space.from_unit(np.array([[0.0], [1.0]]))
    assert [c["k"] for c in ends] == [-MAX_INT_MAGNITUDE, MAX_INT_MAGNITUDE]
