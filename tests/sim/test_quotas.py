"""Team quotas: derived from the trace's GPU-seconds, or read from a YAML file."""

import pytest

from scheduler.sim.cluster import load_cluster
from scheduler.sim.quotas import derive_quotas, load_quotas, resolve_quotas
from scheduler.sim.trace import Trace, TraceError, TraceJob


def trace_of(*jobs: tuple[str, float, int]) -> Trace:
    return Trace(
        jobs=tuple(
            TraceJob(id=i, submit_time=0.0, duration=d, gpus=g, team=t)
            for i, (t, d, g) in enumerate(jobs, start=1)
        )
    )


def test_it_derives_guarantees_proportional_to_each_teams_gpu_seconds_for_every_model():
    trace = trace_of(("a", 300, 1), ("b", 100, 1), ("a", 50, 2))  # a: 400 GPU-s, b: 100 GPU-s
    cluster = load_cluster("2x8:v100@train,1x4:a100@infer")
    setup = derive_quotas(trace, cluster)
    by_key = {(q.team, q.gpu_model): q for q in setup.quotas}
    assert by_key[("a", "v100")].guaranteed == pytest.approx(12.8)
    assert by_key[("b", "v100")].guaranteed == pytest.approx(3.2)
    assert by_key[("a", "a100")].guaranteed == pytest.approx(3.2)
    assert all(q.limit is None for q in setup.quotas)
    assert sum(q.guaranteed for q in setup.quotas if q.gpu_model == "v100") <= 16
    assert {t.name: t.pools for t in setup.teams}["b"] == frozenset({"train", "infer"})
    assert setup.guaranteed_by_team() == pytest.approx({"a": 16.0, "b": 4.0})


def test_it_reads_quotas_per_model_shorthand_percentages_defaults_and_pools(tmp_path):
    path = tmp_path / "quotas.yaml"
    path.write_text(
        "default: {guaranteed: 1}\n"
        "teams:\n"
        "  a: {guaranteed: 25%, limit: 50%, weight: 2}\n"
        "  b:\n"
        "    pools: [train]\n"
        "    parent: research\n"
        "    quotas:\n"
        "      v100: {guaranteed: 4, limit: 8, non_lendable: 2, pool: train}\n"
    )
    trace = trace_of(("a", 1, 1), ("b", 1, 1), ("c", 1, 1))
    cluster = load_cluster("2x8:v100@train,1x4:a100@infer")
    setup = load_quotas(path, trace, cluster)
    by_key = {(q.team, q.gpu_model): q for q in setup.quotas}
    assert (by_key[("a", "v100")].guaranteed, by_key[("a", "v100")].limit, by_key[("a", "v100")].weight) == (
        4,
        8,
        2,
    )
    assert (by_key[("a", "a100")].guaranteed, by_key[("a", "a100")].limit) == (1, 2)
    assert ("b", "a100") not in by_key  # b has no a100 quota: it may not use a100
    assert by_key[("b", "v100")].pool == "train" and by_key[("b", "v100")].non_lendable == 2
    assert by_key[("c", "v100")].guaranteed == 1 and by_key[("c", "v100")].limit is None
    teams = {t.name: t for t in setup.teams}
    assert teams["b"].pools == frozenset({"train"}) and teams["b"].parent == "research"
    assert setup.limits()[("a", "v100")] == 8


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("teams:\n  a: {guaranteed: lots}\n", "teams.a.guaranteed: expected a number >= 0 or a percentage"),
        ("teams:\n  a: {guaranteed: 8, limit: 4}\n", "teams.a: limit 4 is below guaranteed 8"),
        (
            "teams:\n  a: {quotas: {h100: {guaranteed: 1}}}\n",
            "teams.a.quotas.h100: the cluster has no GPU model",
        ),
        ("teams:\n  a: {pools: [nowhere]}\n", "teams.a.pools: expected a list of pools among default"),
        ("teams:\n  a: {guaranteed: 1, colour: red}\n", r"teams.a: unknown key\(s\) colour"),
        ("teams:\n  a: {quotas: {v100: {size: 1}}}\n", r"teams.a.quotas.v100: unknown key\(s\) size"),
        ("teams: [a, b]\n", "expected a mapping with a 'teams' mapping"),
    ],
)
def test_it_names_the_file_and_key_of_a_bad_quota(tmp_path, text, message):
    path = tmp_path / "q.yaml"
    path.write_text(text)
    trace = trace_of(("a", 1, 1))
    cluster = load_cluster("1x8:v100")
    with pytest.raises(TraceError, match=message):
        load_quotas(path, trace, cluster)


def test_it_derives_quotas_when_no_file_is_given():
    trace = trace_of(("a", 1, 1))
    assert resolve_quotas(None, trace, load_cluster("1x8:v100")).source.startswith("derived")
