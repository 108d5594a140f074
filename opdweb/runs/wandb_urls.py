from django.urls import path

from opdweb.runs import mlflow_links, wandb_views

urlpatterns = [
    path("graphql", wandb_views.graphql, name="wandb_graphql"),
    path("files/<str:entity>/<str:project>/<str:run>/file_stream", wandb_views.file_stream, name="wandb_file_stream"),
    path("upload/<str:signed>", wandb_views.upload, name="wandb_upload"),
    # the links the client prints, for a browser
    path("<str:entity>/<str:project>/runs/<str:name>", mlflow_links.wandb_run_page, name="wandb_run"),
    path("<str:entity>/<str:project>", mlflow_links.wandb_project_page, name="wandb_project"),
    path("<path:rest>", wandb_views.not_served, name="wandb_not_served"),
]
