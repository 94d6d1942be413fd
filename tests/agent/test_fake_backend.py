"""The profile-driven fake GPU backend: shipped profiles, MIG layouts, load that follows jobs, faults."""

import json
from pathlib import Path

import pytest

from scheduler.agent.gpu import open_backend
from scheduler.agent.gpu.base import ECC, LOST, XID
from scheduler.agent.gpu.fake import FakeBackend
from scheduler.agent.gpu.models import model_slug
from scheduler.agent.gpu.profile import ProfileError, load_profile, parse_profile

PROFILES = Path(__file__).resolve().parents[2] / "scheduler" / "agent" / "profiles"


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def node(**extra: object) -> dict:
    return {"node": "n1", "gpus": [{"model": "h100-80gb", "count": 4}], **extra}


@pytest.mark.parametrize(
    ("profile", "count", "model", "memory_mb"),
    [("h100x8", 8, "h100-80gb", 81559), ("a100x4", 4, "a100-40gb", 40960), ("l40sx4", 4, "l40s-48gb", 46068)],
)
def test_it_ships_profiles_for_the_demo_node_types(
    profile: str, count: int, model: str, memory_mb: int
) -> None:
    gpus = FakeBackend(load_profile(PROFILES / f"{profile}.json")).discover()
    assert [g.index for g in gpus] == list(range(count))
    assert {(g.model, g.memory_mb) for g in gpus} == {(model, memory_mb)}
    assert all(model_slug(g.name, g.memory_mb) == g.model for g in gpus)  # names and slugs agree


def test_it_finds_a_shipped_profile_by_its_bare_name() -> None:
    assert load_profile("a100x4").node == "gpu-a100-01"


def test_it_gives_stable_distinct_uuids_per_node_name() -> None:
    first = [g.uuid for g in FakeBackend(parse_profile(node())).discover()]
    again = [g.uuid for g in FakeBackend(parse_profile(node())).discover()]
    other = [g.uuid for g in FakeBackend(parse_profile({**node(), "node": "n2"})).discover()]
    assert first == again
    assert len(set(first)) == 4 and not set(first) & set(other)
    assert all(u.startswith("GPU-") for u in first)


def test_a_node_name_given_to_it_names_the_node_and_its_gpu_uuids() -> None:
    """Two agents on one shipped profile with their own --hostname are two nodes with distinct GPUs."""
    profile = parse_profile(node())
    renamed = FakeBackend(profile, node="gpu-h100-07")
    assert renamed.system_info().hostname == "gpu-h100-07"
    assert not {g.uuid for g in renamed.discover()} & {g.uuid for g in FakeBackend(profile).discover()}
    assert [g.uuid for g in renamed.discover()] == [
        g.uuid for g in FakeBackend(parse_profile({**node(), "node": "gpu-h100-07"})).discover()]
    assert open_backend("fake", profile="h100x8", node="x").system_info().hostname == "x"


def test_it_splits_a_mig_gpu_into_schedulable_slices_with_unique_indexes() -> None:
    profile = {
        "node": "mig",
        "gpus": [
            {"model": "a100-40gb", "count": 1},
            {"model": "a100-40gb", "count": 1, "mig": ["3g.20gb", "1g.5gb"]},
        ],
    }
    gpus = FakeBackend(parse_profile(profile)).discover()
    whole, first, second = gpus
    assert (whole.index, whole.mig, whole.model) == (0, False, "a100-40gb")
    assert (first.index, first.physical_index, first.model, first.memory_mb) == (
        110,
        1,
        "a100-3g.20gb",
        20480,
    )
    assert (second.index, second.model, second.mig_profile) == (111, "a100-1g.5gb", "1g.5gb")
    assert first.uuid.startswith("MIG-") and first.parent_uuid == second.parent_uuid


def test_its_utilization_follows_the_jobs_the_agent_reports() -> None:
    backend = FakeBackend(parse_profile(node()))
    busy = backend.discover()[2]
    backend.set_busy({busy.uuid: 4242})
    samples = {s.uuid: s for s in backend.sample()}
    assert samples[busy.uuid].util_pct >= 85 and samples[busy.uuid].mem_used_mb > 0
    assert samples[busy.uuid].processes[0].pid == 4242
    idle = [s for uuid, s in samples.items() if uuid != busy.uuid]
    assert all(s.util_pct == 0 and s.mem_used_mb == 0 and not s.processes for s in idle)
    backend.set_busy({})
    assert all(s.util_pct == 0 for s in backend.sample())


