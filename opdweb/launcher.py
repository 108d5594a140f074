"""Bring the whole product up, or run the tests, with the services it needs.

    python -m opdweb.launcher run     # make run: services, migrate, web + workers
    python -m opdweb.launcher run --role web      # a web host of a cluster (docs/deployment.md)
    python -m opdweb.launcher run --role worker   # a worker host: its GPUs' workers only
    python -m opdweb.launcher services --listen IP  # a services host: PostgreSQL, Redis, object store
    python -m opdweb.launcher test    # make test: services (running ones, else embedded), pytest
    python -m opdweb.launcher exec -- python benchmarks/bench_traces.py

A process that dies is restarted alone, with backoff (:mod:`opdweb.supervisor`), the embedded
PostgreSQL and Redis too; Ctrl-C (or SIGTERM) stops every process it started, then the
embedded servers.
"""
from __future__ import annotations

import argparse
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from opdweb.cluster_services import read_env
from opdweb.cluster_services import start as start_cluster_services
from opdweb.embedded_servers import ensure_services, reachable
from opdweb.supervisor import Child, CrashLoop, Supervisor

ROOT = Path(__file__).resolve().parent.parent
#: The committed toy pair every test and figure uses.  A rebuild on another CPU trains
#: another student (its rounding differs: 0.10-0.53 held-out accuracy seen against this
#: pair's 0.38), whose example calibration can end with no budget.
SHIPPED_TOY = ROOT / "tests" / "science" / "fixtures" / "toy-test"


def data_dir() -> Path:
    return Path(os.environ.get("OPDWEB_DATA_DIR", ROOT / "var")).resolve()


def secret_key(var: Path) -> str:
    """A stable secret per installation, made on first start."""
    path = var / "secret_key"
    if not path.exists():
        var.mkdir(parents=True, exist_ok=True)
        path.write_text(secrets.token_urlsafe(50))
        path.chmod(0o600)
    return path.read_text().strip()


def visible_gpus() -> list[str]:
    """GPU indices this host offers, without importing torch (the launcher stays light)."""
    if "CUDA_VISIBLE_DEVICES" in os.environ:
        return [d for d in os.environ["CUDA_VISIBLE_DEVICES"].split(",") if d.strip() and d.strip() != "-1"]
    if shutil.which("nvidia-smi"):
        try:
            out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=10).stdout
            return [str(i) for i, line in enumerate(out.splitlines()) if line.startswith("GPU ")]
        except (OSError, subprocess.SubprocessError):
            return []
    return []


#: What each role of ``run`` starts: everything on one host, or a cluster's web host (the
#: web server and the control worker) and worker hosts (the job workers).
ROLES = {"all": ("web", "jobs", "control"), "web": ("web", "control"), "worker": ("jobs",)}


def worker_commands(env: dict, parts=("jobs", "control")) -> list[tuple[str, list[str], dict]]:
    """``(name, command, env)`` of each worker: for ``jobs``, one solo-pool worker per GPU on
    the ``gpu`` queue (or one CPU worker when there is none) and one for light jobs on
    ``cpu``; for ``control``, a small worker that runs the beat schedule and the reaper, so
    that no long job can delay noticing a lost one."""
    celery = [sys.executable, "-m", "celery", "-A", "opdweb.celery_app", "worker", "--loglevel", "INFO"]
    commands = []
    gpus = visible_gpus() if "jobs" in parts else []
    for i, gpu in enumerate(gpus):
        commands.append((f"gpu{i} worker", celery + ["-Q", "gpu", "--pool", "solo", "-n", f"gpu{i}@%h"],
                         {**env, "CUDA_VISIBLE_DEVICES": gpu, "OPDWEB_WORKER_DEVICE": "cuda:0"}))
    if not gpus and "jobs" in parts:
        commands.append(("gpu worker (on the CPU)", celery + ["-Q", "gpu", "--pool", "solo", "-n", "gpu-cpu@%h"],
                         {**env, "OPDWEB_WORKER_DEVICE": "cpu"}))
    if "jobs" in parts:
        commands.append(("cpu worker", celery + ["-Q", "cpu", "--pool", "solo", "-n", "cpu@%h"],
                         {**env, "OPDWEB_WORKER_DEVICE": "cpu"}))
    if "control" not in parts:
        return commands
    commands.append(("control worker", celery + ["-Q", "control", "--pool", "threads", "--concurrency", "2", "-B",
                                                 "--schedule", str(data_dir() / "celerybeat-schedule"),
                                                 "-n", "control@%h"],
                     {**env, "OPDWEB_WORKER_DEVICE": "cpu"}))
    return commands


def manage(*args: str, env: dict) -> None:
    subprocess.run([sys.executable, str(ROOT / "manage.py"), *args], env=env, check=True, cwd=ROOT)


