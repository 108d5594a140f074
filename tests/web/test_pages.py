"""Server-rendered pages and health, through Django's test client."""
import pytest
from django.contrib import admin
from django.contrib.auth import get_user_model

from opdweb.health.models import WorkerPresence
from opdweb.traces.sink import TraceSink
from tests.web.factories import JobFactory
from tests.web.results import mismatch_report

pytestmark = pytest.mark.django_db


def test_every_admin_changelist_and_change_page_loads(client, member):
    user, team = member
    job = JobFactory(team=team)
    sink = TraceSink(job.pk, publish=False)
    sink.add(0, {"a": 1.0})
    sink.flush()
    superuser = get_user_model().objects.create_superuser("root", "root@example.com", "pw-root-123")
    client.force_login(superuser)
    for model in admin.site._registry:
        meta = model._meta
        url = f"/admin/{meta.app_label}/{meta.model_name}/"
        assert client.get(url).status_code == 200, url
        obj = model.objects.first()
        if obj is not None:
            assert client.get(f"{url}{obj.pk}/change/").status_code == 200, url


@pytest.fixture
def staff_client(client):
    """/healthz shows its details to staff only."""
    client.force_login(get_user_model().objects.create_user("ops", is_staff=True))
    return client


def test_healthz_is_503_without_a_live_worker(staff_client):
    response = staff_client.get("/healthz")
    assert response.status_code == 503
    body = response.json()
    assert body == {"status": "degraded", "database": "ok", "redis": "ok", "workers": [], "object_store": "none"}


def test_healthz_ignores_a_worker_that_stopped_reporting(staff_client):
    client = staff_client
    from datetime import timedelta

    from django.utils import timezone

    old = timezone.now() - timedelta(hours=1)
    WorkerPresence.objects.create(name="gone@host", hostname="host", pid=1, queues=["gpu"], device="cpu",
                                  started_at=old, last_seen=old)
    assert client.get("/healthz").json()["workers"] == []


def test_pages_need_a_login(client):
    for url in ("/jobs/", "/jobs/new/", "/status/"):
        response = client.get(url)
        assert response.status_code == 302 and response["Location"].startswith("/login/"), url


def test_the_status_page_lists_workers_and_queues_for_staff_only(client, member, outsider):
    from django.contrib.auth import get_user_model
    from django.utils import timezone

    WorkerPresence.objects.create(name="gpu0@box-17", hostname="box-17", pid=1, queues=["gpu"],
                                  device="cuda:0 (NVIDIA H100)", started_at=timezone.now(), last_seen=timezone.now())
    staff = get_user_model().objects.create_user("ops", password="pw-ops-123", is_staff=True)
    client.force_login(staff)
    page = client.get("/status/").content.decode()
    assert "gpu0@box-17" in page and "cuda:0 (NVIDIA H100)" in page and "alive" in page
    assert "<td>gpu</td>" in page and "<td>cpu</td>" in page
    for user in (member[0], outsider, get_user_model().objects.create_user("teamless", password="pw-none-123")):
        client.force_login(user)
        page = client.get("/status/").content.decode()
        assert "1 alive on cuda:0 (NVIDIA H100)" in page
        assert "box-17" not in page and "<h2>Queues</h2>" not in page and "<td>gpu</td>" not in page


def test_another_teams_job_page_is_404(client, member, outsider):
    _, team = member
    job = JobFactory(team=team)
    client.force_login(outsider)
    assert client.get(f"/jobs/{job.pk}/").status_code == 404
    assert client.post(f"/jobs/{job.pk}/cancel/").status_code == 404


def test_a_mismatch_result_is_summarised_on_its_page(client, member):
    user, team = member
    result = mismatch_report(7.2, [2.08, 23.17], value=1.44e-4, reference_value=2.0e-5, tokens=628,
                             metrics={"k3": 1.44e-4, "k1": 3.19e-4}, reference_metrics={"k3": 2.0e-5, "k1": -2.51e-4})
    job = JobFactory(team=team, kind="mismatch", config={"model": "m"}, state="succeeded", result=result)
    client.force_login(user)
    page = client.get(f"/jobs/{job.pk}/").content.decode()
    assert "7.2×" in page and "[2.08, 23.2]" in page and "628 response tokens" in page
    assert "<td>k1</td><td>0.000319</td><td>-0.000251</td>" in page
    assert "k3 0.000144 against 2e-05 for BF16" in page
    # The unit pair beside the multiple: a result from before the trainer was named was against an fp32 one.
    assert '<span class="meta" id="mismatch-pair">· unit pair hf BF16 engine / fp32 trainer</span>' in page
    paired = JobFactory(team=team, kind="mismatch", config={"model": "m"}, state="succeeded",
                        result={**result, "unit": {"engine": "vllm", "dtype": "bf16", "trainer": "bf16", "why": "w"}})
    assert "· unit pair vllm BF16 engine / bf16 trainer" in client.get(f"/jobs/{paired.pk}/").content.decode()
