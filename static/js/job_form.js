// The job form: choosing a kind shows that kind's fields (the others are disabled, so they
// are not sent) and swaps that kind's example into the JSON box, unless the box was edited;
// what is typed into the fields is copied into the box as it is typed, unless it was edited.
(function () {
  const examples = JSON.parse(document.getElementById("config-examples").textContent);
  const kind = document.querySelector("select[name=kind]");
  const config = document.querySelector("textarea[name=config]");
  let shown = config.value;
  function showFields() {
    for (const set of document.querySelectorAll("fieldset.kind-fields")) {
      const chosen = set.dataset.kind === kind.value;
      set.disabled = !chosen;
      set.hidden = !chosen;
    }
  }
  kind.addEventListener("change", () => {
    if (config.value === shown && examples[kind.value]) {
      config.value = shown = JSON.stringify(examples[kind.value], null, 2);
    }
    showFields();
    showTeacher();
  });

  // The pickers of the fields (models, budgets) offer the chosen team's; the value a field
  // holds stays offered (and chosen) when it is not one of them.
  const pickerChoices = JSON.parse(document.getElementById("picker-choices").textContent);
  function fillFieldPickers() {
    for (const select of document.querySelectorAll("select.picker")) {
      const current = select.value;
      const offered = (pickerChoices[select.dataset.picker] || {})[team.value] || [];
      select.length = 0;
      select.add(new Option("— choose —", ""));
      if (current && !offered.some(([value]) => value === current)) {
        select.add(new Option(`${current} (not one of the team's)`, current));
      }
      for (const [value, label] of offered) select.add(new Option(label, value));
      select.value = current;
    }
  }

  // In the JSON view, the registered models of the chosen team fill the config's model (and
  // teacher, for the kinds that have one); the JSON box stays the truth there.
  const registered = JSON.parse(document.getElementById("registered-models").textContent);
  const team = document.querySelector("select[name=team]");
  const pickers = [document.getElementById("pick-model"), document.getElementById("pick-teacher")];
  function fillPickers() {
    for (const picker of pickers) {
      picker.length = 1;
      for (const m of registered[team.value] || []) picker.add(new Option(`${m.name} (${m.kind})`, m.path));
    }
  }
  function showTeacher() {
    const hasTeacher = examples[kind.value] && "teacher" in examples[kind.value];
    document.getElementById("pick-teacher-label").style.display = hasTeacher ? "" : "none";
  }
  for (const picker of pickers) {
    picker.addEventListener("change", () => {
      let parsed;
      try { parsed = JSON.parse(config.value || "{}"); } catch (e) { return; }
      if (!picker.value) return;
      parsed[picker.dataset.key] = picker.value;
      const edited = config.value !== shown;
      config.value = JSON.stringify(parsed, null, 2);
      if (!edited) shown = config.value;
    });
  }
  // The fields, as they are typed, are copied into the JSON box while it still holds what the
  // page put there (never over a hand edit), read as the server reads them
  // (opdweb/jobs/config_form.py, config_from_inputs): an empty input is left to its default,
  // a checkbox is true or false, a JSON box is parsed, whole numbers and numbers are numbers
  // where they read as one; anything else is sent as typed, for the server to refuse.
  const WHOLE = /^[+-]?\d{1,19}$/, NUMBER = /^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d{1,3})?$/;
  function typed(widget, raw) {
    if ((widget === "integer" || widget === "budget") && WHOLE.test(raw)) return Number(raw);
    if (widget === "number" && NUMBER.test(raw)) return Number(raw);
    return raw;
  }
  function setAt(target, dotted, value) {
    const parts = dotted.split(".");
    let node = target;
    for (const part of parts.slice(0, -1)) {
      if (typeof node[part] !== "object" || node[part] === null) node[part] = {};
      node = node[part];
    }
    node[parts[parts.length - 1]] = value;
  }
  function configFromFields() {
    const set = document.querySelector(`fieldset.kind-fields[data-kind="${kind.value}"]`);
    if (!set) return null;
    const built = {};
    for (const field of set.querySelectorAll("div.field")) {
      const input = field.querySelector("input, select, textarea");
      const widget = field.dataset.widget;
      if (widget === "checkbox") { setAt(built, input.name, input.checked); continue; }
      const raw = input.value.trim();
      if (raw === "") continue;
      if (widget === "json") {
        try { setAt(built, input.name, JSON.parse(raw)); } catch (e) { return null; }  // shown at submit
        continue;
      }
      setAt(built, input.name, typed(widget, raw));
    }
    return built;
  }
  function copyFieldsToJson() {
    if (config.value !== shown) return;  // edited by hand: the box is the person's now
    const built = configFromFields();
    if (built !== null) config.value = shown = JSON.stringify(built, null, 2);
  }
  for (const set of document.querySelectorAll("fieldset.kind-fields")) {
    set.addEventListener("input", copyFieldsToJson);
    set.addEventListener("change", copyFieldsToJson);
  }

  // How long the job would run, asked of the server as the config changes (opdweb/jobs/
  // estimates.py): from the team's runs of the model, else from its size.  Said only for a
  // config the server accepts; the answer to an older question is dropped.
  const estimate = document.getElementById("estimate");
  const csrf = document.querySelector("input[name=csrfmiddlewaretoken]").value;
  let asked = 0, timer = null;
  function configToEstimate() {
    if (config.value === shown) return configFromFields();
    try { return JSON.parse(config.value); } catch (e) { return null; }
  }
  async function askEstimate() {
    const mine = ++asked;
    const built = configToEstimate();
    if (built === null || !team.value) { estimate.hidden = true; return; }
    let answer;
    try {
      const response = await fetch("/api/jobs/estimate", {
        method: "POST", credentials: "same-origin",
        headers: {"Content-Type": "application/json", "X-CSRFToken": csrf},
        body: JSON.stringify({kind: kind.value, team: team.value, config: built}),
      });
      answer = response.ok ? await response.json() : null;
    } catch (e) { answer = null; }
    if (mine !== asked) return;
    if (answer === null) { estimate.hidden = true; return; }
    estimate.textContent = `Estimated run time: ${answer.words}, once a worker takes it (${answer.basis}` +
      (answer.note ? `; ${answer.note}` : "") + ").";
    estimate.dataset.seconds = answer.seconds === null ? "" : String(answer.seconds);
    estimate.hidden = false;
  }
  function estimateSoon() { clearTimeout(timer); timer = setTimeout(askEstimate, 400); }
  for (const source of [kind, team, config, ...pickers]) {
    source.addEventListener("change", estimateSoon);
    source.addEventListener("input", estimateSoon);
  }
  for (const set of document.querySelectorAll("fieldset.kind-fields")) {
    set.addEventListener("input", estimateSoon);
    set.addEventListener("change", estimateSoon);
  }

  team.addEventListener("change", () => { fillPickers(); fillFieldPickers(); });
  fillPickers();
  showTeacher();
  showFields();
  askEstimate();
})();
