"""Load Rota's demo data: a department with three teams, users in each role, priority classes, GPU models,
two pools, quotas, and a fake GPU cluster whose node agents get tokens and profiles under var/agents/.
Idempotent: running it again refreshes the node tokens and changes nothing else."""

import json
import sys
from decimal import Decimal
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management import call_command
from django.core.management.base import BaseCommand
from django.db import transaction
from django.utils import timezone

from portal.access import FINANCE_GROUP
from portal.models import Membership, Team
from scheduler.core.policies import DEFAULT_PRIORITY_CLASSES
from scheduler.models import GpuModel, Node, NodeToken, Pool, PriorityClass, Quota

DEMO_PASSWORD = "rota-demo-2026"
CLASS_DESCRIPTIONS = {
    "production-inference": "Serving traffic: never starved",
    "interactive": "Notebooks and interactive sessions",
    "training": "Training runs (checkpoint on SIGTERM)",
    "batch": "Data processing, evaluation, agent tasks",
    "best-effort": "Runs only on idle capacity",
}
GPU_MODELS = [
    ("h100-80gb", "NVIDIA H100 80GB HBM3", 81559),
    ("a100-40gb", "NVIDIA A100-SXM4-40GB", 40960),
    ("l40s-48gb", "NVIDIA L40S", 46068),
]
# node name, pool, profile file, labels
NODES = [
    ("gpu-h100-01", "train", "h100x8.json", {"network": "ib", "storage": "nvme"}),
    ("gpu-h100-02", "train", "h100x8.json", {"network": "ib", "storage": "nvme"}),
    ("gpu-a100-01", "inference", "a100x4.json", {"network": "eth"}),
]
# Classes only some teams may submit with: the one that preempts everyone's work serves vision's and nlp's
# production models; speech submits its inference services with another class.
RESTRICTED_CLASSES = {"production-inference": ["vision", "nlp"]}
USERS = [
    # username, team, role, staff
    ("alice", "vision", Membership.MEMBER, False),
    ("bob", "vision", Membership.TEAM_ADMIN, False),
    ("carol", "nlp", Membership.MEMBER, False),
    ("dave", "speech", Membership.TEAM_ADMIN, False),
    ("admin", "vision", Membership.MEMBER, True),
]
QUOTAS = [
    # team, model, guaranteed, limit, weight
    ("vision", "h100-80gb", 6, 12, 2),
    ("nlp", "h100-80gb", 6, 12, 2),
    ("speech", "h100-80gb", 2, 4, 1),
    ("vision", "a100-40gb", 1, 2, 1),
    ("nlp", "a100-40gb", 2, 4, 1),
    ("speech", "a100-40gb", 1, 2, 1),
]


class Command(BaseCommand):
    help = "Load the demo department, teams, users, quotas and fake GPU cluster (idempotent)."

    def add_arguments(self, parser):
        parser.add_argument("--agents-dir", default=str(settings.VAR_DIR / "agents"))
        parser.add_argument("--portal", default="http://127.0.0.1:8000")

    def handle(self, *args, agents_dir: str, portal: str, **options):
        agents = Path(agents_dir)
        agents.mkdir(parents=True, exist_ok=True)
        with transaction.atomic():
            tokens = self._seed()
            call_command("seed_rates", stdout=self.stdout)
        profiles_dir = Path(__file__).resolve().parents[2] / "agent" / "profiles"
        lines = []
        for number, (name, _pool, profile_file, _labels) in enumerate(NODES, start=1):
            profile = json.loads((profiles_dir / profile_file).read_text())
            profile["node"] = name
            (agents / f"{name}.json").write_text(json.dumps(profile, indent=2))
            token_path = agents / f"{name}.token"
            token_path.write_text(tokens[name])
            token_path.chmod(0o600)
            faults = agents / f"{name}.faults"
            faults.touch()
            lines.append(
                f"agent-{name}: sleep 3 && {sys.executable} -m scheduler.agent --portal {portal} "
                f"--token-file {token_path} "
                f"--gpu-backend fake --profile {agents / (name + '.json')} --work-dir {agents / name} "
                f"--fault-file {faults} "
                # a loopback address per node: each node hands out the same service ports (replicas, notebooks)
                f"--service-address 127.0.0.{number}"
            )
        (agents / "Procfile.agents").write_text("\n".join(lines) + "\n")
        self.stdout.write(self.style.SUCCESS(f"Demo data loaded; node tokens and profiles in {agents}"))

    def _seed(self) -> dict[str, str]:
        User = get_user_model()
        research, _ = Team.objects.get_or_create(name="research", defaults={"display_name": "Research (department)"})
        teams = {}
        for name, label in [("vision", "Vision"), ("nlp", "Language"), ("speech", "Speech")]:
            teams[name], _ = Team.objects.get_or_create(name=name, defaults={"display_name": label, "parent": research})
        for c in DEFAULT_PRIORITY_CLASSES:
            pc, created = PriorityClass.objects.get_or_create(name=c.name, defaults=dict(
                value=c.value, preemptible=c.preemptible, may_preempt=c.may_preempt,
                min_runtime_s=int(c.min_runtime_s), grace_period_s=int(c.grace_period_s),
                description=CLASS_DESCRIPTIONS.get(c.name, ""), restricted=c.name in RESTRICTED_CLASSES))
            if created and c.name in RESTRICTED_CLASSES:
                pc.teams.add(*[teams[t] for t in RESTRICTED_CLASSES[c.name]])
        models = {}
        for name, label, memory in GPU_MODELS:
            models[name], _ = GpuModel.objects.get_or_create(name=name, defaults={"display_name": label,
                                                                                  "memory_mb": memory})
        pools = {}
        for name, desc, members in [("train", "H100 training pool", ["vision", "nlp", "speech"]),
                                    ("inference", "A100 inference pool", ["vision", "nlp", "speech"])]:
            pools[name], _ = Pool.objects.get_or_create(name=name, defaults={"description": desc})
            pools[name].teams.add(*[teams[t] for t in members])
        for username, team, role, staff in USERS:
            user = User.objects.filter(username=username).first()
            if user is None:
                user = User.objects.create_user(username=username, password=DEMO_PASSWORD,
                                                email=f"{username}@example.com")
            if staff and not user.is_staff:
                user.is_staff = user.is_superuser = True
                user.save(update_fields=["is_staff", "is_superuser"])
            Membership.objects.get_or_create(user=user, team=teams[team], defaults={"role": role})
        finance, _ = Group.objects.get_or_create(name=FINANCE_GROUP)
        fiona = User.objects.filter(username="fiona").first()
        if fiona is None:
            fiona = User.objects.create_user(username="fiona", password=DEMO_PASSWORD, email="fiona@example.com")
        fiona.groups.add(finance)
        for team, model, guaranteed, limit, weight in QUOTAS:
            Quota.objects.get_or_create(team=teams[team], gpu_model=models[model], pool=None, defaults=dict(
                guaranteed=Decimal(guaranteed), limit=Decimal(limit), weight=Decimal(weight)))
        tokens = {}
        for name, pool, _profile, labels in NODES:
            node, _ = Node.objects.get_or_create(name=name, defaults={"pool": pools[pool], "labels": labels})
            NodeToken.objects.filter(node=node, revoked_at__isnull=True).update(revoked_at=timezone.now())
            _, tokens[name] = NodeToken.issue(node)
        return tokens
