"""Issue, rotate or revoke a node's token. The raw token is printed once; only its hash is stored."""

from django.core.management.base import BaseCommand, CommandError
from django.db import transaction
from django.utils import timezone

from scheduler.models import Node, NodeToken, Pool


class Command(BaseCommand):
    help = "issue NODE [--pool P] | rotate NODE | revoke NODE | list: manage node agent tokens."

    def add_arguments(self, parser):
        parser.add_argument("action", choices=["issue", "rotate", "revoke", "list"])
        parser.add_argument("node", nargs="?")
        parser.add_argument("--pool", help="with issue: create the node in this pool if it does not exist")

    def handle(self, *args, action: str, node: str | None, pool: str | None, **options):
        if action == "list":
            for token in NodeToken.objects.select_related("node").order_by("node__name", "created_at"):
                state = f"revoked {token.revoked_at:%Y-%m-%d %H:%M}" if token.revoked_at else "active"
                self.stdout.write(f"{token.node.name}\t{token.prefix}…\t{token.created_at:%Y-%m-%d %H:%M}\t{state}")
            return
        if not node:
            raise CommandError(f"{action} needs a node name")
        with transaction.atomic():
            target = Node.objects.filter(name=node).first()
            if target is None:
                if action != "issue" or not pool:
                    raise CommandError(f"no node named {node!r} (issue --pool POOL creates it)")
                pool_obj = Pool.objects.filter(name=pool).first()
                if pool_obj is None:
                    raise CommandError(f"no pool named {pool!r}")
                target = Node(name=node, pool=pool_obj)
                target.full_clean()
                target.save()
            active = NodeToken.objects.filter(node=target, revoked_at__isnull=True)
            if action in ("rotate", "revoke"):
                revoked = active.update(revoked_at=timezone.now())
                self.stderr.write(f"revoked {revoked} token(s) of {node}")
            if action in ("issue", "rotate"):
                _, raw = NodeToken.issue(target)
                self.stderr.write(f"new token for {node} (shown once; store it in the agent's --token-file):")
                self.stdout.write(raw)
