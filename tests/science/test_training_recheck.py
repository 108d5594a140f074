"""Admission re-checks while training: a run whose rollout config leaves its budget is flagged
at the right step, decided by the admission's own rule on a CI."""
from __future__ import annotations

import logging
import math

import pytest

from workers.science.reporting import RecordingReporter
from workers.science.training.config import OPDConfig
from workers.science.training.job import run_training


def test_a_run_that_leaves_its_budget_is_flagged_at_that_step(student, teacher, caplog):
    # Heavy rollout noise (multiple far above 1.5); the budget allows anything at step 0 and 1.5x from step 2.
    cfg = OPDConfig(model=student, teacher=teacher, steps=4, batch_size=16, eval_every=2, eval_prompts=20,
                    device="cpu", rollout={"noise_sigma": 0.5},
                    budget=[{"step": 0, "multiple": 1e9}, {"step": 2, "multiple": 1.5}])
    rep = RecordingReporter()
    with caplog.at_level(logging.WARNING):
        report = run_training(cfg, rep).model_dump(mode="json")
    checks = report["admission"]["checks"]
    assert [c["step"] for c in checks] == [0, 2, 4]
    assert [c["budget"] for c in checks] == pytest.approx([1e9, 1.5, 1.5])
    assert all(c["multiple"] is not None and math.isfinite(c["multiple"]) and c["multiple"] > 1.5 for c in checks)
    assert [c["within"] for c in checks] == [True, False, False]
    # the admission's rule, on a paired-bootstrap CI around the multiple
    assert [c["verdict"] for c in checks] == ["pass", "not_shown_safe", "not_shown_safe"]
    assert all(c["multiple_ci"][0] <= c["multiple"] <= c["multiple_ci"][1] for c in checks)
    assert checks[1]["multiple_ci"][0] > 1.5 and {c["rule"] for c in checks} == {"ci_against_budget"}
    assert report["admission"]["left_budget_at_step"] == 2
    flags = [(s, v) for s, k, v in rep.points if k == "admission/within_budget"]
    assert flags == [(0, 1.0), (2, 0.0), (4, 0.0)]
    assert any("at step 2" in r.getMessage() and "left the budget" in r.getMessage() for r in caplog.records)


def test_without_budgets_nothing_is_rechecked(student, teacher):
    report = run_training(OPDConfig(model=student, teacher=teacher, steps=1, batch_size=8, eval_prompts=10,
                                    device="cpu"), RecordingReporter()).model_dump(mode="json")
    assert report["admission"] is None
