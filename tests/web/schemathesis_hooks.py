"""Hooks for the schemathesis run of ``test_openapi_fuzz.py`` (loaded through
``SCHEMATHESIS_HOOKS``): every request carries the CSRF pair a browser would send, and
every answer's status is written down so the test can count cases and 5xx itself."""
import os

import schemathesis


@schemathesis.hook
def before_call(context, case, **kwargs):
    token = os.environ["OPDWEB_FUZZ_CSRF"]
    case.cookies = {**(case.cookies or {}), "csrftoken": token}
    case.headers = {**(case.headers or {}), "X-CSRFToken": token}


@schemathesis.hook
def after_call(context, case, response):
    with open(os.environ["OPDWEB_FUZZ_STATUSES"], "a") as log:
        log.write(f"{response.status_code} {case.method} {case.path}\n")
