"""Time from a logged point to its alert reaching the team's webhook receiver.

    python -m opdweb.launcher exec -- .venv/bin/python benchmarks/bench_alert.py [--crossings 50]

One linked run on a real daphne (the MLflow path, a bearer token) and a real Celery worker
(the ``cpu`` queue, where ``opdweb.deliver_webhook`` runs), on a throwaway database.  The run
logs verl's ``rollout_corr/k3_kl`` a step at a time, alternating under and over the budget
(the team's rule alerts after one step above), so every step over the budget is one
crossing and one signed delivery.  Timed per crossing: from just before the ``log-batch``
request of the point that crosses is sent to the moment a loopback HTTP receiver in this
process has read the delivery's body (its signature checked).  Prints p50 / p95 / max.
"""
from __future__ import annotations

import argparse
import hashlib
import hmac
import http.client
import json
import os
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import figures
from harness import ROOT, bench_database, child_env, daphne, load, percentile, team_and_user

SECRET = "bench-secret-of-sixteen-plus"
UNIT_K3 = 0.002
BUDGET = 50.0


class Receiver:
    def __init__(self):
        self.arrived: dict[int, float] = {}  # alert step -> when its delivery was read
        self.bad = 0
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                now = time.perf_counter()
                good = "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
                if self.headers["X-Opdweb-Signature"] != good:
                    receiver.bad += 1
                receiver.arrived[json.loads(body)["step"]] = now
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.host = f"127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def world(receiver: Receiver):
    """A team with a webhook, an approved config against a 50x budget, a token, a rule of one step."""
    from django.utils import timezone

    from opdweb.approvals.models import ApprovalRequest, TeamWebhook
    from opdweb.budgets.models import MismatchBudget
    from opdweb.rollouts.actions import do_create_config
    from opdweb.runs.models import WatchRule
    from opdweb.tokens.actions import do_create_token

    team, user, _ = team_and_user()
    budget = MismatchBudget.objects.create(team=team, checkpoint="/models/student", task="arithmetic:3", method="opd",
                                           metric="k3", unit_engine="hf", reference_value=UNIT_K3, tolerance=1.4,
                                           curve=[], baseline={}, budget=BUDGET, status="reached", rule="bench")
    record, _ = do_create_config(team=team, user=user, name="fp8 kv", data={"kv_cache": "fp8_e4m3"})
    approval = ApprovalRequest.objects.create(team=team, config=record, checkpoint="/models/student",
                                              requested_by=user, state="approved", decided_at=timezone.now(),
                                              budget=budget)
    WatchRule.objects.create(team=team, consecutive_steps=1, silence_seconds=None)
    TeamWebhook.objects.create(team=team, url=f"http://{receiver.host}/hook", secret=SECRET)
    return approval, do_create_token(user=user, team=team, name="bench", can_write=True)[1]


def call(conn: http.client.HTTPConnection, token: str, endpoint: str, body: dict) -> dict:
    conn.request("POST", f"/mlflow/api/2.0/mlflow/{endpoint}", json.dumps(body),
                 {"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
    response = conn.getresponse()
    data = response.read()
    if response.status != 200:
        raise RuntimeError(f"{endpoint}: {response.status} {data[:300]!r}")
    return json.loads(data or b"{}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--crossings", type=int, default=50)
    parser.add_argument("--database", default="opdweb_bench_alert")
    parser.add_argument("--record", action="store_true", help="store the README row (docs/benchmarks/figures.json)")
    args = parser.parse_args()
    receiver = Receiver()
    # daphne and the worker take these from the environment: plain http to this loopback receiver
    os.environ.update({"WEBHOOK_ALLOW_HTTP": "true", "WEBHOOK_ALLOWED_HOSTS": receiver.host})
    with bench_database(args.database):
        approval, token = world(receiver)
        env = child_env()
        worker = subprocess.Popen([sys.executable, "-m", "celery", "-A", "opdweb.celery_app", "worker", "-Q", "cpu",
                                   "-c", "1", "-n", "bench-alert@%h", "--without-gossip", "--without-mingle"],
                                  env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            with daphne() as host:
                conn = http.client.HTTPConnection(host, timeout=30)
                run_id = call(conn, token, "runs/create", {"experiment_id": "0", "tags": [
                    {"key": "opdweb.approval", "value": str(approval.pk)}]})["run"]["info"]["run_id"]
                latencies = []
                step = 0
                for i in range(args.crossings + 1):  # the first crossing warms the worker up, untimed
                    for multiple in (10.0, 60.0):
                        step += 1
                        started = time.perf_counter()
                        call(conn, token, "runs/log-batch", {"run_id": run_id, "metrics": [{
                            "key": "rollout_corr/k3_kl", "value": multiple * UNIT_K3,
                            "timestamp": int(time.time() * 1000), "step": step}]})
                    deadline = time.time() + 30
                    while step not in receiver.arrived:
                        if time.time() > deadline:
                            raise RuntimeError(f"no delivery for the crossing at step {step}")
                        time.sleep(0.002)
                    if i:
                        latencies.append(receiver.arrived[step] - started)
        finally:
            worker.terminate()
            worker.wait(timeout=30)
    ms = [1000 * x for x in latencies]
    print(f"point -> webhook receiver, {len(ms)} crossings (signatures bad: {receiver.bad}): "
          f"p50 {percentile(ms, 50):.0f} ms, p95 {percentile(ms, 95):.0f} ms, max {max(ms):.0f} ms; load {load()}")
    if args.record:
        figures.record([{
            "id": "alert", "page": "docs/tracking.md#watching-a-run-against-its-budget-opdwebrunswatchpy",
            "page_title": "tracking",
            "what": "watched run: logged point (MLflow path, daphne) → signed alert at the webhook receiver "
                    f"(real worker), {len(ms)} crossings",
            "latest": f"p95 {percentile(ms, 95):.0f} ms (p50 {percentile(ms, 50):.0f} ms)", "goal": "≤ 1 s"}])


if __name__ == "__main__":
    main()
