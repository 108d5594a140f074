from django.urls import path

from opdweb.budgets import views

app_name = "budgets"
urlpatterns = [
    path("", views.budget_list, name="list"),
    path("<int:budget_id>/", views.budget_detail, name="detail"),
]
