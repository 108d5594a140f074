"""Finding 3: a cached BF16 reference is reused only when everything it depends on is the same."""
import json
import os
import shutil

import pytest

from workers.science import fingerprint, reference_cache
from workers.science.config import MismatchJobConfig, RolloutConfig
from workers.science.measurement import MeasurementSession
from workers.science.mismatch import run_mismatch


def job(model, **kw):
    fields = dict(model=model, rollout=RolloutConfig(weights="fp8_e4m3"), prompts=24, device="cpu",
                  reference_engine="hf", target_ci=0, bootstrap=0)
    fields.update(kw)
    return MismatchJobConfig(**fields)


def write_prompts(path, problems):
    path.write_text("".join(json.dumps({"problem": q, "answer": a}) + "\n" for q, a in problems))


def test_a_prompt_file_rewritten_at_the_same_path_is_a_miss(student, tmp_path):
    """The issue's reproduction: same path, same size, same mtime, other prompts."""
    reference_cache.forget_all()
    f = tmp_path / "p.jsonl"
    write_prompts(f, [(f"{a}+{b}=", "0") for a in range(4) for b in range(6)])
    cfg = job(student, task=str(f), cache_dir=str(tmp_path / "cache"))
    first = run_mismatch(cfg).model_dump(mode="json")
    st = f.stat()
    write_prompts(f, [(f"{a}+{b}=", "0") for a in range(4, 8) for b in range(3, 9)])
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert f.stat().st_size == st.st_size and f.stat().st_mtime_ns == st.st_mtime_ns
    reference_cache.forget_all()
    second = run_mismatch(cfg).model_dump(mode="json")
    assert second["reference_cached"] is False
    reference_cache.forget_all()
    fresh = run_mismatch(cfg.model_copy(update={"cache_dir": None})).model_dump(mode="json")
    assert second["reference_value"] == fresh["reference_value"] != first["reference_value"]


@pytest.fixture
def session_copy(student, tmp_path):
    model = tmp_path / "student"
    shutil.copytree(student, model, ignore=shutil.ignore_patterns("opdweb_kv_scales"))
    return MeasurementSession(job(str(model))), model


def test_each_input_of_the_reference_changes_its_key(session_copy, monkeypatch):
    session, model = session_copy
    cfg = session.reference_config()
    base = session.reference_key(cfg)
    assert session.reference_key(cfg) == base  # stable
    changed = {}
    # the sampling and the engine
    changed["sampling"] = session.reference_key(
        cfg.model_copy(update={"sampling": cfg.sampling.model_copy(update={"temperature": 0.7})}))
    changed["engine"] = session.reference_key(cfg.model_copy(update={"engine": "vllm"}))
    # the prompts' token ids
    ids = session.prompt_ids
    session.prompt_ids = [list(reversed(p)) for p in ids]
    changed["prompts"] = session.reference_key(cfg)
    session.prompt_ids = ids
    # library versions and the code version
    with monkeypatch.context() as m:
        m.setattr(fingerprint, "library_versions", lambda engine: {"torch": "0.0"})
        changed["versions"] = session.reference_key(cfg)
    with monkeypatch.context() as m:
        m.setattr(fingerprint, "MEASUREMENT_VERSION", fingerprint.MEASUREMENT_VERSION + 1)
        changed["code"] = session.reference_key(cfg)
    # the tokenizer's files and the checkpoint's files, rewritten with their mtime restored
    for name, f in (("tokenizer", model / "tokenizer_config.json"), ("checkpoint", model / "config.json")):
        st = f.stat()
        data = json.loads(f.read_text())
        data["opdweb_test_marker"] = 1
        f.write_text(json.dumps(data))
        os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
        changed[name] = session.reference_key(cfg)
    assert set(changed) == {"sampling", "engine", "prompts", "versions", "code", "tokenizer", "checkpoint"}
    for name, key in changed.items():
        assert key != base, name
    assert len(set(changed.values())) == len(changed)


def test_workers_storing_the_same_reference_at_once_all_succeed_and_leave_one_whole_file(tmp_path):
    """Two gpu workers measure the same BF16 reference and store it at the same moment (a
    calibration's noise children share it); each must succeed, and the file must be whole."""
    import threading

    import numpy as np

    from workers.science.metrics import TokenRecords

    n = 2000
    records = TokenRecords(lp_roll=np.linspace(-3, 0, n), lp_train=np.linspace(-3, 0, n),
                           seq=np.arange(n) // 100, pos=np.arange(n) % 100, kl_full=None, tv_full=None,
                           n_sequences=20)
    cache = str(tmp_path / "cache")
    failures: list[BaseException] = []
    start = threading.Barrier(8)

    def writer():
        start.wait()
        for _ in range(25):
            try:
                reference_cache.store("k", cache, records, {"value": 1.5})
            except BaseException as failed:  # noqa: BLE001 - collected and asserted below
                failures.append(failed)

    threads = [threading.Thread(target=writer) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []
    back, meta = reference_cache.stored("k", cache)
    assert meta == {"n_sequences": 20, "value": 1.5}
    assert np.array_equal(back.lp_roll, records.lp_roll) and back.kl_full is None
    assert [p.name for p in (tmp_path / "cache").iterdir()] == ["bf16-reference-k.npz"]  # no temporary left
