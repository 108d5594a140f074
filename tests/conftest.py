"""Suite-wide: every module named ``*_browser.py`` drives Chromium and is marked
``browser``, so ``make test-fast`` (``-m "not browser and not fuzz and not faults and not
slow"``) can leave them out without each file repeating the mark."""
import pytest


def pytest_collection_modifyitems(items):
    for item in items:
        if item.path.stem.endswith("_browser"):
            item.add_marker(pytest.mark.browser)
