"""The reading side a notebook uses, through the official MLflow client against a real
daphne: ``search_runs``, ``get_metric_history``, ``search_experiments``,
``get_experiment(_by_name)`` give what MLflow's own tracking store gives for the same
calls on the same runs (the peer: the same client on MLflow's file store in ``tmp_path``,
MLflow's own search, sort and paging code).  Bad filters and page tokens are MLflow's 400;
a token reads only its team's runs; the run link the client prints reaches the run's page."""
from __future__ import annotations

import http.client
import json
import re
import urllib.parse

import pytest

from opdweb.runs.models import MlflowRun
from opdweb.tokens.actions import do_create_token
from tests.web.factories import MembershipFactory, TeamFactory
from tests.web.test_mlflow_client import mlflow_client  # noqa: F401 (a fixture)

T0 = 1_700_000_000_000
#: name, start offset (ms), params, tags, {key: [(step, value)]}, status
RUNS = [
    ("fp8-kv", 40, {"lr": "1e-6", "quant": "fp8"}, {"team": "opd"},
     {"train/loss": [(0, 2.0), (1, 1.0), (2, 0.5), (3, 0.25), (4, 0.2)], "eval/accuracy": [(4, 0.71)]}, "FINISHED"),
    ("bf16", 10, {"lr": "1e-6", "quant": "bf16"}, {"team": "opd"},
     {"train/loss": [(0, 2.0), (1, 0.9), (2, 0.4)], "eval/accuracy": [(2, 0.74)]}, "FINISHED"),
    ("stale-4", 30, {"lr": "3e-6", "quant": "fp8"}, {"team": "grpo"},
     {"train/loss": [(0, 2.5), (1, 1.5)]}, "FAILED"),
    ("int4", 20, {"lr": "3e-6"}, {},
     {"eval/accuracy": [(0, 0.62)]}, "RUNNING"),
    ("nan-run", 50, {"lr": "1e-5", "quant": "int8"}, {"team": "Opd-2"},
     {"train/loss": [(0, float("nan"))]}, "KILLED"),
]

SEARCHES = [
    ("", []),
    ("", ["metrics.`train/loss` ASC"]),
    ("", ["metrics.`train/loss` DESC", "attributes.run_name"]),
    ("metrics.`train/loss` < 1", []),
    ("metrics.`eval/accuracy` >= 0.7", ["metrics.`eval/accuracy` DESC"]),
    ("params.lr = '1e-6' AND params.quant != 'bf16'", []),
    ("params.quant LIKE 'fp%'", ["params.lr DESC"]),
    ("tags.team ILIKE 'opd%'", ["attributes.start_time ASC"]),
    ("tags.team IS NULL", []),
    ("params.quant IS NOT NULL", ["run_name"]),
    ("attributes.status = 'FINISHED'", []),
    ("attributes.run_name LIKE '%-%'", ["attributes.end_time DESC"]),
    (f"attributes.start_time > {T0 + 20}", []),
    ("tags.`mlflow.runName` = 'bf16'", []),
    ("metrics.`train/loss` > 100", []),
]


def log_runs(client, experiment_id: str) -> dict[str, str]:
    """The runs of ``RUNS`` into ``experiment_id``, each call the same on both sides."""
    from mlflow.entities import Metric, Param

    ids = {}
    for name, offset, params, tags, metrics, status in RUNS:
        run = client.create_run(experiment_id, start_time=T0 + offset, run_name=name, tags=tags)
        points = [Metric(key, value, T0 + offset + 1000 * step, step)
                  for key, series in metrics.items() for step, value in series]
        client.log_batch(run.info.run_id, metrics=points, params=[Param(k, v) for k, v in params.items()])
        if status != "RUNNING":
            client.set_terminated(run.info.run_id, status=status, end_time=T0 + offset + 10_000)
        ids[name] = run.info.run_id
    return ids


