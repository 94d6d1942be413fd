"""Trace loaders: the three formats, time windows, and errors that name file, line and column."""

from datetime import datetime
from pathlib import Path

import pytest

from scheduler.sim.loaders import Window, load_generic, load_openb, load_philly, load_trace, parse_bound
from scheduler.sim.trace import TraceError

PHILLY = """timestamp,duration,num_gpus,gpu_time,cluster
2017-10-09 07:01:55,66.0,1,66.0,11cb48
2017-10-09 06:13:03,2951.0,8,23608.0,6214e9
2017-10-08 23:59:59,100.0,1,100.0,6214e9
2017-10-10 00:00:00,10.0,2,20.0,b436b2
"""


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_it_loads_philly_jobs_with_virtual_clusters_as_teams_sorted_by_submit(tmp_path):
    trace = load_philly(write(tmp_path, "philly.csv", PHILLY))
    assert [j.id for j in trace.jobs] == [3, 2, 1, 4]  # data row numbers, in submit order
    assert trace.jobs[0].submit_time == 0.0
    assert trace.jobs[1].team == "6214e9" and trace.jobs[1].gpus == 8 and trace.jobs[1].duration == 2951.0
    assert trace.origin == datetime(2017, 10, 8, 23, 59, 59)
    assert trace.teams == ("6214e9", "11cb48", "b436b2")


def test_it_keeps_only_submits_inside_the_window_and_measures_time_from_its_start(tmp_path):
    window = Window(parse_bound("2017-10-09"), parse_bound("2017-10-10"))
    trace = load_philly(write(tmp_path, "philly.csv", PHILLY), window)
    assert [j.id for j in trace.jobs] == [2, 1]
    assert trace.jobs[0].submit_time == 6 * 3600 + 13 * 60 + 3
    assert trace.span_s == 86400.0


@pytest.mark.parametrize(
    ("row", "message"),
    [
        (
            "2017-10-09 07:01:55,abc,1,66.0,11cb48",
            "philly.csv:3: column 'duration': expected a number, got 'abc'",
        ),
        (
            "2017-10-09 07:01:55,66,1.5,66.0,11cb48",
            "philly.csv:3: column 'num_gpus': expected a whole number",
        ),
        ("2017-10-09 07:01:55,-3,1,66.0,11cb48", "philly.csv:3: column 'duration': expected a number >= 0"),
        ("yesterday,66,1,66.0,11cb48", "philly.csv:3: column 'timestamp': expected a date and time"),
        ("2017-10-09 07:01:55,66,1,66.0", "philly.csv:3: expected 5 columns, found 4"),
        ("2017-10-09 07:01:55,66,1,66.0,", "philly.csv:3: column 'cluster'"),
    ],
)
def test_it_names_file_line_and_column_of_a_malformed_philly_row(tmp_path, row, message):
    text = PHILLY.splitlines()[0] + "\n" + PHILLY.splitlines()[1] + "\n" + row + "\n"
    with pytest.raises(TraceError, match=message.replace("(", r"\(")):
        load_philly(write(tmp_path, "philly.csv", text))


def test_it_reports_missing_columns_and_missing_files(tmp_path):
    with pytest.raises(TraceError, match=r"bad.csv:1: missing column\(s\) num_gpus, cluster"):
        load_philly(write(tmp_path, "bad.csv", "timestamp,duration\n2017-10-09 07:01:55,1\n"))
    with pytest.raises(TraceError, match="cannot open"):
        load_philly(tmp_path / "nope.csv")


def test_it_refuses_a_window_in_seconds_for_a_dated_trace(tmp_path):
    with pytest.raises(TraceError, match="submit times are dates"):
        load_philly(write(tmp_path, "philly.csv", PHILLY), Window(start=100.0))


GENERIC = (
    "job_id,submit_time,duration,num_gpus,team,user,gpu_model,kind,priority_class,time_limit,gpu_fraction\n"
    + """\
a,0,100,2,vision,ann,h100-80gb|A100-40GB,training,,3600,
b,50,10,1,nlp,,,inference,,,0.25
c,20,30,0,nlp,,,,,,
d,70,5,1,,,,notebook,batch,,
"""
)


def test_it_loads_the_generic_csv_with_optional_columns_and_defaults(tmp_path):
    trace = load_generic(write(tmp_path, "jobs.csv", GENERIC))
    a, b, d = trace.jobs
    assert (a.name, a.gpus, a.team, a.user, a.time_limit_s) == ("a", 2, "vision", "ann", 3600.0)
    assert a.gpu_models == ("h100-80gb", "a100-40gb")
    assert (b.kind, b.priority_class, b.gpu_fraction, b.gpu_request) == (
        "inference",
        "production-inference",
        0.25,
        0.25,
    )
    assert (d.team, d.kind, d.priority_class) == ("default", "notebook", "batch")
    assert trace.skipped == {"cpu-only": 1}


