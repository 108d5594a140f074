"""The trainers' own MLflow loggers, run for real against a daphne, each in a process of its
own as a trainer would be, with only the environment set (no code change):

- verl 0.9.1's ``verl.utils.tracking.Tracking`` (the pinned wheel's own file, loaded by path:
  the package's ``__init__`` imports ray) resuming a run made beforehand with the link tags,
  through ``MLFLOW_RUN_ID``, the recipe docs/tracking.md gives for verl;
- transformers' ``MLflowCallback`` under a real ``Trainer`` (what TRL's
  ``report_to="mlflow"`` uses), linking through ``MLFLOW_TAGS``.

Each run lands as an external job linked to the approval, with every point once; verl's
stream crosses the planted budget at the step the stream was built to cross it."""
from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter

import pytest

from opdweb.jobs.models import JobState
from opdweb.runs.metric_map import MULTIPLE_KEY
from opdweb.runs.models import Alert, MlflowRun, RunLink
from opdweb.tokens.actions import do_create_token
from opdweb.traces.models import TracePoint
from tests.web.conftest import ROOT
from tests.web.test_run_watch import BUDGET, CROSSING_STEP, UNIT_K3, Watched, verl_step

VERL_TRACKING = ROOT / ".venv" / "trainers" / "verl" / "utils" / "tracking.py"

VERL = """
import importlib.util, json, os, sys
import mlflow

# The documented recipe: make the run with its link tags, then start verl with its id.
client = mlflow.MlflowClient()
experiment = mlflow.set_experiment("opd-smollm2")
made = client.create_run(experiment.experiment_id, tags=json.loads(os.environ["LINK_TAGS"]))
os.environ["MLFLOW_RUN_ID"] = made.info.run_id

spec = importlib.util.spec_from_file_location("verl_tracking", sys.argv[1])
tracking_module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tracking_module)
tracking = tracking_module.Tracking(project_name="opd-smollm2", experiment_name="fp8 w+kv",
                                   default_backend=["mlflow"], config=None)
assert "mlflow" in tracking.logger, "verl's MLflow logger did not start"
for step, metrics in json.loads(sys.stdin.read()):
    tracking.log(data=metrics, step=step)
tracking.finish()
print(made.info.run_id)
"""

TRAINER = """
import os, sys, torch
from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments

torch.manual_seed(0)
model = LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                     num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=32))


class Sequences(torch.utils.data.Dataset):
    def __len__(self):
        return 32

    def __getitem__(self, i):
        ids = torch.arange(i, i + 8) % 64
        return {"input_ids": ids, "labels": ids}


args = TrainingArguments(output_dir=sys.argv[1], max_steps=int(sys.argv[2]), logging_steps=1, report_to=["mlflow"],
                         run_name="trl-style sft", per_device_train_batch_size=4, save_strategy="no", use_cpu=True,
                         disable_tqdm=True, learning_rate=1e-3)
Trainer(model=model, args=args, train_dataset=Sequences()).train()
"""


def trainer_env(server: str, secret: str, **extra: str) -> dict:
    import os

    env = {**os.environ, "MLFLOW_TRACKING_URI": f"http://{server}/mlflow", "MLFLOW_TRACKING_TOKEN": secret,
           "MLFLOW_DISABLE_TELEMETRY": "true", "DO_NOT_TRACK": "true", "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0",
           **extra}
    for name in ("MLFLOW_RUN_ID", "MLFLOW_EXPERIMENT_ID", "MLFLOW_EXPERIMENT_NAME", "MLFLOW_TAGS"):
        if name not in extra:
            env.pop(name, None)
    return env


def points_of(job) -> Counter:
    return Counter(TracePoint.objects.filter(series__job=job).values_list("series__key", "step"))


@pytest.mark.slow
def test_verls_own_mlflow_logger_resuming_a_tagged_run_is_linked_and_crosses_the_budget_at_its_step(
        start_asgi_server, tmp_path, settings):
    world = Watched(tmp_path, settings)
    server = start_asgi_server(OPDWEB_MODEL_ROOTS=str(tmp_path / "models"))
    _, secret = do_create_token(user=world.member, team=world.team, name="verl", can_write=True)
    steps = [(step, verl_step(step, 20.5 + step)) for step in range(1, 41)]  # above the budget from step 30
    tags = {"opdweb.approval": str(world.approval.pk), "opdweb.checkpoint": world.checkpoint}
    done = subprocess.run([sys.executable, "-c", VERL, str(VERL_TRACKING)], input=json.dumps(steps),
                          env=trainer_env(server, secret, LINK_TAGS=json.dumps(tags)), capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    run = MlflowRun.objects.get(run_id=done.stdout.strip().splitlines()[-1])
    job = run.job

    assert job.state == JobState.SUCCEEDED and job.team == world.team
    link = RunLink.objects.get(job=job)
    assert (link.approval_id, link.checkpoint, link.k3_key) == (world.approval.pk, world.checkpoint,
                                                              "rollout_corr/k3_kl")
    logged = {(key, step) for step, metrics in steps for key in metrics}
    counted = points_of(job)
    assert set(counted) - {(MULTIPLE_KEY, s) for s, _ in steps} == logged  # verl's keys as it sent them
    assert set(counted.values()) == {1}  # every point once
    multiples = dict(TracePoint.objects.filter(series__job=job, series__key=MULTIPLE_KEY).values_list("step", "value"))
    assert multiples[1] == pytest.approx(21.5) and multiples[40] == pytest.approx(60.5)  # k3 / the unit's k3
    assert UNIT_K3 * multiples[29] < UNIT_K3 * BUDGET < UNIT_K3 * multiples[30]

    alert = Alert.objects.get(job=job)
    assert (alert.kind, alert.step, alert.threshold) == ("budget", CROSSING_STEP, BUDGET)
    world.approval.refresh_from_db()
    assert (world.approval.breached_at_step, world.approval.breached_by_id) == (CROSSING_STEP, job.pk)


@pytest.mark.slow
def test_a_transformers_trainer_reporting_to_mlflow_with_mlflow_tags_is_a_linked_run(start_asgi_server, tmp_path,
                                                                                     settings):
    world = Watched(tmp_path, settings)
    server = start_asgi_server(OPDWEB_MODEL_ROOTS=str(tmp_path / "models"))
    _, secret = do_create_token(user=world.member, team=world.team, name="trl", can_write=True)
    tags = json.dumps({"opdweb.approval": str(world.approval.pk), "opdweb.checkpoint": world.checkpoint})
    max_steps = 6
    done = subprocess.run([sys.executable, "-c", TRAINER, str(tmp_path / "out"), str(max_steps)],
                          env=trainer_env(server, secret, MLFLOW_TAGS=tags, MLFLOW_EXPERIMENT_NAME="sft"),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]

    run = MlflowRun.objects.get(job__team=world.team)
    job = run.job
    assert (job.name, job.state, run.experiment.name) == ("trl-style sft", JobState.SUCCEEDED, "sft")
    assert RunLink.objects.get(job=job).approval_id == world.approval.pk
    assert job.config["tags"]["opdweb.approval"] == str(world.approval.pk)
    assert job.config["params"]["learning_rate"] == "0.001" and job.config["params"]["max_steps"] == str(max_steps)
    counted = points_of(job)
    assert sorted(step for key, step in counted if key == "loss") == list(range(1, max_steps + 1))
    assert set(counted.values()) == {1}
    assert not Alert.objects.filter(job=job).exists()  # it logs no k3: nothing on the budget's scale
