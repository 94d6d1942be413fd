"""Scheduler domain models: the cluster (GPU models, pools, nodes, GPUs), quotas, priority classes,
jobs with their history, and allocations (the source of truth for who holds which GPU)."""

from scheduler.models.arrays import JobArray
from scheduler.models.beats import SchedulerBeat
from scheduler.models.cluster import Gpu, GpuModel, Node, NodeToken, Pool
from scheduler.models.dependencies import JobDependency
from scheduler.models.gateway import InferenceService, ServiceKey, ServiceLatency, ServiceTraffic
from scheduler.models.jobs import Allocation, Job, JobLog, JobTransition, KindImage, Preemption, PriorityClass
from scheduler.models.loans import QuotaLoan
from scheduler.models.notebooks import NotebookServer
from scheduler.models.policies import PolicyActivation, PolicyVersion, SchedulingPolicy
from scheduler.models.quota import Quota
from scheduler.models.slurm import SlurmAccounting
from scheduler.models.telemetry import AdmissionTally, GpuSample, GpuSampleRollup, JobEvent
from scheduler.models.templates import JobTemplate
from scheduler.models.whatif import WhatIfRun

__all__ = [
    "Allocation",
    "Gpu",
    "GpuSample",
    "GpuSampleRollup",
    "GpuModel",
    "InferenceService",
    "Job",
    "JobArray",
    "JobDependency",
    "AdmissionTally",
    "JobEvent",
    "JobLog",
    "JobTemplate",
    "JobTransition",
    "KindImage",
    "Node",
    "NodeToken",
    "NotebookServer",
    "PolicyActivation",
    "PolicyVersion",
    "Pool",
    "Preemption",
    "PriorityClass",
    "Quota",
    "SlurmAccounting",
    "QuotaLoan",
    "SchedulerBeat",
    "SchedulingPolicy",
    "ServiceKey",
    "ServiceLatency",
    "ServiceTraffic",
    "WhatIfRun",
]
