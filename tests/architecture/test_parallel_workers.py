"""Two xdist workers share nothing that a test flushes or names by job id
(tests/parallel.py): their Redis databases, channel prefixes and data directories differ."""
from __future__ import annotations

import os

import pytest
from django.conf import settings

from tests.parallel import worker_redis_url


@pytest.mark.parametrize("base, worker, expected", [
    ("redis://127.0.0.1:6379/0", 0, "redis://127.0.0.1:6379/0"),
    ("redis://127.0.0.1:6379/0", 1, "redis://127.0.0.1:6379/1"),
    ("redis://127.0.0.1:6393/13", 1, "redis://127.0.0.1:6393/14"),
    ("redis://127.0.0.1:6379/15", 1, "redis://127.0.0.1:6379/14"),  # past Redis's 16 databases: below instead
    ("redis://127.0.0.1:6379", 1, "redis://127.0.0.1:6379/1"),
])
def test_each_worker_moves_the_redis_database(base, worker, expected):
    assert worker_redis_url(base, worker) == expected


def test_under_xdist_this_worker_has_its_own_redis_database_prefix_and_data_directory(db):
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker is None:
        pytest.skip("not under pytest-xdist: nothing is moved")
    assert settings.DATA_DIR.name == f"test-{worker}"
    database = int(settings.REDIS_URL.rsplit("/", 1)[1])
    assert settings.CHANNEL_PREFIX.endswith(f".redis{database}")
    assert settings.DATABASES["default"]["NAME"].endswith(f"_{worker}")  # pytest-django's suffix
