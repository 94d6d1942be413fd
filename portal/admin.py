from django import forms
from django.contrib import admin
from django.contrib.auth import get_user_model
from django.contrib.auth.admin import UserAdmin
from django.db import transaction

from portal.audit import audit_record
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


class Audited:
    """Admin mixin: every add, change and delete made in the Django admin lands in Rota's audit log (who, and
    before → after of the fields that changed), beside the changes made on the governance pages. Django's own
    admin history is neither shown there nor keeps the values before a change."""

    audit_exclude = ("password", "last_login")

    def _snapshot(self, obj) -> dict:
        out = {}
        for f in obj._meta.concrete_fields:
            if f.primary_key or f.name in self.audit_exclude:
                continue
            value = getattr(obj, f.name)
            out[f.name] = str(value) if f.is_relation and value is not None else value
        if obj.pk:
            for f in obj._meta.many_to_many:
                out[f.name] = sorted(str(v) for v in getattr(obj, f.name).all())
            out |= self.audit_extra(obj)
        return out

    def audit_extra(self, obj) -> dict:
        """More of ``obj`` to audit than its own fields (e.g. the rows an inline edits)."""
        return {}

    def _audit(self, request, obj, verb: str, before: dict | None, after: dict | None) -> None:
        if before is not None and after is not None:
            changed = [k for k in after if before.get(k) != after.get(k)]
            if not changed:
                return
            before, after = {k: before.get(k) for k in changed}, {k: after[k] for k in changed}
        kind = obj._meta.model_name
        audit_record(actor=request.user, action=f"{kind}.{verb}", object_type=kind, object_id=obj.pk,
                     object_name=str(obj), before=before, after=after, reason="Django admin")

    def changeform_view(self, request, object_id=None, form_url="", extra_context=None):
        with transaction.atomic():  # the change and its audit entry, together
            return super().changeform_view(request, object_id, form_url, extra_context)

    # The values before a change are kept on the request: one ModelAdmin serves every request, on many threads.
    def save_model(self, request, obj, form, change):
        request._rota_audit_before = (self._snapshot(type(obj).objects.get(pk=obj.pk)) if change and obj.pk
                                      else None)
        super().save_model(request, obj, form, change)

    def save_related(self, request, form, formsets, change):
        super().save_related(request, form, formsets, change)  # many-to-many values are saved by now
        before = getattr(request, "_rota_audit_before", None) if change else None
        self._audit(request, form.instance, "update" if change else "create", before, self._snapshot(form.instance))

    def delete_model(self, request, obj):
        with transaction.atomic():
            before, pk = self._snapshot(obj), obj.pk
            super().delete_model(request, obj)
            obj.pk = pk
            self._audit(request, obj, "delete", before, None)

    def delete_queryset(self, request, queryset):
        with transaction.atomic():  # all of them or none, as Django's own bulk delete
            for obj in queryset:
                self.delete_model(request, obj)


class MembershipInline(ReadOnly, admin.TabularInline):
    """Members are managed on the team pages and the teams API (audited, never the last team-admin)."""

    model = Membership
    extra = 0


class TeamForm(forms.ModelForm):
    class Meta:
        model = Team
        fields = ["name", "display_name", "parent"]

    def clean(self):
        """A new parent must cover its children's guarantees with this team among them (the rule the quota page
        keeps), else moving a team would break it unseen."""
        data = super().clean()
        parent = data.get("parent")
        if parent is not None and (self.instance.pk is None or self.instance.parent_id != parent.pk):
            from portal.governance.services import parent_guarantee_errors

            for message in parent_guarantee_errors(self.instance, parent, name=data.get("name") or "this team"):
                self.add_error("parent", message)
        return data


@admin.register(Team)
class TeamAdmin(Audited, admin.ModelAdmin):
    form = TeamForm
    list_display = ["name", "display_name", "parent", "unix_id"]
    readonly_fields = ["unix_id"]  # taken from ROTA_TEAM_UID_RANGE when the team is created, never changed
    inlines = [MembershipInline]


User = get_user_model()
admin.site.unregister(User)


@admin.register(User)
class AuditedUserAdmin(Audited, UserAdmin):
    """Users and who is a platform admin (staff) or in the finance group: every change audited, and password
    changes too (that they happened, never the values)."""

    audit_exclude = ("password", "last_login", "date_joined")  # the admin form drops date_joined's microseconds

    def user_change_password(self, request, id, form_url=""):
        with transaction.atomic():
            response = super().user_change_password(request, id, form_url)
            if request.method == "POST" and response.status_code == 302:
                self._audit(request, self.get_object(request, id), "password", None, None)
            return response
