"""The config-to-trainer path in a real browser (Chromium by Playwright, daphne, the test
database): a member makes a config from a preset and asks for approval; a second user, an
approver, approves it on the admission check's evidence and downloads the verl export.
Screenshots of each page go to ``test-artifacts/approval-flow/``."""
import re
from pathlib import Path

from playwright.sync_api import expect

from opdweb.approvals.models import ApprovalRequest
from opdweb.rollouts.models import RolloutConfigRecord
from opdweb.rollouts.presets import PRESETS_BY_SLUG
from opdweb.teams.models import Role
from tests.web.approval_world import admission_job, make_budget, make_checkpoint
from tests.web.browser import log_in
from tests.web.factories import MembershipFactory

SHOTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "approval-flow"


def shot(page, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


def test_a_config_from_a_preset_is_approved_by_a_second_user_and_exported_for_verl(
        start_asgi_server, page, tmp_path):
    models = tmp_path / "models"
    checkpoint = make_checkpoint(models)
    base = "http://" + start_asgi_server(OPDWEB_MODEL_ROOTS=str(models))
    member = MembershipFactory(role=Role.MEMBER)
    team = member.team
    approver = MembershipFactory(team=team, role=Role.APPROVER).user

    log_in(page, base, member.user)
    page.click("nav >> text=Configs")
    page.click("text=New config")
    page.click("a[data-preset=block-fp8]")
    expect(page.locator("#field-weights")).to_have_value("fp8_e4m3")
    expect(page.locator("#field-kv_cache")).to_have_value("fp8_e4m3")
    shot(page, "1-new-config-from-preset")
    page.click("#save-form")
    expect(page).to_have_url(re.compile(r"/configs/\d+/$"))
    record = RolloutConfigRecord.objects.get()
    assert record.config["weights"] == "fp8_e4m3" and record.config["kv_cache"] == "fp8_e4m3"
    expect(page.locator("#config-hash")).to_have_text(record.config_hash)

    # The admission check of this config on the checkpoint (the admission kind's record of it).
    budget = make_budget(team, checkpoint)
    check = admission_job(team, checkpoint, PRESETS_BY_SLUG["block-fp8"].config, budget, multiple=3.2)
    page.reload()
    expect(page.locator("#config-jobs")).to_contain_text(f"#{check.pk}")
    page.fill("#request-approval input[name=checkpoint]", checkpoint)
    page.fill("#request-approval textarea[name=comment]", "for the 7B run")
    shot(page, "2-config-page")
    page.click("#request-approval button[type=submit]")
    expect(page.locator("#approval-state")).to_have_text("pending")
    approval = ApprovalRequest.objects.get()
    # The requester cannot decide their own request: no decision form.
    expect(page.locator("#decide")).to_have_count(0)

    page.click("button:has-text('Log out')")
    log_in(page, base, approver)
    page.click("nav >> text=Approvals")
    page.click(f"a[href='/approvals/{approval.pk}/']")
    expect(page.locator("#verdict")).to_have_text("pass")
    expect(page.locator("#evidence")).to_contain_text(f"Job #{check.pk}")
    shot(page, "3-approval-evidence")
    page.fill("#decide textarea[name=comment]", "within budget")
    page.click("#decide button[value=approve]")
    expect(page.locator("#approval-state")).to_have_text("approved")
    shot(page, "4-approved")

    with page.expect_download() as download_info:
        page.click("#exports button[data-format=verl]")
    download = download_info.value
    assert download.suggested_filename == f"{record.config_hash[:12]}-verl.txt"
    text = Path(download.path()).read_text()
    assert "actor_rollout_ref.rollout.quantization=fp8" in text.splitlines()
    assert "+actor_rollout_ref.rollout.engine_kwargs.vllm.kv_cache_dtype=fp8_e4m3" in text.splitlines()
    assert record.config_hash in text and f"admission check #{check.pk}" in text and f"by {approver.username}" in text
    (SHOTS / "verl-overrides.txt").write_text(text)

    page.goto(f"{base}/teams/{team.slug}/audit/")
    expect(page.locator("#audit")).to_contain_text("config.exported")
    shot(page, "5-audit-log")


def test_a_refused_approval_request_keeps_what_was_typed(start_asgi_server, page, tmp_path):
    from opdweb.rollouts.actions import do_create_config

    models = tmp_path / "models"
    make_checkpoint(models)
    base = "http://" + start_asgi_server(OPDWEB_MODEL_ROOTS=str(models))
    member = MembershipFactory(role=Role.MEMBER)
    record, _ = do_create_config(team=member.team, user=member.user, name="fp8", data={"weights": "fp8_e4m3"})
    log_in(page, base, member.user)
    page.goto(f"{base}/configs/{record.pk}/")
    page.fill("#request-approval input[name=checkpoint]", str(models / "no-such-student"))
    page.fill("#request-approval textarea[name=comment]", "for the 7B run")
    page.click("#request-approval button[type=submit]")
    expect(page.locator("#refusal")).to_be_visible()
    expect(page.locator("#refusal")).to_have_count(1)
    expect(page.locator("#request-approval input[name=checkpoint]")).to_have_value(str(models / "no-such-student"))
    expect(page.locator("#request-approval textarea[name=comment]")).to_have_value("for the 7B run")
    assert ApprovalRequest.objects.count() == 0
