from django.contrib import admin

from portal.models import Membership, Team


class MembershipInline(admin.TabularInline):
    """Members are managed on the team pages and the teams API (audited, never the last team-admin)."""

    model = Membership
    extra = 0

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(Team)
class TeamAdmin(admin.ModelAdmin):
    list_display = ["name", "display_name", "parent"]
    inlines = [MembershipInline]
