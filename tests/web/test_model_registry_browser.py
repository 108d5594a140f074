"""The model pickers in a real browser: a registered model picked on the job form fills
the config's ``model`` (and ``teacher``, for a kind that has one); on a rollout config's
page it fills the approval request's checkpoint."""
import json

from playwright.sync_api import expect

from opdweb.registry.models import RegisteredModel
from opdweb.rollouts.actions import do_create_config
from tests.web.browser import log_in


def test_picking_registered_models_fills_the_config_and_the_checkpoint(member, asgi_server, page):
    user, team = member
    for name, kind in (("toy student", "student"), ("toy teacher", "teacher")):
        RegisteredModel.objects.create(team=team, name=name, kind=kind, path=f"/models/{kind}")
    base = f"http://{asgi_server}"
    log_in(page, base, user)

    page.goto(f"{base}/jobs/new/")
    page.click("#advanced summary")  # the JSON view's pickers
    expect(page.locator("#pick-teacher-label")).to_be_hidden()  # selftest names no teacher
    page.select_option("select[name=kind]", "train")
    expect(page.locator("#pick-teacher-label")).to_be_visible()
    page.select_option("#pick-model", "/models/student")
    page.select_option("#pick-teacher", "/models/teacher")
    config = json.loads(page.input_value("textarea[name=config]"))
    assert (config["model"], config["teacher"], config["method"]) == ("/models/student", "/models/teacher", "opd")

    record, _ = do_create_config(team=team, user=user, name="fp8", data={"weights": "fp8_e4m3"})
    page.goto(f"{base}/configs/{record.pk}/")
    page.select_option("#pick-checkpoint", "/models/student")
    expect(page.locator("input[name=checkpoint]")).to_have_value("/models/student")