def start_real_model_import(var: Path, env: dict) -> subprocess.Popen | None:
    """SmolLM2-135M-Instruct from the GGUF the product ships, imported as a checkpoint folder
    under the model roots in the background (about 30-45 s, first start only), so the first
    page does not wait for it; None when it is there already."""
    from workers.science.packaged import SMOLLM2_FOLDER

    out = var / "models" / SMOLLM2_FOLDER
    if out.is_dir():
        return None
    print("opdweb: importing SmolLM2-135M-Instruct in the background (first start only); it is registered "
          "in team demo when done", flush=True)
    with open(var / "import-smollm2.log", "w") as log:  # the child holds its own copy of the file
        return subprocess.Popen([sys.executable, "-m", "workers", "import-gguf", "--packaged", "smollm2",
                                 "--out", str(out)], env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=log)


def finish_real_model_import(importing: subprocess.Popen, var: Path, env: dict) -> None:
    """Register the imported model in the demo team, or say why it was not imported (the
    demo runs on without it; the import's log is ``var/import-smollm2.log``)."""
    if importing.returncode != 0:
        lines = (var / "import-smollm2.log").read_text(errors="replace").strip().splitlines()
        print(f"opdweb: the real model was not imported: {lines[-1] if lines else importing.returncode}",
              file=sys.stderr, flush=True)
        return
    try:
        manage("register_demo_models", "--team", "demo", env=env)
    except subprocess.CalledProcessError as exc:  # the product serves on; the model page says what is registered
        print(f"opdweb: the real model was imported but not registered (exit {exc.returncode})", file=sys.stderr,
              flush=True)


