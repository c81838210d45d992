"""Domains: math (reasoning-gym), code (HumanEval), swe (repository tasks)."""

from __future__ import annotations


def make_env(cfg):
    """The environment for a run's domain (imports lazily: each domain has its own deps)."""
    domains = cfg.domains
    if len(domains) != 1:
        raise ValueError("a mix of domains in one run is not supported yet; run one domain per run")
    d = domains[0]
    if d == "math":
        from .math import MathEnv

        return MathEnv(cfg.math.datasets, cfg.math.heldout_seed, cfg.eval.n_tasks)
    if d == "code":
        from .code import CodeEnv

        return CodeEnv(cfg.code)
    if d == "swe":
        from .swe import SweEnv

        return SweEnv(cfg.swe)
    raise ValueError(f"unknown domain '{d}'")
