import subprocess
import sys

import pytest

from workers.science.config import (
    MAX_PROMPTS,
    ConfigError,
    DriftJobConfig,
    MismatchJobConfig,
    RolloutConfig,
    SensitivityJobConfig,
    ValidationError,
    describe_validation_error,
    validation_problems,
)


def problems(text: str) -> list[str]:
    with pytest.raises(ValidationError) as exc:
        RolloutConfig.from_yaml(text)
    return describe_validation_error(exc.value)


def test_it_parses_a_full_yaml_config():
    cfg = RolloutConfig.from_yaml(
        """
engine: hf
dtype: bf16
weights: fp8_e4m3
weight_scale: block
block_size: 64
kv_cache: fp8_e5m2
kv_scale: head
keep_bf16: [0, "model.layers.1.mlp.*", "re:q_proj$"]
noise_sigma: 0.1
noise_seed: 3
staleness: 2
sampling: {temperature: 0.7, top_p: 0.9, max_new_tokens: 32}
seed: 5
"""
    )
    assert cfg.weights == "fp8_e4m3" and cfg.block_size == 64 and cfg.kv_scale == "head"
    assert cfg.keep_bf16 == [0, "model.layers.1.mlp.*", "re:q_proj$"]
    assert cfg.sampling.top_p == 0.9 and cfg.staleness == 2
    assert not cfg.is_reference


def test_it_defaults_to_the_bf16_reference():
    cfg = RolloutConfig.from_yaml("")
    assert cfg.is_reference and cfg.dtype == "bf16"
    assert cfg.bf16_reference() == cfg


def test_it_names_an_unknown_dtype():
    (line,) = problems("dtype: fp64")
    assert line.startswith("dtype:") and "'fp64'" in line


def test_it_refuses_negative_sigma():
    (line,) = problems("noise_sigma: -0.1")
    assert line.startswith("noise_sigma:") and "must be at least 0" in line


def test_it_gives_one_line_per_problem():
    lines = problems("weights: fp9\nnoise_sigma: -1\nbogus: 1\nsampling: {top_p: 2}\n")
    assert len(lines) == 4
    assert any(line == "bogus: unknown field" for line in lines)
    assert any(line.startswith("sampling.top_p:") for line in lines)


def test_it_refuses_bad_regexes_and_negative_layer_indices():
    assert problems("keep_bf16: ['re:(']")[0].startswith("keep_bf16:")
    first = problems("keep_bf16: [-1]")[0]
    assert first.startswith("keep_bf16.0") and "must be at least 0 (got -1)" in first


def test_it_refuses_inconsistent_options():
    assert "weights" in problems("weight_scale: channel")[0]
    assert "FP8 weights" in problems("activations: fp8_e4m3")[0]


def test_it_gives_clear_errors_for_non_mappings_and_missing_files(tmp_path):
    with pytest.raises(ConfigError, match="mapping"):
        RolloutConfig.from_yaml("- a\n- b\n")
    with pytest.raises(ConfigError, match="does not exist"):
        RolloutConfig.from_file(tmp_path / "nope.yaml")


@pytest.mark.parametrize("config,fields,problem", [
    (MismatchJobConfig, {"prompts": MAX_PROMPTS + 1},
     {"field": "prompts", "message": f"must be at most {MAX_PROMPTS} (got {MAX_PROMPTS + 1})"}),
    (MismatchJobConfig, {"max_new_tokens": 10**6},
     {"field": "max_new_tokens", "message": "must be at most 8192 (got 1000000)"}),
    (SensitivityJobConfig, {"target": -1.0},
     {"field": "target", "message": "must be more than 0.0 (got -1.0)"}),
    (DriftJobConfig, {"extra_field": 1}, {"field": "extra_field", "message": "unknown field"}),
])
def test_job_configs_refuse_huge_requests(config, fields, problem):
    with pytest.raises(ValidationError) as exc:
        config(model="m", **fields)
    assert validation_problems(exc.value) == [problem]


def test_job_applies_its_seed_and_length_to_the_rollout():
    job = MismatchJobConfig(model="m", rollout=RolloutConfig(seed=1), seed=9, max_new_tokens=12)
    assert job.rollout_effective.seed == 9
    assert job.rollout_effective.sampling.max_new_tokens == 12


def test_config_and_entrypoints_import_without_torch():
    code = (
        "import sys; import workers.science.config, workers.science.entrypoints, workers.science.capacity; "
        "import workers.science.results, workers.science.budget.results, workers.science.training.results; "
        "assert 'torch' not in sys.modules, 'torch imported'; "
        "assert 'numpy' not in sys.modules, 'numpy imported'; "
        "assert 'django' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_a_catastrophic_regex_is_matched_in_linear_time():
    """``(\\w|\\w|.)*X`` backtracks exponentially in Python's re; on RE2 it answers at once."""
    import time

    from workers.science.config import keep_pattern

    matches = keep_pattern(r"re:^(\w|\w|.)*X")
    started = time.perf_counter()
    assert not matches("model.layers.0.mlp.up_proj" * 4)
    assert matches("model.layers.0.mlp.X")
    assert time.perf_counter() - started < 1.0


def test_it_refuses_regexes_re2_cannot_run_and_overlong_patterns():
    assert "not a valid RE2 pattern" in problems(r"keep_bf16: ['re:(a)\1']")[0]
    # RE2's own reason in words, not the bytes repr of its C++ message
    assert problems("keep_bf16: ['re:(a']")[0].endswith("is not a valid RE2 pattern: missing ): (a")
    assert "at most 200 characters" in problems("keep_bf16: ['" + "x" * 201 + "']")[-1]


def test_an_unknown_field_names_the_closest_known_one():
    from workers.science.budget.config import CalibrationJobConfig

    with pytest.raises(ValidationError) as caught:
        CalibrationJobConfig.model_validate({"model": "m", "steeps": 10, "rollout": {"wieghts": "fp8_e4m3"},
                                             "zzz": 1})
    problems = {p["field"]: p["message"] for p in validation_problems(caught.value, model=CalibrationJobConfig)}
    assert problems["steeps"] == "unknown field; did you mean 'steps'?"
    assert problems["rollout.wieghts"] == "unknown field; did you mean 'weights'?"  # inside a nested model
    assert problems["zzz"] == "unknown field"  # nothing close: no guess
    assert {p["message"] for p in validation_problems(caught.value)} >= {"unknown field"}  # no model: no guess
