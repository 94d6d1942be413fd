#!/usr/bin/env python3
"""Check Rota's NVML GPU backend on this machine: print what the node agent would see and report.

    .venv/bin/python scripts/check_nvml.py [--samples 3] [--interval 1]

Prints the driver/CUDA versions, every schedulable device (MIG slices included) with its Rota model slug,
a few telemetry samples (``None`` is "n/a": the device does not support that metric) and any XID/ECC
events. Exits 0 with a clear message when NVML is not present (no driver, no GPU), 1 on a backend error.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scheduler.agent.gpu.nvml import NvmlBackend, NvmlUnavailable  # noqa: E402
from scheduler.agent.wire import gpu_entry, telemetry_entries  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    """Discover, sample and poll events through ``NvmlBackend``; print each step."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=3)
    parser.add_argument("--interval", type=float, default=1.0)
    args = parser.parse_args(argv)
    try:
        backend = NvmlBackend()
    except NvmlUnavailable as error:
        print(f"NVML is not available on this machine, nothing to check: {error}")
        return 0
    try:
        system = backend.system_info()
        print(
            f"host {system.hostname}: driver {system.driver_version}, CUDA {system.cuda_version}, "
            f"{system.cpus} CPUs, {system.memory_mb} MiB RAM"
        )
        gpus = backend.discover()
        print(f"{len(gpus)} schedulable device(s):")
        for gpu in gpus:
            print("  ", gpu_entry(gpu))
        for round_ in range(args.samples):
            if round_:
                time.sleep(args.interval)
            samples = backend.sample()
            events = backend.events()
            print(f"sample {round_ + 1}:")
            for row in telemetry_entries(samples, {}):
                print("  ", row)
            for sample in samples:
                for process in sample.processes:
                    print(f"   process {process.pid} on {sample.uuid}: {process.used_mb} MiB")
            for event in events:
                print(f"   event {event.kind} {event.code} on GPU {event.index} ({event.uuid})")
        print("NVML backend OK")
        return 0
    except Exception as error:  # a check script: say what broke, plainly
        print(f"NVML backend FAILED: {error.__class__.__name__}: {error}")
        return 1
    finally:
        backend.close()


if __name__ == "__main__":
    sys.exit(main())
