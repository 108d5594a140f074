"""The schema-built job form and the job page's chart panels in Chromium against daphne:
the loop from a new config to a downloaded export without typing JSON, the form keeping
what was typed after a refusal (with "did you mean" in the JSON view), and the charts'
panels in the same order on every load."""
import json
import re
from datetime import timedelta
from pathlib import Path

from django.utils import timezone
from playwright.sync_api import expect

from opdweb.approvals.models import ApprovalRequest
from opdweb.jobs.models import ChartLayout, Job, JobState
from opdweb.rollouts.models import RolloutConfigRecord
from opdweb.teams.models import Role
from opdweb.traces.sink import TraceSink
from tests.web.approval_world import make_budget, make_checkpoint
from tests.web.browser import log_in
from tests.web.conftest import wait_for
from tests.web.factories import JobFactory, MembershipFactory
from tests.web.results import admission_result
from workers.science.fingerprint import checkpoint_digest


def test_the_loop_from_a_new_config_to_an_export_is_clicked_through_without_json(start_asgi_server, page, tmp_path):
    models = tmp_path / "models"
    checkpoint = make_checkpoint(models)
    base = "http://" + start_asgi_server(OPDWEB_MODEL_ROOTS=str(models))
    member = MembershipFactory(role=Role.MEMBER)
    team = member.team
    approver = MembershipFactory(team=team, role=Role.APPROVER).user
    budget = make_budget(team, checkpoint, value=50.0)

    log_in(page, base, member.user)
    page.click("nav >> text=Configs")
    page.click("text=New config")
    page.click("a[data-preset=block-fp8]")
    page.click("#save-form")
    expect(page).to_have_url(re.compile(r"/configs/\d+/$"))
    record = RolloutConfigRecord.objects.get()

    # "Check admission" opens the admission fields, filled: the budget chosen in its picker.
    page.select_option("#check-admission select[name=budget]", str(budget.pk))
    page.click("#check-admission button[type=submit]")
    expect(page.locator("select[name=kind]")).to_have_value("admission")
    expect(page.locator("#f-admission-budget")).to_have_value(str(budget.pk))
    expect(page.locator("#f-admission-model")).to_have_value(checkpoint)
    expect(page.locator("#f-admission-rollout-weights")).to_have_value("fp8_e4m3")
    expect(page.locator("#advanced")).not_to_have_attribute("open", "")
    # Settings the check does not set wait folded at their defaults.
    expect(page.locator("#f-admission-drift")).to_be_hidden()
    page.click("details.more-settings[data-more-for=admission] > summary")
    page.locator("#f-admission-drift").uncheck()
    page.click("#submit-fields")
    expect(page).to_have_url(re.compile(r"/jobs/\d+/$"))
    job = Job.objects.get(kind="admission")
    assert job.config["rollout"]["weights"] == "fp8_e4m3" and job.config["drift"] is False
    assert job.config["budget"]["id"] == budget.pk and job.config["model"] == checkpoint

    # The check's verdict, as its worker records it (no GPU job runs in this test).
    rollout = job.config["rollout"]
    Job.objects.filter(pk=job.pk).update(state=JobState.SUCCEEDED, progress=1.0, result=admission_result(
        "pass", 3.2, budget=budget.spec(), rollout=rollout, model=checkpoint,
        checkpoint_hash=checkpoint_digest(checkpoint)))
    page.reload()
    page.click("#request-approval")
    expect(page.locator("#approval-state")).to_have_text("pending")
    approval = ApprovalRequest.objects.get()
    assert approval.config_id == record.pk

    page.click("button:has-text('Log out')")
    log_in(page, base, approver)
    page.goto(f"{base}/approvals/{approval.pk}/")
    page.click("#decide button[value=approve]")
    expect(page.locator("#approval-state")).to_have_text("approved")
    with page.expect_download() as download_info:
        page.click("#exports button[data-format=verl]")
    text = Path(download_info.value.path()).read_text()
    assert "actor_rollout_ref.rollout.quantization=fp8" in text.splitlines()
    assert record.config_hash in text and f"admission check #{job.pk}" in text


