from django.urls import path

from opdweb.jobs.consumers import JobLiveConsumer

websocket_urlpatterns = [path("ws/jobs/<int:job_id>/", JobLiveConsumer.as_asgi())]
