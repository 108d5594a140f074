"""Where a test run's time went: ``python -m tests.timings [junit.xml]`` sums the times of
``make test``'s JUnit report (``test-artifacts/junit.xml``) by module, slowest first, with
each module's slowest test.  The report's time of a test includes its setup and teardown."""
from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

DEFAULT = Path(__file__).resolve().parent.parent / "test-artifacts" / "junit.xml"


def by_module(path: Path) -> list[tuple[str, float, int, str, float]]:
    """``(module, seconds, tests, slowest test, its seconds)`` per module, slowest first."""
    total: dict[str, float] = defaultdict(float)
    count: dict[str, int] = defaultdict(int)
    slowest: dict[str, tuple[str, float]] = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        parts = case.get("classname", "?").split(".")
        while len(parts) > 1 and not parts[-1].startswith("test"):  # a test class: its module
            parts.pop()
        module, seconds = ".".join(parts), float(case.get("time", 0))
        total[module] += seconds
        count[module] += 1
        if seconds > slowest.get(module, ("", -1.0))[1]:
            slowest[module] = (case.get("name", "?"), seconds)
    return sorted(((m, total[m], count[m], *slowest[m]) for m in total), key=lambda row: -row[1])


def main(argv: list[str]) -> int:
    path = Path(argv[0]) if argv else DEFAULT
    rows = by_module(path)
    whole = sum(row[1] for row in rows)
    print(f"{whole:,.0f} s in {sum(row[2] for row in rows):,} tests ({path})")
    for module, seconds, tests, name, its in rows:
        print(f"{seconds:8.1f} s {seconds / whole:6.1%} {tests:5d}  {module}   slowest: {name} {its:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
