"""Fixtures for the studies tests: a storage URL per backend (SQLite always, PostgreSQL when
RT_POSTGRES_URL is set), and a clean database for each test."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

PG_ENV = "RT_POSTGRES_URL"
PG_SKIP = (
    f'PostgreSQL tests need a server: set {PG_ENV} (e.g. export {PG_ENV}="$(.ci/postgres.sh)").'
)


def postgres_url() -> str:
    """The PostgreSQL URL from the environment with a clean schema, or skip the test."""
    url = os.environ.get(PG_ENV)
    if not url:
        pytest.skip(PG_SKIP)
    from sqlalchemy import create_engine
    from sqlalchemy.pool import NullPool

    from studies.schema import metadata

    engine = create_engine(url, poolclass=NullPool)
    with engine.begin() as conn:
        metadata.drop_all(conn)
    engine.dispose()
    return url


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def storage_url(request: pytest.FixtureRequest, tmp_path) -> Iterator[str]:
    """A fresh storage URL on each backend."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'study.db'}"
    else:
        yield postgres_url()


@pytest.fixture
def sqlite_url(tmp_path) -> str:
    """A fresh SQLite storage URL."""
    return f"sqlite:///{tmp_path / 'study.db'}"
