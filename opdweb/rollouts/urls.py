from django.urls import path

from opdweb.rollouts import views

app_name = "rollouts"
urlpatterns = [
    path("configs/", views.config_list, name="list"),
    path("configs/new/", views.config_new, name="new"),
    path("configs/compare/", views.config_compare, name="compare"),
    path("configs/<int:config_id>/", views.config_detail, name="detail"),
    path("configs/<int:config_id>/edit/", views.config_edit, name="edit"),
    path("configs/<int:config_id>/for/<str:target>/", views.config_for_target, name="for-target"),
]
