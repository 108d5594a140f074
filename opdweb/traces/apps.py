from django.apps import AppConfig


class TracesConfig(AppConfig):
    name = "opdweb.traces"
