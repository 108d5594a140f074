"""Plotly figures saved as a PNG picture for the docs: drawn with the plotly the product
ships (``static/vendor``), in Debian's Chromium driven by Playwright, one figure under the
other."""
from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PLOTLY = ROOT / "static" / "vendor" / "plotly-cartesian.min.js"
CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking", "--disable-sync"]


def render_png(figures: list[tuple[list, dict]], path: Path, width: int = 900) -> None:
    """``figures`` ([(traces, layout)], each layout with its ``height``) drawn static, stacked, to ``path``."""
    from playwright.sync_api import sync_playwright

    divs = "".join(f'<div id="f{i}"></div>' for i in range(len(figures)))
    calls = ",".join(f'Plotly.newPlot("f{i}", {json.dumps(traces)}, {json.dumps({"width": width, **layout})}, '
                     "{staticPlot: true})" for i, (traces, layout) in enumerate(figures))
    html = (f"<!doctype html><html><head><script>{PLOTLY.read_text()}</script></head>"
            f"<body style='margin:0;background:white'>{divs}<script>Promise.all([{calls}])"
            ".then(() => document.title = 'done');</script></body></html>")
    height = sum(int(layout["height"]) for _, layout in figures)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        page = browser.new_page(viewport={"width": width, "height": height})
        page.set_content(html)
        page.wait_for_function("document.title === 'done'")
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(path), full_page=True)
        browser.close()