def run(args) -> int:
    var = data_dir()
    var.mkdir(parents=True, exist_ok=True)
    parts = ROLES[args.role]
    if args.cluster_env:
        os.environ.update(read_env(Path(args.cluster_env)))
    if args.role != "all" and not (os.environ.get("DATABASE_URL") and os.environ.get("REDIS_URL")):
        print(f"opdweb: a {args.role} host of a cluster needs DATABASE_URL and REDIS_URL (and the object store's "
              "S3_ENDPOINT_URL and keys): give --cluster-env with a services host's var/cluster.env, or your own "
              "servers' addresses (docs/deployment.md)", file=sys.stderr)
        return 2
    services = ensure_services(var, object_store=True)
    supervisor = Supervisor([])
    importing: subprocess.Popen | None = None

    def stop(*_):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    try:
        env = {
            **os.environ,
            "DATABASE_URL": services.database_url,
            "REDIS_URL": services.redis_url,
            "SECRET_KEY": os.environ.get("SECRET_KEY") or secret_key(var),
            "OPDWEB_DATA_DIR": str(var),
            "PYTHONUNBUFFERED": "1",
        }
        if services.store_env:  # the embedded store: its keys, and its checkpoints bucket open to configs
            env.update(services.store_env)
            env.setdefault("OPDWEB_CHECKPOINT_URIS", "s3://checkpoints/")
        where = "embedded servers under " + str(var) if services.embedded else "the servers in DATABASE_URL / REDIS_URL"
        print(f"opdweb: using {where}", flush=True)
        if "web" in parts:
            manage("migrate", "--noinput", "-v", "0", env=env)
            manage("collectstatic", "--noinput", "-v", "0", env=env)
            manage("read_checkpoints", "-v", "0", env=env)  # digests of what an upgrade left unread
        demo = args.demo and args.role == "all"  # the demo's models live on this host's disk
        if demo:
            # The toy pair the form's examples point at, before bootstrap_demo registers it:
            # the shipped one, which the builder reuses while its recipe is today's (else it
            # builds it, seconds on first start, then cached).
            toy = var / "toy" / "test"
            if not (toy / "manifest.json").exists() and (SHIPPED_TOY / "manifest.json").is_file():
                shutil.copytree(SHIPPED_TOY, toy, dirs_exist_ok=True)
            subprocess.run([sys.executable, "-m", "workers", "build-toy-models", "--size", "test", "--out",
                            str(toy)], env=env, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
            manage("bootstrap_demo", env=env)
        importing = start_real_model_import(var, env) if demo else None
        host, port = args.host, args.port
        if "web" in parts and reachable(host, port):
            print(f"opdweb: port {port} is taken; set OPDWEB_PORT or pass --port", file=sys.stderr)
            return 1
        web = ("web server",
               [sys.executable, "-m", "opdweb.web_server", "-b", host, "-p", str(port), "opdweb.asgi:application"], env)
        supervisor.children = [Child(name, command, child_env, ROOT) for name, command, child_env
                               in [*([web] if "web" in parts else []), *worker_commands(env, parts)]]
        supervisor.start()
        for child in supervisor.children:
            print(f"opdweb: started {child.name} (pid {child.pid})", flush=True)
        while "web" in parts and not reachable(host, port):  # "up" only once the web server answers
            services.check()
            supervisor.check()
            time.sleep(0.2)
        where = f"http://{host}:{port}/" if "web" in parts else "a worker host"
        print(f"\nopdweb is up: {where}   (Ctrl-C stops everything)\n", flush=True)
        while True:
            services.check()
            supervisor.check()
            if importing is not None and importing.poll() is not None:
                finish_real_model_import(importing, var, env)
                importing = None
            time.sleep(0.5)
    except KeyboardInterrupt:
        print("\nopdweb: stopping", flush=True)
        return 0
    except CrashLoop as exc:
        print(f"opdweb: {exc}; stopping everything", file=sys.stderr, flush=True)
        return 1
    finally:
        if importing is not None and importing.poll() is None:
            importing.terminate()  # its folder is written beside the target and renamed in: no half model
            importing.wait()
        supervisor.stop()
        services.stop()


def serve_cluster(args) -> int:
    """The services host: its servers on ``--listen`` until Ctrl-C or SIGTERM."""
    var = data_dir()

    def stop(*_):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    services = start_cluster_services(var, args.listen, secret_key(var))
    try:
        print(f"opdweb: services listening on {args.listen}; the other hosts' environment is in "
              f"{var / 'cluster.env'}", flush=True)
        while True:
            services.check()
            time.sleep(0.5)
    except KeyboardInterrupt:
        print("\nopdweb: stopping", flush=True)
        return 0
    except CrashLoop as exc:
        print(f"opdweb: {exc}; stopping everything", file=sys.stderr, flush=True)
        return 1
    finally:
        services.stop()


def with_services(command: list[str]) -> int:
    """Run ``command`` with DATABASE_URL / REDIS_URL pointing at real servers: those given,
    else those running on the standard loopback ports, else embedded ones."""
    var = data_dir()
    var.mkdir(parents=True, exist_ok=True)
    services = ensure_services(var, prefer_local=True)
    try:
        env = {
            **os.environ,
            "DATABASE_URL": services.database_url,
            "REDIS_URL": services.redis_url,
            "SECRET_KEY": os.environ.get("SECRET_KEY", "test-only-secret"),
            "OPDWEB_DATA_DIR": str(var),
        }
        where = "embedded servers" if services.embedded else f"{services.database_url} and {services.redis_url}"
        print(f"opdweb: running against {where}", flush=True)
        proc = subprocess.Popen(command, env=env, cwd=ROOT)
        try:
            while proc.poll() is None:  # the embedded servers stay up while it runs
                services.check()
                time.sleep(0.5)
        except BaseException:
            proc.terminate()
            proc.wait()
            raise
        return proc.returncode
    finally:
        services.stop()


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    # `test` and `exec` pass everything after them through untouched (pytest flags too).
    if argv and argv[0] == "test":
        return with_services([sys.executable, "-m", "pytest", *argv[1:]])
    if argv and argv[0] == "exec":
        rest = argv[1:][1:] if argv[1:2] == ["--"] else argv[1:]
        if not rest:
            print("usage: python -m opdweb.launcher exec [--] COMMAND ...", file=sys.stderr)
            return 2
        return with_services(rest)
    parser = argparse.ArgumentParser(prog="python -m opdweb.launcher",
                                     epilog="also: test [PYTEST ARGS], exec [--] COMMAND")
    sub = parser.add_subparsers(dest="command", required=True)
    p_run = sub.add_parser("run", help="services, migrations, web server and workers")
    p_run.add_argument("--host", default=os.environ.get("OPDWEB_HOST", "127.0.0.1"))
    p_run.add_argument("--port", type=int, default=int(os.environ.get("OPDWEB_PORT", "8000")))
    p_run.add_argument("--no-demo", dest="demo", action="store_false",
                       help="skip the demo team, admin user and toy models (production hosts)")
    p_run.add_argument("--role", choices=sorted(ROLES), default=os.environ.get("OPDWEB_ROLE", "all"),
                       help="all: the whole product on this host; web: migrations, the web server and the control "
                            "worker; worker: this host's job workers (docs/deployment.md)")
    p_run.add_argument("--cluster-env", default=os.environ.get("OPDWEB_CLUSTER_ENV"),
                       help="a services host's var/cluster.env: the servers and keys of the cluster")
    p_services = sub.add_parser("services", help="a cluster's services host: PostgreSQL, Redis and the object "
                                                 "store, listening on --listen")
    p_services.add_argument("--listen", required=True, help="the address the other hosts reach this one at")
    args = parser.parse_args(argv)
    return run(args) if args.command == "run" else serve_cluster(args)


if __name__ == "__main__":
    raise SystemExit(main())
