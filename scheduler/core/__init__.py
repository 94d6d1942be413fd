"""Rota's pure scheduling engine: a Snapshot goes in, Decisions come out. No Django, clock or I/O."""
