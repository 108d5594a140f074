// The job page's charts: series that belong together share a chart (same namespace and
// suffix: "mismatch/rollout_k3" with "mismatch/reference_k3"), each with its min/max band;
// smoothing (EMA or running mean, the raw line kept faint), log y, and a zoom that re-reads
// the visible window from the downsampled API.  A series with a single point is a number,
// not a chart.  The x axis is the step, the wall time or the time since the run's first
// point: on a time axis the series are read with the wall time of each bucket's last step
// (asked only then: it costs the read a few ms), and a zoom reads the steps in view.
window.JobCharts = (function () {
  "use strict";
  const MAX_POINTS = 20000;
  const COLORS = [[31, 119, 180], [214, 39, 40], [44, 160, 44], [148, 103, 189], [255, 127, 14], [23, 190, 207]];
  const series = {};   // key -> {x (steps), t (wall s), y, lo, hi, zoom: same shape for the zoomed window, or null}
  const groups = {};   // chart name -> {keys, div}
  const dirty = new Set();
  const options = { smoothing: "none", logY: false, xAxis: "step" };
  const X_TITLES = { step: "step", time: "wall time", relative: "time since the first point (s)" };
  let container, numbers, readWindow, drawScheduled = false, revision = 0;
  // Per series key, what its chart adds (an external run's page): a horizontal line (the
  // budget on the multiple's chart) and a note in the title ("own scale: not comparable").
  const guidesTag = document.getElementById("chart-guides");
  const guides = guidesTag ? JSON.parse(guidesTag.textContent) : {};

  function groupOf(key) {
    const m = /^(.*\/)[^/_]+_([^/]+)$/.exec(key);
    return m ? `${m[1]}*_${m[2]}` : key;
  }

  function timeAxis() { return options.xAxis !== "step"; }

  // Values that are not finite come as strings ("NaN", "Infinity"): Number() makes them numbers.
  function fromBuckets(buckets) {
    return { x: buckets.map(b => b[4]), t: buckets.map(b => b[6]), lo: buckets.map(b => Number(b[2])),
             hi: buckets.map(b => Number(b[3])), y: buckets.map(b => Number(b[5])) };
  }

  // The run's first wall time over every series drawn (the origin of relative time).
  function origin() {
    const firsts = Object.values(series).filter(s => s.t.length).map(s => s.t[0]);
    return firsts.length ? Math.min(...firsts) : 0;
  }

  function xValues(d) {
    if (options.xAxis === "time") return d.t.map(t => new Date(t * 1000));
    if (options.xAxis === "relative") { const t0 = origin(); return d.t.map(t => t - t0); }
    return d.x;
  }

  // A visible x range as a step window: on a time axis, the steps whose wall times bound it
  // (from the whole series drawn, so the window may be a bucket wider than the view).
  function stepWindow(key, range) {
    if (options.xAxis === "step") return [Math.max(0, Math.floor(range[0])), Math.ceil(range[1])];
    // A date axis reports ranges as local-time strings ("2026-11-30 21:40:01.5"), or ms if set as numbers.
    const toSeconds = v => options.xAxis !== "time" ? Number(v) + origin()
      : (typeof v === "number" ? v : Date.parse(String(v).replace(" ", "T"))) / 1000;
    const [t0, t1] = range.map(toSeconds);
    const s = series[key];
    let first = s.t.findIndex(t => t >= t0);
    let last = s.t.length - 1;
    while (last > 0 && s.t[last] > t1) last--;
    if (first < 0) first = s.t.length - 1;
    return [first > 0 ? s.x[first - 1] + 1 : 0, Math.max(s.x[last], s.x[first])];
  }

  function smooth(y) {
    const [kind, param] = options.smoothing.split(":");
    const p = Number(param);
    if (kind === "ema") {
      let s = null;
      return y.map(v => (s = s === null ? v : p * s + (1 - p) * v));
    }
    if (kind === "mean") {
      let sum = 0;
      return y.map((v, i) => { sum += v - (i >= p ? y[i - p] : 0); return sum / Math.min(i + 1, p); });
    }
    return null;
  }

  function traces(keys) {
    const out = [];
    keys.forEach((key, i) => {
      const d = series[key].zoom || series[key];
      const rgb = COLORS[i % COLORS.length].join(",");
      const smoothed = smooth(d.y);
      const x = xValues(d);
      out.push({ x: x, y: d.hi, mode: "lines", line: { width: 0 }, hoverinfo: "skip", showlegend: false });
      out.push({ x: x, y: d.lo, mode: "lines", line: { width: 0 }, fill: "tonexty", fillcolor: `rgba(${rgb},0.18)`,
                 hoverinfo: "skip", showlegend: false });
      out.push({ x: x, y: d.y, name: key, mode: "lines", line: { color: `rgb(${rgb})`, width: 1.5 },
                 opacity: smoothed ? 0.3 : 1 });
      if (smoothed) out.push({ x: x, y: smoothed, name: `${key} (${options.smoothing})`, mode: "lines",
                               line: { color: `rgb(${rgb})`, width: 2 } });
    });
    return out;
  }

  // A chart follows its newest points (its axes autorange on every draw) until the user zooms
  // or pans an axis; a reset (double click, "autoscale") makes it follow again.
  // Steps are integers: ticks never fall between two of them (a span of a few steps gets a
  // tick per step, a longer one plotly's own spacing, labelled as whole numbers).
  function stepTicks(keys) {
    let lo = Infinity, hi = -Infinity;
    for (const key of keys) {
      const x = (series[key].zoom || series[key]).x;
      if (x.length) { lo = Math.min(lo, x[0]); hi = Math.max(hi, x[x.length - 1]); }
    }
    const ticks = { tickformat: ",d" };
    if (hi - lo <= 10) Object.assign(ticks, { tickmode: "linear", tick0: 0, dtick: 1 });
    return ticks;
  }

  // What the step of a namespace counts, where it is not a training step.
  const STEP_TITLES = { calibration: "ladder level (0: the BF16 baseline)", sensitivity: "scanned part (index)" };

  function layout(name, keys) {
    const follow = groups[name].follow;
    const namespace = keys[0].split("/")[0];
    const title = options.xAxis === "step" ? (STEP_TITLES[namespace] || X_TITLES.step) : X_TITLES[options.xAxis];
    const xaxis = { title: { text: title }, type: options.xAxis === "time" ? "date" : "linear",
                    ...(options.xAxis === "step" ? stepTicks(keys) : {}) };
    const yaxis = { type: options.logY ? "log" : "linear" };
    if (follow.x) xaxis.autorange = true;
    if (follow.y) yaxis.autorange = true;
    // The series arrays grow in place, and Plotly.react compares arrays by reference: a new
    // datarevision on every draw is what makes it look at the new points at all.
    const guide = keys.length === 1 ? guides[keys[0]] : null;
    let text = keys.length > 1 ? name : keys[0];
    const shapes = [], annotations = [];
    if (guide && guide.note) text += `<br><span style="font-size:11px">${guide.note}</span>`;
    const band = guide && options.xAxis === "step" && Array.isArray(guide.points) && guide.points.length > 1;
    if (band) {
      // The budget between calibrated steps: the straight line between them, flat outside.
      guide.points.slice(1).forEach((p, i) => {
        const q = guide.points[i];
        shapes.push({ type: "line", xref: "x", yref: "y", x0: q[0], x1: p[0], y0: q[1], y1: p[1], line: { color: "#e03131", width: 2 } });
      });
    }
    if (guide && Number.isFinite(guide.breached_step) && options.xAxis === "step") {
      shapes.push({ type: "line", xref: "x", yref: "paper", x0: guide.breached_step, x1: guide.breached_step, y0: 0, y1: 1,
                    line: { color: "#e03131", width: 1, dash: "dot" } });
    }
    if (guide && Number.isFinite(guide.y) && !band) {
      shapes.push({ type: "line", xref: "paper", x0: 0, x1: 1, y0: guide.y, y1: guide.y, line: { color: "#e03131", width: 2 } });
      annotations.push({ xref: "paper", x: 1, xanchor: "right", y: guide.y, yanchor: "bottom", text: guide.label,
                         showarrow: false, font: { color: "#e03131", size: 11 } });
    }
    return { title: { text: text }, height: 280, margin: { t: guide ? 56 : 40, r: 10, b: 40, l: 60 },
             xaxis: xaxis, yaxis: yaxis, uirevision: options.xAxis, datarevision: ++revision,
             legend: { orientation: "h", y: -0.25 }, shapes: shapes, annotations: annotations };
  }

  // Sections: the charts the person pinned first, then loss and accuracy (any chart whose
  // name says loss, accuracy or reward), then mismatch (the mismatch namespace, k3 / KL /
  // multiple charts), then one section per namespace of the rest (the key's part before the
  // first "/"; keys without one first), in alphabetical order; the charts of a section, in a
  // grid, in the order of their names: the same order on every load, whatever order the
  // reads come back in.  Each section folds; the chooser pins and hides charts.  What is
  // pinned, hidden and folded is the person's (their chart layout, on every job page and in
  // every browser), saved as they change it.
  const layoutTag = document.getElementById("chart-layout");
  const saved = layoutTag ? JSON.parse(layoutTag.textContent) : {};
  const pinned = new Set(saved.pinned || []), hidden = new Set(saved.hidden || []), folded = new Set(saved.folded || []);
  let saving = Promise.resolve();
  function saveLayout() {
    const token = document.getElementById("chart-layout-csrf");
    if (!layoutTag || !token) return;  // a page without a person's layout: nothing to keep
    const body = JSON.stringify({ pinned: [...pinned], hidden: [...hidden], folded: [...folded] });
    // One save after the other, so the last change is the one kept.
    saving = saving.then(() => fetch(token.dataset.url, {
      method: "POST", credentials: "same-origin", body: body,
      headers: { "Content-Type": "application/json", "X-CSRFToken": token.value } })).catch(() => {});
  }
  const NO_NAMESPACE = "";
  function namespaceOf(name) { const i = name.indexOf("/"); return i < 0 ? NO_NAMESPACE : name.slice(0, i); }
  const PINNED = "pinned", LOSS_AND_ACCURACY = "loss and accuracy", MISMATCH = "mismatch";
  function sectionOf(name) {
    if (pinned.has(name)) return PINNED;
    if (/loss|accuracy|reward/i.test(name)) return LOSS_AND_ACCURACY;
    if (namespaceOf(name) === MISMATCH || /k3|(^|[/_])kl([/_]|$)|multiple/i.test(name)) return MISMATCH;
    return namespaceOf(name);
  }
  // The sort key of a section: the three named sections first, then the namespaces.
  function sectionOrder(section) {
    return { [PINNED]: "0", [LOSS_AND_ACCURACY]: "1", [MISMATCH]: "2" }[section] || "3" + section;
  }
  function insertSorted(parent, child, attribute) {
    const value = child.dataset[attribute];
    const after = [...parent.children].find(c => c.dataset[attribute] !== undefined && c.dataset[attribute] > value);
    parent.insertBefore(child, after || null);
  }
  function panelOf(section) {
    let panel = container.querySelector(`details.chart-panel[data-section="${CSS.escape(section)}"]`);
    if (panel) return panel;
    panel = document.createElement("details");
    panel.className = "chart-panel";
    panel.dataset.section = section;
    panel.dataset.order = sectionOrder(section);
    panel.open = !folded.has(section);
    const summary = document.createElement("summary");
    summary.textContent = section || "other";
    panel.appendChild(summary);
    const body = document.createElement("div");
    body.className = "panel-charts";
    panel.appendChild(body);
    panel.addEventListener("toggle", () => {
      if (panel.open) { folded.delete(section); body.querySelectorAll(".chart").forEach(d => Plotly.Plots.resize(d)); }
      else folded.add(section);
      saveLayout();
    });
    insertSorted(container, panel, "order");
    return panel;
  }
  function chooser() {
    let box = document.getElementById("metric-chooser");
    if (box) return box;
    box = document.createElement("details");
    box.id = "metric-chooser";
    box.dataset.order = "";  // before every section
    const summary = document.createElement("summary");
    summary.textContent = "Metrics shown";
    box.appendChild(summary);
    container.insertBefore(box, container.firstChild);
    return box;
  }
  // A chart into its section's grid (a section left empty goes).
  function moveChart(name, div) {
    const from = div.closest("details.chart-panel");
    insertSorted(panelOf(sectionOf(name)).querySelector(".panel-charts"), div, "chart");
    if (from && !from.querySelector(".chart")) from.remove();
    if (!div.hidden) Plotly.Plots.resize(div);
  }
  function placeChart(name, div) {
    insertSorted(panelOf(sectionOf(name)).querySelector(".panel-charts"), div, "chart");
    div.hidden = hidden.has(name);
    const choice = document.createElement("span");
    choice.className = "metric-choice";
    choice.dataset.chart = name;
    const label = document.createElement("label");
    const box = document.createElement("input");
    box.type = "checkbox";
    box.className = "shown";
    box.checked = !hidden.has(name);
    box.addEventListener("change", () => {
      if (box.checked) hidden.delete(name); else hidden.add(name);
      div.hidden = !box.checked;
      if (box.checked) Plotly.Plots.resize(div);
      saveLayout();
    });
    label.append(box, " " + name);
    const pin = document.createElement("button");
    pin.type = "button";
    pin.className = "pin";
    const showPin = () => { pin.textContent = pinned.has(name) ? "unpin" : "pin"; pin.setAttribute("aria-pressed", String(pinned.has(name))); };
    showPin();
    pin.addEventListener("click", () => {
      if (pinned.has(name)) pinned.delete(name); else pinned.add(name);
      showPin();
      moveChart(name, div);
      saveLayout();
    });
    choice.append(label, " ", pin);
    insertSorted(chooser(), choice, "chart");
  }

  function plot(name, keys) {
    const group = groups[name];
    const config = { responsive: true, displaylogo: false };
    if (group.div) return Plotly.react(group.div, traces(keys), layout(name, keys), config);
    group.div = document.createElement("div");
    group.div.className = "chart";
    group.div.dataset.chart = name;
    placeChart(name, group.div);
    const start = performance.now();
    Plotly.newPlot(group.div, traces(keys), layout(name, keys), config);
    // The page's first chart, for anyone timing the page (the job page benchmark does).
    if (!performance.getEntriesByName("charts:first-plot").length) performance.measure("charts:first-plot", { start: start });
    group.div.on("plotly_relayout", event => zoomed(name, event));
  }

  // Zoom: read each series of the chart again for the visible steps; reset: the whole series.
  async function zoomed(name, event) {
    const keys = groups[name].keys, follow = groups[name].follow;
    if (event["yaxis.autorange"]) follow.y = true;
    else if (event["yaxis.range"] || event["yaxis.range[0]"] !== undefined) follow.y = false;
    if (event["xaxis.autorange"]) {
      follow.x = true;
      keys.forEach(key => { series[key].zoom = null; });
    } else if (event["xaxis.range"] || event["xaxis.range[0]"] !== undefined) {
      follow.x = false;
      const range = event["xaxis.range"] || [event["xaxis.range[0]"], event["xaxis.range[1]"]];
      const steps = keys.map(key => stepWindow(key, range));
      if (steps.every(([start, end]) => end < start)) return;
      const axis = options.xAxis;
      const windows = await Promise.all(keys.map((key, i) => readWindow(key, steps[i][0], steps[i][1], timeAxis())));
      if (options.xAxis !== axis) return;  // the axis changed meanwhile: this zoom is void
      keys.forEach((key, i) => { series[key].zoom = fromBuckets(windows[i]); });
      groups[name].div.dataset.window = `${steps[0][0]}-${steps[0][1]}`;
    } else return;
    markDirty(name);
  }

  function markDirty(name) {
    dirty.add(name);
    if (!drawScheduled) { drawScheduled = true; requestAnimationFrame(draw); }
  }

  // One chart per frame, so the first one shows without waiting for the others.
  function draw() {
    drawScheduled = false;
    const name = dirty.values().next().value;
    dirty.delete(name);
    const keys = groups[name].keys;
    const charted = keys.some(key => series[key].x.length > 1);
    keys.forEach(key => showNumber(key, charted ? null : series[key]));
    if (charted) {
      plot(name, keys);
      groups[name].div.dataset.keys = keys.join(",");
    }
    if (dirty.size) { drawScheduled = true; requestAnimationFrame(draw); }
  }

  function showNumber(key, s) {
    let row = numbers.querySelector(`[data-key="${CSS.escape(key)}"]`);
    if (!s || !s.x.length) { if (row) row.remove(); numbers.hidden = !numbers.children.length; return; }
    if (!row) {
      row = document.createElement("div");
      row.dataset.key = key;
      numbers.appendChild(row);
    }
    row.innerHTML = "<dt></dt><dd></dd>";
    row.firstChild.textContent = key;
    row.lastChild.textContent = `${Number(s.y[0].toPrecision(4))} (step ${s.x[0]})`;
    numbers.hidden = false;
  }

  function keyed(key) {
    if (!series[key]) {
      series[key] = { x: [], t: [], y: [], lo: [], hi: [], zoom: null };
      const name = groupOf(key);
      (groups[name] = groups[name] || { keys: [], div: null, follow: { x: true, y: true } }).keys.push(key);
      groups[name].keys.sort();
    }
    return groupOf(key);
  }

  return {
    // Where charts and single numbers go, and how to read a window of a series' buckets.
    init(chartContainer, numberList, readSeriesWindow) {
      container = chartContainer; numbers = numberList; readWindow = readSeriesWindow;
      if (!document.getElementById("chart-controls")) return;  // a finished job without traces
      document.getElementById("smoothing").addEventListener("change", e => {
        options.smoothing = e.target.value;
        Object.keys(groups).forEach(markDirty);
      });
      document.getElementById("x-axis").addEventListener("change", async e => {
        options.xAxis = e.target.value;
        // A new axis starts unzoomed (its ui revision differs, so plotly drops the old ranges) and follows.
        Object.values(series).forEach(s => { s.zoom = null; });
        Object.values(groups).forEach(g => { g.follow = { x: true, y: true }; });
        // Series read without wall times are read again with them (live points carry theirs).
        const lacking = Object.keys(series).filter(key => timeAxis() && series[key].t.some(t => t === undefined));
        const axis = options.xAxis;
        const again = await Promise.all(lacking.map(key => readWindow(key, undefined, undefined, true)));
        if (options.xAxis !== axis) return;  // changed again meanwhile; that change redraws
        Object.values(series).forEach(s => { s.zoom = null; });  // a zoom made meanwhile was on the old axis
        lacking.forEach((key, i) => {
          // Points that arrived live during the read stay (the read has what was stored before it).
          const s = series[key], fresh = fromBuckets(again[i]);
          const last = fresh.x.length ? fresh.x[fresh.x.length - 1] : -1;
          const later = s.x.flatMap((x, j) => (x > last ? [j] : []));
          for (const column of ["x", "t", "y", "lo", "hi"]) fresh[column].push(...later.map(j => s[column][j]));
          Object.assign(s, fresh);
        });
        Object.keys(groups).forEach(markDirty);
      });
      document.getElementById("log-y").addEventListener("change", e => {
        options.logY = e.target.checked;
        Object.values(groups).filter(g => g.div).forEach(g => {
          g.follow.y = true;
          Plotly.relayout(g.div, { "yaxis.type": options.logY ? "log" : "linear", "yaxis.autorange": true });
        });
      });
    },
    // The whole series as the downsampled API returns it.
    setHistory(key, buckets) {
      const name = keyed(key);
      Object.assign(series[key], fromBuckets(buckets));
      markDirty(name);
    },
    // Live points after the history: each point is its own bucket.
    append(key, steps, walls, values) {
      const name = keyed(key);
      const s = series[key];
      s.x.push(...steps); s.t.push(...walls);
      for (const column of [s.y, s.lo, s.hi]) column.push(...values);
      if (s.x.length > MAX_POINTS) for (const column of [s.x, s.t, s.y, s.lo, s.hi]) column.splice(0, s.x.length - MAX_POINTS);
      markDirty(name);
    },
  };
})();
