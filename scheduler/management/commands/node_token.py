"""Issue, rotate or revoke a node's token. The raw token is printed once (or written to ``--output`` with mode
0600); only its hash is stored. Every change lands in the audit log."""

import getpass
import os
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace

from django.core.management.base import BaseCommand, CommandError
from django.db import transaction
from django.utils import timezone

from portal.audit import audit_record
from scheduler.models import Node, NodeToken, Pool

MAX_GRACE_S = 7 * 24 * 3600


class Command(BaseCommand):
    help = ("issue NODE [--pool P] | rotate NODE [--grace S] | revoke NODE | list: manage node agent tokens "
            "(--output FILE writes a new token to FILE, readable by its owner only).")

    def add_arguments(self, parser):
        parser.add_argument("action", choices=["issue", "rotate", "revoke", "list"])
        parser.add_argument("node", nargs="?")
        parser.add_argument("--pool", help="with issue: create the node in this pool if it does not exist")
        parser.add_argument("--grace", type=int, default=0,
                            help="with rotate: seconds the old token keeps working (time to put the new one on "
                                 "the node; the agent reads its --token-file again when refused). Default 0")
        parser.add_argument("--output", type=Path, help="write the new token to this file (mode 0600), not stdout")
        parser.add_argument("--reason", default="", help="why (kept in the audit log)")

    def handle(self, *args, action: str, node: str | None, pool: str | None, grace: int, output: Path | None,
               reason: str, **options):
        if action == "list":
            now = timezone.now()
            for token in NodeToken.objects.select_related("node").order_by("node__name", "created_at"):
                if token.revoked_at is None:
                    state = "active"
                elif token.revoked_at > now:
                    state = f"active until {token.revoked_at:%Y-%m-%d %H:%M} (rotated)"
                else:
                    state = f"revoked {token.revoked_at:%Y-%m-%d %H:%M}"
                self.stdout.write(f"{token.node.name}\t{token.prefix}…\t{token.created_at:%Y-%m-%d %H:%M}\t{state}")
            return
        if not node:
            raise CommandError(f"{action} needs a node name")
        if not 0 <= grace <= MAX_GRACE_S:
            raise CommandError(f"--grace must be between 0 and {MAX_GRACE_S} seconds (a week); got {grace}")
        if grace and action != "rotate":
            raise CommandError("--grace only applies to rotate")
        if output is not None and action not in ("issue", "rotate"):
            raise CommandError("--output only applies to issue and rotate")
        with transaction.atomic():
            target, created = self._node(action, node, pool)
            now = timezone.now()
            active = NodeToken.objects.select_for_update().filter(NodeToken.usable_at(now), node=target)
            if action == "issue" and active.exists():
                raise CommandError(f"node {node} already has an active token: use rotate to replace it, or revoke "
                                   "to lock the node out")
            if action in ("rotate", "revoke"):
                if not active.exists():
                    raise CommandError(f"node {node} has no active token (issue gives it one)")
                until = now + timedelta(seconds=grace) if action == "rotate" else now
                # A token already rotated keeps its deadline, or gets this earlier one: a grace never grows.
                revoked = active.filter(revoked_at__isnull=True).update(revoked_at=until)
                active.filter(revoked_at__gt=until).update(revoked_at=until)
                when = f"in {grace} s" if grace else "now"
                self.stderr.write(f"revoked {revoked} token(s) of {node} ({when})")
            raw = None
            if action in ("issue", "rotate"):
                token, raw = NodeToken.issue(target)
            # No portal user runs this: the audit log names the shell account that did.
            actor = SimpleNamespace(pk=None, username=f"manage.py node_token ({_os_user()})")
            audit_record(actor=actor, action=f"node-token.{action}", object_type="node", object_id=target.pk,
                         object_name=target.name, reason=reason,
                         after={"token": f"{token.prefix}…" if raw else None, "grace_s": grace,
                                "node_created_in_pool": target.pool.name if created else None})
            if raw is not None and output is not None:
                self._write(output, raw)
        if raw is None:
            return
        if output is not None:
            self.stderr.write(f"new token for {node} written to {output} (mode 0600); point the agent's "
                              "--token-file at it")
        else:
            self.stderr.write(f"new token for {node} (shown once; store it in the agent's --token-file, mode 0600):")
            self.stdout.write(raw)

    def _node(self, action: str, name: str, pool: str | None) -> tuple[Node, bool]:
        target = Node.objects.select_related("pool").filter(name=name).first()
        if target is not None:
            if pool and pool != target.pool.name:
                raise CommandError(f"node {name} exists in pool {target.pool.name}; --pool only applies when issue "
                                   "creates a node (move a node under Django admin → Nodes)")
            return target, False
        if action != "issue" or not pool:
            raise CommandError(f"no node named {name!r} (issue --pool POOL creates it)")
        pool_obj = Pool.objects.filter(name=pool).first()
        if pool_obj is None:
            raise CommandError(f"no pool named {pool!r}")
        target = Node(name=name, pool=pool_obj)
        target.full_clean()
        target.save()
        return target, True

    @staticmethod
    def _write(path: Path, raw: str) -> None:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "w") as f:
                os.fchmod(f.fileno(), 0o600)  # an existing file keeps its mode otherwise
                f.write(raw + "\n")
        except OSError as error:
            raise CommandError(f"--output: {error.strerror}: {path}") from error


def _os_user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return f"uid {os.getuid()}"
