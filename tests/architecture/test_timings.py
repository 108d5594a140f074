"""``python -m tests.timings`` sums a JUnit report by module (hand-made report, hand sums)."""
from tests.timings import by_module

REPORT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" tests="4">
<testcase classname="tests.web.test_a" name="test_one" time="1.5"/>
<testcase classname="tests.web.test_a.TestGroup" name="test_two" time="2.0"/>
<testcase classname="tests.science.test_b" name="test_three[x]" time="4.25"/>
<testcase classname="tests.web.test_a" name="test_four" time="0.5"/>
</testsuite></testsuites>"""


def test_times_are_summed_by_module_slowest_first(tmp_path):
    path = tmp_path / "junit.xml"
    path.write_text(REPORT)
    assert by_module(path) == [("tests.science.test_b", 4.25, 1, "test_three[x]", 4.25),
                               ("tests.web.test_a", 4.0, 3, "test_two", 2.0)]
