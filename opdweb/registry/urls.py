from django.urls import path

from opdweb.registry import views

app_name = "registry"
urlpatterns = [
    path("", views.model_list, name="list"),
    path("<int:model_id>/", views.model_detail, name="detail"),
    path("<int:model_id>/read/", views.model_read_again, name="read"),
    path("<int:model_id>/delete/", views.model_delete, name="delete"),
]
