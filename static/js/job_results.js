// A finished job's result drawn: sensitivity ranking (and layer × module heatmap), drift's
// first-divergence histogram and identical-prefix curve.  Data: opdweb/jobs/result_charts.py.
(function () {
  "use strict";
  const source = document.getElementById("result-charts");
  if (!source) return;
  const charts = JSON.parse(source.textContent);
  const config = { responsive: true, displaylogo: false };
  const margin = { t: 40, r: 10, b: 60, l: 70 };

  function plot(id, traces, layout) {
    Plotly.newPlot(document.getElementById(id), traces, { margin, height: 320, ...layout }, config);
  }

  if (charts.kind === "sensitivity") {
    const r = charts.ranking;
    plot("sensitivity-ranking", [{
      type: "bar", x: r.units, y: r.multiples, name: "multiple",
      error_y: { type: "data", symmetric: false, array: r.ci_high.map((h, i) => h === null ? null : h - r.multiples[i]),
                 arrayminus: r.ci_low.map((l, i) => l === null ? null : r.multiples[i] - l) },
    }], { title: { text: "Each unit alone in FP8: multiple of BF16's mismatch (95% CI)" },
          yaxis: { title: { text: "multiple (×)" } } });
    if (charts.heatmap) {
      const h = charts.heatmap;
      plot("sensitivity-heatmap", [{ type: "heatmap", x: h.layers, y: h.modules, z: h.z, colorscale: "YlOrRd", reversescale: true,
                                     colorbar: { title: { text: "×" } } }],
           { title: { text: "Multiple per layer × module" }, xaxis: { title: { text: "layer" }, dtick: 1 },
             height: 120 + 28 * h.modules.length, margin: { ...margin, l: 160 } });
    }
  }
  if (charts.kind === "drift") {
    plot("drift-histogram", [{ type: "bar", x: charts.histogram.positions, y: charts.histogram.counts }],
         { title: { text: "First divergence from BF16" }, xaxis: { title: { text: "token position" } },
           yaxis: { title: { text: "decodes" } } });
    plot("drift-prefix", [{ mode: "lines", x: charts.prefix.lengths, y: charts.prefix.fractions }],
         { title: { text: "Decodes still identical to BF16 after L tokens" }, xaxis: { title: { text: "L (tokens)" } },
           yaxis: { title: { text: "fraction" }, range: [0, 1.02] } });
  }
})();
