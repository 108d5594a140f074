"""The web process never reads weights: a checkpoint's content is read by a worker's
``describe`` job, and the web keeps and compares digests.  Read from the source: no module
under ``opdweb/`` that the web process runs reaches a function of the science that opens a
checkpoint's files, and no module opens a weight file by name.  The worker's side of the
Django project (the job runner, which checks checkpoints out of the worker's cache before
the science runs) is the one exception, named here.  The same rule is checked at run time
by tests/web/test_checkpoint_references.py (an audit hook sees every open)."""
import ast
import re

from tests.architecture.test_layout import ROOT, imports_of, module_name

#: Science that opens a checkpoint's files (hashing, headers, loading, fetching).
READS_CHECKPOINTS = {
    "workers.science.fingerprint": {"checkpoint_digest", "tokenizer_digest", "files_digest", "file_digest"},
    "workers.science.checkpoint_facts": {"read_checkpoint_facts", "safetensors_names"},
    "workers.science.checkpoints.describe": {"describe_folder", "run_describe", "import_note"},
}
READS_CHECKPOINT_MODULES = {"workers.science.checkpoints.cache", "workers.science.checkpoints.fetch",
                            "workers.science.engines", "workers.science.measurement", "safetensors", "torch",
                            "transformers", "vllm"}
#: Modules of the Django project that run in the worker process only: the job runner and its
#: checkout of checkpoints, and the presence beat (started by Celery's worker signals; it
#: names the worker's GPU through torch).
WORKER_SIDE = {"opdweb.jobs.checkpoints", "opdweb.jobs.runner", "opdweb.jobs.tasks", "opdweb.health.presence"}
WEIGHT_FILE = re.compile(r"""["'][^"']*\.(safetensors|bin|pt|pth|gguf)["']""")


def names_imported(path) -> set[tuple[str, str]]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.update((node.module, alias.name) for alias in node.names)
    return found


def violations(paths) -> list[str]:
    out = []
    for path in paths:
        name = module_name(path)
        if name in WORKER_SIDE or "migrations" in path.parts:
            continue
        for module, imported in names_imported(path):
            if imported in READS_CHECKPOINTS.get(module, ()):
                out.append(f"{name} imports {module}.{imported}")
        for module in imports_of(path):
            if any(module == m or module.startswith(m + ".") for m in READS_CHECKPOINT_MODULES):
                out.append(f"{name} imports {module}")
        for line_no, line in enumerate(path.read_text().splitlines(), 1):
            if WEIGHT_FILE.search(line) and ("open(" in line or "read_bytes" in line or "glob(" in line):
                out.append(f"{name}:{line_no} opens a weight file: {line.strip()}")
    return out


def test_no_web_module_reads_a_checkpoint():
    assert violations(sorted((ROOT / "opdweb").rglob("*.py"))) == []


def test_the_check_sees_a_module_that_would(tmp_path):
    """The check can fail: a module that hashes a checkpoint, or globs its weights, is named."""
    bad = ROOT / "opdweb" / "_probe_reads_weights.py"
    bad.write_text("from workers.science.fingerprint import checkpoint_digest\n"
                   "from pathlib import Path\nfiles = list(Path('.').glob('*.safetensors'))\n")
    try:
        found = violations([bad])
    finally:
        bad.unlink()
    assert found == ["opdweb._probe_reads_weights imports workers.science.fingerprint.checkpoint_digest",
                     "opdweb._probe_reads_weights:3 opens a weight file: "
                     "files = list(Path('.').glob('*.safetensors'))"]


def test_the_worker_side_is_what_the_runner_needs():
    """Each exception exists, the runner checks checkpoints out, and the presence beat
    starts from Celery's worker signals only."""
    for name in WORKER_SIDE:
        assert (ROOT / (name.replace(".", "/") + ".py")).is_file(), name
    assert "opdweb.jobs.checkpoints" in imports_of(ROOT / "opdweb" / "jobs" / "runner.py")
    assert "worker_ready" in (ROOT / "opdweb" / "health" / "presence.py").read_text()
