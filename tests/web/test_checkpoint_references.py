"""The web process never reads weights; a real worker does.  An audit hook in this process
(where the test client runs the web's views) sees every file opened or listed while a
checkpoint is registered, shown, read again, approved and exported: no weight file is
opened, nor any file of the checkpoint's folder (registering only lists it).  The digest comes from a
real Celery worker's ``describe`` job and equals the one written out by hand."""
from __future__ import annotations

import hashlib
import os
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest
from django.test import Client

from opdweb.approvals.models import ApprovalRequest, ApprovalState
from opdweb.registry.models import CheckpointDescription, RegisteredModel
from opdweb.rollouts.actions import do_create_config
from opdweb.teams.models import Role
from tests.web.approval_world import admission_job, make_budget, make_loadable_checkpoint
from tests.web.conftest import CEILING_S, wait_for
from tests.web.factories import MembershipFactory, TeamFactory

pytestmark = pytest.mark.slow

# verl's FP8 rollout engine, as the approval tests admit it
FP8 = {"weights": "fp8_e4m3", "weight_scale": "block", "activations": "fp8_e4m3", "kv_cache": "fp8_e4m3",
       "kv_scales": "unit"}
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf")
_watching: list[tuple[str, list[tuple[str, str]]]] = []


def _audit(event: str, args: tuple) -> None:
    if not _watching or event not in ("open", "os.listdir", "os.scandir", "glob.glob"):
        return
    target = args[0] if args else None
    if isinstance(target, int) or target is None:
        return
    path = os.fsdecode(target) if isinstance(target, (str, bytes, os.PathLike)) else str(target)
    for folder, seen in _watching:
        if path.startswith(folder) or path.endswith(WEIGHT_SUFFIXES):
            seen.append((event, path))


sys.addaudithook(_audit)  # hooks cannot be removed: this one records only inside web_reads()


@contextmanager
def web_reads(folder: Path):
    """What this process opens or lists in ``folder`` (and any weight file) in the block."""
    seen: list[tuple[str, str]] = []
    _watching.append((str(folder), seen))
    try:
        yield seen
    finally:
        _watching.pop()


def hand_digest(folder: Path) -> str:
    lines = b""
    for name in ("config.json", "model.safetensors"):
        lines += name.encode() + b"\0" + hashlib.sha256((folder / name).read_bytes()).hexdigest().encode() + b"\n"
    return hashlib.sha256(lines).hexdigest()


def test_the_hook_sees_a_read_of_weights(tmp_path):
    """The check can fail: hashing the weights in this process is seen."""
    from workers.science.fingerprint import checkpoint_digest

    folder = make_loadable_checkpoint(tmp_path, "probe")
    with web_reads(folder) as seen:
        checkpoint_digest(folder)
    assert ("open", str(folder / "model.safetensors")) in seen


def test_registering_approving_and_exporting_reads_no_weights_in_the_web(settings, tmp_path, start_worker):
    roots = tmp_path / "models"
    settings.OPDWEB_MODEL_ROOTS = [roots]
    folder = make_loadable_checkpoint(roots, "student")
    start_worker("describer", queues="cpu", OPDWEB_MODEL_ROOTS=str(roots))
    team = TeamFactory()
    member = MembershipFactory(team=team, role=Role.MEMBER).user
    approver = MembershipFactory(team=team, role=Role.APPROVER).user
    as_member, as_approver = Client(), Client()
    as_member.force_login(member)
    as_approver.force_login(approver)

    with web_reads(folder) as registering:
        r = as_member.post("/models/", {"team": team.slug, "name": "student", "path": str(folder),
                                        "kind": "student"})
        assert r.status_code == 302, r.content
    model = RegisteredModel.objects.get(team=team)
    wait_for(lambda: CheckpointDescription.objects.filter(uri=str(folder)).exists(), CEILING_S,
             "the worker to read the checkpoint")
    described = CheckpointDescription.objects.get(uri=str(folder))
    assert described.digest == hand_digest(folder) and described.problems == []
    assert (described.files, described.bytes) == (3, sum(f.stat().st_size for f in folder.iterdir()))

    # The evidence as the science records it (the test's helpers hash the folder themselves:
    # that is this process reading, so it happens before the watch).
    record, _ = do_create_config(team=team, user=member, name="fp8", data=FP8)
    admission_job(team, str(folder), FP8, make_budget(team, str(folder)))
    with web_reads(folder) as using:
        assert described.digest[:12] in as_member.get(f"/models/{model.pk}/").content.decode()
        assert as_member.post(f"/models/{model.pk}/read/").status_code == 302
        r = as_member.post(f"/configs/{record.pk}/request-approval/", {"checkpoint": str(folder), "comment": "x"})
        assert r.status_code == 302, r.content
        approval = ApprovalRequest.objects.get(config=record)
        assert as_approver.post(f"/approvals/{approval.pk}/decide/",
                                {"decision": "approve", "comment": "ok"}).status_code == 302
        approval.refresh_from_db()
        assert approval.state == ApprovalState.APPROVED, approval.state
        exported = as_member.post(f"/approvals/{approval.pk}/export/verl/")
        assert exported.status_code == 200, exported.content
    # Registering looks the folder up (that config.json is there, the names of its tokenizer
    # files), as a preflight does; nothing of it is opened, no weight file even listed.
    assert [p for event, p in registering if event == "open"] == []
    assert [p for _, p in registering if p.endswith(WEIGHT_SUFFIXES)] == []
    assert using == []



