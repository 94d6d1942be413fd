"""Tenancy: teams form a tree (department -> team); users are members of teams with a role."""

from django.conf import settings
from django.core.validators import RegexValidator
from django.db import models

slug_validator = RegexValidator(
    r"^[a-z0-9][a-z0-9-]{0,62}$", "use 1-63 lowercase letters, digits and dashes, starting with a letter or digit"
)


class Team(models.Model):
    """A tenant. ``parent`` is the department (or any ancestor) that caps its children's quotas."""

    name = models.CharField(max_length=63, unique=True, validators=[slug_validator])
    display_name = models.CharField(max_length=120, blank=True)
    parent = models.ForeignKey("self", null=True, blank=True, on_delete=models.PROTECT, related_name="children")
    # The unprivileged uid (and gid, the same number) the team's jobs run as on every node: taken from
    # settings.ROTA_TEAM_UID_RANGE when the team is first saved, never reused by another team.
    unix_id = models.PositiveIntegerField(unique=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def save(self, *args, **kwargs):
        """A new team gets the lowest free uid of the range (under an advisory lock, so two teams created at
        once never pick the same one)."""
        if self.unix_id is not None:
            return super().save(*args, **kwargs)
        from django.db import transaction

        from portal.locks import TEAM_UNIX_ID, xact_lock

        with transaction.atomic():
            xact_lock(TEAM_UNIX_ID)
            self.unix_id = free_unix_id(Team.objects.all())
            return super().save(*args, **kwargs)

    @property
    def label(self) -> str:
        return self.display_name or self.name

    def clean(self) -> None:
        """The team tree stays a tree: a team is never its own ancestor."""
        from django.core.exceptions import ValidationError

        seen, node = set(), self.parent
        while node is not None:
            if node.pk == self.pk or node.pk in seen:
                raise ValidationError({"parent": f"{self.parent} is {self.name} itself or one of its teams: the "
                                                  "team tree cannot loop"})
            seen.add(node.pk)
            node = node.parent


def free_unix_id(teams) -> int:
    """The lowest id of settings.ROTA_TEAM_UID_RANGE that none of ``teams`` (a queryset) holds. Raises
    ValidationError (``unix_id``) when the range is used up."""
    from django.core.exceptions import ValidationError

    low, high = settings.ROTA_TEAM_UID_RANGE
    taken = set(teams.filter(unix_id__gte=low, unix_id__lte=high).values_list("unix_id", flat=True))
    if len(taken) > high - low:
        raise ValidationError({"unix_id": f"every uid of ROTA_TEAM_UID_RANGE ({low}-{high}) is taken by a team: "
                                          "widen the range to add teams"})
    return next(uid for uid in range(low, high + 1) if uid not in taken)


class Membership(models.Model):
    """A user's role in a team: ``member`` submits and sees the team's work; ``team-admin`` also manages
    the team's members and sees its costs."""

    MEMBER = "member"
    TEAM_ADMIN = "team-admin"
    ROLE_CHOICES = [(MEMBER, "member"), (TEAM_ADMIN, "team admin")]

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=20, choices=ROLE_CHOICES, default=MEMBER)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user", "team"], name="membership_unique_user_team"),
            models.CheckConstraint(condition=models.Q(role__in=["member", "team-admin"]), name="membership_role_valid"),
        ]
        ordering = ["team__name", "user__username"]

    def __str__(self) -> str:
        return f"{self.user} in {self.team} ({self.role})"


class AuditEntry(models.Model):
    """One governance change: who did what to which object, when, the object's state before and after
    (JSON; null for a creation or deletion) and the reason given. Written only by ``portal.audit``,
    in the same transaction as the change it records; never edited."""

    at = models.DateTimeField(auto_now_add=True, db_index=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="audit_entries"
    )
    actor_name = models.CharField(max_length=150, blank=True)  # kept if the user is deleted
    action = models.CharField(max_length=40)  # e.g. quota.update, node.drain
    object_type = models.CharField(max_length=40, db_index=True)  # quota, priority-class, pool, node
    object_id = models.CharField(max_length=64, blank=True)
    object_name = models.CharField(max_length=200, blank=True)
    before = models.JSONField(null=True, blank=True)
    after = models.JSONField(null=True, blank=True)
    reason = models.CharField(max_length=500, blank=True)

    class Meta:
        ordering = ["-at", "-id"]
        verbose_name_plural = "audit entries"

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M} {self.actor_name} {self.action} {self.object_name}"
