import json
import math

import pytest

from workers.science.config import TOKEN_METRICS, ConfigError, MismatchJobConfig, RolloutConfig
from workers.science.entrypoints import KINDS
from workers.science.mismatch import run_mismatch
from workers.science.reporting import Cancelled, RecordingReporter


def job(student, prompts=96, **rollout):
    """One round of ``prompts`` against the hf BF16 unit (the precision loop and the vLLM unit have their own tests)."""
    return MismatchJobConfig(model=student, rollout=RolloutConfig(**rollout), prompts=prompts, bootstrap=200,
                             device="cpu", batch_size=48, reference_engine="hf", target_ci=0)


def test_report_has_the_contract_fields_and_is_json(student):
    rep = RecordingReporter()
    r = run_mismatch(job(student, weights="fp8_e4m3", kv_cache="fp8_e4m3"), rep).model_dump(mode="json")
    for key in ("metric", "value", "reference_value", "multiple", "multiple_ci", "tokens", "metrics"):
        assert key in r
    assert r["metric"] == "k3" and r["tokens"] > 96
    for name in TOKEN_METRICS + ("pearson", "ess", "log_ppl_gap", "chi2_seq", "prob_diff_max"):
        assert r["metrics"][name] is not None, name
    assert r["multiple"] == pytest.approx(r["value"] / r["reference_value"])
    lo, hi = r["multiple_ci"]
    assert lo <= r["multiple"] <= hi
    assert r["kv_cache"]["capacity_ratio"] == pytest.approx(2.0)
    json.dumps(r, allow_nan=False)
    keys = {k for _, k, _ in rep.points}
    assert {"mismatch/k3", "mismatch/multiple"} <= keys
    assert rep.progress_calls[-1][0] == 1.0


def test_the_bf16_engine_is_exactly_one_x(student):
    r = run_mismatch(job(student), RecordingReporter()).model_dump(mode="json")
    assert r["multiple"] == 1.0 and r["multiple_ci"] == [1.0, 1.0]
    assert r["value"] > 0  # BF16 against the fp32 trainer is small but not zero


def test_staleness_zero_and_keeping_everything_recover_the_bf16_multiple(student):
    assert run_mismatch(job(student, staleness=0)).model_dump(mode="json")["multiple"] == 1.0
    kept = run_mismatch(job(student, weights="fp8_e4m3", kv_cache="fp8_e4m3", noise_sigma=0.1,
                            keep_bf16=[0])).model_dump(mode="json")
    assert kept["multiple"] == 1.0


def test_the_multiple_rises_with_sigma(student):
    multiples = [run_mismatch(job(student, noise_sigma=s)).multiple for s in (0.03, 0.1, 0.3)]
    assert multiples[0] < multiples[1] < multiples[2]
    assert multiples[2] > 10


def test_staleness_increases_mismatch(student):
    assert run_mismatch(job(student, staleness=4)).model_dump(mode="json")["multiple"] > 1.5


def test_dump_writes_one_line_per_response(student, tmp_path):
    path = tmp_path / "dump.jsonl"
    r = run_mismatch(job(student, prompts=20, noise_sigma=0.1), dump_path=path).model_dump(mode="json")
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    assert len(lines) == 20
    assert sum(len(x["token_ids"]) for x in lines) == r["tokens"]
    for x in lines:
        assert len(x["token_ids"]) == len(x["logprobs_rollout"]) == len(x["logprobs_trainer"])
        assert all(lp <= 0 for lp in x["logprobs_rollout"] + x["logprobs_trainer"])


def test_it_stops_when_the_reporter_asks(student):
    with pytest.raises(Cancelled):
        run_mismatch(job(student, prompts=96, noise_sigma=0.1), RecordingReporter(stop_after_logs=1))


