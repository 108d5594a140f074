// The job form: choosing a kind shows that kind's fields (the others are disabled, so they
// are not sent) and swaps that kind's example into the JSON box, unless the box was edited.
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
  team.addEventListener("change", () => { fillPickers(); fillFieldPickers(); });
  fillPickers();
  showTeacher();
  showFields();
})();
