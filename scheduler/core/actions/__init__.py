"""Actions: the steps of a cycle, in the order ``engine.schedule`` runs them.

``admit`` walks the queue and starts each job where the quota admits it and devices fit; a job that starts
nowhere goes on, in the same walk, to ``preempt`` (claim devices of stopping jobs, or plan victims: the
priority plugin's and, while ``reclaim`` is open, the quota plugin's borrowers) and then ``backfill``
(reserve or block its group, and say why it waits). ``estimate`` runs last: queue positions and estimated
starts. Each module reads as the policy it implements; every change goes through the session's statement.
"""
