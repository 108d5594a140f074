// A registered model picked fills the checkpoint box.
(function () {
  const picker = document.getElementById("pick-checkpoint");
  if (picker) picker.addEventListener("change", () => { if (picker.value) picker.form.checkpoint.value = picker.value; });
})();
