"""Repository-level SWE domain: multi-turn bug fixing with tools, hidden tests decide.

    env = SweEnv(cfg.swe)
    episodes = env.run_episodes(tasks, generate, chat_ids, harness)

Modules: repos (shipped repositories, sandboxed test runs), mutate (AST bug
injection), tasks (generation, tasks.json), tools (workspace and tool calls),
episode (batched multi-turn driver, token ids and loss mask), env (SweEnv).
"""

from .env import SweEnv
from .tools import TOOLS, TOOLS_DOC, parse_call

__all__ = ["SweEnv", "TOOLS", "TOOLS_DOC", "parse_call"]
