"""Approval events reach the team's webhook: posted by a real Celery worker to a real HTTP
server on loopback, signed with HMAC-SHA256 of the body under the team's secret, retried
after a failure, and logged."""
import hashlib
import hmac
import ipaddress
import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest
from django.test import Client

from opdweb.approvals.models import ApprovalRequest, DeliveryState, TeamWebhook, WebhookDelivery
from opdweb.approvals.webhooks import attempt_delivery, do_send_pending_webhooks, queue_event
from opdweb.embedded_servers import free_port
from opdweb.rollouts.actions import do_create_config
from opdweb.teams.models import AuditEntry, Role
from tests.web.approval_world import make_checkpoint
from tests.web.conftest import CEILING_S, wait_for
from tests.web.factories import MembershipFactory, TeamFactory

SECRET = "s3cret-of-sixteen-plus"


class Receiver:
    """A loopback HTTP server that answers the statuses given, in order (then 200), and
    keeps every request it got; with ``redirect_to``, every answer is a 302 there."""

    def __init__(self, statuses=(), redirect_to=None):
        self.statuses = list(statuses)
        self.received: list[dict] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.received.append({"headers": dict(self.headers), "body": body})
                status = 302 if redirect_to else (receiver.statuses.pop(0) if receiver.statuses else 200)
                self.send_response(status)
                if redirect_to:
                    self.send_header("Location", redirect_to)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = HTTPServer(("127.0.0.1", free_port()), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def allowed_host(url: str) -> str:
    return url.split("//", 1)[1].split("/", 1)[0]


@pytest.fixture
def receiver(settings):
    """Loopback receivers, each allowed by name in WEBHOOK_ALLOWED_HOSTS (loopback is not a
    public address: without the setting the product refuses to post there)."""
    made = []
    settings.WEBHOOK_ALLOWED_HOSTS = []

    def make(statuses=(), redirect_to=None):
        made.append(Receiver(statuses, redirect_to))
        settings.WEBHOOK_ALLOWED_HOSTS = [*settings.WEBHOOK_ALLOWED_HOSTS, allowed_host(made[-1].url)]
        return made[-1]

    yield make
    for r in made:
        r.close()


def expected_signature(body: bytes) -> str:
    return "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()


@pytest.mark.django_db(transaction=True)
def test_request_and_decision_are_posted_signed_and_retried(start_worker, receiver, tmp_path, settings):
    settings.OPDWEB_MODEL_ROOTS = [tmp_path / "models"]
    make_checkpoint(tmp_path / "models")  # a checkpoint a worker has read (its digest is known)
    hook = receiver(statuses=[500])  # the first post fails; the retry succeeds
    team = TeamFactory()
    admin = MembershipFactory(team=team, role=Role.ADMIN).user
    member = MembershipFactory(team=team, role=Role.MEMBER).user
    approver = MembershipFactory(team=team, role=Role.APPROVER).user
    start_worker(WEBHOOK_RETRY_SECONDS="0.2", WEBHOOK_ALLOWED_HOSTS=allowed_host(hook.url))

    admin_client = Client()
    admin_client.force_login(admin)
    response = admin_client.post(f"/teams/{team.slug}/webhook/", {"url": hook.url, "secret": SECRET})
    assert response.status_code == 302 and TeamWebhook.objects.get(team=team).url == hook.url

    record, _ = do_create_config(team=team, user=member, name="fp8", data={"weights": "fp8_e4m3"})
    member_client = Client()
    member_client.force_login(member)
    response = member_client.post(f"/configs/{record.pk}/request-approval/",
                                  {"checkpoint": str(tmp_path / "models" / "student"), "comment": "please"})
    assert response.status_code == 302, response.content.decode()[-1500:]
    approval = ApprovalRequest.objects.get()

    delivered = wait_for(lambda: WebhookDelivery.objects.filter(state=DeliveryState.DELIVERED).first(), 30,
                         "the request event to be delivered")
    assert (delivered.event, delivered.attempts, delivered.last_status) == ("approval.requested", 2, 200)
    assert len(hook.received) == 2 and hook.received[0]["body"] == hook.received[1]["body"]
    first = hook.received[1]
    assert first["headers"]["X-Opdweb-Signature"] == expected_signature(first["body"])
    assert first["headers"]["X-Opdweb-Event"] == "approval.requested"
    assert first["headers"]["X-Opdweb-Delivery"] == str(delivered.pk)
    payload = json.loads(first["body"])
    assert payload["event"] == "approval.requested" and payload["team"] == team.slug
    assert payload["approval"] == approval.pk and payload["comment"] == "please"
    assert payload["config"] == {"id": record.pk, "name": "fp8", "hash": record.config_hash}
    assert payload["requested_by"] == member.username

    approver_client = Client()
    approver_client.force_login(approver)
    response = approver_client.post(f"/approvals/{approval.pk}/decide/", {"decision": "reject", "comment": "no"})
    assert response.status_code == 302
    wait_for(lambda: len(hook.received) == 3, CEILING_S, "the decision event")
    decision = hook.received[2]
    assert decision["headers"]["X-Opdweb-Signature"] == expected_signature(decision["body"])
    assert json.loads(decision["body"])["event"] == "approval.rejected"
    assert json.loads(decision["body"])["decided_by"] == approver.username
    wait_for(lambda: WebhookDelivery.objects.filter(state=DeliveryState.DELIVERED).count() == 2, CEILING_S, "logged")

    page = admin_client.get(f"/teams/{team.slug}/webhook/").content.decode()
    assert page.count("delivered") >= 2 and "approval.rejected" in page
    assert AuditEntry.objects.filter(team=team, action="webhook.changed").count() == 1


@pytest.mark.django_db
def test_a_receiver_that_cannot_be_reached_is_logged_and_given_up_after_the_limit(settings):
    settings.WEBHOOK_MAX_ATTEMPTS = 3
    team = TeamFactory()
    closed_port = free_port()
    settings.WEBHOOK_ALLOWED_HOSTS = [f"127.0.0.1:{closed_port}"]
    TeamWebhook.objects.create(team=team, url=f"http://127.0.0.1:{closed_port}/hook", secret=SECRET)
    delivery = queue_event(team, "approval.requested", {"x": 1})
    assert attempt_delivery(delivery.pk) is False
    assert attempt_delivery(delivery.pk) is False
    assert attempt_delivery(delivery.pk) is True  # the third and last attempt
    delivery.refresh_from_db()
    assert (delivery.state, delivery.attempts, delivery.last_status) == (DeliveryState.FAILED, 3, None)
    assert delivery.last_error.startswith("could not reach the receiver")


@pytest.mark.django_db
def test_webhook_settings_refuse_bad_input_and_non_admins(settings):
    team = TeamFactory()
    admin = Client()
    admin.force_login(MembershipFactory(team=team, role=Role.ADMIN).user)
    response = admin.post(f"/teams/{team.slug}/webhook/", {"url": "ftp://example.com/x", "secret": "short"})
    assert response.status_code == 400
    text = response.content.decode()
    assert "must be an http:// or https:// URL" in text and "at least 16 characters" in text
    approver = Client()
    approver.force_login(MembershipFactory(team=team, role=Role.APPROVER).user)
    response = approver.post(f"/teams/{team.slug}/webhook/", {"url": "https://example.com/x", "secret": SECRET})
    assert response.status_code == 403
    assert not TeamWebhook.objects.exists() and not AuditEntry.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize("change", ["secret", "url", "removed"])
def test_a_delivery_queued_before_its_webhook_changed_is_dropped_not_sent(receiver, change):
    """A retry goes only to the webhook it was queued for, signed with that webhook's
    secret: after the secret or URL changed, or the webhook went, it is recorded as dropped
    and nothing reaches any receiver (signed with an empty key, anyone could forge it)."""
    old, new = receiver(), receiver()
    team = TeamFactory()
    TeamWebhook.objects.create(team=team, url=old.url, secret=SECRET)
    delivery = queue_event(team, "approval.requested", {"approval": 1})
    if change == "removed":
        TeamWebhook.objects.filter(team=team).delete()
    else:
        TeamWebhook.objects.filter(team=team).update(**{"secret": "another-secret-16chars"} if change == "secret" else
                                                     {"url": new.url})
    assert attempt_delivery(delivery.pk) is True  # no more attempts
    delivery.refresh_from_db()
    assert (delivery.state, delivery.attempts, delivery.last_status) == (DeliveryState.DROPPED, 0, None)
    assert delivery.last_error.startswith("not sent: the webhook")
    assert old.received == [] and new.received == []


@pytest.mark.django_db
def test_a_delivery_to_an_unchanged_webhook_is_sent_signed_with_its_secret(receiver):
    hook_receiver = receiver()
    team = TeamFactory()
    TeamWebhook.objects.create(team=team, url=hook_receiver.url, secret=SECRET)
    delivery = queue_event(team, "approval.requested", {"approval": 1})
    assert attempt_delivery(delivery.pk) is True
    [got] = hook_receiver.received
    expected = "sha256=" + hmac.new(SECRET.encode(), got["body"], hashlib.sha256).hexdigest()
    assert got["headers"]["X-Opdweb-Signature"] == expected


@pytest.mark.django_db
def test_a_delivery_whose_task_was_never_queued_is_sent_by_the_outbox_sweep(receiver, settings):
    """As when the broker was down when the event committed (its task never reached a
    queue; here the test's transaction never commits, so none is sent): the delivery waits
    in the log with no attempt, and the periodic sweep posts it once it is older than the
    first retry delay; a second sweep sends nothing more."""
    from datetime import timedelta

    from django.utils import timezone

    hook_receiver = receiver()
    team = TeamFactory()
    TeamWebhook.objects.create(team=team, url=hook_receiver.url, secret=SECRET)
    delivery = queue_event(team, "approval.requested", {"approval": 1})
    assert (delivery.state, delivery.attempts) == (DeliveryState.PENDING, 0)
    assert do_send_pending_webhooks() == []  # too young: its task may still be on its way
    later = timezone.now() + timedelta(seconds=settings.WEBHOOK_RETRY_SECONDS + 1)
    assert do_send_pending_webhooks(now=later) == [delivery.pk]
    delivery.refresh_from_db()
    assert (delivery.state, delivery.attempts, delivery.last_status) == (DeliveryState.DELIVERED, 1, 200)
    assert len(hook_receiver.received) == 1
    assert do_send_pending_webhooks(now=later) == [] and len(hook_receiver.received) == 1


def test_the_outbox_sweep_runs_on_the_beat_schedule(settings):
    entry = settings.CELERY_BEAT_SCHEDULE["send-pending-webhooks"]
    assert entry["task"] == "opdweb.send_pending_webhooks" and entry["options"]["queue"] == "control"


FORBIDDEN = {
    "http://127.0.0.1:6379/": "loopback",  # the product's own Redis
    "https://localhost:5432/": "loopback",  # ... and PostgreSQL, by name
    "https://[::1]/hook": "loopback",
    "https://0.0.0.0/hook": "unspecified",
    "https://10.1.2.3/hook": "private",
    "https://172.16.5.4/hook": "private",
    "https://192.168.0.10/hook": "private",
    "https://100.64.0.1/hook": "not public",  # shared address space (CGNAT)
    "https://169.254.169.254/latest/meta-data/": "link-local",  # cloud metadata
    "https://metadata.google.internal/computeMetadata/v1/": "cloud metadata service",
    "https://[::ffff:127.0.0.1]/hook": "loopback",
    # IPv6 forms carrying an IPv4 address, which a relay may deliver to.
    "https://[2002:a9fe:a9fe::]/": "link-local",  # 6to4 of 169.254.169.254
    "https://[2002:7f00:1::]/hook": "loopback",  # 6to4 of 127.0.0.1
    "https://[2002:a00:1::]/hook": "private",  # 6to4 of 10.0.0.1
    "https://[64:ff9b::a9fe:a9fe]/": "link-local",  # NAT64 of 169.254.169.254
    "https://[64:ff9b::c0a8:1]/hook": "private",  # NAT64 of 192.168.0.1
    "https://[64:ff9b:1::a9fe:a9fe]/": "local-use NAT64",
    "https://[2001:0:4136:e378:8000:63bf:5601:5601]/": "link-local",  # Teredo, client 169.254.169.254
    "https://[::a9fe:a9fe]/": "link-local",  # IPv4-compatible
    "https://224.0.0.1/hook": "multicast",
    "http://93.184.216.34/hook": "must be https://",
}


@pytest.mark.django_db
@pytest.mark.parametrize("url", FORBIDDEN)
def test_a_webhook_to_a_loopback_private_metadata_or_plain_http_address_is_refused(url, settings):
    settings.WEBHOOK_ALLOWED_HOSTS, settings.WEBHOOK_ALLOW_HTTP = [], False
    team = TeamFactory()
    admin = Client()
    admin.force_login(MembershipFactory(team=team, role=Role.ADMIN).user)
    response = admin.post(f"/teams/{team.slug}/webhook/", {"url": url, "secret": SECRET})
    assert response.status_code == 400, url
    assert FORBIDDEN[url] in response.content.decode()
    assert not TeamWebhook.objects.exists() and not AuditEntry.objects.exists()


@pytest.mark.django_db
def test_a_public_https_address_is_accepted(settings):
    settings.WEBHOOK_ALLOWED_HOSTS = []
    team = TeamFactory()
    admin = Client()
    admin.force_login(MembershipFactory(team=team, role=Role.ADMIN).user)
    response = admin.post(f"/teams/{team.slug}/webhook/", {"url": "https://93.184.216.34/hook", "secret": SECRET})
    assert response.status_code == 302 and TeamWebhook.objects.get(team=team).url == "https://93.184.216.34/hook"


def test_a_6to4_address_carrying_a_public_ipv4_is_public():
    from opdweb.approvals.webhook_destinations import _forbidden

    assert _forbidden(ipaddress.ip_address("2002:5db8:d822::1")) is None  # 93.184.216.34 inside


@pytest.mark.django_db
def test_a_redirect_is_not_followed(receiver):
    """A 302 from the receiver is a failed delivery: its target gets nothing."""
    target = receiver()
    redirecting = receiver(redirect_to=target.url)
    team = TeamFactory()
    TeamWebhook.objects.create(team=team, url=redirecting.url, secret=SECRET)
    delivery = queue_event(team, "approval.requested", {"x": 1})
    assert attempt_delivery(delivery.pk) is False
    delivery.refresh_from_db()
    assert (delivery.state, delivery.last_status) == (DeliveryState.PENDING, 302)
    assert "redirects are not followed" in delivery.last_error
    assert len(redirecting.received) == 1 and target.received == []


@pytest.mark.django_db
def test_a_destination_that_turned_private_since_it_was_saved_is_not_posted_to(receiver, settings):
    """Checked again at delivery (DNS rebinding): the same URL, no longer allowed, gets nothing."""
    hook = receiver()
    team = TeamFactory()
    TeamWebhook.objects.create(team=team, url=hook.url, secret=SECRET)
    delivery = queue_event(team, "approval.requested", {"x": 1})
    settings.WEBHOOK_ALLOWED_HOSTS = []
    assert attempt_delivery(delivery.pk) is True
    delivery.refresh_from_db()
    assert delivery.state == DeliveryState.DROPPED and "loopback" in delivery.last_error
    assert hook.received == []


@pytest.fixture
def tls_receiver(tmp_path, settings):
    """An https receiver on loopback with a certificate for ``localhost`` made here (openssl)."""
    import shutil
    import ssl
    import subprocess

    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out",
                    str(cert), "-days", "1", "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost"],
                   check=True, capture_output=True)
    hook = Receiver()
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    hook.server.socket = context.wrap_socket(hook.server.socket, server_side=True)
    hook.url = f"https://localhost:{hook.server.server_port}/hook"
    settings.WEBHOOK_ALLOWED_HOSTS = [allowed_host(hook.url)]
    yield hook, cert
    hook.close()


@pytest.mark.django_db
def test_an_https_delivery_verifies_the_receivers_certificate(tls_receiver, settings):
    """Over TLS to the checked address, verified against the host name: a certificate no CA
    vouches for gets nothing; with the operator's CA file the same delivery is made."""
    hook, cert = tls_receiver
    team = TeamFactory()
    TeamWebhook.objects.create(team=team, url=hook.url, secret=SECRET)
    settings.WEBHOOK_CA_FILE = ""
    delivery = queue_event(team, "approval.requested", {"x": 1})
    assert attempt_delivery(delivery.pk) is False
    delivery.refresh_from_db()
    assert "CERTIFICATE_VERIFY_FAILED" in delivery.last_error and hook.received == []
    settings.WEBHOOK_CA_FILE = str(cert)
    assert attempt_delivery(delivery.pk) is True
    delivery.refresh_from_db()
    assert (delivery.state, delivery.last_status) == (DeliveryState.DELIVERED, 200)
    assert hook.received[0]["headers"]["X-Opdweb-Signature"] == expected_signature(hook.received[0]["body"])
