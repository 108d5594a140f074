// The job page asks for its charts' history first thing (before plotly, which is deferred);
// job_live.js draws these answers, in order.
window.jobHistory = JSON.parse(document.getElementById("job-history-reads").textContent).map(url =>
  fetch(url).then(r => (r.ok ? r.json() : { series: [] })).catch(() => ({ series: [] })));
