from django.contrib import admin

from portal.models import Membership, Team


class ReadOnly:
    """Admin mixin: view only, for what changes through an audited service (governance, team pages) or
    belongs to the scheduler."""

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


class MembershipInline(ReadOnly, admin.TabularInline):
    """Members are managed on the team pages and the teams API (audited, never the last team-admin)."""

    model = Membership
    extra = 0


@admin.register(Team)
class TeamAdmin(admin.ModelAdmin):
    list_display = ["name", "display_name", "parent"]
    inlines = [MembershipInline]