def test_it_fires_scripted_faults_at_their_time() -> None:
    clock = Clock()
    faults = [
        {"at_s": 30, "gpu": 3, "xid": 79},
        {"at_s": 60, "gpu": 1, "ecc": 2},
        {"at_s": 90, "gpu": 0, "lost": True},
    ]
    backend = FakeBackend(parse_profile(node(faults=faults)), clock=clock)
    clock.now += 29
    assert backend.events() == []
    clock.now += 1
    [xid] = backend.events()
    assert (xid.kind, xid.code, xid.index) == (XID, 79, 3)
    clock.now += 30
    [ecc] = backend.events()
    assert (ecc.kind, ecc.code, ecc.index) == (ECC, 2, 1)
    assert {s.index: s.ecc_uncorrected for s in backend.sample()}[1] == 2
    clock.now += 30
    assert [(e.kind, e.index) for e in backend.events()] == [(LOST, 0)]
    lost = backend.sample()[0]
    assert lost.lost and lost.util_pct is None and lost.temperature_c is None


def test_it_applies_faults_appended_to_its_fault_file_at_runtime(tmp_path: Path) -> None:
    fault_file = tmp_path / "faults"
    backend = FakeBackend(parse_profile(node(fault_file=str(fault_file))))
    assert backend.events() == []
    fault_file.write_text(json.dumps({"gpu": 2, "xid": 48}) + "\n" + "not json\n" + '{"gpu": 1, "xi')
    assert [(e.kind, e.code, e.index) for e in backend.events()] == [(XID, 48, 2)]
    with fault_file.open("a") as handle:
        handle.write('d": 79}\n{"gpu": 0, "temperature_c": 97}\n')
    assert [(e.code, e.index) for e in backend.events()] == [(79, 1)]
    assert backend.sample()[0].temperature_c == 97


def test_a_fault_on_a_mig_gpu_reaches_every_slice_of_it() -> None:
    profile = {"node": "m", "gpus": [{"model": "a100-40gb", "mig": ["3g.20gb", "3g.20gb"]}]}
    profile["faults"] = [{"gpu": 0, "xid": 79}]
    assert [e.index for e in FakeBackend(parse_profile(profile)).events()] == [100, 101]


@pytest.mark.parametrize(
    ("profile", "field"),
    [
        ({"gpus": [{"model": "h100-80gb"}]}, "node"),
        ({"node": "n", "gpus": []}, "gpus"),
        ({"node": "n", "gpus": [{"model": "tpu-v9"}]}, "gpus[0]"),
        ({"node": "n", "gpus": [{"model": "h100-80gb", "count": 0}]}, "gpus[0].count"),
        ({"node": "n", "gpus": [{"model": "a100-40gb", "mig": ["big"]}]}, "mig"),
        ({**node(), "faults": [{"gpu": 9, "xid": 79}]}, "faults[0].gpu"),
        ({**node(), "faults": [{"gpu": 0}]}, "faults[0]"),
        ({**node(), "faults": [{"gpu": 0, "xid": "79"}]}, "faults[0].xid"),
    ],
)
def test_it_rejects_a_profile_that_cannot_describe_a_node(profile: dict, field: str) -> None:
    with pytest.raises(ProfileError, match=field.replace("[", r"\[").replace("]", r"\]")):
        parse_profile(profile)


def test_auto_falls_back_to_the_fake_when_nvml_cannot_start() -> None:
    class NoLibrary:
        class NVMLError(Exception):
            pass

        def nvmlInit(self) -> None:  # noqa: N802 (pynvml's name)
            raise self.NVMLError("NVML Shared Library Not Found")

    backend = open_backend("auto", profile="l40sx4", nvml=NoLibrary())
    assert backend.kind == "fake" and len(backend.discover()) == 4


def test_the_shipped_mig_profile_offers_whole_gpus_and_slices_with_unique_indexes() -> None:
    gpus = FakeBackend(load_profile("a100x4-mig")).discover()
    assert [g.index for g in gpus if not g.mig] == [0, 1]
    assert [g.index for g in gpus if g.mig] == [120, 121, 122, 123, 130, 131, 132, 133]
    assert len({g.uuid for g in gpus}) == len(gpus) == 10
