"""The local Slurm cluster of the tests, now ``scheduler/slurm/localcluster.py`` (the demo starts it too); this
import path stays for the code that uses it (``python -m tests.slurm.cluster up|down DIR`` works as before)."""

import sys

from scheduler.slurm.localcluster import (
    DAEMONS,
    NVIDIA_MAJOR,
    REQUIRED,
    SlurmCluster,
    SlurmClusterError,
    free_port,
    main,
)

__all__ = ["DAEMONS", "NVIDIA_MAJOR", "REQUIRED", "SlurmCluster", "SlurmClusterError", "free_port", "main"]

if __name__ == "__main__":
    sys.exit(main())
