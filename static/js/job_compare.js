// Compare page: each shared trace key on one chart, one line per job (the downsampled
// series' last value per bucket; the page links each job for its min/max detail).
(function () {
  "use strict";
  const root = document.getElementById("compare");
  if (!root) return;
  const ids = root.dataset.ids.split(",");

  async function series(jobId, key) {
    const params = new URLSearchParams({ key: key, buckets: "1000" });
    const response = await fetch(`/api/jobs/${jobId}/series/downsampled?${params}`);
    if (!response.ok) return null;  // this job lacks the key
    const buckets = (await response.json()).buckets;
    const x = buckets.map(b => b[4]);
    return { x: x, y: buckets.map(b => b[5]), name: `#${jobId}`, mode: x.length > 1 ? "lines" : "markers" };
  }

  async function draw(div) {
    const lines = (await Promise.all(ids.map(id => series(id, div.dataset.key)))).filter(Boolean);
    Plotly.newPlot(div, lines, {
      title: { text: div.dataset.key }, height: 280, margin: { t: 40, r: 10, b: 40, l: 60 },
      xaxis: { title: { text: "step" } },
    }, { responsive: true, displaylogo: false });
  }

  document.querySelectorAll(".compare-chart").forEach(draw);
})();
