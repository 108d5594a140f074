"""The README's "Current figures" table is what the benchmarks recorded
(docs/benchmarks/figures.json, written by ``--record``), never edited by hand apart from it."""
from __future__ import annotations

import json
import re

import pytest

from benchmarks import figures

ROOT = figures.ROOT
LOAD = re.compile(r"^\d+\.\d → \d+\.\d$")


def test_the_readme_table_is_written_from_the_recorded_figures():
    readme = figures.README.read_text()
    assert figures.readme_with_table(readme, figures.load_figures()) == readme, \
        "README.md's table differs from docs/benchmarks/figures.json: run python benchmarks/figures.py"


def test_each_recorded_row_names_its_command_and_load_and_its_page_exists():
    rows = figures.load_figures()
    assert len({row["id"] for row in rows}) == len(rows), "two rows share an id"
    recorded = [row for row in rows if row["by"] == "benchmark"]
    for row in rows:
        assert (ROOT / row["page"].split("#")[0]).is_file(), row["page"]
        assert row["by"] in ("benchmark", "hand"), row["by"]
    for row in recorded:
        assert LOAD.match(row["load"]), row
        script = re.search(r"(benchmarks/\w+\.py)", row["command"]).group(1)
        source = (ROOT / script).read_text()
        assert '"--record"' in source and ("figures.record(" in source or "figures.stamp(" in source), \
            f"{script} does not record"
        assert re.match(r"^\d{4}-\d\d-\d\d$", row["date"]) and re.match(r"^[0-9a-f]{7}", row["commit"]), row


def test_record_replaces_a_row_in_place_and_stamps_it(tmp_path):
    path = tmp_path / "figures.json"
    hand = {"id": "b", "what": "w", "latest": "1", "goal": "", "page": "p", "page_title": "t", "by": "hand",
            "load": "not recorded"}
    path.write_text(json.dumps({"rows": [{**hand, "id": "a"}, hand]}))
    figures.record([{"id": "a", "what": "new", "latest": "2 ms", "goal": "≤ 3 ms", "page": "p", "page_title": "t"},
                    {"id": "c", "what": "added", "latest": "3", "goal": "", "page": "p", "page_title": "t"}], path)
    rows = figures.load_figures(path)
    assert [row["id"] for row in rows] == ["a", "b", "c"]
    assert rows[1] == hand
    assert rows[0]["latest"] == "2 ms" and rows[0]["by"] == "benchmark" and LOAD.match(rows[0]["load"])


def test_a_pipe_in_a_figure_does_not_split_its_cell():
    row = {"id": "a", "what": "w", "latest": "1 | 2", "goal": "", "page": "p", "page_title": "t", "by": "hand",
           "load": "not recorded"}
    line = figures.table([row]).split("\n")[2]
    assert "1 \\| 2" in line and len(re.findall(r"(?<!\\)\|", line)) == 7  # six cells


def test_a_row_without_its_page_is_refused(tmp_path):
    path = tmp_path / "figures.json"
    path.write_text(json.dumps({"rows": []}))
    with pytest.raises(ValueError, match="page"):
        figures.record([{"id": "a", "what": "w", "latest": "1", "goal": ""}], path)
    assert figures.load_figures(path) == []