@pytest.fixture
def both(mlflow_client, tmp_path, monkeypatch):  # noqa: F811
    """``(ours, peer, ours_exp, peer_exp)``: the product and MLflow's own store, each with
    the experiment "notebook" holding ``RUNS`` logged the same way."""
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    ours = mlflow_client.MlflowClient()
    peer = mlflow_client.MlflowClient(tracking_uri=(tmp_path / "mlruns").as_uri())
    ours_exp = ours.create_experiment("notebook", tags={"project": "opd"})
    peer_exp = peer.create_experiment("notebook", tags={"project": "opd"})
    ours.ids, peer.ids = log_runs(ours, ours_exp), log_runs(peer, peer_exp)
    return ours, peer, ours_exp, peer_exp


def seen(run) -> tuple:
    """What a notebook reads of a searched run (not its ids, artifact URI or the client's
    source tags, which differ between two stores by construction)."""
    info = run.info
    tags = {k: v for k, v in run.data.tags.items() if not k.startswith("mlflow.") or k == "mlflow.runName"}
    metrics = {k: ("nan" if v != v else v) for k, v in run.data.metrics.items()}
    return (info.run_name, info.status, info.start_time, info.end_time, metrics, run.data.params, tags)


def test_search_runs_finds_and_orders_what_mlflows_own_store_does(both, mlflow_client):  # noqa: F811
    ours, peer, ours_exp, peer_exp = both
    for text, order_by in SEARCHES:
        mine = ours.search_runs([ours_exp], text, order_by=order_by)
        theirs = peer.search_runs([peer_exp], text, order_by=order_by)
        assert [seen(r) for r in mine] == [seen(r) for r in theirs], (text, order_by)
    assert len(ours.search_runs([ours_exp], "")) == len(RUNS)
    # The notebook's shortcut, by experiment name (it looks the experiment up first).
    by_name = mlflow_client.search_runs(experiment_names=["notebook"], filter_string="params.quant = 'fp8'",
                                        output_format="list")
    assert [seen(r) for r in by_name] == [seen(r) for r in peer.search_runs([peer_exp], "params.quant = 'fp8'")]
    # Two at a time: the same pages, and the tokens MLflow's own store gives.
    for text, order_by in SEARCHES[:3]:
        token_mine = token_theirs = None
        while True:
            mine = ours.search_runs([ours_exp], text, order_by=order_by, max_results=2, page_token=token_mine)
            theirs = peer.search_runs([peer_exp], text, order_by=order_by, max_results=2, page_token=token_theirs)
            assert [seen(r) for r in mine] == [seen(r) for r in theirs]
            # The file store hands its token over as bytes; its server sends it as text.
            assert mine.token == (theirs.token.decode() if theirs.token else None)
            if mine.token is None:
                break
            token_mine, token_theirs = mine.token, theirs.token


def test_get_metric_history_gives_every_point_as_mlflows_own_store_does(both):
    ours, peer, _, _ = both
    for name, *_, metrics, _ in RUNS:
        for key in [*metrics, "never/logged"]:
            mine = ours.get_metric_history(ours.ids[name], key)
            theirs = peer.get_metric_history(peer.ids[name], key)
            as_read = [[(m.key, "nan" if m.value != m.value else m.value, m.timestamp, m.step) for m in h]
                       for h in (mine, theirs)]
            assert as_read[0] == as_read[1], (name, key)
    # Pages as the REST store asks for them (max_results, then next_page_token), hand-known:
    # five points in pages of two are three pages.
    store = ours._tracking_client.store
    run_id, pages, token = ours.ids["fp8-kv"], [], None
    while True:
        history = store.get_metric_history(run_id, "train/loss", max_results=2, page_token=token)
        pages.append([(m.step, m.value) for m in history])
        token = history.token
        if not token:
            break
    assert pages == [[(0, 2.0), (1, 1.0)], [(2, 0.5), (3, 0.25)], [(4, 0.2)]]


