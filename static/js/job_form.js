// The job form: switching the kind swaps in that kind's example, unless the config was edited.
(function () {
  const examples = JSON.parse(document.getElementById("config-examples").textContent);
  const kind = document.querySelector("select[name=kind]");
  const config = document.querySelector("textarea[name=config]");
  let shown = config.value;
  kind.addEventListener("change", () => {
    if (config.value === shown && examples[kind.value]) {
      config.value = shown = JSON.stringify(examples[kind.value], null, 2);
    }
    showTeacher();
  });

  // The registered models of the chosen team fill the config's model (and teacher, for
  // the kinds that have one); the JSON box stays the truth.
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
  team.addEventListener("change", fillPickers);
  fillPickers();
  showTeacher();
})();
