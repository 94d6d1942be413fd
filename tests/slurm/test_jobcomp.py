"""Slurm's job completion log as the bridge reads it (pure: files only, no Slurm, no database)."""

from datetime import datetime

from scheduler.slurm.jobcomp import JobCompLog, parse_line

LINE = ("JobId=41 UserId=rota-test-5001(5001) GroupId=rota-test-5001(5001) Name=rota-12-3 JobState=FAILED "
        "Partition=gpu TimeLimit=30 StartTime=2026-12-06T02:36:19 EndTime=2026-12-06T02:38:49 NodeList=slurm-gpu-01 "
        "NodeCnt=1 ProcCnt=3 WorkDir=/tmp ReservationName= Tres=cpu=3,mem=2G,node=1,billing=3 Account= QOS= WcKey= "
        "Cluster=rota-test SubmitTime=2026-12-06T02:36:18 EligibleTime=2026-12-06T02:36:18 DerivedExitCode=0:0 "
        "ExitCode=3:0 ")


def test_a_line_names_the_attempt_its_end_and_its_times():
    done = parse_line(LINE)
    assert (done.job.slurm_id, done.job.key, done.job.state, done.job.node) == (41, (12, 3), "FAILED", "slurm-gpu-01")
    assert (done.job.exit_code, done.job.signal, done.gpus, done.elapsed_s) == (3, None, None, 150.0)
    assert done.started_at == datetime.fromisoformat("2026-12-06T02:36:19").astimezone()


def test_a_signal_and_a_gpu_count_where_slurm_records_one_and_lines_that_are_not_rotas():
    done = parse_line(LINE.replace("ExitCode=3:0", "ExitCode=0:9").replace("billing=3", "billing=3,gres/gpu=2"))
    assert (done.job.exit_code, done.job.signal, done.gpus) == (None, 9, 2)
    assert parse_line(LINE.replace("Name=rota-12-3", "Name=my training run")) is None
    assert parse_line(LINE.replace("Name=rota-12-3", "Name=rota-12")) is None
    assert parse_line(LINE.split(" ExitCode")[0]) is None  # cut short
    never = parse_line(LINE.replace("StartTime=2026-12-06T02:36:19", "StartTime=Unknown"))
    assert never.started_at is None and never.elapsed_s == 0


def test_the_log_is_read_whole_then_followed_and_read_again_after_rotation(tmp_path):
    path = tmp_path / "jobcomp.log"
    log = JobCompLog(path)
    assert log.read() == []  # not written yet
    path.write_text(LINE + "\n" + LINE.replace("rota-12-3", "rota-13-1")[:50])
    assert [d.job.key for d in log.read()] == [(12, 3)]  # the second line is not finished
    with open(path, "a") as handle:
        handle.write(LINE.replace("rota-12-3", "rota-13-1")[50:] + "\n")
    assert [d.job.key for d in log.read()] == [(13, 1)]
    assert log.read() == []
    path.unlink()
    path.write_text(LINE.replace("rota-12-3", "rota-14-1") + "\n")  # rotated: a new file
    assert [d.job.key for d in log.read()] == [(14, 1)]
