"""What a commit's cycle wake-up costs the thread that committed, and the process: ``python bench/wakeup.py``.

Run from a checkout's root (it imports the portal found in the current directory, so a base checkout runs it as
``cd <base> && python <this checkout>/bench/wakeup.py``). Each of N transactions asks for a cycle on commit
(``run_cycle.delay_on_commit``, as a submit does) and the flag is taken after each (``wake.cycle_claim``, as a
cycle in a one-client burst would), so every wake-up pushes the flag and publishes a Celery message. It prints the
median and p90 wall time of the transaction on the committing thread, and the process's CPU per wake-up (the
sender thread's included, where there is one), then the CPU of a bare Celery publish. The messages are left in
the given Redis database's ``celery`` list and deleted at the end.
"""

import argparse
import os
import statistics
import sys
import time

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("--database", default="peer_h5", help="an existing database (nothing is written to it)")
parser.add_argument("--redis-url", required=True, help="a Redis database of your own: its celery list is deleted")
parser.add_argument("--wakeups", type=int, default=1000)
args = parser.parse_args()
sys.path.insert(0, os.getcwd())
os.environ.update(DJANGO_SETTINGS_MODULE="portal.settings", REDIS_URL=args.redis_url, DEBUG="0",
                  SECRET_KEY="bench-" + "x" * 60, DATABASE_URL=f"postgres://postgres@localhost:5432/{args.database}")

import django  # noqa: E402

django.setup()
import redis  # noqa: E402
from django.db import transaction  # noqa: E402

from scheduler import wake  # noqa: E402
from scheduler.tasks import run_cycle  # noqa: E402

try:
    from scheduler import wake_sender
except ImportError:  # a checkout from before the sender
    wake_sender = None


def one() -> None:
    with transaction.atomic():
        run_cycle.delay_on_commit()


for _ in range(30):  # warm: the broker's connection, the sender
    one()
walls = []
cpu_started = time.process_time()
for _ in range(args.wakeups):
    started = time.perf_counter()
    one()
    walls.append((time.perf_counter() - started) * 1000)
    if wake_sender is not None:
        wake_sender.flush()
    wake.cycle_claim()
cpu = (time.process_time() - cpu_started) / args.wakeups * 1000
walls.sort()
cpu_started = time.process_time()
for _ in range(args.wakeups):
    run_cycle.apply_async(kwargs={"wanted": True})
publish = (time.process_time() - cpu_started) / args.wakeups * 1000
where = "sender thread" if wake_sender else "in the request"
print(f"{where}: the committing thread {statistics.median(walls):.3f} ms "
      f"(p90 {walls[int(0.9 * len(walls))]:.3f}); process CPU per wake-up {cpu:.3f} ms (flag claim included); "
      f"a bare publish {publish:.3f} ms CPU")
redis.Redis.from_url(args.redis_url).delete("celery")
