from django.contrib import admin

from opdweb.tokens.models import ApiToken


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    list_display = ("name", "hint", "user", "team", "can_write", "created_at", "last_used_at", "revoked_at")
    list_filter = ("can_write", "team")
    readonly_fields = ("digest", "hint", "created_at", "last_used_at")
