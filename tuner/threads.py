"""One CPU thread for the tuner's numerics (`one_thread`)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from threadpoolctl import threadpool_limits

__all__ = ["one_thread"]


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """torch at one intra-op thread, and every BLAS and OpenMP library at one thread, inside the
    block; the caller's settings restored on exit (an exception included).

    A proposal fits GPs on tens to hundreds of trials and evaluates its acquisition on batches
    of a few thousand points: operations far too small for a thread team to pay, and on a
    machine whose cores a study's workers keep busy a team of spinning threads makes them
    several times slower (figures: docs/tuner.md). It also keeps a driving process that forks its workers from ever
    starting an OpenMP thread team (libgomp is not fork-safe: a worker forked after one hangs at
    its first parallel kernel).
    """
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with threadpool_limits(limits=1):
            yield
    finally:
        torch.set_num_threads(before)
