"""Operator tools around the engine: bench, compare, report, doctor (run through the `evotui` CLI)."""
