from django.urls import path

from opdweb.teams import views

app_name = "teams"
urlpatterns = [
    path("", views.team_list, name="list"),
    path("<slug:slug>/", views.team_detail, name="detail"),
    path("<slug:slug>/audit/", views.audit_log, name="audit"),
    path("<slug:slug>/budget-criterion/", views.budget_criterion, name="budget_criterion"),
    path("<slug:slug>/members/", views.member_add, name="member_add"),
    path("<slug:slug>/invitations/", views.member_invite, name="member_invite"),
    path("<slug:slug>/members/<int:membership_id>/role/", views.member_role, name="member_role"),
    path("<slug:slug>/members/<int:membership_id>/remove/", views.member_remove, name="member_remove"),
]
