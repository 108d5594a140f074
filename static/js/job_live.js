// Live job page: draws each trace key from the downsampled API, then follows the job's
// websocket. On (re)connect it sends the last step it holds per key and receives the
// rest from the database first, so a dropped connection loses nothing.
(function () {
  "use strict";
  const root = document.getElementById("job");
  if (!root) return;
  const jobId = root.dataset.jobId;
  const charts = document.getElementById("charts");
  const lastStep = {};      // key -> last step drawn
  const divs = {};          // key -> chart div
  const pending = {};       // key -> {x: [], y: []} not yet drawn
  let drawScheduled = false;
  let socket = null;
  let retry = 500;

  function setState(job) {
    const el = document.getElementById("job-state");
    el.textContent = job.state;
    el.className = "state " + job.state;
    document.getElementById("job-progress").value = job.progress;
    document.getElementById("job-message").textContent = job.message || "";
    const err = document.getElementById("job-error");
    if (job.error) { err.hidden = false; err.textContent = job.error; }
    const terminal = ["succeeded", "failed", "cancelled"].includes(job.state);
    if (terminal) {
      const cancel = document.getElementById("cancel");
      if (cancel) cancel.disabled = true;
      // The job ended while the page was open: show its result and log as rendered.
      if (root.dataset.terminal !== "1") { root.dataset.terminal = "1"; location.reload(); }
    }
    root.dataset.state = job.state;
  }

  function chartFor(key) {
    if (divs[key]) return divs[key];
    const div = document.createElement("div");
    div.className = "chart";
    div.dataset.key = key;
    charts.appendChild(div);
    Plotly.newPlot(div, [
      { x: [], y: [], name: "max", mode: "lines", line: { width: 0 }, hoverinfo: "skip", showlegend: false },
      { x: [], y: [], name: "min–max", mode: "lines", fill: "tonexty", line: { width: 0 }, fillcolor: "rgba(31,119,180,0.2)", hoverinfo: "skip" },
      { x: [], y: [], name: key, mode: "lines+markers", marker: { size: 4 }, line: { color: "#1f77b4" } },
    ], { title: { text: key }, margin: { t: 40, r: 10, b: 40, l: 60 }, height: 280, xaxis: { title: { text: "step" } } },
    { responsive: true, displaylogo: false });
    divs[key] = div;
    return div;
  }

  async function loadHistory() {
    const series = await (await fetch(`/api/jobs/${jobId}/series`)).json();
    for (const s of series) {
      const params = new URLSearchParams({ key: s.key, buckets: "1000" });
      const data = await (await fetch(`/api/jobs/${jobId}/series/downsampled?${params}`)).json();
      const b = data.buckets;
      const div = chartFor(s.key);
      Plotly.update(div, {
        x: [b.map(r => r[4]), b.map(r => r[4]), b.map(r => r[4])],
        y: [b.map(r => r[3]), b.map(r => r[2]), b.map(r => r[5])],
      });
      lastStep[s.key] = s.last_step;
    }
    root.dataset.points = JSON.stringify(lastStep);
  }

  function queuePoints(points) {
    for (const [key, step, , value] of points) {
      if (lastStep[key] !== undefined && step <= lastStep[key]) continue;
      lastStep[key] = step;
      (pending[key] = pending[key] || { x: [], y: [] });
      pending[key].x.push(step);
      pending[key].y.push(value);
    }
    if (!drawScheduled) { drawScheduled = true; requestAnimationFrame(draw); }
  }

  function draw() {
    drawScheduled = false;
    for (const key of Object.keys(pending)) {
      const p = pending[key];
      delete pending[key];
      const div = chartFor(key);
      Plotly.extendTraces(div, { x: [p.x, p.x, p.x], y: [p.y, p.y, p.y] }, [0, 1, 2], 20000);
    }
    root.dataset.points = JSON.stringify(lastStep);
  }

  function connect() {
    const scheme = location.protocol === "https:" ? "wss" : "ws";
    socket = new WebSocket(`${scheme}://${location.host}/ws/jobs/${jobId}/`);
    const status = document.getElementById("live-status");
    socket.onopen = () => {
      retry = 500;
      status.textContent = "live";
      socket.send(JSON.stringify({ type: "resume", after: lastStep }));
    };
    socket.onmessage = (event) => {
      const msg = JSON.parse(event.data);
      if (msg.type === "points") {
        queuePoints(msg.points);
        socket.send(JSON.stringify({ type: "ack", seq: msg.seq }));
      }
      else if (msg.type === "state") setState(msg.job);
      else if (msg.type === "replayed") root.dataset.replayed = "1";
      else if (msg.type === "error") status.textContent = msg.message;
    };
    socket.onclose = (event) => {
      // Refused (not logged in, no access, access ended): do not hammer the server.  A client
      // closed for falling behind (4408) reconnects and resumes from the database.
      if (event.code >= 4400 && event.code !== 4408) return;
      status.textContent = "reconnecting…";
      setTimeout(connect, retry);
      retry = Math.min(retry * 2, 10000);
    };
  }

  loadHistory().then(connect, () => connect());
})();
