from django.urls import path

from opdweb.configs import team_views, views

app_name = "configs"
urlpatterns = [
    path("configs/", views.config_list, name="list"),
    path("configs/new/", views.config_new, name="new"),
    path("configs/compare/", views.config_compare, name="compare"),
    path("configs/<int:config_id>/", views.config_detail, name="detail"),
    path("configs/<int:config_id>/edit/", views.config_edit, name="edit"),
    path("configs/<int:config_id>/request-approval/", views.approval_request, name="request_approval"),
    path("approvals/", views.approval_list, name="approvals"),
    path("approvals/<int:approval_id>/", views.approval_detail, name="approval"),
    path("approvals/<int:approval_id>/decide/", views.approval_decide, name="decide"),
    path("approvals/<int:approval_id>/export/<slug:fmt>/", views.approval_export, name="export"),
]

urlpatterns += [
    path("teams/<slug:slug>/webhook/", team_views.webhook_settings, name="webhook"),
]
