"""The README's "Current figures" table, written from what the benchmarks recorded.

A benchmark run with ``--record`` (at its full size: the smoke sizes `make test` runs never
record) stores its rows in ``docs/benchmarks/figures.json``: what was measured, the figure,
the goal, the docs page, the command that ran it, the 1-minute load average when it started
and when it ended, the date and the commit it started on. Then

    python benchmarks/figures.py

rewrites the table in README.md from that file (`tests/architecture/test_readme_figures.py`
fails while the two differ). A benchmark run on another host (``gpu_check.py --record`` on a lent
GPU) puts its rows and their stamp in its result file instead, and ``python benchmarks/figures.py
--record-from FILE`` stores them here. A row with ``"by": "hand"`` is one whose benchmark does not
record yet: its figures were copied from its docs page, and the table says so.

No Django here: the README is written without a database.
"""
from __future__ import annotations

import datetime
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIGURES = ROOT / "docs" / "benchmarks" / "figures.json"
README = ROOT / "README.md"
BEGIN, END = "<!-- figures: written by benchmarks/figures.py from docs/benchmarks/figures.json -->", "<!-- /figures -->"
#: The 1-minute load average when the benchmark started (it imports this module first thing).
LOAD_AT_START = os.getloadavg()[0]


def load_figures(path: Path = FIGURES) -> list[dict]:
    return json.loads(path.read_text())["rows"]


def commit() -> str:
    """This checkout's commit, ``+changes`` where tracked files differ from it (other than the
    figures and the README, which the benchmarks run one after another change); in a copy
    with no ``.git``, ``OPDWEB_COMMIT`` says which commit it is."""
    def git(*args: str) -> str:
        try:
            return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True).stdout.strip()
        except OSError:  # no git on this host
            return ""

    head = git("rev-parse", "--short=7", "HEAD")
    if not head:  # a copy of the tree without its .git (a lent GPU host): the commit it was copied from
        return os.environ.get("OPDWEB_COMMIT", "unknown")
    changed = git("status", "--porcelain", "--untracked-files=no", "--", ".",
                  f":!{FIGURES.relative_to(ROOT)}", f":!{README.relative_to(ROOT)}")
    return head + ("+changes" if changed else "")


#: The code the benchmark ran: the checkout as it started (what it writes itself, or commits
#: made while it runs, do not change it).
COMMIT_AT_START = commit()


def shown(path: Path) -> Path:
    """``path`` as the docs write it: from the checkout's root where it lies inside."""
    return path.relative_to(ROOT) if path.is_relative_to(ROOT) else path


def command() -> str:
    """How this benchmark was run, as the docs give it (arguments quoted where a shell needs it)."""
    return " ".join([f"python -m opdweb.launcher exec -- .venv/bin/python {shown(Path(sys.argv[0]).resolve())}",
                     *map(shlex.quote, sys.argv[1:])])


def stamp() -> dict:
    """How, where and when this run measured its rows: the command, the commit it started on,
    the date and the load average at its start and now."""
    return {"by": "benchmark", "command": command(), "commit": COMMIT_AT_START,
            "date": datetime.date.today().isoformat(),
            "load": f"{LOAD_AT_START:.1f} → {os.getloadavg()[0]:.1f}"}


def record(rows: list[dict], path: Path = FIGURES, measured: dict | None = None) -> None:
    """Store ``rows`` (each with ``id``, ``what``, ``latest``, ``goal``, ``page`` and ``page_title``) as this
    run measured them (or as ``measured``, the stamp of a run on another host): a row already there
    is replaced in place, a new one added at the end."""
    measured = measured or stamp()
    table = load_figures(path)
    for row in rows:
        missing = {"id", "what", "latest", "goal", "page", "page_title"} - row.keys()
        if missing:
            raise ValueError(f"row {row.get('id')!r} lacks {sorted(missing)}")
        new = {**row, **measured}
        at = next((i for i, old in enumerate(table) if old["id"] == row["id"]), None)
        if at is None:
            table.append(new)
        else:
            table[at] = new
    path.write_text(json.dumps({"rows": table}, indent=1, ensure_ascii=False) + "\n")
    print(f"recorded {', '.join(row['id'] for row in rows)} in {shown(path)}; "
          "python benchmarks/figures.py writes them into README.md")


def cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def table(rows: list[dict]) -> str:
    lines = ["| what | latest | goal | load average (start → end) | when | page |", "|---|---|---|---|---|---|"]
    for row in rows:
        if row["by"] == "benchmark":
            when = f"{row['date']}, `{row['commit']}`"
        else:
            when = "copied by hand from its page"
        lines.append("| " + " | ".join(cell(x) for x in (row["what"], row["latest"], row["goal"], row["load"], when))
                     + f" | [{row['page_title']}]({row['page']}) |")
    return "\n".join(lines)


def readme_with_table(readme: str, rows: list[dict]) -> str:
    start, end = readme.index(BEGIN) + len(BEGIN), readme.index(END)
    return readme[:start] + "\n" + table(rows) + "\n" + readme[end:]


def record_from(path: Path, figures_path: Path = FIGURES) -> None:
    """Store the rows a benchmark on another host wrote into its result file (``"figures"``: its
    rows and its stamp), as measured there; a file without rows stores nothing."""
    measured = json.loads(path.read_text()).get("figures") or {}
    if not measured.get("rows"):
        raise SystemExit(f"{path}: no rows to record (was it run with --record, on the host it measures?)")
    record(measured["rows"], figures_path, measured=measured["stamp"])


def main() -> int:
    if sys.argv[1:2] == ["--record-from"]:
        record_from(Path(sys.argv[2]))
    README.write_text(readme_with_table(README.read_text(), load_figures()))
    print(f"README.md: {len(load_figures())} rows from {FIGURES.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
