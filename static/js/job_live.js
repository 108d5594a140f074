// Live job page: draws each trace key from the downsampled API (charts: job_charts.js),
// then follows the job's websocket. On (re)connect it sends the last step it holds per
// key and receives the rest from the database first, so a dropped connection loses nothing.
// The log streams the same way: the page holds the newest lines, the channel sends the rest.
(function () {
  "use strict";
  const root = document.getElementById("job");
  if (!root) return;
  const jobId = root.dataset.jobId;
  const lastStep = {};      // key -> last step drawn
  const pending = {};       // key -> {steps: [], walls: [], values: []} not yet drawn
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
    const place = document.getElementById("queue-place");  // true only while it was queued
    if (place) place.hidden = job.state !== "queued";
    const terminal = ["succeeded", "failed", "cancelled"].includes(job.state);
    showLive(!terminal && socket !== null && socket.readyState === WebSocket.OPEN);
    if (terminal) {
      const cancel = document.getElementById("cancel");
      if (cancel) cancel.disabled = true;
      // The job ended while the page was open: show its result and log as rendered.
      if (root.dataset.terminal !== "1") { root.dataset.terminal = "1"; location.reload(); }
    }
    root.dataset.state = job.state;
  }

  function isTerminal() {
    return ["succeeded", "failed", "cancelled"].includes(root.dataset.state);
  }

  // "live" only while the job runs and its points are followed.
  function showLive(on) {
    const badge = document.getElementById("live-status");
    badge.textContent = on ? "live" : "";
    badge.classList.toggle("on", on);
  }

  async function readWindow(key, start, end, wall) {
    const params = new URLSearchParams({ key: key, buckets: "1000" });
    if (start !== undefined) { params.set("start", start); params.set("end", end); }
    if (wall) params.set("wall", "true");
    const response = await fetch(`/api/jobs/${jobId}/series/downsampled?${params}`);
    return response.ok ? (await response.json()).buckets : [];
  }

  // Plotly is deferred: fetch meanwhile, draw once the deferred scripts have run.
  const plotlyReady = new Promise(resolve => document.readyState === "complete" ? resolve()
    : document.addEventListener("DOMContentLoaded", resolve));

  // The page's head asked for every series' history (window.jobHistory: batched reads, in
  // key order); each answer is drawn as soon as it and plotly are there.
  async function loadHistory() {
    const series = JSON.parse(document.getElementById("job-series").textContent);
    const drawn = [];
    for (const answer of window.jobHistory || []) {
      const reads = (await answer).series;
      drawn.push(plotlyReady.then(() => reads.forEach(read => {
        JobCharts.setHistory(read.key, read.buckets);
        lastStep[read.key] = Math.max(-1, ...read.buckets.map(b => b[4]).slice(-1));
      })));
    }
    await Promise.all(drawn);
    // The series may have grown since the page was made: resume after what was drawn, or
    // after what was stored then where a read failed.
    for (const s of series) lastStep[s.key] = Math.max(s.last_step, lastStep[s.key] ?? -1);
    root.dataset.points = JSON.stringify(lastStep);
  }

  function queuePoints(points) {
    for (const [key, step, wall, value] of points) {
      if (lastStep[key] !== undefined && step <= lastStep[key]) continue;
      lastStep[key] = step;
      (pending[key] = pending[key] || { steps: [], walls: [], values: [] });
      pending[key].steps.push(step);
      pending[key].walls.push(wall);
      pending[key].values.push(value);
    }
    if (!drawScheduled) { drawScheduled = true; requestAnimationFrame(draw); }
  }

  function draw() {
    drawScheduled = false;
    for (const key of Object.keys(pending)) {
      const p = pending[key];
      delete pending[key];
      JobCharts.append(key, p.steps, p.walls, p.values);
    }
    root.dataset.points = JSON.stringify(lastStep);
  }

  const logBox = document.getElementById("job-log");

  function appendLog(entries) {
    const atBottom = logBox.scrollTop + logBox.clientHeight >= logBox.scrollHeight - 4;
    const lines = entries.map(([, time, level, message]) => `${time.slice(11, 19)} ${level} ${message}\n`);
    logBox.append(lines.join(""));
    logBox.dataset.logAfter = entries[entries.length - 1][0];
    if (atBottom) logBox.scrollTop = logBox.scrollHeight;
  }

  // An alert raised on a watched run while its page is open: a row at the top of its list,
  // with the same Acknowledge form the page draws (text set as text, never as markup).
  function showAlert(alert) {
    const table = document.getElementById("run-alert-table");
    if (!table || table.querySelector(`tr[data-alert-id="${Number(alert.id)}"]`)) return;
    const row = document.createElement("tr");
    row.dataset.alertId = alert.id;
    row.dataset.alertKind = alert.kind;
    row.dataset.alertStep = alert.step === null ? "" : alert.step;
    const cell = (text) => { const td = document.createElement("td"); td.textContent = text; row.append(td); return td; };
    const rule = cell("");
    const badge = document.createElement("span");
    badge.className = "state failed";
    badge.textContent = alert.kind_label;
    rule.append(badge);
    cell(alert.step === null ? "" : String(alert.step));
    cell(alert.message);
    cell(alert.created_at.slice(0, 19).replace("T", " "));
    const token = document.querySelector("input[name=csrfmiddlewaretoken]");
    const form = document.createElement("form");
    form.method = "post";
    form.action = `/runs/${jobId}/alerts/${Number(alert.id)}/acknowledge/`;
    if (token) { const t = token.cloneNode(); t.value = token.value; form.append(t); }
    const button = document.createElement("button");
    button.type = "submit";
    button.textContent = "Acknowledge";
    form.append(button);
    cell("").append(form);
    table.tBodies[0].prepend(row);
    table.hidden = false;
    const none = document.getElementById("run-no-alert");
    if (none) none.hidden = true;
  }

  function connect() {
    const scheme = location.protocol === "https:" ? "wss" : "ws";
    socket = new WebSocket(`${scheme}://${location.host}/ws/jobs/${jobId}/`);
    const status = document.getElementById("live-status");
    socket.onopen = () => {
      retry = 500;
      showLive(!isTerminal());
      socket.send(JSON.stringify({ type: "resume", after: lastStep, log_after: Number(logBox.dataset.logAfter) }));
    };
    socket.onmessage = (event) => {
      const msg = JSON.parse(event.data);
      if (msg.type === "points") {
        queuePoints(msg.points);
        socket.send(JSON.stringify({ type: "ack", seq: msg.seq }));
      }
      else if (msg.type === "log") appendLog(msg.entries);
      else if (msg.type === "state") setState(msg.job);
      else if (msg.type === "alert") showAlert(msg.alert);
      else if (msg.type === "replayed") root.dataset.replayed = "1";
      else if (msg.type === "error") status.textContent = msg.message;
    };
    socket.onclose = (event) => {
      // Refused (not logged in, no access, access ended): do not hammer the server.  A client
      // closed for falling behind (4408) reconnects and resumes from the database.
      if (event.code >= 4400 && event.code !== 4408) return;
      status.textContent = isTerminal() ? "" : "reconnecting…";
      setTimeout(connect, retry);
      retry = Math.min(retry * 2, 10000);
    };
  }

  JobCharts.init(document.getElementById("charts"), document.getElementById("single-values"), readWindow);
  loadHistory().catch(() => {}).then(() => plotlyReady).then(connect);
})();