def test_the_job_form_keeps_what_was_typed_and_offers_did_you_mean(member, asgi_server, page):
    user, _ = member
    base = f"http://{asgi_server}"
    log_in(page, base, user)
    page.goto(f"{base}/jobs/new/")
    page.fill("#f-selftest-steps", "many")
    page.fill("#f-selftest-sleep_s", "0.01")
    page.fill("input[name=name]", "typed")
    page.click("#submit-fields")
    expect(page.locator("#form-error")).to_have_text("Not submitted: 1 problem in the config, shown at its field.")
    expect(page.locator(".field-error[data-field=steps]")).to_have_text("must be a whole number (got 'many')")
    expect(page.locator("#f-selftest-steps")).to_have_value("many")
    expect(page.locator("#f-selftest-sleep_s")).to_have_value("0.01")
    expect(page.locator("input[name=name]")).to_have_value("typed")

    page.click("#advanced summary")
    page.fill("textarea[name=config]", '{"stpes": 5}')
    page.click("#submit-json")
    expect(page.locator("#form-error")).to_contain_text("stpes: unknown field; did you mean 'steps'?")
    expect(page.locator("textarea[name=config]")).to_have_value('{"stpes": 5}')
    assert Job.objects.count() == 0


def test_what_is_typed_in_the_fields_is_copied_into_the_json_box_until_the_box_is_edited(member, asgi_server, page):
    user, _ = member
    base = f"http://{asgi_server}"
    log_in(page, base, user)
    page.goto(f"{base}/jobs/new/")
    page.fill("#f-selftest-steps", "77")
    page.fill("#f-selftest-sleep_s", "0.25")
    page.click("#advanced summary")
    box = page.locator("textarea[name=config]")
    copied = json.loads(box.input_value())
    assert (copied["steps"], copied["sleep_s"]) == (77, 0.25)  # numbers, as the server reads them
    page.fill("#f-selftest-steps", "not a number")  # sent as typed, for the server to refuse
    assert json.loads(box.input_value())["steps"] == "not a number"
    page.fill("#f-selftest-steps", "")  # empty: left to the default
    assert "steps" not in json.loads(box.input_value())

    box.fill('{"steps": 5}')  # a hand edit is the person's: fields no longer write over it
    page.fill("#f-selftest-steps", "9")
    expect(box).to_have_value('{"steps": 5}')
    page.click("#submit-json")
    expect(page).to_have_url(re.compile(r"/jobs/\d+/$"))
    assert Job.objects.get().config["steps"] == 5


def test_the_form_says_how_long_a_job_would_run_before_it_is_submitted(start_asgi_server, page, tmp_path):
    models = tmp_path / "models"
    (models / "smollm2").mkdir(parents=True)
    (models / "smollm2" / "config.json").write_text("{}")
    model = str(models / "smollm2")
    base = "http://" + start_asgi_server(OPDWEB_MODEL_ROOTS=str(models))
    member = MembershipFactory(role=Role.MEMBER)
    end = timezone.now()
    JobFactory(team=member.team, kind="mismatch", state=JobState.SUCCEEDED, config={"model": model, "prompts": 32},
               started_at=end - timedelta(seconds=64), finished_at=end)  # 2 s a prompt

    log_in(page, base, member.user)
    page.goto(f"{base}/jobs/new/")
    estimate = page.locator("#estimate")
    expect(estimate).to_contain_text("Estimated run time: no estimate")  # a selftest: nothing to go by yet
    page.select_option("select[name=kind]", "mismatch")
    page.click("#advanced summary")
    page.locator("textarea[name=config]").fill(json.dumps({"model": model, "prompts": 30, "target_ci": 0}))
    expect(estimate).to_have_text("Estimated run time: about a minute, once a worker takes it (30 prompts at "
                                  "2.00 s each, the median of the team's last 1 finished mismatch job of this model).")
    page.locator("textarea[name=config]").fill(json.dumps({"model": model, "prompts": 300, "target_ci": 0}))
    expect(estimate).to_contain_text("Estimated run time: about 10 minutes")
    page.locator("textarea[name=config]").fill(json.dumps({"model": model, "prompts": 0}))
    expect(estimate).to_be_hidden()  # a config the server refuses has no estimate (the refusal comes at submit)
    assert Job.objects.count() == 1


