// A parent job's children table (a calibration's noise solves and training runs): asks the
// API for the children every few seconds while the parent runs, so rows appear and fill in
// without a reload; once the parent has ended, one last read and no more.
(function () {
  "use strict";
  const POLL_MS = 2000;
  const section = document.getElementById("child-jobs");
  const page = document.getElementById("job");
  if (!section || !page) return;
  const body = section.querySelector("tbody");

  function cell(text, className) {
    const td = document.createElement("td");
    if (className) td.className = className;
    td.textContent = text;
    return td;
  }

  function row(child) {
    const tr = document.createElement("tr");
    tr.dataset.childId = String(child.id);
    const link = document.createElement("a");
    link.href = `/jobs/${child.id}/`;
    link.textContent = String(child.id);
    const id = document.createElement("td");
    id.appendChild(link);
    const state = document.createElement("span");
    state.className = "state " + child.state;
    state.textContent = child.state;
    const stateCell = document.createElement("td");
    stateCell.appendChild(state);
    const bar = document.createElement("progress");
    bar.max = 1;
    bar.value = child.progress;
    const barCell = document.createElement("td");
    barCell.appendChild(bar);
    tr.append(id, cell(child.label), cell(child.kind), stateCell, barCell, cell(child.summary, "result"));
    return tr;
  }

  function show(children) {
    body.replaceChildren(...children.map(row));
    section.hidden = children.length === 0;
    document.getElementById("child-count").textContent = String(children.length);
  }

  async function poll() {
    const ended = page.dataset.terminal === "1";
    try {
      const response = await fetch(`/api/jobs/${section.dataset.jobId}/children`);
      if (response.ok) show(await response.json());
    } catch (error) { /* the next poll tries again */ }
    if (!ended) setTimeout(poll, POLL_MS);
  }

  setTimeout(poll, POLL_MS);
})();
