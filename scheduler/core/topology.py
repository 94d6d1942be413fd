"""Topology: which nodes sit close together (from their labels) and where a multi-node gang lands.

Two node labels, set like any other node label (the agent's profile or an admin in Govern):

- ``topology.rota.io/switch``: the network switch / InfiniBand island the node hangs off;
- ``topology.rota.io/nvlink-domain``: the NVLink domain that spans nodes (e.g. one NVL72 rack), finer.

A *block* is the schedulable nodes of a group (pool × GPU model) that share one value of one of these
labels. A gang goes into one block when one fits it now: an NVLink domain first, else a switch; among the
blocks that fit, the tightest (best fit: the fewest free devices left over on the nodes that could take a
member), ties by block name; inside it, best fit per member as on a flat cluster.

Spanning: a gang that some block could ever hold (on an empty cluster) waits for one rather than start
across switches, where its collective traffic would cross the spine; its reason is ``Topology`` with the
largest free block against what it needs. A gang that no block could ever hold spans blocks, placed as on a
flat cluster. No job field or policy knob: "inside one block whenever that is possible at all" is the rule.
Nodes without the labels belong to no block (only gangs that span use them); a group where no node carries
either label is flat, and placement there is exactly what it was without topology.
"""

from __future__ import annotations

from scheduler.core.cluster import Device, Group, Node
from scheduler.core.placement import Request, Veto, fits_host, free_devices, node_matches

SWITCH = "topology.rota.io/switch"
NVLINK_DOMAIN = "topology.rota.io/nvlink-domain"
LEVELS = (NVLINK_DOMAIN, SWITCH)  # finest first


def word(label: str) -> str:
    """A level's name in messages: "switch" or "NVLink domain"."""
    return "NVLink domain" if label == NVLINK_DOMAIN else "switch"


def blocks(group: Group, label: str) -> dict[str, list[Node]]:
    """The group's schedulable nodes per value of ``label`` (in name order), found once per session."""
    found = group.blocks.get(label)
    if found is None:
        found = {}
        for node in group.nodes:
            value = node.info.labels.get(label)
            if value and node.order in group.count:  # schedulable
                found.setdefault(value, []).append(node)
        group.blocks[label] = found
    return found


def labelled(group: Group) -> bool:
    """Whether any schedulable node of the group carries a topology label."""
    return any(blocks(group, label) for label in LEVELS)


def could_ever_hold(group: Group, req: Request, per: int, n: int) -> bool:
    """Whether some block has ``n`` nodes that could each hold a member (``per`` healthy devices with the
    memory, the labels, driver and host size), whatever runs there now."""
    for label in LEVELS:
        for nodes in blocks(group, label).values():
            able = sum(1 for node in nodes if _member_capacity(node, group, req) >= per and node_matches(node, req, n))
            if able >= n:
                return True
    return False


def _member_capacity(node: Node, group: Group, req: Request) -> int:
    return sum(1 for d in node.by_model.get(group.model, ()) if d.healthy and d.memory_mb >= req.min_memory_mb)


def place_inside(group: Group, req: Request, per: int, n: int,
                 veto: Veto | None) -> list[tuple[Node, list[Device]]] | None:
    """``n`` nodes with ``per`` free devices each inside one block (the finest level that has one, the
    tightest block of that level), or None when no block fits the gang now."""
    for label in LEVELS:
        best: tuple[int, str, list[tuple[Node, list[Device]]]] | None = None
        for name, nodes in sorted(blocks(group, label).items()):
            fit = _fit(group, req, per, n, veto, nodes)
            if fit is not None and (best is None or fit[0] < best[0]):
                best = (fit[0], name, fit[1])
        if best is not None:
            return best[2]
    return None


def _fit(group: Group, req: Request, per: int, n: int, veto: Veto | None,
         nodes: list[Node]) -> tuple[int, list[tuple[Node, list[Device]]]] | None:
    """The devices left free and the ``n`` best-fitting members in ``nodes``, or None when fewer fit."""
    ok: list[tuple[int, int, Node, list[Device]]] = []
    for node in nodes:
        k = group.count[node.order]
        if k < per or not fits_host(node, req, n) or (veto is not None and veto(node, per)):
            continue
        devs = free_devices(node, group.model, req, per)
        if devs is not None:
            ok.append((k, node.order, node, devs))
    if len(ok) < n:
        return None
    ok.sort(key=lambda t: (t[0], t[1]))
    return sum(k for k, *_ in ok) - per * n, [(node, devs) for _k, _o, node, devs in ok[:n]]


def block_orders(group: Group) -> list[frozenset[int]]:
    """Every block of the group (both levels, in name order) as the orders of its nodes."""
    return [frozenset(node.order for node in nodes)
            for label in LEVELS for _name, nodes in sorted(blocks(group, label).items())]


def largest_free_block(group: Group, per: int) -> tuple[str, str, int]:
    """(label, block, nodes): the block with the most nodes that have ``per`` free devices now, over both
    levels (ties: the coarser level, then the block name); ("", "", 0) when the group has no blocks."""
    best = ("", "", 0)
    for label in reversed(LEVELS):
        for name, nodes in sorted(blocks(group, label).items()):
            ready = sum(1 for node in nodes if group.count[node.order] >= per)
            if ready > best[2]:
                best = (label, name, ready)
    return best
