"""Each kind's result is a typed model, declared on the kind: what the registry validates,
the JSON it stores, and the words the science spells once (metric names, k3, dtype names,
the scan's granularity)."""
from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch

from workers.science.children import ChildJob, run_children
from workers.science.cli import _job_config, _parser
from workers.science.config import TOKEN_METRICS, MetricName, MismatchJobConfig, RolloutConfig, SensitivityJobConfig
from workers.science.entrypoints import KINDS, MalformedResult, get_kind
from workers.science.kinds import EXTERNAL_KINDS, Kind
from workers.science.metrics import TokenRecords, token_terms
from workers.science.reporting import NullReporter
from workers.science.results import Comparison, SelftestResult
from workers.science.selftest import SelftestConfig
from workers.science.training.losses import k3


def misshapen_selftest(config: SelftestConfig, reporter) -> dict:
    return {"steps": config.steps, "lats": {}}


def selftest_as_a_dict(config: SelftestConfig, reporter) -> dict:
    return {"steps": config.steps, "last": {"selftest/linear": 1.0}}


def test_every_kind_declares_its_result_and_every_kind_name_is_a_kind():
    # every kind name is a runnable kind of the registry, or one whose runs report in from outside (never both)
    assert set(KINDS) == {k.value for k in Kind} - set(EXTERNAL_KINDS) and not set(KINDS) & set(EXTERNAL_KINDS)
    assert all(isinstance(kind.result, type) for kind in KINDS.values())


def test_a_result_that_is_not_the_kinds_is_refused_saying_what_is_wrong():
    kind = replace(get_kind(Kind.SELFTEST), entry=f"{__name__}:misshapen_selftest")
    with pytest.raises(MalformedResult, match="the selftest job's result is not a SelftestResult: "
                                              "last: Field required; lats: Extra inputs are not permitted"):
        kind.run(SelftestConfig(steps=1))


def test_a_dict_result_is_validated_into_the_kinds_model():
    kind = replace(get_kind(Kind.SELFTEST), entry=f"{__name__}:selftest_as_a_dict")
    result = kind.run(SelftestConfig(steps=3))
    assert isinstance(result, SelftestResult) and result.last == {"selftest/linear": 1.0}


def test_the_stored_json_is_the_reports_shape():
    r = get_kind(Kind.SELFTEST).run(SelftestConfig(steps=4))
    assert r.model_dump(mode="json") == {"steps": 4, "last": {"selftest/linear": 3.0, "selftest/square": 9.0}}
    body = {"metric": "k3", "value": 2e-4, "reference_value": 1e-4, "multiple": 2.0, "multiple_ci": [1.5, 2.5],
            "tokens": 10, "reference_tokens": 10, "metrics": {}, "reference_metrics": {}, "summary": {},
            "reference_summary": {}, "accuracy": None, "reference_accuracy": None}
    assert Comparison.model_validate(body).model_dump(mode="json") == body  # a key never set stays out
    with_buckets = {**body, "buckets": []}
    assert Comparison.model_validate(with_buckets).model_dump(mode="json") == with_buckets


def test_children_run_only_where_the_reporter_can_run_them():
    with pytest.raises(TypeError, match="cannot run child jobs"):
        list(run_children(NullReporter(), [ChildJob("a", Kind.SELFTEST, {"steps": 1})]))


def test_the_loss_trace_takes_k3_from_the_metrics():
    # r = p_train / p_roll per token; k3 = mean(r - 1 - log r) over the masked tokens, by hand:
    lp_roll = torch.tensor([[-1.0, -2.0, -0.5, -3.0]], dtype=torch.float64)
    lp_train = torch.tensor([[-1.2, -1.5, -0.5, -0.1]], dtype=torch.float64)
    mask = torch.tensor([[True, True, True, False]])  # the last token does not count
    by_hand = ((math.exp(-0.2) - 1 + 0.2) + (math.exp(0.5) - 1 - 0.5) + 0.0) / 3
    records = TokenRecords.from_arrays(lp_roll, lp_train, mask)
    assert float(token_terms(records)["k3"].mean()) == pytest.approx(by_hand, rel=1e-12)
    assert k3(lp_train, lp_roll, mask) == pytest.approx(by_hand, rel=1e-12)
    assert k3(lp_train, lp_roll, mask) == float(token_terms(records)["k3"].mean())  # the same formula, bit for bit
    assert k3(lp_train, lp_roll, torch.zeros_like(mask)) == 0.0


def test_metric_names_are_declared_once():
    assert set(MetricName.__args__) < set(TOKEN_METRICS)
    assert set(TOKEN_METRICS) - set(MetricName.__args__) == {"prob_diff"}


@pytest.mark.parametrize("spelling,name", [("bfloat16", "bf16"), (" BFloat16 ", "bf16"), ("float32", "fp32"),
                                           ("half", "fp16"), ("float", "fp32"), ("bf16", "bf16")])
def test_the_schema_takes_the_dtype_names_people_write(spelling, name, tmp_path):
    path = tmp_path / "rollout.yaml"
    path.write_text(f"dtype: '{spelling}'\n")
    assert RolloutConfig.from_file(path).dtype == name  # the command line's --config
    assert RolloutConfig.model_validate({"dtype": spelling}).dtype == name
    assert MismatchJobConfig(model="m", trainer_dtype=spelling).trainer_dtype == name


def test_the_command_line_takes_a_dtype_alias_as_an_option():
    args = _parser().parse_args(["mismatch", "--model", "m", "--config", "x.yaml", "--trainer-dtype", "float32"])
    args.config = None
    assert _job_config(KINDS[Kind.MISMATCH], args).trainer_dtype == "fp32"


def test_a_weights_alias_is_folded_and_a_wrong_name_still_refused():
    assert RolloutConfig(weights="bfloat16").weights == "bf16"
    with pytest.raises(ValueError, match="weights"):
        RolloutConfig(weights="float8")


def test_the_scan_granularity_keeps_its_old_spelling():
    assert SensitivityJobConfig(model="m", unit="module").granularity == "module"
    assert SensitivityJobConfig(model="m", granularity="module").granularity == "module"
    assert "granularity" in SensitivityJobConfig(model="m").model_dump() and \
        "unit" not in SensitivityJobConfig(model="m").model_dump()
    args = _parser().parse_args(["sensitivity", "--model", "m", "--config", "x.yaml", "--unit", "module"])
    assert args.granularity == "module"
