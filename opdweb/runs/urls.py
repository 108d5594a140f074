from django.urls import path

from opdweb.runs import mlflow_links, mlflow_views

app_name = "runs"
urlpatterns = [
    # The links MLflow's client prints, for a person; the API below, for the client.
    path("", mlflow_links.link_page, name="mlflow_link"),
    path("runs/<str:run_id>", mlflow_links.run_page, name="mlflow_run"),
    path("experiments/<str:experiment_id>", mlflow_links.experiment_page, name="mlflow_experiment"),
    path("<path:path>", mlflow_views.dispatch, name="mlflow"),
]
