// Compare page: each shared trace key on one chart, one line per job (the downsampled
// series' last value per bucket; the page links each job for its min/max detail).
(function () {
  "use strict";
  const root = document.getElementById("compare");
  if (!root) return;
  const ids = root.dataset.ids.split(",");

  // Each job's batched reads of the shared series it has, laid out by the view: {job id: [url, ...]}.
  const reads = JSON.parse(document.getElementById("compare-reads").textContent);
  // A legend names each job by its id and name (its kind where it has none), not by its id alone.
  const names = JSON.parse(document.getElementById("compare-names").textContent);

  async function linesOf(jobId) {
    const lines = {};
    for (const url of reads[jobId] || []) {
      const response = await fetch(url);
      if (!response.ok) continue;
      for (const read of (await response.json()).series) {
        const x = read.buckets.map(b => b[4]);
        lines[read.key] = { x: x, y: read.buckets.map(b => Number(b[5])), name: names[jobId] || `#${jobId}`,
                            mode: x.length > 1 ? "lines" : "markers" };
      }
    }
    return lines;
  }

  async function drawAll() {
    const byJob = await Promise.all(ids.map(linesOf));
    document.querySelectorAll(".compare-chart").forEach(div => {
      const lines = byJob.map(lines => lines[div.dataset.key]).filter(Boolean);  // a job may lack the key
      Plotly.newPlot(div, lines, {
        title: { text: div.dataset.key }, height: 280, margin: { t: 40, r: 10, b: 40, l: 60 },
        xaxis: { title: { text: "step" } },
      }, { responsive: true, displaylogo: false });
    });
  }

  drawAll();
})();