def test_experiments_are_found_as_mlflows_own_store_finds_them(both):
    ours, peer, ours_exp, peer_exp = both
    ours.create_experiment("scratch")
    peer.create_experiment("scratch")

    def named(experiments):
        return [(e.name, e.tags) for e in experiments if e.name != "Default"]  # MLflow's store always has one

    assert named(ours.search_experiments()) == named(peer.search_experiments())
    for text, order_by in [("name = 'notebook'", None), ("name LIKE 'note%'", None), ("tags.project = 'opd'", None),
                           ("", ["name ASC"]), ("", ["name DESC"]), ("tags.project IS NULL", None)]:
        mine = ours.search_experiments(filter_string=text, order_by=order_by)
        theirs = peer.search_experiments(filter_string=text, order_by=order_by)
        assert named(mine) == named(theirs), (text, order_by)
    by_name = ours.get_experiment_by_name("notebook")
    assert (by_name.experiment_id, by_name.name, by_name.tags) == (ours_exp, "notebook", {"project": "opd"})
    assert ours.get_experiment(ours_exp).name == peer.get_experiment(peer_exp).name == "notebook"
    assert ours.get_experiment_by_name("no such") is None and peer.get_experiment_by_name("no such") is None


def post(server: str, endpoint: str, body: dict, secret: str) -> tuple[int, dict]:
    return request(server, "POST", endpoint, secret, json.dumps(body))


def request(server: str, method: str, endpoint: str, secret: str, body: str | None = None) -> tuple[int, dict]:
    conn = http.client.HTTPConnection(server, timeout=30)
    conn.request(method, "/mlflow/api/2.0/mlflow/" + endpoint, body=body,
                 headers={"Authorization": f"Bearer {secret}", "Content-Type": "application/json"})
    response = conn.getresponse()
    answer = json.loads(response.read() or b"{}")
    conn.close()
    return response.status, answer


@pytest.mark.parametrize("body, words", [
    ({"filter": "metrics.loss LIKE 3"}, "Invalid comparator"),
    ({"filter": "metrics.loss < 1 OR params.a = 'b'"}, "Invalid clause"),
    ({"filter": "params.lr = 5"}, "quoted string"),
    ({"filter": "attributes.colour = 'red'"}, "Invalid attribute key"),
    ({"order_by": ["metrics.loss sideways"]}, "ordering key"),
    ({"page_token": "not a token"}, "page token"),
    ({"page_token": "eyJvZmZzZXQiOiAiYSJ9"}, "page token"),  # {"offset": "a"}
    ({"max_results": 0}, "max_results"),
    ({"max_results": 50001}, "max_results"),
    ({"experiment_ids": "1"}, "experiment_ids"),
    ({"experiment_ids": ["../1"]}, "Invalid experiment ID"),
])
def test_a_bad_search_is_mlflows_400_never_a_500(both, body, words):
    ours, _, ours_exp, _ = both
    secret = ours._tracking_client.store.get_host_creds().token
    server = urllib.parse.urlsplit(ours.tracking_uri).netloc
    status, answer = post(server, "runs/search", {"experiment_ids": [ours_exp], **body}, secret)
    assert status == 400 and answer["error_code"] == "INVALID_PARAMETER_VALUE" and words in answer["message"], answer


def test_bad_reads_through_the_client_raise_mlflows_invalid_parameter_value(both):
    from mlflow.exceptions import MlflowException

    ours, _, ours_exp, _ = both
    with pytest.raises(MlflowException) as refused:
        ours.search_runs([ours_exp], "metrics.`train/loss` ~ 1")
    assert refused.value.error_code == "INVALID_PARAMETER_VALUE"
    with pytest.raises(MlflowException) as refused:
        ours.search_experiments(page_token="%%%")
    assert refused.value.error_code == "INVALID_PARAMETER_VALUE"
    secret = ours._tracking_client.store.get_host_creds().token
    server = urllib.parse.urlsplit(ours.tracking_uri).netloc
    run_id = ours.ids["fp8-kv"]
    for query, words in [(f"run_id={run_id}&metric_key=train/loss&max_results=-1", "max_results"),
                         (f"run_id={run_id}&metric_key=train/loss&max_results=2&page_token=xyz", "page token"),
                         (f"run_id={run_id}", "metric_key")]:
        status, answer = request(server, "GET", "metrics/get-history?" + query, secret)
        assert status == 400 and answer["error_code"] == "INVALID_PARAMETER_VALUE" and words in answer["message"]


