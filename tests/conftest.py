"""Suite-wide: every module named ``*_browser.py`` drives Chromium and is marked
``browser``, so ``make test-fast`` (``-m "not browser and not fuzz and not faults and not
slow"``) can leave them out without each file repeating the mark.  A test marked
``needs(check)`` skips locally, and fails under ``CI=true``, when ``check()`` gives a
reason (``tests/dependencies.py``)."""
import pytest

from tests.dependencies import missing

pytest_plugins = ["tests.s3_store"]  # s3_server, s3_bucket: a real SeaweedFS


def pytest_collection_modifyitems(items):
    for item in items:
        if item.path.stem.endswith("_browser"):
            item.add_marker(pytest.mark.browser)


@pytest.fixture(scope="session", autouse=True)
def collected_static(django_db_blocker):
    """Pages name static files by their hashed names, read from the manifest that
    collectstatic writes (as the launcher does before serving): the web tests' servers and
    the benchmarks that render pages both need it, whichever runs first."""
    from django.core.management import call_command

    with django_db_blocker.unblock():
        call_command("collectstatic", "--noinput", verbosity=0)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """Before any fixture: a fixture that starts vLLM must not fail where vLLM is missing."""
    for mark in item.iter_markers("needs"):
        why = mark.args[0]()
        if why:
            missing(why, installed_by_make=mark.kwargs.get("installed_by_make", True))
