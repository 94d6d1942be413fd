"""Rota's node agent: reads GPUs (NVML or a fake), runs job processes, reconciles with the portal.

Plain Python: no Django, no database. It talks to the portal only over the node HTTP API described in
``docs/node-protocol.md``. Run it with ``python -m scheduler.agent --help``.
"""

AGENT_VERSION = "1"
