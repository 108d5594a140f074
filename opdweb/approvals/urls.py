from django.urls import path

from opdweb.approvals import views, webhook_views

app_name = "approvals"
urlpatterns = [
    path("configs/<int:config_id>/request-approval/", views.approval_request, name="request"),
    path("approvals/", views.approval_list, name="list"),
    path("approvals/<int:approval_id>/", views.approval_detail, name="detail"),
    path("approvals/<int:approval_id>/decide/", views.approval_decide, name="decide"),
    path("approvals/<int:approval_id>/export/<slug:fmt>/", views.approval_export, name="export"),
    path("approvals/<int:approval_id>/kv-scales/", views.approval_kv_scales, name="kv-scales"),
    path("teams/<slug:slug>/webhook/", webhook_views.webhook_settings, name="webhook"),
]
