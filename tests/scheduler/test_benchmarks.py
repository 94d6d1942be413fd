"""The benchmarks run and report consistent figures (their speed is measured, never asserted)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import psycopg

from scheduler.bench import main as bench_main

ROOT = Path(__file__).resolve().parents[2]


def test_the_engine_benchmark_reports_its_phases_and_a_clean_cycle(capsys):
    assert bench_main(["--pending", "300", "--nodes", "20", "--repeat", "1", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["pending"] > 300 // 2 and result["nodes"] == 20 and result["gpus"] == 160
    assert set(result["phases_ms"]) >= {"index", "order", "place", "estimate"}
    assert result["violations"] == 0 and result["first_cycle"]["violations"] == 0
    # The ratio is of the unrounded times; each printed time is rounded to 0.01 ms, so the ratio of the printed
    # figures may differ from it by that much (a 0.09 ms sort is anywhere in 0.085..0.095 ms).
    cycle, sort = result["cycle_ms"], result["sort_ms"]
    low, high = (cycle - 0.005) / (sort + 0.005), (cycle + 0.005) / (sort - 0.005)
    assert sort > 0 and low - 0.005 <= result["ratio"] <= high + 0.005


def test_the_live_cycle_benchmark_runs_cycles_on_its_own_scratch_database():
    name = os.environ.get("ROTA_TEST_DATABASE", "test_rota") + "_bench_cycle"
    env = {**os.environ, "REDIS_URL": "filesystem"}
    env.pop("DATABASE_URL", None)
    try:
        proc = subprocess.run([sys.executable, "bench/cycle.py", "--pending", "120", "--nodes", "12", "--cycles", "2",
                               "--database", name, "--json"], cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=300)
        assert proc.returncode == 0, proc.stderr[-2000:]
        result = json.loads(proc.stdout.strip().splitlines()[-1])
        assert result["nodes"] == 12 and result["gpus"] == 96 and result["pending"] == 120
        first, second = result["cycles"]
        # Nothing ends here (no node agents): each cycle's waiting jobs are the last cycle's, less its starts.
        assert first["started"] > 0 and first["pending"] == 120 - first["started"]
        assert second["pending"] == first["pending"] - second["started"]
        assert all(set(c) >= {"snapshot", "engine", "persist", "total_ms"} for c in result["cycles"])
        assert result["steady_median_ms"]["total_ms"] == second["total_ms"]
    finally:
        base = os.environ.get("ROTA_BENCH_DATABASE_URL", "postgres://postgres@localhost:5432")  # as the bench
        with psycopg.connect(f"{base}/postgres", autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
