"""``opdweb``: log in, submit a job, read its state, wait for it, export its points.

Exit status: 0 done (``wait``: the job succeeded), 1 the job failed or was cancelled,
2 the command could not be done (no credentials, a refused token, bad input, no server):
one line saying why on stderr, never a traceback."""
from __future__ import annotations

import argparse
import getpass
import json
import os
import sys
from pathlib import Path
from typing import Any

from opdweb_client.credentials import Credentials, load_credentials, save_credentials
from opdweb_client.jobs import Client
from opdweb_client.transport import OpdwebError

EXIT_JOB_FAILED = 1
EXIT_USAGE = 2


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return int(args.command(args) or 0)
    except OpdwebError as exc:
        print(f"opdweb: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="opdweb", description="opdweb's client. Credentials: OPDWEB_URL and "
                                  "OPDWEB_TOKEN, else what 'opdweb login' saved.")
    sub = top.add_subparsers(required=True, metavar="command")

    login = sub.add_parser("login", help="check a token against a server and save both (file mode 0600)")
    login.add_argument("url", nargs="?", help="the server, e.g. https://opd.example.com (default: OPDWEB_URL)")
    login.add_argument("--token", help="the API token (default: OPDWEB_TOKEN, else asked for)")
    login.set_defaults(command=do_login)

    submit = sub.add_parser("submit", help="submit a job; prints its id")
    submit.add_argument("kind", help="the job kind (GET /api/kinds lists them), e.g. selftest")
    submit.add_argument("--config", default="{}", help="the config as JSON, or @FILE holding it")
    submit.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="one config field (dots for nesting; VALUE read as JSON, else as text)")
    submit.add_argument("--name", default="")
    submit.add_argument("--team", help="team slug (a token's own team by default)")
    submit.add_argument("--json", action="store_true", help="print the job as JSON")
    submit.set_defaults(command=do_submit)

    status = sub.add_parser("status", help="a job's state")
    status.add_argument("job", type=int)
    status.add_argument("--json", action="store_true", help="the job as JSON")
    status.set_defaults(command=do_status)

    wait = sub.add_parser("wait", help="wait for a job to end; exit 0 if it succeeded, 1 if not")
    wait.add_argument("job", type=int)
    wait.add_argument("--timeout", type=float, help="give up after this many seconds (exit 2)")
    wait.add_argument("--interval", type=float, default=1.0, help="seconds between polls")
    wait.add_argument("--quiet", action="store_true", help="print only the end")
    wait.set_defaults(command=do_wait)

    export = sub.add_parser("export", help="every point of a job, as CSV or JSON lines")
    export.add_argument("job", type=int)
    export.add_argument("--format", choices=("csv", "jsonl"), default="csv")
    export.add_argument("--key", action="append", default=[], help="only this key (repeatable)")
    export.add_argument("-o", "--output", help="a file (default: stdout)")
    export.set_defaults(command=do_export)
    return top


def do_login(args) -> int:
    url = args.url or os.environ.get("OPDWEB_URL")
    if not url:
        raise OpdwebError("name the server: 'opdweb login https://opd.example.com' (or set OPDWEB_URL)")
    if not url.startswith(("http://", "https://")):
        raise OpdwebError(f"{url!r} is not an http(s) URL")
    token = args.token or os.environ.get("OPDWEB_TOKEN")
    if not token:
        token = (getpass.getpass("API token (made on the server's /tokens/ page): ") if sys.stdin.isatty()
                 else sys.stdin.readline()).strip()
    if not token:
        raise OpdwebError("no token given")
    credentials = Credentials(url=url.rstrip("/"), token=token)
    Client(credentials).check()  # a refused token is not saved
    path = save_credentials(credentials)
    print(f"logged in to {credentials.url}; credentials saved in {path}")
    return 0


def do_submit(args) -> int:
    config = _config(args.config)
    for item in args.set:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise OpdwebError(f"--set {item!r}: write KEY=VALUE")
        try:
            value: Any = json.loads(raw)
        except ValueError:
            value = raw
        *parents, leaf = key.split(".")
        node = config
        for part in parents:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise OpdwebError(f"--set {item!r}: {part!r} is not an object in the config")
        node[leaf] = value
    job = _client().submit(args.kind, config, name=args.name, team=args.team)
    print(json.dumps(job, indent=2) if args.json else job["id"])
    return 0


def do_status(args) -> int:
    job = _client().job(args.job)
    print(json.dumps(job, indent=2) if args.json else _line(job))
    return 0


def do_wait(args) -> int:
    on_change = None if args.quiet else (lambda job: print(_line(job), file=sys.stderr, flush=True))
    job = _client().wait(args.job, timeout=args.timeout, interval=args.interval, on_change=on_change)
    print(_line(job))
    return 0 if job["state"] == "succeeded" else EXIT_JOB_FAILED


def do_export(args) -> int:
    client = _client()
    if args.output:
        with open(args.output, "wb") as out:
            client.export(args.job, out, args.format, args.key)
    else:
        client.export(args.job, sys.stdout.buffer, args.format, args.key)
        sys.stdout.buffer.flush()
    return 0


def _client() -> Client:
    return Client(load_credentials())


def _config(text: str) -> dict:
    if text.startswith("@"):
        try:
            text = Path(text[1:]).read_text()
        except OSError as exc:
            raise OpdwebError(f"--config {text}: {exc.strerror}") from None
    try:
        config = json.loads(text)
    except ValueError as exc:
        raise OpdwebError(f"--config is not JSON: {exc}") from None
    if not isinstance(config, dict):
        raise OpdwebError("--config must be a JSON object")
    return config


def _line(job: dict) -> str:
    line = f"job #{job['id']} {job['kind']} {job['state']} {round(100 * float(job.get('progress') or 0))}%"
    if job.get("message"):
        line += f" {job['message']}"
    if job.get("error"):
        line += f" (error: {job['error']})"
    return line
