"""How a job runs on a node: the image it runs in, the identity it runs as and the limits it is held to.
One answer for the node (each heartbeat's assignments, docs/node-protocol.md) and for people (the job page's
"How it runs", the API)."""

from django.conf import settings

from portal.models import Team
from scheduler.images import image_resolve
from scheduler.models import Job, KindImage, Node


def kind_images() -> dict[str, str]:
    """The default image of each kind a platform admin set (one query); a notebook's is
    settings.ROTA_NOTEBOOK_IMAGE (JupyterLab) until one is set."""
    return {"notebook": settings.ROTA_NOTEBOOK_IMAGE, **dict(KindImage.objects.values_list("kind", "image"))}


def job_image(job: Job, defaults: dict[str, str] | None = None) -> str:
    """The image ``job`` runs in: its own, else its kind's default, else settings.ROTA_DEFAULT_IMAGE
    (``defaults``: ``kind_images()``, read once by callers that ask for many jobs)."""
    return image_resolve(job.image, job.kind, kind_images() if defaults is None else defaults,
                         settings.ROTA_DEFAULT_IMAGE)


def run_as(team: Team) -> dict:
    """The unprivileged identity a team's jobs run as on every node: uid and gid are the team's ``unix_id``."""
    return {"uid": team.unix_id, "gid": team.unix_id, "team": team.name}


def job_limits(job: Job, *, nodes: int = 1, share: float = 1.0, node: Node | None = None,
               node_gpus: int | None = None) -> dict:
    """The cgroup limits of one node's part of ``job``: its CPU and memory request split evenly over its
    ``nodes`` (null: no request), and settings.ROTA_JOB_PIDS_LIMIT processes. A job on a ``share`` (< 1) of one
    GPU that requests no CPUs or memory gets that share of the ``node``'s, per GPU, where the node reported
    its CPUs and memory (``node_gpus``: its devices, counted here when not given)."""
    nodes = max(1, nodes)
    cpus = job.cpus / nodes if job.cpus else None
    memory_mb = job.memory_gb * 1024 // nodes if job.memory_gb else None
    if share < 1 and node is not None:
        if node_gpus is None:
            node_gpus = node.gpus.filter(present=True).count()
        gpus_on_node = max(1, node_gpus)
        if cpus is None and node.cpus:
            cpus = round(node.cpus * share / gpus_on_node, 2)
        if memory_mb is None and node.memory_mb:
            memory_mb = int(node.memory_mb * share / gpus_on_node)
    return {"cpus": cpus, "memory_mb": memory_mb, "pids": settings.ROTA_JOB_PIDS_LIMIT}


def job_how_it_runs(job: Job, allocations: list) -> dict:
    """What the job page shows under "How it runs": the image, the identity, the limits of each node's part
    (as its nodes are told: see ``node_assignments``) and the executor of each node it holds devices on
    (``allocations``: its current attempt's, nodes loaded)."""
    nodes = {a.node_id: a.node for a in allocations}
    share = min((a.share for a in allocations), default=1.0)
    node = next(iter(nodes.values()), None)
    return {
        "image": job_image(job),
        "run_as": run_as(job.team),
        "limits": job_limits(job, nodes=len(nodes) or job.nodes or 1, share=share, node=node),
        "executors": [{"node": n.name, "executor": n.executor or "unknown", "isolates": n.isolates_tenants,
                       "runtime": n.executor_info.get("runtime", "")} for n in nodes.values()],
    }
