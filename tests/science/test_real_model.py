"""The real model the product ships: SmolLM2-135M-Instruct (Llama, 30 layers), imported from
its GGUF Q4_1 file into an ordinary checkpoint folder, measured on GSM8K.  Small samples
only (8 prompts x 32 tokens): these check that the real loading path and every engine work
on real weights, not what the figures are (the weights went through 4-bit quantization
before the product sees them)."""
import json
import subprocess
import sys

import pytest

from tests.dependencies import missing, needs_vllm
from workers.science.config import ConfigError, MismatchJobConfig, RolloutConfig
from workers.science.packaged import SMOLLM2, packaged_file
from workers.science.prompts import GSM8K_TASKS, encode_prompts, gsm8k_prompt_set

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def gguf():
    try:
        return packaged_file(*SMOLLM2)
    except ConfigError as exc:  # a machine without `make`'s packages; any other error is a failure
        missing(str(exc))


@pytest.fixture(scope="module")
def smollm2(gguf, tmp_path_factory):
    """The folder ``python -m workers import-gguf --packaged smollm2`` writes (the real command)."""
    out = tmp_path_factory.mktemp("real") / "smollm2-135m-instruct"
    done = subprocess.run([sys.executable, "-m", "workers", "import-gguf", "--packaged", "smollm2", "--out", str(out),
                           "--json"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return out, json.loads(done.stdout)


def test_the_imported_folder_is_an_ordinary_checkpoint_with_the_gguf_models_logits(gguf, smollm2):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out, record = smollm2
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"] and config["num_hidden_layers"] == 30
    assert "quantization_config" not in config and config["head_dim"] == 64 and config["vocab_size"] == 49152
    assert record["source"]["file_type"] == "Q4_1" and "went through that quantization" in record["note"]
    assert record["logits_max_abs_diff"] == 0.0
    # checked again here, on a prompt the import did not use: the same dequantized weights
    folder = AutoModelForCausalLM.from_pretrained(str(out), dtype=torch.float32).eval()
    original = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(str(out))
    ids = tokenizer("Janet has 3 apples and buys 5 more, so she has", return_tensors="pt")
    with torch.no_grad():
        diff = (folder(**ids).logits - original(**ids).logits).abs().max().item()
    assert diff == 0.0
    assert tokenizer.chat_template and json.loads((out / "opdweb_task.json").read_text())["task"] == "gsm8k"


def test_gsm8k_prompts_are_put_to_the_instruct_model_in_its_chat_template(smollm2):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(smollm2[0]))
    ps = gsm8k_prompt_set("test", limit=2)
    (ids, _) = encode_prompts(tokenizer, ps.prompts(), ps.chat)
    text = tokenizer.decode(ids)
    assert text.startswith("<|im_start|>system\n") and f"<|im_start|>user\n{ps.problems[0].prompt}<|im_end|>" in text
    assert text.endswith("<|im_start|>assistant\n")
    plain = encode_prompts(tokenizer, ["2+3="], chat=False)[0]
    assert tokenizer.decode(plain) == "2+3="  # not a chat task: the text as it is


def real_job(model, prompts=8, **rollout):
    return MismatchJobConfig(model=str(model), task="gsm8k", rollout=RolloutConfig(**rollout), prompts=prompts,
                             max_new_tokens=32, bootstrap=200, device="cpu", batch_size=8, reference_engine="hf",
                             target_ci=0)


def test_identical_engines_give_exactly_the_bf16_unit_and_fp8_weights_rise_above_its_floor(smollm2):
    from workers.science.mismatch import run_mismatch

    out = smollm2[0]
    unit = run_mismatch(real_job(out)).model_dump(mode="json")
    assert unit["multiple"] == 1.0 and unit["multiple_ci"] == [1.0, 1.0] and unit["task"] == "gsm8k"
    fp8 = run_mismatch(real_job(out, weights="fp8_e4m3")).model_dump(mode="json")
    assert fp8["tokens"] >= 8 * 16 and fp8["multiple_ci"][0] > fp8["floor"]["value"]
    assert fp8["multiple"] > 1.0
    assert fp8["kv_cache"]["layers"] == 30


@needs_vllm
def test_vllm_cpu_loads_the_imported_folder_and_agrees_on_the_next_token(smollm2, monkeypatch):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from vllm import LLM, SamplingParams

    out = smollm2[0]
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "1")
    tokenizer = AutoTokenizer.from_pretrained(str(out))
    prompt = "The capital of France is"
    with torch.no_grad():
        logits = AutoModelForCausalLM.from_pretrained(str(out), dtype=torch.float32)(
            **tokenizer(prompt, return_tensors="pt")).logits[0, -1]
    llm = LLM(model=str(out), dtype="bfloat16", enforce_eager=True, max_model_len=128)
    try:
        (result,) = llm.generate([prompt], SamplingParams(temperature=0.0, max_tokens=4), use_tqdm=False)
    finally:
        llm.llm_engine.engine_core.shutdown()
    assert len(result.outputs[0].token_ids) == 4
    assert result.outputs[0].token_ids[0] == int(logits.argmax())


