from django.apps import AppConfig


class TokensConfig(AppConfig):
    name = "opdweb.tokens"
