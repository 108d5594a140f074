"""What a job page draws from sensitivity and drift results: figures built from hand-made
results, and the page showing the recipe and KV capacity."""
from opdweb.jobs.models import Job, JobState
from opdweb.jobs.result_charts import result_charts
from tests.web.results import drift_report, sensitivity_report

RANKING = [  # as run_sensitivity ranks them: largest multiple first
    {"unit": "model.layers.1.mlp.down_proj", "multiple": 4.0, "multiple_ci": [3.0, 5.0], "rank": 1},
    {"unit": "model.layers.0.self_attn.q_proj", "multiple": 2.0, "multiple_ci": [1.5, 2.5], "rank": 2},
    {"unit": "model.layers.0.mlp.down_proj", "multiple": 1.5, "multiple_ci": None, "rank": 3},
]
RECIPE = {"target": 3.0, "reached": True, "keep_bf16": ["model.layers.1.mlp.down_proj"], "multiple": 2.5,
          "kv_cache": {"capacity_ratio": 2.0}}
# A scan stored before its report recorded the granularity: the config says it.
SENSITIVITY = sensitivity_report(RANKING, granularity=None, recipe=RECIPE)
DRIFT = drift_report(4, 0.75, {"median": 3.0, "histogram": {"3": 2, "10": 1}}, [1.0, 1.0, 1.0, 0.5])


def job(kind, result, config=None):
    return Job(kind=kind, result=result, config=config or {})


def test_it_ranks_units_with_their_interval():
    charts = result_charts(job("sensitivity", SENSITIVITY))
    assert charts["ranking"] == {
        "units": ["model.layers.1.mlp.down_proj", "model.layers.0.self_attn.q_proj", "model.layers.0.mlp.down_proj"],
        "multiples": [4.0, 2.0, 1.5], "ci_low": [3.0, 1.5, None], "ci_high": [5.0, 2.5, None]}
    assert "heatmap" not in charts  # unit = layer (the default) has no modules


def test_it_places_modules_on_a_layer_grid():
    charts = result_charts(job("sensitivity", SENSITIVITY, {"unit": "module"}))
    assert charts["heatmap"] == {"layers": [0, 1], "modules": ["mlp.down_proj", "self_attn.q_proj"],
                                 "z": [[1.5, 4.0], [2.0, None]]}


def test_it_reads_the_granularity_from_the_report():
    by_module = sensitivity_report(RANKING, granularity="module")
    assert "heatmap" in result_charts(job("sensitivity", by_module))
    assert "heatmap" not in result_charts(job("sensitivity", sensitivity_report(RANKING), {"unit": "module"}))


def test_a_result_that_is_not_its_kinds_draws_nothing():
    assert result_charts(job("sensitivity", {"ranking": RANKING})) is None  # a partial report is not a report


def test_it_draws_the_divergence_histogram_and_prefix_curve():
    charts = result_charts(job("drift", DRIFT))
    assert charts["histogram"] == {"positions": [3, 10], "counts": [2, 1]}
    assert charts["prefix"] == {"lengths": [1, 2, 3, 4], "fractions": [1.0, 1.0, 1.0, 0.5]}


def test_other_kinds_and_missing_results_draw_nothing():
    assert result_charts(job("mismatch", {"multiple": 1.0})) is None
    assert result_charts(job("sensitivity", None)) is None
    assert result_charts(job("drift", {"error": "x"})) is None


def test_the_page_shows_the_recipe_and_capacity(member, client):
    user, team = member
    scan = Job.objects.create(team=team, created_by=user, kind="sensitivity", state=JobState.SUCCEEDED,
                              config={"unit": "module"}, result=SENSITIVITY)
    client.force_login(user)
    page = client.get(f"/jobs/{scan.pk}/").content.decode()
    assert "keep <b>model.layers.1.mlp.down_proj</b> in BF16" in page and "2.5×" in page
    assert '2.5× <span class="meta pair">(hf BF16 engine / fp32 trainer)</span>' in page  # the recipe's unit pair
    assert 'id="kv-capacity"' in page and "KV cache holds 2× BF16's tokens" in page
    assert 'id="sensitivity-heatmap"' in page and 'id="result-charts"' in page
    assert 'id="glossary"' in page