@pytest.mark.faults
def test_a_checkpoint_in_s3_is_read_by_a_worker_that_waits_out_a_store_outage(settings, tmp_path, start_worker,
                                                                               s3_server, s3_bucket):
    """Registered by ``s3://`` URI while the store is down: the worker's describe job finds
    the store out of reach, is queued again (not failed), and once the store is back reads
    the checkpoint into the worker's own cache; the digest is the one written by hand."""
    from opdweb.jobs.models import Job, JobState
    from workers.science.checkpoints.stores import store_at
    from workers.science.entrypoints import get_kind
    from workers.science.kinds import Kind

    folder = make_loadable_checkpoint(tmp_path / "upload", "student")
    uri = f"s3://{s3_bucket}/team/student"
    for f in folder.iterdir():
        with f.open("rb") as fh:
            store_at(uri).write(f.name, fh)
    settings.OPDWEB_CHECKPOINT_URIS = [f"s3://{s3_bucket}/team"]
    cache = tmp_path / "worker-cache"
    start_worker("fetcher", queues="cpu", OPDWEB_CHECKPOINT_URIS=f"s3://{s3_bucket}/team",
                 OPDWEB_CHECKPOINT_CACHE=str(cache), JOB_FETCH_RETRY_SECONDS="1", **s3_server.env)
    team = TeamFactory()
    member = MembershipFactory(team=team, role=Role.MEMBER).user
    client = Client()
    client.force_login(member)

    s3_server.kill()
    try:
        r = client.post("/models/", {"team": team.slug, "name": "student", "path": uri, "kind": "student"})
        assert r.status_code == 302, r.content  # registering asks nothing of the store
        job = RegisteredModel.objects.get(team=team).describe_job
        wait_for(lambda: Job.objects.get(pk=job.pk).attempts >= 2, CEILING_S, "the job to be queued again")
        job.refresh_from_db()
        # not counted against the job's own attempts (those are for workers lost mid-job)
        assert job.max_attempts - (job.attempts - 1) == get_kind(Kind.DESCRIBE).max_attempts
    finally:
        s3_server.start()
    wait_for(lambda: Job.objects.get(pk=job.pk).state in (JobState.SUCCEEDED, JobState.FAILED), CEILING_S,
             "the describe job")
    job.refresh_from_db()
    assert job.state == JobState.SUCCEEDED, job.error
    described = CheckpointDescription.objects.get(uri=uri)
    assert described.digest == hand_digest(folder) and job.result["model"] == uri
    assert str(cache) not in str(job.result)  # the result names the URI, never the worker's cache
    assert (cache / described.digest / "model.safetensors").read_bytes() == (folder / "model.safetensors").read_bytes()
    # what the job page showed while it fetched, and what its log keeps
    assert job.message == "done" and job.progress == 1.0
    logged = " ".join(job.log_entries.values_list("message", flat=True))
    assert f"checkpoint {uri}: in this worker's cache as {described.digest}" in logged
