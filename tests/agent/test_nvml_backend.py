"""The NVML backend against a stand-in ``pynvml``: identity, MIG, units, n/a metrics, lost GPUs, XIDs."""

import pynvml
import pytest

from scheduler.agent.gpu import open_backend
from scheduler.agent.gpu.base import ECC, LOST, XID
from scheduler.agent.gpu.nvml import NvmlBackend, NvmlUnavailable, cuda_version_text
from tests.agent.nvml_standin import Device, StandInNvml

MIB = 1024 * 1024


def h100(n: int, **extra: object) -> Device:
    return Device(uuid=f"GPU-h100-{n}", name="NVIDIA H100 80GB HBM3", total_bytes=81559 * MIB, **extra)


def a100_in_mig_mode() -> Device:
    slices = [
        Device(
            "MIG-a", "NVIDIA A100-SXM4-40GB MIG 3g.20gb", 19968 * MIB, used_bytes=512 * MIB, gpu_instance=1
        ),
        Device("MIG-b", "NVIDIA A100-SXM4-40GB MIG 1g.5gb", 4864 * MIB, gpu_instance=2),
    ]
    return Device("GPU-a100-0", "NVIDIA A100-SXM4-40GB", 40960 * MIB, mig_slices=slices)


def test_the_stand_in_only_uses_names_that_real_pynvml_has() -> None:
    names = [n for n in vars(StandInNvml) if n.startswith(("nvml", "NVML"))]
    assert names and all(hasattr(pynvml, name) for name in names), [
        n for n in names if not hasattr(pynvml, n)
    ]


def test_it_reports_gpu_identity_with_model_slugs() -> None:
    backend = NvmlBackend(StandInNvml([h100(0), h100(1)]), hostname="gpu-1")
    gpus = backend.discover()
    assert [(g.index, g.uuid, g.model, g.memory_mb, g.mig) for g in gpus] == [
        (0, "GPU-h100-0", "h100-80gb", 81559, False),
        (1, "GPU-h100-1", "h100-80gb", 81559, False),
    ]
    info = backend.system_info()
    assert (info.hostname, info.driver_version, info.cuda_version) == ("gpu-1", "550.54.15", "12.4")
    assert info.cpus > 0 and info.memory_mb > 0


def test_it_lists_mig_slices_as_separate_schedulable_devices() -> None:
    gpus = NvmlBackend(StandInNvml([h100(0), a100_in_mig_mode()])).discover()
    assert [(g.index, g.uuid, g.model, g.memory_mb, g.mig) for g in gpus] == [
        (0, "GPU-h100-0", "h100-80gb", 81559, False),
        (110, "MIG-a", "a100-3g.20gb", 19968, True),
        (111, "MIG-b", "a100-1g.5gb", 4864, True),
    ]
    assert gpus[1].parent_uuid == "GPU-a100-0" and gpus[1].physical_index == 1


def test_it_converts_units_once_at_the_boundary() -> None:
    nvml = StandInNvml([h100(0, used_bytes=30000 * MIB, util=87, power_mw=410_500, temperature=61, ecc=0)])
    nvml.devices[0].processes = [(4242, 29000 * MIB), (4243, None)]
    backend = NvmlBackend(nvml)
    backend.discover()
    [sample] = backend.sample()
    assert (sample.util_pct, sample.mem_used_mb, sample.temperature_c) == (87.0, 30000, 61)
    assert (sample.power_w, sample.sm_clock_mhz, sample.ecc_uncorrected) == (410.5, 1980, 0)
    assert [(p.pid, p.used_mb) for p in sample.processes] == [(4242, 29000), (4243, None)]
    assert cuda_version_text(12040) == "12.4" and cuda_version_text(11080) == "11.8"


def test_a_metric_the_device_does_not_support_is_na_not_a_crash() -> None:
    unsupported = {"nvmlDeviceGetTotalEccErrors", "nvmlDeviceGetPowerUsage", "nvmlDeviceGetUtilizationRates"}
    nvml = StandInNvml([h100(0, unsupported=unsupported)])
    backend = NvmlBackend(nvml)
    backend.discover()
    [sample] = backend.sample()
    assert (sample.ecc_uncorrected, sample.power_w, sample.util_pct) == (None, None, None)
    assert sample.temperature_c == 40 and not sample.lost


def test_a_lost_gpu_reads_as_lost_and_emits_one_lost_event() -> None:
    nvml = StandInNvml([h100(0), h100(1)])
    backend = NvmlBackend(nvml)
    backend.discover()
    nvml.devices[1].lost = True
    samples = backend.sample()
    assert [s.lost for s in samples] == [False, True]
    assert samples[1].util_pct is None
    backend.sample()
    assert [(e.kind, e.uuid) for e in backend.events()] == [(LOST, "GPU-h100-1")]


def test_a_gpu_lost_before_discovery_is_left_out() -> None:
    backend = NvmlBackend(StandInNvml([h100(0), h100(1, lost=True)]))
    assert [g.uuid for g in backend.discover()] == ["GPU-h100-0"]


def test_it_polls_xid_events_without_blocking_and_maps_them_to_devices() -> None:
    nvml = StandInNvml([h100(0), h100(1)])
    backend = NvmlBackend(nvml)
    backend.discover()
    assert {uuid for uuid, _ in nvml.registered} == {"GPU-h100-0", "GPU-h100-1"}
    assert backend.events() == []
    nvml.xid(nvml.devices[1], 79)
    [event] = backend.events()
    assert (event.kind, event.code, event.uuid, event.index) == (XID, 79, "GPU-h100-1", 1)


def test_an_xid_in_one_gpu_instance_is_reported_on_that_mig_slice_only() -> None:
    nvml = StandInNvml([a100_in_mig_mode()])
    backend = NvmlBackend(nvml)
    backend.discover()
    nvml.xid(nvml.devices[0], 43, gpu_instance=2)
    nvml.xid(nvml.devices[0], 79)
    assert [(e.code, e.uuid) for e in backend.events()] == [(43, "MIG-b"), (79, "MIG-a"), (79, "MIG-b")]


def test_a_rising_uncorrected_ecc_count_becomes_an_ecc_event() -> None:
    nvml = StandInNvml([h100(0)])
    backend = NvmlBackend(nvml)
    backend.discover()
    backend.sample()
    nvml.devices[0].ecc = 2
    assert backend.sample()[0].ecc_uncorrected == 2
    assert [(e.kind, e.code) for e in backend.events()] == [(ECC, 2)]


def test_closing_shuts_nvml_down() -> None:
    nvml = StandInNvml([h100(0)])
    backend = NvmlBackend(nvml)
    backend.discover()
    backend.close()
    assert nvml.shut_down


def test_auto_picks_nvml_when_it_starts_and_nvml_fails_loudly_when_it_does_not() -> None:
    assert open_backend("auto", nvml=StandInNvml([h100(0)])).kind == "nvml"

    class Broken(StandInNvml):
        def nvmlInit(self) -> None:  # noqa: N802
            raise self.NVMLError(12)

    with pytest.raises(NvmlUnavailable):
        open_backend("nvml", nvml=Broken([]))
