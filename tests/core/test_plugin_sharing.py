"""The GPU-sharing plugin: shares pack onto partly used devices; a waiting share says the largest free one."""

from scheduler.core import reasons as R
from scheduler.core.plugins import sharing
from scheduler.core.session import Session
from scheduler.core.types import JobInfo
from tests.core.builders import gpu_ids, node, quota, running, snap

H100 = "h100-80gb"


def _session(n, jobs):
    return Session(snap([n], jobs, [quota("a", guaranteed=8, limit=8)]))


def test_a_share_goes_to_the_partly_used_device_with_least_room_that_fits():
    n = node("n1", gpus=4, first_id=0)
    s = _session(n, [running(1, "a", gpu_ids(n, 1, 0), share=0.5, gpus=1, gpu_fraction=0.5),
                     running(2, "a", gpu_ids(n, 1, 1), share=0.25, gpus=1, gpu_fraction=0.25)])
    req = s.request(JobInfo(3, "a", gpus=1, gpu_fraction=0.5))
    (p,) = sharing.place(s.cluster, s.cluster.groups[("train", H100)], req, None)
    assert p.gpu_id == 0 and p.share == 0.5  # device 0 has 0.5 free, device 1 has 0.75: the tighter fit


def test_a_share_takes_an_idle_device_when_no_partly_used_one_fits():
    n = node("n1", gpus=2, first_id=0)
    s = _session(n, [running(1, "a", gpu_ids(n, 1, 0), share=0.75, gpus=1, gpu_fraction=0.75)])
    req = s.request(JobInfo(3, "a", gpus=1, gpu_fraction=0.5))
    (p,) = sharing.place(s.cluster, s.cluster.groups[("train", H100)], req, None)
    assert p.gpu_id == 1


def test_a_waiting_share_names_the_largest_free_share():
    n = node("n1", gpus=1, first_id=0)
    s = _session(n, [running(1, "a", gpu_ids(n, 1), share=0.75, gpus=1, gpu_fraction=0.75)])
    req = s.request(JobInfo(3, "a", gpus=1, gpu_fraction=0.5))
    group = s.cluster.groups[("train", H100)]
    assert sharing.place(s.cluster, group, req, None) is None
    reason = sharing.waiting(req, group)
    assert reason.code == R.RESOURCES and reason.details["largest_free_share"] == 0.25
    assert reason.details["plugin"] == "sharing" and "largest free share of a device is 0.25" in reason.message
