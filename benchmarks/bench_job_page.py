"""Time to first chart on a job page with 10 keys x 100,000 points, in Chromium driven by
Playwright, against daphne serving the app as the launcher does (collectstatic, WhiteNoise).

    python -m opdweb.launcher exec -- .venv/bin/python benchmarks/bench_job_page.py

Each repetition starts a browser with a fresh profile on disk, as a user's browser keeps
one, and opens the page in a new tab several times.  Cold: the first visit (empty caches).
Second visit: static files from the HTTP cache; V8 compiles plotly again, but keeps its code
cache from now on.  Returning (the third visit and later, as a user who opens job pages
every day): static files and their compiled code from the profile's caches; the API is asked
again every time.  Per load: ms from the start of navigation until the first chart has drawn
its lines, until all charts have, and the bytes received (bodies as sent, compressed where
they were, plus headers).  Goals: first chart <= 500 ms warm, <= 1.5 s cold.
"""
from __future__ import annotations

import argparse
import tempfile
import time

import figures
import numpy as np
from harness import bench_database, daphne, load, make_job, percentile, team_and_user

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking", "--disable-sync"]
# Predicates are functions, never bare expressions: Playwright evaluates an expression with
# eval, which the page's CSP (no 'unsafe-eval') refuses.
FIRST_CHART = "() => document.querySelector('#charts .chart .scatterlayer .trace path.js-line')"


def ingest(team, keys: int, steps: int):
    from opdweb.traces.sink import TraceSink

    job = make_job(team, f"{keys} keys x {steps:,}", state="succeeded")
    rng = np.random.default_rng(0)
    sink = TraceSink(job.pk)
    for k in range(keys):
        values = np.cumsum(rng.normal(0, 0.01, steps)) + 1.0
        sink.add_many(f"train/metric_{k}", range(steps), values.tolist(), (1.7e9 + np.arange(steps)).tolist())
    sink.close()
    return job


# Where a load's time went, from the page's own timings (ms from the start of navigation):
# the HTML received, the deferred scripts run (plotly included), the first chart read
# (asked, its first byte, received), and the first chart's Plotly.newPlot (its start and
# its length).
BREAKDOWN = """() => {
  const nav = performance.getEntriesByType("navigation")[0];
  const reads = performance.getEntriesByType("resource").filter(e => e.name.includes("/series/"));
  const plot = performance.getEntriesByName("charts:first-plot")[0];
  const first = reads.length ? reads.reduce((a, b) => (b.responseEnd < a.responseEnd ? b : a)) : null;
  return { html: nav.responseEnd, scripts: nav.domContentLoadedEventStart,
           read_asked: first ? first.startTime : NaN, read_first_byte: first ? first.responseStart : NaN,
           read: first ? first.responseEnd : NaN,
           plot_start: plot ? plot.startTime : NaN, plot: plot ? plot.duration : NaN };
}"""
STAGES = ("html", "scripts", "read_asked", "read_first_byte", "read", "plot_start", "plot")


def measure(page, url: str, keys: int) -> tuple[float, float, int, dict]:
    """One load: (ms to the first chart's lines, ms to every chart's, bytes received, where
    the time went)."""
    received = []
    page.on("requestfinished", lambda request: received.append(request.sizes()))
    page.goto(url, wait_until="commit")
    page.wait_for_function(FIRST_CHART, polling="raf", timeout=60_000)
    first = page.evaluate("performance.now()")
    stages = page.evaluate(BREAKDOWN)
    page.wait_for_function(f"() => Array.from(document.querySelectorAll('#charts .chart'))"
                           f".filter(d => d.querySelector('.scatterlayer path.js-line')).length >= {keys}",
                           polling="raf", timeout=60_000)
    every = page.evaluate("performance.now()")
    page.wait_for_load_state("networkidle")
    size = sum(s["responseBodySize"] + s["responseHeadersSize"] for s in received)
    return first, every, size, stages


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--keys", type=int, default=10)
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--returning", type=int, default=3, help="visits after the second, per repetition")
    parser.add_argument("--database", default="opdweb_bench")
    parser.add_argument("--record", action="store_true", help="store the README row (docs/benchmarks/figures.json)")
    args = parser.parse_args()
    from django.core.management import call_command
    from playwright.sync_api import sync_playwright

    call_command("collectstatic", "--noinput", verbosity=0)
    with bench_database(args.database):
        team, user, cookie = team_and_user()
        t = time.perf_counter()
        job = ingest(team, args.keys, args.steps)
        print(f"ingested {args.keys} keys x {args.steps:,} points in {time.perf_counter() - t:.1f} s", flush=True)
        name, value = cookie.split("=", 1)
        with daphne() as host, sync_playwright() as p:
            url = f"http://{host}/jobs/{job.pk}/"
            results = {"cold": [], "second visit": [], "returning": []}
            for _ in range(args.reps):
                with tempfile.TemporaryDirectory() as profile:
                    context = p.chromium.launch_persistent_context(
                        profile, executable_path=CHROMIUM, args=ARGS, headless=True,
                        viewport={"width": 1280, "height": 900})
                    context.add_cookies([{"name": name, "value": value, "domain": "127.0.0.1", "path": "/"}])
                    for visit in range(2 + args.returning):
                        page = context.new_page()
                        kind = "cold" if visit == 0 else "second visit" if visit == 1 else "returning"
                        results[kind].append(measure(page, url, args.keys))
                        page.close()
                    context.close()
        print(f"\nJob page, {args.keys} keys x {args.steps:,} points, Chromium headless, {args.reps} fresh profiles:")
        print(f"  {'':12s} {'loads':>5s} {'first chart p50':>16s} {'p95':>8s} "
              f"{'all charts p50':>15s} {'p95':>8s}  bytes received")
        for kind, rows in results.items():
            first, every, size, _ = zip(*rows, strict=True)
            print(f"  {kind:12s} {len(rows):5d} {percentile(first, 50):13.0f} ms {percentile(first, 95):5.0f} ms "
                  f"{percentile(every, 50):12.0f} ms "
                  f"{percentile(every, 95):5.0f} ms  {min(size):,}-{max(size):,}")
        print("\n  Where the first chart's time went, p50 of ms from the start of navigation: HTML received, deferred "
              "scripts run (plotly), first read asked / first byte / received, first newPlot started, and its length:")
        print(f"  {'':12s} " + " ".join(f"{name:>15s}" for name in STAGES))
        for kind, rows in results.items():
            print(f"  {kind:12s} " + " ".join(f"{percentile([r[3][name] for r in rows], 50):15.0f}" for name in STAGES))
        print(f"  (load average at the end: {load()})")
    if args.record:
        def first_chart(kind: str) -> float:
            return percentile([row[0] for row in results[kind]], 95)

        figures.record([{
            "id": "job-page", "page": "docs/benchmarks/pages.md", "page_title": "pages",
            "what": f"job page of {args.keys} keys × {args.steps:,} points in Chromium, first chart drawn, "
                    f"{args.reps} fresh profiles: cold / returning",
            "latest": f"p95 {first_chart('cold'):,.0f} ms / {first_chart('returning'):,.0f} ms",
            "goal": "≤ 1.5 s / ≤ 500 ms"}])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
