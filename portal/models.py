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
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def label(self) -> str:
        return self.display_name or self.name


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
