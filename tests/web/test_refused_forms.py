"""A refused form says each problem once (the YAML config form and the approval request drew a
refusal's message and then the same problem again in its list), and shows what was sent, not
another value."""
import re

from opdweb.approvals.models import ApprovalRequest
from opdweb.rollouts.actions import do_create_config
from opdweb.rollouts.models import RolloutConfigRecord


def words_between(html: str, start: str, end: str) -> str:
    """The visible words of the page between two markers."""
    return re.sub(r"<[^>]+>", " ", html.split(start, 1)[1].split(end, 1)[0])


def test_a_bad_yaml_config_names_its_problem_once(member, client):
    user, team = member
    client.force_login(user)
    response = client.post("/configs/new/", {"source": "yaml", "team": team.slug, "name": "bad",
                                             "yaml": "weights: fp9_e4m3\n"})
    assert response.status_code == 400 and RolloutConfigRecord.objects.count() == 0
    # Above the form: the refusal (the YAML box below it shows what was typed)
    words = words_between(response.content.decode(), "<h1>", '<p class="presets">')
    assert words.count("fp9_e4m3") == 1, words


def test_a_refused_approval_request_says_why_once(member, client, tmp_path):
    user, team = member
    record, _ = do_create_config(team=team, user=user, name="fp8", data={"weights": "fp8_e4m3"})
    client.force_login(user)
    missing = str(tmp_path / "no-such-student")
    response = client.post(f"/configs/{record.pk}/request-approval/", {"checkpoint": missing, "comment": "c"},
                           HTTP_REFERER=f"http://testserver/configs/{record.pk}/")
    assert response.status_code >= 400 and ApprovalRequest.objects.count() == 0
    words = words_between(response.content.decode(), 'id="refusal"', "</div>")
    assert words.count("no-such-student") == 1, words


def test_a_tampered_choice_is_shown_as_sent_not_as_the_first_option(member, client):
    user, team = member
    client.force_login(user)
    response = client.post("/configs/new/", {"source": "form", "team": team.slug, "name": "tampered",
                                             "dtype": "fp7", "weights": "bf16"})
    assert response.status_code == 400 and RolloutConfigRecord.objects.count() == 0
    select = response.content.decode().split('name="dtype"', 1)[1].split("</select>", 1)[0]
    selected = re.findall(r'<option value="([^"]*)" selected', select)
    assert selected == ["fp7"] and "fp7 (not a choice)" in select, select
