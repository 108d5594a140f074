"""A second model family beside SmolLM2: Gemma 3 270M, shipped in four part packages under
the Gemma Terms of Use (installed only by ``make gemma``), a base model with no chat template
whose GGUF asks for BOS.  The parts, the header's rules and the base-model prompt format are
checked here on files and tokenizers built by the test; the real import runs where ``make
gemma`` has installed the packages."""
import hashlib
import json
import os
import subprocess
import sys

import pytest

from workers.science.config import ConfigError
from workers.science.gguf_import import gguf_header
from workers.science.packaged import (
    GEMMA3_FILE,
    GEMMA3_INSTALL,
    GEMMA3_PARTS,
    GEMMA3_SUMS,
    assemble_gemma3,
    packaged_file,
)
from workers.science.prompts import BASE_MODEL_FORMAT, encode_prompts


def _fake_packages(root, parts: list[bytes], published: bytes) -> None:
    """Part packages laid out as pip installs the real ones, and the SHA256SUMS naming ``published``."""
    for (package, relative), data in zip(GEMMA3_PARTS, parts, strict=True):
        (root / package / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / package / "__init__.py").write_text("")
        (root / package / relative).write_bytes(data)
    package, relative = GEMMA3_SUMS
    (root / package / relative).parent.mkdir(parents=True, exist_ok=True)
    (root / package / "__init__.py").write_text("")
    (root / package / relative).write_text(f"{hashlib.sha256(published).hexdigest()}  {GEMMA3_FILE}\n")


def test_the_parts_are_put_together_in_order_and_checked_against_the_published_sha256(tmp_path, monkeypatch):
    parts = [b"GGUF" + b"a" * 10, b"b" * 7, b"c" * 3, b"d" * 5]
    packages = tmp_path / "packages"
    _fake_packages(packages, parts, b"".join(parts))
    monkeypatch.setenv("OPDWEB_PACKAGED_DIR", str(packages))
    out = tmp_path / "out"
    out.mkdir()
    assembled = assemble_gemma3(out)
    assert assembled == out / GEMMA3_FILE and assembled.read_bytes() == b"GGUF" + b"a" * 10 + b"bbbbbbbcccddddd"

    # a part from another release: the whole no longer matches; nothing is left behind
    (packages / GEMMA3_PARTS[2][0] / GEMMA3_PARTS[2][1]).write_bytes(b"C" * 3)
    (out / GEMMA3_FILE).unlink()
    with pytest.raises(ConfigError, match="not the .* its package publishes: reinstall it"):
        assemble_gemma3(out)
    assert not (out / GEMMA3_FILE).exists()


def test_a_missing_part_says_how_to_install_the_optional_model(tmp_path, monkeypatch):
    monkeypatch.setenv("OPDWEB_PACKAGED_DIR", str(tmp_path))  # searched alone: nothing installed there
    with pytest.raises(ConfigError, match="make gemma .*Gemma Terms of Use"):
        assemble_gemma3(tmp_path)
    done = subprocess.run([sys.executable, "-m", "workers", "import-gguf", "--packaged", "gemma3", "--out",
                           str(tmp_path / "gemma")], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "OPDWEB_PACKAGED_DIR": str(tmp_path)})
    assert done.returncode == 2 and "make gemma" in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert not (tmp_path / "gemma").exists() and not list(tmp_path.glob(".gguf-*"))


def test_the_gguf_header_gives_the_licence_and_whether_the_model_wants_bos(tmp_path):
    import gguf as gguf_lib

    def write(name: str, arch: str, add_bos: bool | None, licence: str | None):
        path = tmp_path / name
        writer = gguf_lib.GGUFWriter(str(path), arch)
        if add_bos is not None:
            writer.add_add_bos_token(add_bos)
        if licence:
            writer.add_license(licence)
        writer.add_file_type(15)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        return path

    gemma = gguf_header(write("g.gguf", "gemma3", True, "gemma"))
    assert (gemma["architecture"], gemma["file_type"], gemma["license"], gemma["add_bos_token"]) == \
        ("gemma3", "Q4_K_M", "gemma", True)
    llama = gguf_header(write("l.gguf", "llama", False, None))
    assert (llama["add_bos_token"], llama["license"]) == (False, None)
    assert gguf_header(write("n.gguf", "llama", None, None))["add_bos_token"] is False