def test_a_student_derived_from_the_real_model_trains_on_gsm8k_with_it_as_the_teacher(smollm2, tmp_path):
    """The real OPD pair (benchmarks/gpu_real_calibration.sh): a student of 16 of its 30
    layers, one OPD step on GSM8K in the chat template, weights moved by the step."""
    import torch
    from safetensors.torch import load_file

    from workers.science.derive_student import derive_student
    from workers.science.training.config import OPDConfig
    from workers.science.training.job import run_training

    teacher, _ = smollm2
    student = tmp_path / "student"
    record = derive_student(teacher, student, keep="every:2")
    assert len(record["kept_layers"]) == 16 and record["kept_layers"][-1] == 29
    out = tmp_path / "run"
    cfg = OPDConfig(model=str(student), teacher=str(teacher), task="gsm8k", steps=1, batch_size=2,
                    max_new_tokens=8, eval_every=0, eval_prompts=1, checkpoint_every=1, out=str(out), device="cpu")
    report = run_training(cfg).model_dump(mode="json")
    assert report["task"] == "gsm8k" and report["steps"] == 1 and report["tokens"] > 0
    before, after = load_file(student / "model.safetensors"), load_file(out / "checkpoint-000001" / "model.safetensors")
    assert set(after) == set(before)
    assert [k for k in before if not torch.equal(before[k].float(), after[k].float())]  # the step moved weights


def test_what_cannot_be_imported_is_a_clear_error_and_exit_2(gguf, tmp_path):
    import gguf as gguf_lib

    def run(path):
        return subprocess.run([sys.executable, "-m", "workers", "import-gguf", "--gguf", str(path), "--out",
                               str(tmp_path / "out")], capture_output=True, text=True, timeout=300)

    text = tmp_path / "notes.gguf"
    text.write_text("not a model")
    truncated = tmp_path / "truncated.gguf"
    truncated.write_bytes(gguf.read_bytes()[:5_000_000])
    other = tmp_path / "falcon.gguf"
    writer = gguf_lib.GGUFWriter(str(other), "falcon")
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    for path, message in [(tmp_path / "missing.gguf", "does not exist"), (text, "not a GGUF file"),
                          (truncated, "cannot be read (truncated or corrupt?)"),
                          (other, "GGUF architecture 'falcon' is not one the product names modules for")]:
        done = run(path)
        assert done.returncode == 2 and message in done.stderr and "Traceback" not in done.stderr, (path, done.stderr)
    assert not (tmp_path / "out").exists() and not list(tmp_path.glob(".out.*"))


def test_the_gsm8k_tasks_are_the_official_splits():
    test, train = gsm8k_prompt_set("test"), gsm8k_prompt_set("train")
    assert (len(test), len(train)) == (1319, 7473) and set(GSM8K_TASKS) == {"gsm8k", "gsm8k:test", "gsm8k:train"}
    assert test.problems[0].answer == "18" and test.chat  # Janet's ducks: 16 - 3 - 4 = 9 eggs at $2
