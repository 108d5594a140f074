"""Live latency end to end, as a user sees it.

    python -m opdweb.launcher exec -- .venv/bin/python benchmarks/bench_live.py

For each rate (points per second): a separate process logs one key through the real
path, ``JobReporter.log`` into a ``TraceSink`` made exactly as the runner makes it
(writer thread, PostgreSQL, ``live.publish`` over the Redis channel layer); a websocket
client on a real daphne, logged in, follows the job.  A point's latency is the time
from the ``log`` call (its wall time, stamped by the sink) to the client having decoded
the message that carries it.  Same machine, same clock.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time

import figures
from harness import ROOT, bench_database, child_env, daphne, load, make_job, percentile, team_and_user


def produce(job_id: int, rate: float, seconds: float) -> None:
    """The separate process: log ``rate`` points per second for ``seconds``."""
    from opdweb.jobs import live
    from opdweb.jobs.models import Job
    from opdweb.jobs.runner import JobReporter
    from opdweb.traces.sink import TraceSink

    job = Job.objects.get(pk=job_id)
    sink = TraceSink(job.pk, publish=lambda messages: live.publish(job.pk, messages))  # as in run_job
    reporter = JobReporter(job, sink)
    n = int(rate * seconds)
    start = time.monotonic()
    for step in range(n):
        delay = start + step / rate - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        reporter.log(step, {"bench/live": float(step)})
    sink.close()


async def follow(host: str, cookie: str, job_id: int, rate: float, seconds: float) -> list[float]:
    import websockets

    n = int(rate * seconds)
    latencies: list[float] = []
    headers = {"Cookie": cookie, "Origin": "http://127.0.0.1"}
    async with websockets.connect(f"ws://{host}/ws/jobs/{job_id}/", additional_headers=headers, max_size=None) as ws:
        await ws.send(json.dumps({"type": "resume", "after": {}}))
        while json.loads(await asyncio.wait_for(ws.recv(), 30))["type"] != "replayed":
            pass
        producer = await asyncio.create_subprocess_exec(
            sys.executable, __file__, "--produce", str(job_id), str(rate), str(seconds), env=child_env(), cwd=ROOT)
        try:
            while len(latencies) < n:
                msg = json.loads(await asyncio.wait_for(ws.recv(), seconds + 60))
                if msg["type"] == "points":
                    now = time.time()
                    latencies.extend(now - p[2] for p in msg["points"])
                    await ws.send(json.dumps({"type": "ack", "seq": msg["seq"]}))  # as the page does
        finally:
            await asyncio.wait_for(producer.wait(), 60)
    return [x * 1000 for x in latencies]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rates", default="1,10,100,1000", help="points per second, comma separated")
    parser.add_argument("--seconds", default="30,15,10,10", help="duration per rate (one value, or one per rate)")
    parser.add_argument("--database", default="opdweb_bench")
    parser.add_argument("--produce", nargs=3, metavar=("JOB", "RATE", "SECONDS"), help=argparse.SUPPRESS)
    parser.add_argument("--record", action="store_true",
                        help="store the README row, for the highest rate (docs/benchmarks/figures.json)")
    args = parser.parse_args()
    if args.produce:
        produce(int(args.produce[0]), float(args.produce[1]), float(args.produce[2]))
        return 0
    rates = [float(r) for r in args.rates.split(",")]
    seconds = [float(s) for s in args.seconds.split(",")]
    seconds = seconds * len(rates) if len(seconds) == 1 else seconds
    with bench_database(args.database):
        team, _, cookie = team_and_user()
        with daphne() as host:
            print("\nLive latency, log() in a separate process -> websocket client on daphne:")
            by_rate = {}
            for rate, duration in zip(rates, seconds, strict=False):
                job = make_job(team, f"live {rate:g}/s")
                ms = by_rate[rate] = asyncio.run(follow(host, cookie, job.pk, rate, duration))
                print(f"  {rate:6g} points/s, {len(ms):6,} points: p50 {percentile(ms, 50):6.1f} ms  "
                      f"p95 {percentile(ms, 95):6.1f} ms  max {max(ms):6.1f} ms", flush=True)
            print(f"  (load average at the end: {load()})")
    if args.record:
        rate = max(by_rate)
        ms = by_rate[rate]
        figures.record([{
            "id": "live-latency", "page": "docs/benchmarks/traces.md", "page_title": "traces",
            "what": f"live latency, log call in a worker process → websocket client on daphne, {rate:,g} points/s",
            "latest": f"p95 {percentile(ms, 95):.1f} ms (p50 {percentile(ms, 50):.1f} ms, {len(ms):,} points)",
            "goal": "≤ 100 ms"}])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