def _word_tokenizer(chat_template: str | None):
    """A real transformers tokenizer (word level, BOS prepended) built here, with or without a chat template."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    words = ["<unk>", "<bos>", "Question:", "Answer:", "how", "many", "eggs?", "user", "assistant"]
    core = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    core.post_processor = processors.TemplateProcessing(single="<bos> $A", special_tokens=[("<bos>", 1)])
    tok = PreTrainedTokenizerFast(tokenizer_object=core, bos_token="<bos>", unk_token="<unk>")
    tok.chat_template = chat_template
    return tok, {w: i for i, w in enumerate(words)}


def test_a_base_model_is_asked_in_the_question_answer_format_and_a_chat_model_in_its_template():
    base, ids = _word_tokenizer(None)
    assert BASE_MODEL_FORMAT == "Question: {}\nAnswer:"
    assert encode_prompts(base, ["how many eggs?"], chat=True) == \
        [[ids["<bos>"], ids["Question:"], ids["how"], ids["many"], ids["eggs?"], ids["Answer:"]]]
    # not a natural-language problem (the toy's arithmetic): the text itself
    assert encode_prompts(base, ["how many"], chat=False) == [[ids["<bos>"], ids["how"], ids["many"]]]
    chat, ids = _word_tokenizer("{% for m in messages %}{{ m['role'] }} {{ m['content'] }} {% endfor %}"
                                "{% if add_generation_prompt %}assistant{% endif %}")
    # the template's own text, without a BOS the template did not write
    assert encode_prompts(chat, ["how many eggs?"], chat=True) == \
        [[ids["user"], ids["how"], ids["many"], ids["eggs?"], ids["assistant"]]]


@pytest.mark.slow
def test_the_packaged_gemma3_imports_with_bos_and_the_gguf_models_logits(tmp_path):
    """Where ``make gemma`` installed the parts: the real command, the real folder."""
    try:
        packaged_file(*GEMMA3_SUMS, install=GEMMA3_INSTALL)
    except ConfigError as exc:
        pytest.skip(f"Gemma 3 is optional (Gemma Terms of Use): {exc}")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = tmp_path / "gemma3-270m"
    done = subprocess.run([sys.executable, "-m", "workers", "import-gguf", "--packaged", "gemma3", "--out", str(out),
                           "--json"], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    record = json.loads(done.stdout)
    assert record["architecture"] == "Gemma3ForCausalLM" and record["layers"] == 18
    assert record["source"]["file_type"] == "Q4_K_M" and record["source"]["license"] == "gemma"
    assert record["logits_max_abs_diff"] == 0.0 and not list(tmp_path.glob(".gguf-*"))
    tokenizer = AutoTokenizer.from_pretrained(str(out))
    assert tokenizer("The capital of France is").input_ids[0] == tokenizer.bos_token_id == 2
    # the folder and the GGUF-loaded model agree on a prompt the import did not check, BOS included
    folder = AutoModelForCausalLM.from_pretrained(str(out), dtype=torch.float32).eval()
    gguf = tmp_path / "again"
    gguf.mkdir()
    original = AutoModelForCausalLM.from_pretrained(str(gguf), gguf_file=assemble_gemma3(gguf).name,
                                                    dtype=torch.float32).eval()
    ids = tokenizer("Janet has 3 apples and buys 5 more, so she has", return_tensors="pt")
    with torch.no_grad():
        assert (folder(**ids).logits - original(**ids).logits).abs().max().item() == 0.0
