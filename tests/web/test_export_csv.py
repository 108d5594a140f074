"""The CSV export reads back as it was written and opens safely in a spreadsheet: a key
holding ``\\r``, a comma, a quote or a newline round-trips through Python's csv reader; a
key a spreadsheet would run as a formula gets OWASP's leading ``'``; numbers stay numbers,
negative ones included."""
import csv
import io

import pytest

from opdweb.traces.download import spreadsheet_text
from opdweb.traces.sink import TraceSink
from tests.web.factories import JobFactory, MembershipFactory
from tests.web.test_traces import read_stream

# key -> what the CSV must read back as
KEYS = {
    "a\rb": "a\rb",
    "a\nb": "a\nb",
    'say "hi", twice': 'say "hi", twice',
    "=HYPERLINK(\"http://evil.example\",\"x\")": "'=HYPERLINK(\"http://evil.example\",\"x\")",
    "+cmd|' /C calc'!A0": "'+cmd|' /C calc'!A0",
    "-2+3": "'-2+3",
    "@SUM(1)": "'@SUM(1)",
    "\tx": "'\tx",
    "\rx": "'\rx",
    "-1.5": "-1.5",  # a number, not a formula
    "train/loss": "train/loss",
}


@pytest.mark.parametrize("text, shown", [("=1+1", "'=1+1"), ("-1", "-1"), ("+2.5e3", "+2.5e3"), ("-x", "'-x"),
                                         ("a=b", "a=b"), ("", ""), ("-", "'-"), ("@", "'@")])
def test_spreadsheet_text_neutralises_formulas_only(text, shown):
    assert spreadsheet_text(text) == shown


def test_the_csv_export_round_trips_hostile_keys_and_keeps_numbers_numeric(client, transactional_db):
    job = JobFactory()
    client.force_login(MembershipFactory(team=job.team).user)
    sink = TraceSink(job.pk, publish=False)
    for step in range(3):
        sink.add(step, {key: -0.5 - step for key in KEYS}, wall_time=1000.0 + step)
    sink.close()
    response = client.get(f"/api/jobs/{job.pk}/export?format=csv")
    assert response.status_code == 200
    text = read_stream(response)
    rows = list(csv.reader(io.StringIO(text, newline="")))
    assert rows[0] == ["key", "step", "wall_time", "value"]
    assert sorted({row[0] for row in rows[1:]}) == sorted(KEYS.values())
    assert len(rows) == 1 + 3 * len(KEYS)
    for _, step, wall, value in rows[1:]:
        assert float(value) == -0.5 - int(step) and value.startswith("-")  # a number, not "'-..."
        assert float(wall) == 1000.0 + int(step)
