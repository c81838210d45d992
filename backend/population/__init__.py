"""A population of runs: N members trained side by side, compared on validation every K steps.

A member clearly behind copies a better member (exploit) and, in explore mode, takes one
proposed harness move (explore). `store` holds the population database and its typed records.
"""
