from django.urls import path

from opdweb.runs import pages

app_name = "run_pages"
urlpatterns = [
    path("<int:job_id>/recheck/", pages.recheck, name="recheck"),
    path("<int:job_id>/watch/", pages.run_watch_rule, name="run_watch"),
    path("<int:job_id>/watch/clear/", pages.clear_run_watch_rule, name="clear_run_watch"),
    path("watch/<slug:slug>/", pages.team_watch_rule, name="team_watch"),
    path("<int:job_id>/artifacts/<path:path>", pages.artifact, name="artifact"),
    path("<int:job_id>/alerts/<int:alert_id>/acknowledge/", pages.acknowledge, name="acknowledge"),
]
