"""The per-module sensitivity map as a picture: for each model, the multiple of each decoder
linear and KV cache kept alone in FP8, on a layer x module grid, side by side.  The grid is
the job page's own (``opdweb.jobs.result_charts.module_heatmap``), drawn with the plotly the
product ships, in Debian's Chromium (Playwright), and saved as PNG:

    python benchmarks/sensitivity_heatmap.py --out docs/benchmarks/sensitivity-map.png \\
        smollm2=var/bench-real-model/smollm2-module.json gemma3=var/bench-real-model/gemma3.json

Each input is ``bench_real_model.py``'s result file (its model's module scan is drawn) or a
``python -m workers sensitivity --granularity module --json`` report.  The colour scale is
log10 of the multiple, shared by every panel, so the models compare cell for cell.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from plotly_png import render_png

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def module_scan(path: Path, name: str) -> dict:
    """The module scan's ranking in ``path``, and its settings."""
    data = json.loads(path.read_text())
    if "models" in data:  # bench_real_model.py's file: its model's module scan
        entry = data["models"][name].get("sensitivity_module") or {}
        if not entry.get("ranking"):
            raise SystemExit(f"{path}: no module scan of {name} ({entry.get('error') or 'not run'})")
        args = data["args"]
        return {"ranking": entry["ranking"], "multiple": entry.get("multiple"),
                "sample": f"{args['prompts']} x {args['max_new_tokens']}", "wall_s": entry.get("wall_s")}
    return {"ranking": data["ranking"], "multiple": data.get("multiple"), "sample": "", "wall_s": None}


def panels(inputs: list[str]) -> list[dict]:
    from opdweb.jobs.result_charts import module_heatmap
    from workers.science.results import SensitivityRow

    out = []
    for spec in inputs:
        name, _, file = spec.partition("=")
        scan = module_scan(Path(file), name)
        grid = module_heatmap([SensitivityRow.model_validate(row) for row in scan["ranking"]])
        log_z = [[None if v is None or v <= 0 else math.log10(v) for v in row] for row in grid["z"]]
        whole = f"; the whole config {scan['multiple']:.3g}x" if scan["multiple"] else ""
        sample = f"; {scan['sample']} per measurement" if scan["sample"] else ""
        out.append({"title": f"{name}: each part alone in FP8, multiple of the BF16 unit{whole}{sample}",
                    "layers": grid["layers"], "modules": grid["modules"], "z": grid["z"], "log_z": log_z})
    return out


def figures(data: list[dict]) -> list[tuple[list, dict]]:
    """One heat map per model on one log10 colour scale."""
    finite = [v for p in data for row in p["log_z"] for v in row if v is not None]
    low, high = min(finite), max(finite)
    ticks = [t for t in (0, 0.5, 1, 1.5, 2, 2.5, 3) if low - 0.25 <= t <= high + 0.25]
    colorbar = {"title": {"text": "multiple"}, "tickvals": ticks, "ticktext": [f"{10 ** t:.3g}x" for t in ticks]}
    return [([{"type": "heatmap", "x": p["layers"], "y": p["modules"], "z": p["log_z"], "zmin": low, "zmax": high,
               "colorscale": "YlOrRd", "reversescale": True, "colorbar": colorbar}],
             {"title": {"text": p["title"]}, "height": 140 + 26 * len(p["modules"]),
              "margin": {"t": 40, "r": 10, "b": 40, "l": 170}, "xaxis": {"title": {"text": "layer"}, "dtick": 1}})
            for p in data]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("inputs", nargs="+", metavar="NAME=FILE")
    parser.add_argument("--out", default="var/bench-real-model/sensitivity-map.png")
    args = parser.parse_args()
    data = panels(args.inputs)
    render_png(figures(data), Path(args.out), width=1200)
    for p in data:
        cells = sorted(((v, f"layer {layer} {m}") for m, row in zip(p["modules"], p["z"], strict=True)
                        for layer, v in zip(p["layers"], row, strict=True) if v is not None), reverse=True)
        print(f"{p['title']}: top {', '.join(f'{u} {v:.3g}x' for v, u in cells[:5])}")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
