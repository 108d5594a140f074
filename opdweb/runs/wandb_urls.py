from django.urls import path

from opdweb.runs import wandb_views

urlpatterns = [
    path("graphql", wandb_views.graphql, name="wandb_graphql"),
    path("files/<str:entity>/<str:project>/<str:run>/file_stream", wandb_views.file_stream, name="wandb_file_stream"),
    path("upload/<str:signed>", wandb_views.upload, name="wandb_upload"),
]
urlpatterns.append(path("<path:rest>", wandb_views.not_served, name="wandb_not_served"))
