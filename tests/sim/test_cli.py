"""``python -m scheduler.sim``: arguments, output forms and exit codes, on a tiny generic CSV."""

import json
import subprocess
import sys

import pytest

from scheduler.sim.cli import main

JOBS = "job_id,submit_time,duration,num_gpus,team\na,0,100,2,x\nb,0,50,1,y\nc,0,30,1,x\n"


@pytest.fixture
def trace_file(tmp_path):
    path = tmp_path / "jobs.csv"
    path.write_text(JOBS)
    return path


def test_it_prints_json_with_the_run_context_and_one_result_per_policy(trace_file, capsys):
    code = main(
        [
            "--trace",
            str(trace_file),
            "--cluster",
            "1x2:v100",
            "--compare",
            "fifo,rota",
            "--json",
            "--interval",
            "0",
            "--no-progress",
        ]
    )
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    assert [r["policy"] for r in out["results"]] == ["fifo", "rota"]
    assert out["trace"]["jobs"] == 3 and out["cluster"]["gpus"] == 2
    fifo = out["results"][0]
    assert fifo["avg_jct_s"] == pytest.approx(380 / 3)
    assert fifo["invariant_violations"] == 0 and fifo["quota_violations"] == 0
    assert set(fifo["teams"]) == {"x", "y"}


def test_it_prints_a_side_by_side_table_by_default(trace_file, capsys):
    assert (
        main(["--trace", str(trace_file), "--cluster", "1x2", "--compare", "fifo,slurm", "--no-progress"])
        == 0
    )
    out = capsys.readouterr().out
    header = next(line for line in out.splitlines() if line.startswith("metric"))
    assert header.split() == ["metric", "fifo", "slurm"]
    assert "avg JCT" in out and "per team" in out


def test_it_exits_2_with_a_message_for_bad_input(trace_file, tmp_path, capsys):
    assert main(["--trace", str(trace_file), "--cluster", "72*8"]) == 2
    assert "bad cluster group" in capsys.readouterr().err
    assert main(["--trace", str(trace_file), "--cluster", "1x2", "--policy", "greedy"]) == 2
    assert "unknown policy greedy" in capsys.readouterr().err
    bad = tmp_path / "bad.csv"
    bad.write_text("job_id,submit_time,duration,num_gpus\nz,0,ten,1\n")
    assert main(["--trace", str(bad), "--cluster", "1x2"]) == 2
    assert "bad.csv:2: column 'duration'" in capsys.readouterr().err
    assert main(["--trace", str(trace_file), "--cluster", "1x2", "--start", "1000"]) == 2
    assert "no jobs" in capsys.readouterr().err


def test_it_runs_as_a_module(trace_file):
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "scheduler.sim",
            "--trace",
            str(trace_file),
            "--cluster",
            "1x2",
            "--policy",
            "fifo",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["results"][0]["completed"] == 3
    assert done.stderr == ""  # no progress bar when stderr is not a terminal
