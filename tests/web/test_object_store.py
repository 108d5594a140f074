"""The object store as the web process sees it: /healthz and the status page say whether it
answers (where one is used), and ``make_buckets`` makes the buckets the settings name."""
from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.utils import timezone

from opdweb.health.models import WorkerPresence
from workers.science.checkpoints import s3

pytestmark = pytest.mark.django_db


@pytest.fixture
def staff_client(client):
    client.force_login(get_user_model().objects.create_user("ops", is_staff=True))
    WorkerPresence.objects.create(name="w@host", hostname="host", pid=1, queues=["gpu"], device="cpu",
                                  started_at=timezone.now(), last_seen=timezone.now())
    return client


def test_health_reports_the_store_up_then_down(staff_client, settings, s3_server, s3_bucket, monkeypatch):
    settings.OPDWEB_ARTIFACT_ROOT = f"s3://{s3_bucket}/runs"
    up = staff_client.get("/healthz")
    assert (up.status_code, up.json()["object_store"]) == (200, "ok")
    monkeypatch.setenv("S3_ENDPOINT_URL", "http://127.0.0.1:9")  # a store that is not there
    s3._client.cache_clear()
    down = staff_client.get("/healthz")
    assert down.status_code == 503 and down.json()["status"] == "degraded"
    assert "out of reach" in down.json()["object_store"]
    assert "Object store: <b class=\"bad\">" in staff_client.get("/status/").content.decode()


def test_make_buckets_makes_what_the_settings_name_once(settings, s3_server, s3_bucket):
    settings.OPDWEB_CHECKPOINT_URIS = [f"s3://{s3_bucket}-ckpt/team/", f"s3://{s3_bucket}/x/"]
    settings.OPDWEB_ARTIFACT_ROOT = f"s3://{s3_bucket}-runs/runs"
    before = {b["Name"] for b in s3.client().list_buckets()["Buckets"]}
    call_command("make_buckets")
    call_command("make_buckets")
    after = {b["Name"] for b in s3.client().list_buckets()["Buckets"]}
    assert after - before == {f"{s3_bucket}-ckpt", f"{s3_bucket}-runs"}
