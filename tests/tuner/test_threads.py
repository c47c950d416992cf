"""Tests for the one-thread block the tuner's numerics run in (`tuner.threads`)."""

from __future__ import annotations

import pytest
import torch
from threadpoolctl import threadpool_info

from spaces import Space
from tests.tuner.conftest import make_tuner, run
from tuner import Fitted, FlatSurrogate, TrainingData
from tuner.threads import one_thread


@pytest.fixture
def two_threads():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


def test_one_thread_inside_and_restored_after_an_error(two_threads: None) -> None:
    with pytest.raises(RuntimeError, match="boom"), one_thread():
        assert torch.get_num_threads() == 1
        assert all(lib["num_threads"] == 1 for lib in threadpool_info())
        raise RuntimeError("boom")
    assert torch.get_num_threads() == 2


class _Recording(FlatSurrogate):
    """The flat GP, noting the torch threads each fit ran on."""

    def __init__(self) -> None:
        super().__init__({"maxiter": 20})
        self.threads: list[int] = []

    def fit(self, data: TrainingData) -> Fitted:
        self.threads.append(torch.get_num_threads())
        return super().fit(data)


def test_proposals_fit_and_optimize_on_one_thread(space: Space, two_threads: None) -> None:
    surrogate = _Recording()
    tuner = make_tuner(space, surrogate=surrogate, n_initial=3)
    run(tuner, 5)
    assert surrogate.threads and set(surrogate.threads) == {1}
    assert torch.get_num_threads() == 2  # the caller's setting is back after every proposal