def test_a_token_reads_only_its_teams_runs_and_a_read_only_token_may_search(both, member):
    ours, _, ours_exp, _ = both
    user, team = member
    server = urllib.parse.urlsplit(ours.tracking_uri).netloc
    stranger = MembershipFactory(team=TeamFactory())
    _, theirs = do_create_token(user=stranger.user, team=stranger.team, name="other", can_write=True)
    status, answer = post(server, "runs/search", {"experiment_ids": [ours_exp, "0"]}, theirs)
    assert (status, answer) == (200, {})
    status, answer = post(server, "experiments/search", {}, theirs)
    assert status == 200 and "notebook" not in [e["name"] for e in answer.get("experiments", [])]
    status, answer = request(server, "GET", f"metrics/get-history?run_id={ours.ids['bf16']}&metric_key=train/loss",
                             theirs)
    assert status == 404 and answer["error_code"] == "RESOURCE_DOES_NOT_EXIST"
    _, reader = do_create_token(user=user, team=team, name="notebook", can_write=False)
    status, answer = post(server, "runs/search", {"experiment_ids": [ours_exp], "filter": "params.quant = 'bf16'"},
                          reader)
    assert status == 200 and [r["info"]["run_name"] for r in answer["runs"]] == ["bf16"]


def test_the_run_link_the_client_prints_leads_to_the_runs_page(mlflow_client, member, client, capsys):  # noqa: F811
    mlflow = mlflow_client
    user, _ = member
    with mlflow.start_run(run_name="linked") as run:
        mlflow.log_metric("train/loss", 1.0, step=0)
    printed = capsys.readouterr().out
    link = re.search(r"View run linked at: (\S+)", printed).group(1)
    assert link == f"http://{mlflow.server}/mlflow/#/experiments/{run.info.experiment_id}/runs/{run.info.run_id}"
    job = MlflowRun.objects.get(run_id=run.info.run_id).job
    # The server sees /mlflow/ only: a page whose script reads the fragment and goes on.
    page = client.get("/mlflow/")
    assert page.status_code == 200 and re.search(rb"js/mlflow_link[.\w]*\.js", page.content)
    client.force_login(user)
    assert client.get(f"/mlflow/runs/{run.info.run_id}").url == f"/jobs/{job.pk}/"
    assert client.get(f"/mlflow/experiments/{run.info.experiment_id}").url == "/jobs/"
    client.force_login(MembershipFactory(team=TeamFactory()).user)
    assert client.get(f"/mlflow/runs/{run.info.run_id}").status_code == 404
    assert client.get("/mlflow/runs/" + "0" * 32).status_code == 404


def test_in_a_browser_the_printed_link_opens_the_runs_page_after_signing_in(mlflow_client, member, page,  # noqa: F811
                                                                           capsys):
    from playwright.sync_api import expect

    from tests.web.browser import PASSWORD

    mlflow = mlflow_client
    user, _ = member
    with mlflow.start_run(run_name="linked") as run:
        mlflow.log_metric("train/loss", 1.0, step=0)
    link = re.search(r"View run linked at: (\S+)", capsys.readouterr().out).group(1)
    job = MlflowRun.objects.get(run_id=run.info.run_id).job
    page.goto(link)
    expect(page).to_have_url(re.compile(r"/login/\?next=/mlflow/runs/" + run.info.run_id))
    page.fill("input[name=username]", user.username)
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    expect(page).to_have_url(f"http://{mlflow.server}/jobs/{job.pk}/")
    expect(page.locator("h1")).to_contain_text("linked")