def test_it_loads_a_minimal_generic_csv_and_windows_it_in_seconds(tmp_path):
    path = write(tmp_path, "jobs.csv", "job_id,submit_time,duration,num_gpus\n1,10,5,1\n2,30,5,1\n3,60,5,1\n")
    trace = load_generic(path, Window(20.0, 60.0))
    assert [(j.name, j.submit_time) for j in trace.jobs] == [("2", 10.0)]
    assert trace.span_s == 40.0


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ("e,1,5,2,,,,,,,0.5", "jobs.csv:6: column 'num_gpus': must be 1 when gpu_fraction is set"),
        ("e,1,5,1,,,,,,,1.5", r"jobs.csv:6: column 'gpu_fraction': expected a fraction in \(0, 1\]"),
        ("a,1,5,1,,,,,,,", "jobs.csv:6: column 'job_id': duplicate id 'a' \\(first on line 2\\)"),
        ("e,1,5,1,,,,cooking,,,", "jobs.csv:6: column 'kind': expected one of training"),
        ("e,1,0,1,,,,,,,", "jobs.csv:6: column 'duration': expected a positive number, got '0'"),
        ("e,1,5,1,,,,,,-4,", "jobs.csv:6: column 'time_limit': expected a positive number"),
        ("e,2017-10-01 00:00:00,5,1,,,,,,,", "jobs.csv:6: column 'submit_time': expected seconds"),
    ],
)
def test_it_names_file_line_and_column_of_a_malformed_generic_row(tmp_path, row, message):
    with pytest.raises(TraceError, match=message):
        load_generic(write(tmp_path, "jobs.csv", GENERIC + row + "\n"))


def test_it_accepts_dated_submit_times_in_the_generic_csv(tmp_path):
    path = write(
        tmp_path,
        "jobs.csv",
        "job_id,submit_time,duration,num_gpus\nx,2024-01-01T00:00:10,5,1\ny,2024-01-01T00:01:00,5,1\n",
    )
    trace = load_generic(path, Window(parse_bound("2024-01-01")))
    assert [j.submit_time for j in trace.jobs] == [10.0, 60.0]


OPENB_NODES = """sn,cpu_milli,memory_mib,gpu,model
n0,64000,262144,2,P100
n1,96000,393216,8,V100M32
n2,32000,131072,0,
"""

OPENB_PODS = (
    (
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n"
    )
    + """\
p0,12000,16384,1,1000,,LS,Running,0,1000,0
p1,6000,12288,1,460,V100M16|V100M32,BE,Running,100,600,110
p2,4000,8192,0,0,,BE,Running,120,900,120
p3,8500,8192,8,1000,,Guaranteed,Pending,200,700,
"""
)


def test_it_loads_openb_pods_with_fractions_models_qos_and_the_node_list(tmp_path):
    write(tmp_path, "openb_node_list_gpu_node.csv", OPENB_NODES)
    trace = load_openb(write(tmp_path, "pods.csv", OPENB_PODS))
    p0, p1, p3 = trace.jobs
    assert (p0.gpus, p0.gpu_fraction, p0.duration, p0.priority_class, p0.cpus) == (
        1,
        None,
        1000,
        "production-inference",
        12,
    )
    assert (p1.gpu_fraction, p1.gpu_models, p1.duration, p1.priority_class) == (
        0.46,
        ("v100m16", "v100m32"),
        490,
        "best-effort",
    )
    assert (p3.gpus, p3.duration, p3.cpus) == (8, 500, 9)  # never scheduled: deletion - creation
    assert trace.skipped == {"cpu-only": 1}
    assert [(n.name, n.gpus, n.model) for n in trace.nodes] == [("n0", 2, "p100"), ("n1", 8, "v100m32")]


def test_it_treats_openb_files_without_times_as_packing_experiments(tmp_path):
    write(tmp_path, "openb_node_list_gpu_node.csv", OPENB_NODES)
    path = write(
        tmp_path,
        "pods.csv",
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np0,1000,1,1,500\np1,1000,1,2,1000\n",
    )
    trace = load_openb(path)
    assert [(j.submit_time, j.gpu_request) for j in trace.jobs] == [(0.0, 0.5), (1.0, 2.0)]
    assert trace.jobs[0].duration > 1e9


def test_it_rejects_a_bad_gpu_share_in_openb(tmp_path):
    path = write(tmp_path, "pods.csv", "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np0,1000,1,1,1500\n")
    with pytest.raises(TraceError, match="pods.csv:2: column 'gpu_milli': expected a GPU share in 1..1000"):
        load_openb(path)


def test_it_dispatches_on_format_and_rejects_unknown_formats_and_bounds(tmp_path):
    assert len(load_trace(write(tmp_path, "philly.csv", PHILLY), "philly").jobs) == 4
    with pytest.raises(ValueError, match="unknown trace format 'slurm'"):
        load_trace(tmp_path / "philly.csv", "slurm")
    with pytest.raises(ValueError, match="bad time bound 'soon'"):
        parse_bound("soon")