def test_missing_model_and_bad_layer_are_config_errors(student, tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        run_mismatch(job(str(tmp_path / "nope")))
    with pytest.raises(ConfigError, match="out of range"):
        run_mismatch(job(student, weights="int8", keep_bf16=[3]))


def test_the_registry_names_the_mismatch_kind():
    kind = KINDS["mismatch"]
    assert kind.config is MismatchJobConfig and kind.queue == "gpu"
    assert kind.entry == "workers.science.mismatch:run_mismatch"


def test_metrics_are_finite(student):
    r = run_mismatch(job(student, weights="int4", weight_scale="block", block_size=32)).model_dump(mode="json")
    assert all(v is None or math.isfinite(v) for v in r["metrics"].values())
    assert r["multiple"] > 1


def test_the_bf16_reference_is_cached_on_disk(student, tmp_path):
    from workers.science import reference_cache

    reference_cache.forget_all()
    cfg = job(student, prompts=32, weights="fp8_e4m3").model_copy(update={"cache_dir": str(tmp_path)})
    first = run_mismatch(cfg).model_dump(mode="json")
    # the unit and the unit under its second seed (the floor)
    assert first["reference_cached"] is False and len(list(tmp_path.glob("bf16-reference-*.npz"))) == 2
    reference_cache.forget_all()
    second = run_mismatch(cfg).model_dump(mode="json")
    assert second["reference_cached"] is True
    assert second["reference_value"] == first["reference_value"] and second["multiple"] == first["multiple"]
    # a different seed is a different reference
    other = run_mismatch(cfg.model_copy(update={"seed": 1})).model_dump(mode="json")
    assert other["reference_cached"] is False


def test_the_same_config_measured_twice_agrees_exactly(student):
    import torch

    from workers.science.measurement import MeasurementSession
    from workers.science.metrics import TokenRecords, metric_values, summarize
    from workers.science.multiple import compare

    session = MeasurementSession.open(job(student, prompts=32, weights="fp8_e4m3", kv_cache="fp8_e4m3",
                                          noise_sigma=0.05))
    cfg = session.rollout
    a = session.measure(cfg, "first", keep=True)
    b = session.measure(cfg, "second", keep=True)  # a second engine built from the same weights
    for ra, rb in zip(a.rollouts, b.rollouts, strict=True):
        assert torch.equal(ra.tokens, rb.tokens) and torch.equal(ra.mask, rb.mask)
    # the second engine in the trainer's place: every per-token divergence is exactly zero
    same = TokenRecords(a.records.lp_roll, b.records.lp_roll, a.records.seq, a.records.pos, n_sequences=32)
    v = metric_values(summarize(same))
    assert a.records.tokens > 32
    for name in ("k1", "k2", "k3", "prob_diff", "prob_diff_max", "chi2_token", "log_ppl_gap", "chi2_seq"):
        assert v[name] == 0.0, name
    assert v["mult_error"] == 1.0 and v["ess"] == 1.0 and v["pearson"] == 1.0
    # and on the BF16 scale, one measurement is exactly one times the other
    body = compare(session, a, b, "k3", 200)
    assert body.value > 0 and body.multiple == 1.0 and body.multiple_ci == [1.0, 1.0]


@pytest.mark.parametrize("model,rollout,message", [
    ("student", dict(weights="fp8_e4m3", weight_scale="block", block_size=48), "block_size 48 does not divide"),
    ("student", dict(weights="int4", weight_scale="block", block_size=96), "block_size 96 does not divide"),
    ("student", dict(staleness=50), "beyond the snapshot ring"),
    ("teacher", dict(staleness=1), "no snapshots/index.json"),
    ("student", dict(keep_bf16=["*.attention.*"]), "matches no module"),
])
def test_check_rollout_refuses_before_any_sampling(request, monkeypatch, model, rollout, message):
    from workers.science import reference_cache
    from workers.science.engines.hf import HFEngine

    reference_cache.forget_all()  # a remembered BF16 reference would need no sampling either way
    path = request.getfixturevalue(model)
    sampled = []
    real_sample = HFEngine.sample
    monkeypatch.setattr(HFEngine, "sample", lambda self, *a, **kw: sampled.append(1) or real_sample(self, *a, **kw))
    rep = RecordingReporter()
    with pytest.raises(ConfigError, match=message):
        run_mismatch(job(path, prompts=8, **rollout), rep)
    assert sampled == [] and rep.progress_calls == []


def test_a_long_batch_reports_its_progress_token_by_token(student):
    """A real model's batch decodes for minutes: progress moves within it, not only after it."""
    rep = RecordingReporter()
    cfg = MismatchJobConfig(model=student, rollout=RolloutConfig(sampling={"max_new_tokens": 16, "ignore_eos": True}),
                            prompts=8, bootstrap=50, device="cpu", batch_size=8, reference_engine="hf", target_ci=0)
    run_mismatch(cfg, rep)
    within = [(frac, message) for frac, message in rep.progress_calls if "token" in message]
    assert any(message.endswith("prompts 1-8 of 8, token 8/16") for _, message in within)
    assert any(message.endswith("token 16/16") for _, message in within)
    fracs = [frac for frac, _ in rep.progress_calls]
    assert fracs == sorted(fracs)  # never backwards


class StopMidBatch(RecordingReporter):
    """Asks to stop once the first batch has decoded its first tokens (a cancel clicked mid-batch)."""

    def should_stop(self) -> bool:
        return any(", token " in message for _, message in self.progress_calls)


def test_a_cancel_mid_batch_stops_at_the_next_token_step_not_the_batchs_end(student):
    from workers.science.engines.hf.engine import PROGRESS_EVERY

    reporter = StopMidBatch()
    long_answers = {"ignore_eos": True, "max_new_tokens": 64}  # a batch of 64 decode steps
    with pytest.raises(Cancelled, match=f"prompts 1-48, token {2 * PROGRESS_EVERY}"):
        run_mismatch(job(student, prompts=96, noise_sigma=0.1, sampling=long_answers), reporter)
    assert [m for _, m in reporter.progress_calls] == [f"BF16 reference: prompts 1-48 of 96, token {PROGRESS_EVERY}/64"]
