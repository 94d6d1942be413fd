"""Workload kinds and their defaults (priority class, preemptible, time limit). Pure data."""

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class KindDefaults:
    """Defaults applied at submit when the user leaves a field blank. Minutes for times."""

    priority_class: str
    preemptible: bool
    time_limit_minutes: int | None
    idle_timeout_minutes: int | None = None
    restart_on_failure: bool = False


KINDS: dict[str, KindDefaults] = {
    "training": KindDefaults("training", True, 7 * 24 * 60),
    "inference": KindDefaults("production-inference", False, None, restart_on_failure=True),
    "notebook": KindDefaults("interactive", False, 12 * 60, idle_timeout_minutes=60),
    "data-processing": KindDefaults("batch", True, 24 * 60),
    "evaluation": KindDefaults("batch", True, 12 * 60),
    "agent": KindDefaults("batch", True, 4 * 60),
}
KIND_CHOICES = [(k, k) for k in KINDS]
