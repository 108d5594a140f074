// The links MLflow's client prints put the run after '#', which only the browser sees:
// go on to the run's page (/mlflow/runs/<id>) or the experiment's (/mlflow/experiments/<id>).
(function () {
  const route = /^#\/experiments\/([A-Za-z0-9_-]+)(?:\/runs\/([0-9A-Za-z]+))?\/?(?:\?.*)?$/.exec(window.location.hash);
  if (!route) return;
  const base = window.location.pathname.replace(/\/?$/, "/");
  const target = route[2] ? "runs/" + route[2] : "experiments/" + route[1];
  window.location.replace(base + target);
})();
