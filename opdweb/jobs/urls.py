from django.urls import path

from opdweb.jobs import chart_layout, views

app_name = "jobs"
urlpatterns = [
    path("", views.job_list, name="list"),
    path("new/", views.job_new, name="new"),
    path("compare/", views.job_compare, name="compare"),
    path("chart-layout/", chart_layout.chart_layout, name="chart_layout"),
    path("<int:job_id>/", views.job_detail, name="detail"),
    path("<int:job_id>/cancel/", views.job_cancel, name="cancel"),
    path("<int:job_id>/extend/", views.job_extend, name="extend"),
]
