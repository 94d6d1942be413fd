"""Workload kinds and their defaults (priority class, preemptible, time limit, command). Pure data."""

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class KindDefaults:
    """Defaults applied at submit when the user leaves a field blank. Minutes for times."""

    priority_class: str
    preemptible: bool
    time_limit_minutes: int | None
    idle_timeout_minutes: int | None = None
    restart_on_failure: bool = False
    command: str = ""  # what a job of the kind runs when its command is left blank ("": it must name one)


# A notebook left without a command runs JupyterLab on its port under the portal proxy's base URL
# (scheduler.notebooks). Its token comes from JUPYTER_TOKEN in the environment, never the command line. A port
# taken already is an error, not the next port (the portal would reach another job's server there).
NOTEBOOK_COMMAND = (
    'exec jupyter lab --no-browser --ip=0.0.0.0 --port="$ROTA_PORT" --ServerApp.base_url="$ROTA_NOTEBOOK_BASE_URL" '
    '--ServerApp.root_dir="$HOME" --ServerApp.allow_remote_access=True --ServerApp.port_retries=0 '
    "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"
)


KINDS: dict[str, KindDefaults] = {
    "training": KindDefaults("training", True, 7 * 24 * 60),
    "inference": KindDefaults("production-inference", False, None, restart_on_failure=True),
    "notebook": KindDefaults("interactive", False, 12 * 60, idle_timeout_minutes=60, command=NOTEBOOK_COMMAND),
    "data-processing": KindDefaults("batch", True, 24 * 60),
    "evaluation": KindDefaults("batch", True, 12 * 60),
    "agent": KindDefaults("batch", True, 4 * 60),
}
KIND_CHOICES = [(k, k) for k in KINDS]
