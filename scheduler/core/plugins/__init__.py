"""Plugins: one module per policy dimension, each a few small functions the actions call.

| plugin | order | fits | score | victims | waits because |
|---|---|---|---|---|---|
| ``priority`` | queue key, LAS ranks | | | who may preempt (lower priority) | strict order / reservations |
| ``fairshare`` | usage / entitlement | | | | |
| ``quota`` | | limits, guarantee, borrowing | | reclaim (borrowers) | QuotaExceeded, OverLimit, … |
| ``placement`` | | pools, models, labels | best fit or spread | | Resources, Unsatisfiable |
| ``gang`` | | | one member per node, inside one switch (``topology``) | | GangIncomplete, Topology |
| ``sharing`` | | | tightest partly used device | | Resources (largest free share) |
| ``kinds`` | | | inference spreads | | |

Each names itself (``NAME``) in the ``plugin`` detail of the reasons it gives.
"""