def test_the_charts_are_grouped_in_panels_in_the_same_order_on_every_load(member, asgi_server, page):
    user, team = member
    job = Job.objects.create(team=team, created_by=user, kind="train", name="many", state=JobState.SUCCEEDED,
                             config={"model": "/m/s"}, result=None)
    sink = TraceSink(job.pk)
    keys = ["train/loss", "eval/accuracy", "mismatch/rollout_k3", "mismatch/reference_k3", "time/step_s",
            "time/sync_s", "train/grad_norm", "lr", "train/entropy", "eval/reward", "mismatch/multiple"]
    for key in keys:
        sink.add_many(key, range(5), [1.0 + s for s in range(5)], [1.7e9 + s for s in range(5)])
    sink.close()
    base = f"http://{asgi_server}"
    log_in(page, base, user)

    def layout(page=page):
        page.goto(f"{base}/jobs/{job.pk}/")
        expect(page.locator("#charts .chart")).to_have_count(9)  # the k3 pair, and time/*_s, share a chart
        return page.eval_on_selector_all("#charts details.chart-panel", """panels => panels.map(p =>
            [p.dataset.section, [...p.querySelectorAll('.chart')].map(c => c.dataset.chart)])""")

    # Loss and accuracy first, then mismatch, then a section per namespace (none first).
    first = layout()
    assert first == [["loss and accuracy", ["eval/accuracy", "eval/reward", "train/loss"]],
                     ["mismatch", ["mismatch/*_k3", "mismatch/multiple"]], ["", ["lr"]], ["time", ["time/*_s"]],
                     ["train", ["train/*_norm", "train/entropy"]]]
    for _ in range(2):
        assert layout() == first
    # A section's charts in a grid: at 1,280 px the first two side by side.
    corners = page.eval_on_selector_all("details.chart-panel[data-section='loss and accuracy'] .chart",
                                        "cs => cs.map(c => [c.getBoundingClientRect().x, c.getBoundingClientRect().y])")
    assert corners[0][1] == corners[1][1] and corners[0][0] < corners[1][0] and corners[2][1] > corners[0][1]

    # The chooser pins a chart to the top and hides another; a section folds.
    page.locator("#metric-chooser summary").click()
    page.locator(".metric-choice[data-chart='train/entropy'] button.pin").click()
    expect(page.locator("details.chart-panel[data-section=pinned] .chart[data-chart='train/entropy']")).to_be_visible()
    page.locator(".metric-choice[data-chart='train/loss'] input.shown").uncheck()
    expect(page.locator(".chart[data-chart='train/loss']")).to_be_hidden()
    page.locator("details.chart-panel[data-section=time] > summary").click()
    expect(page.locator(".chart[data-chart='time/*_s']")).to_be_hidden()
    wait_for(lambda: ChartLayout.objects.filter(user=user, pinned=["train/entropy"], hidden=["train/loss"],
                                                folded=["time"]).exists(), 10, "the layout to be saved")

    # It is the person's: a browser of their own, sharing no storage with this one, draws it so.
    elsewhere = page.context.browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
    log_in(elsewhere, base, user)
    assert layout(elsewhere) == [["pinned", ["train/entropy"]], *first[:4], ["train", ["train/*_norm"]]]
    expect(elsewhere.locator(".chart[data-chart='train/loss']")).to_be_hidden()
    expect(elsewhere.locator("details.chart-panel[data-section=time]")).not_to_have_attribute("open", "")
    elsewhere.locator("#metric-chooser summary").click()
    elsewhere.locator(".metric-choice[data-chart='train/entropy'] button.pin").click()  # unpinned: back in train
    expect(elsewhere.locator("details.chart-panel[data-section=pinned]")).to_have_count(0)
    wait_for(lambda: ChartLayout.objects.filter(user=user, pinned=[]).exists(), 10, "the unpin to be saved")
    assert layout() == [*first[:4], ["train", ["train/*_norm", "train/entropy"]]]
    expect(page.locator(".chart[data-chart='train/loss']")).to_be_hidden()
