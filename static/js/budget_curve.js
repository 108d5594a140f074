// The budget page's chart: held-out accuracy against the measured multiple (log x), the
// seeds of every level, the tolerance band under the BF16 baseline, the budget line and
// every admission check placed at its multiple, coloured by verdict.
(function () {
  const data = JSON.parse(document.getElementById("budget-data").textContent);
  const pct = (x) => 100 * x;
  const base = data.baseline;
  const rows = data.curve;
  const seedsX = [], seedsY = [];
  for (const r of rows) for (const a of r.accuracies) { seedsX.push(r.multiple); seedsY.push(pct(a)); }
  for (const a of base.accuracies || []) { seedsX.push(1); seedsY.push(pct(a)); }
  // The BF16 baseline (x = 1) and the band under it, where the budget records them.
  const hasBase = Number.isFinite(base.mean);
  const xs = (hasBase ? [1] : []).concat(rows.map((r) => r.multiple));
  const shown = xs.concat(data.checks.map((c) => c.multiple || 1), data.budget ? [data.budget] : []);
  const lo = shown.length ? Math.min(...shown) / 2 : 0.5, hi = shown.length ? Math.max(...shown) * 2 : 100;
  const traces = [
    { x: seedsX, y: seedsY, mode: "markers", name: "seeds", marker: { color: "rgba(25,113,194,0.35)", size: 7 } },
    { x: xs, y: (hasBase ? [pct(base.mean)] : []).concat(rows.map((r) => pct(r.accuracy_mean))), mode: "lines+markers",
      name: "mean", error_y: { type: "data", visible: true,
                               array: (hasBase ? [pct(base.sd || 0)] : []).concat(rows.map((r) => pct(r.accuracy_sd))) },
      line: { color: "#1971c2" } },
  ];
  const colours = { pass: "#2f9e44", inconclusive: "#f08c00", not_shown_safe: "#9c36b5", fail: "#e03131" };
  const floor = Math.min(...seedsY) - 2;
  for (const verdict of Object.keys(colours)) {
    const cs = data.checks.filter((c) => c.verdict === verdict && c.multiple);
    if (!cs.length) continue;
    traces.push({ x: cs.map((c) => c.multiple), y: cs.map(() => floor), mode: "markers",
      name: `admission: ${verdict.replaceAll("_", " ")}`,
      text: cs.map((c) => c.name), marker: { symbol: "diamond", size: 11, color: colours[verdict] },
      error_x: { type: "data", symmetric: false, array: cs.map((c) => (c.ci ? c.ci[1] - c.multiple : 0)),
                 arrayminus: cs.map((c) => (c.ci ? c.multiple - c.ci[0] : 0)), color: colours[verdict] } });
  }
  const shapes = hasBase ? [{ type: "rect", xref: "paper", x0: 0, x1: 1, y0: pct(base.mean) - data.tolerance,
                              y1: pct(base.mean), fillcolor: "rgba(47,158,68,0.12)", line: { width: 0 } }] : [];
  if (data.budget) shapes.push({ type: "line", x0: data.budget, x1: data.budget, yref: "paper", y0: 0, y1: 1,
                                 line: { color: "#2f9e44", dash: data.status === "not_reached" ? "dot" : "solid" } });
  // The paper's criterion (mean drop) on the same curve, and where the shown-harmful zone starts.
  if (data.mean_budget && data.mean_budget !== data.budget)
    shapes.push({ type: "line", x0: data.mean_budget, x1: data.mean_budget, yref: "paper", y0: 0, y1: 1,
                  line: { color: "#2f9e44", dash: "dash" } });
  if (data.harmful) shapes.push({ type: "rect", x0: data.harmful, x1: hi, yref: "paper", y0: 0, y1: 1,
                                  fillcolor: "rgba(224,49,49,0.08)", line: { width: 0 } });
  Plotly.newPlot("budget-curve", traces, {
    margin: { t: 30, r: 20, b: 50, l: 60 }, shapes,
    xaxis: { type: "log", title: { text: "multiple of the BF16 engine's mismatch (measured)" }, range: [Math.log10(lo), Math.log10(hi)] },
    yaxis: { title: { text: "held-out accuracy after equal steps (%)" } },
    title: { text: "accuracy against mismatch; band: tolerance under the BF16 baseline; green: the budget (dashed: the " +
                   "paper's mean-drop criterion); red: shown harmful", font: { size: 13 } },
  }, { displaylogo: false, responsive: true });
})();
