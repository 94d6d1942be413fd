"""The registry of PostgreSQL advisory-lock keys: one place, so two jobs never pick the same number."""

SCHEDULING_CYCLE = 7_001
NODE_LIVENESS = 7_002
USAGE_ROLLUP = 7_003
WHATIF = 7_004
