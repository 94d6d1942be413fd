"""Forms of the team pages: adding a member (or changing a role) and removing one."""

from django import forms

from portal.models import Membership


class MemberForm(forms.Form):
    username = forms.CharField(max_length=150, label="Username")
    role = forms.ChoiceField(choices=Membership.ROLE_CHOICES, initial=Membership.MEMBER, label="Role")
