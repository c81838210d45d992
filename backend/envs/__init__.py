"""Domains: math (reasoning-gym), code (HumanEval), swe (repository tasks)."""

from __future__ import annotations

from .split import in_validation


def make_env(cfg):
    """The environment for a run's domain (imports lazily: each domain has its own deps)."""
    domains = cfg.domains
    if len(domains) != 1:
        raise ValueError("a mix of domains in one run is not supported yet; run one domain per run")
    d = domains[0]
    if d == "math":
        from .math import MathEnv

        return MathEnv(cfg.math.datasets, cfg.math.heldout_seed, cfg.eval.n_val)
    if d == "code":
        from .code import CodeEnv

        return CodeEnv(cfg.code)
    if d == "swe":
        from .swe import SweEnv

        return SweEnv(cfg.swe)
    raise ValueError(f"unknown domain '{d}'")


SPLITS = ("validation", "test")


def held_out_sets(env, n_val: int, n_test: int, n_ood: int = 0) -> dict[str, list]:
    """{"validation": tasks, "test": tasks}, disjoint and frozen, and "ood" when `n_ood` > 0 and
    the env has an out-of-distribution test (`ood_tasks`, reported only).

    An env with `validation_tasks` / `test_tasks` (math: a hash of each question)
    draws them itself; otherwise its held-out list is split by a hash of the
    task id (about half each, the same on every machine), then cut to size.
    """
    if hasattr(env, "validation_tasks") and hasattr(env, "test_tasks"):
        sets = {"validation": list(env.validation_tasks(n_val)), "test": list(env.test_tasks(n_test))}
    else:
        held = list(env.heldout_tasks())
        sets = {"validation": [t for t in held if in_validation(t.id)][:n_val],
                "test": [t for t in held if not in_validation(t.id)][:n_test]}
    ood = list(env.ood_tasks(n_ood)) if n_ood > 0 and hasattr(env, "ood_tasks") else []
    return sets | ({"ood": ood} if ood else {})
