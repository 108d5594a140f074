// Job list: keeps the state and progress of the running jobs on the page current by asking
// the API for the running jobs every few seconds; a row that left that list is asked once
// for its final state.
(function () {
  "use strict";
  const POLL_MS = 3000;

  function runningRows() {
    return Array.from(document.querySelectorAll("tr[data-job-id]"))
      .filter(row => ["running", "waiting", "queued"].includes(row.dataset.state));
  }

  function show(row, job) {
    row.dataset.state = job.state;
    const badge = row.querySelector(".state");
    badge.textContent = job.state;
    badge.className = "state " + job.state;
    row.querySelector("progress").value = job.progress;
  }

  async function update(rows) {
    const response = await fetch("/api/jobs?state=running&limit=1000");
    if (!response.ok) return;
    const running = new Map((await response.json()).map(job => [String(job.id), job]));
    for (const row of rows) {
      const job = running.get(row.dataset.jobId);
      if (job) { show(row, job); continue; }
      if (row.dataset.state === "queued") continue;  // still queued
      // it left the running list, or waits for its child jobs: asked on its own
      const one = await fetch(`/api/jobs/${row.dataset.jobId}`);
      if (one.ok) show(row, await one.json());
    }
  }

  // Until no row on the page is queued, running or waiting; a failed poll is tried again.
  async function poll() {
    const rows = runningRows();
    if (!rows.length) return;
    try { await update(rows); } catch (error) { /* the next poll tries again */ }
    setTimeout(poll, POLL_MS);
  }

  setTimeout(poll, POLL_MS);
})();
