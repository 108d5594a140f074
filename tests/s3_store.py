"""A real S3 object store for the tests: SeaweedFS started by the product's own code
(:func:`opdweb.embedded_servers.start_embedded_object_store`), once per session, in a
directory of its own.  ``s3_bucket`` gives a test a fresh bucket with this process's
environment pointed at the store, so ``store_at("s3://<bucket>/...")`` reaches it."""
from __future__ import annotations

import time
import uuid
from dataclasses import dataclass

import pytest

from opdweb.embedded_servers import _start_and_wait, start_embedded_object_store
from opdweb.supervisor import Child
from workers.science.checkpoints import s3


@dataclass
class S3Server:
    env: dict[str, str]
    child: Child

    def kill(self) -> None:
        """kill -9, the whole process group (its sockets removed)."""
        self.child.kill()

    def start(self) -> None:
        """Start it again on its data, at the same address (after a kill)."""
        _start_and_wait(self.child, lambda: _answers(self.env))

    def stop(self) -> None:
        self.child.stop(time.monotonic() + 10)


def _answers(env: dict[str, str]) -> bool:
    import boto3
    from botocore.config import Config

    client = boto3.session.Session().client(
        "s3", endpoint_url=env["S3_ENDPOINT_URL"], aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"], region_name=env["AWS_DEFAULT_REGION"],
        config=Config(connect_timeout=1, read_timeout=2, retries={"max_attempts": 1}))
    try:
        client.list_buckets()
        return True
    except Exception:  # noqa: BLE001 - not up yet
        return False


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory):
    data_dir = tmp_path_factory.mktemp("s3-store")
    env, child = start_embedded_object_store(data_dir)
    server = S3Server(env, child)
    yield server
    server.kill()  # a graceful stop waits 15 s on its filer's streams; its data is thrown away anyway


@pytest.fixture
def s3_bucket(s3_server, monkeypatch):
    """A new bucket's name, this process's S3 environment set to the store."""
    for name, value in s3_server.env.items():
        monkeypatch.setenv(name, value)
    s3._client.cache_clear()
    bucket = f"test-{uuid.uuid4().hex[:12]}"
    client = s3.client()
    client.create_bucket(Bucket=bucket)
    yield bucket
    try:  # its volume goes with it: a session makes many buckets
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket):
            for obj in page.get("Contents", []):
                client.delete_object(Bucket=bucket, Key=obj["Key"])
        client.delete_bucket(Bucket=bucket)
    except Exception:  # noqa: BLE001 - a test that left the store down: the session's store goes at its end
        pass
