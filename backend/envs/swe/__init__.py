"""Repository-level SWE domain in levels: one-shot edits (0, 1), multi-turn tool episodes (2-4); hidden tests decide.

    env = SweEnv(cfg.swe)
    episodes = env.run_episodes(tasks, generate, chat_ids, harness)

Modules: repos (shipped repositories, sandboxed test runs), mutate (AST bug
injection), tasks (multi-turn task generation, tasks.json), levels (one-shot
tasks from validated mutants, levels.json), edit (the one-shot edit format),
oneshot (one-shot prompts, judging and facts), tools (workspace and tool
calls), episode (batched multi-turn driver, token ids and loss mask), env (SweEnv).
"""

from .env import SweEnv
from .tools import TOOLS, TOOLS_DOC, parse_call

__all__ = ["SweEnv", "TOOLS", "TOOLS_DOC", "parse_call"]
