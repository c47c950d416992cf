"""Fixtures for the whole test suite."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(scope="session", autouse=True)
def verdict_cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Point ``REWRITE_CACHE_DIR`` (`rewrite.verify.default_cache_dir`) at a directory of the
    session's temporary tree, so no test writes the user's cache; the variable is restored after.
    Subprocesses the tests start inherit it."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("REWRITE_CACHE_DIR", str(tmp_path_factory.mktemp("rewrite-cache")))
        yield
