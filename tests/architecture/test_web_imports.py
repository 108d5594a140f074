"""The web process starts fast and without a GPU stack: importing the ASGI application, the
URL configuration (every view, API route and template tag they reach), the Celery app with
the tasks and the kind registry imports no torch, numpy or model library.  Checked in a fresh interpreter, so nothing an earlier test
imported can hide an import."""  # noqa: E501
import json
import os
import subprocess
import sys

from tests.architecture.test_layout import ROOT

HEAVY = ("torch", "numpy", "transformers", "safetensors", "tokenizers", "vllm")

PROBE = f"""
import json, sys
import django
django.setup()
import opdweb.asgi, opdweb.urls, opdweb.celery_app, opdweb.jobs.tasks, workers.science.entrypoints
print(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}} & set({HEAVY!r}))))
"""


def test_the_web_process_imports_no_torch_or_numpy():
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "opdweb.settings", "SECRET_KEY": "imports-only",
           # nothing connects during imports: unreachable servers prove it
           "DATABASE_URL": "postgres://nobody@127.0.0.1:9/none", "REDIS_URL": "redis://127.0.0.1:9/0"}
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-4000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


def test_the_probe_would_see_a_heavy_import():
    """The check itself can fail: the same probe run after importing numpy reports it."""
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "opdweb.settings", "SECRET_KEY": "imports-only",
           "DATABASE_URL": "postgres://nobody@127.0.0.1:9/none", "REDIS_URL": "redis://127.0.0.1:9/0"}
    out = subprocess.run([sys.executable, "-c", "import numpy\n" + PROBE], env=env, cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-4000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == ["numpy"]
