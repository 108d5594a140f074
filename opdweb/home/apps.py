from django.apps import AppConfig


class HomeConfig(AppConfig):
    name = "opdweb.home"
