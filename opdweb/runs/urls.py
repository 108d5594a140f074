from django.urls import path

from opdweb.runs import mlflow_views

app_name = "runs"
urlpatterns = [
    path("<path:path>", mlflow_views.dispatch, name="mlflow"),
]
