from django.apps import AppConfig


class TeamsConfig(AppConfig):
    name = "opdweb.teams"
