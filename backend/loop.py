"""One run of the method, top to bottom.

Each step: sample tasks through the harness's curriculum, generate a group of
rollouts per task, score them with the evaluator (truth) and the harness
(reward), diagnose, filter, compute group-relative advantages, take one GRPO
update, checkpoint the LoRA adapter, and commit everything for the step in
one transaction. Every `evolve.every` steps an evolution round diagnoses,
proposes, backtests and (maybe) promotes a harness change. Every
`eval.every` steps, and at the start and the end, the two frozen held-out sets
are evaluated greedily: validation (the gate may read it) and test (the run's
reported number; nothing in the loop reads it).

Run it headless with `evotui run --headless --steps 20`.
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor, wait
from contextlib import nullcontext
from pathlib import Path

import torch

from backend import checkpoint_overlap, curriculum_rule
from backend import dead_groups
from backend import evolve_hooks as hooks
from backend.config import RunConfig
from backend.dispatch import Control, StopRequested
from backend.errors import EvoError
from backend.evolve import Effects
from backend.envs import held_out_sets, make_env
from backend.harness.client import WorkerFailure
from backend.harness.loader import Harness, HarnessError
from backend.harness import run_file
from backend.harness.semantics import is_trained
from backend.disk import room_problem
from backend.metrics_export import MetricsExport, reward_term_means
from backend.policy import checkpoint as ckpt
from backend.policy import retention
from backend.policy.generate import GenerationInterrupted, apply_engine_settings, make_generator
from backend.policy.grpo import GRPOTrainer, Sample
from backend.policy.interrupt import watch as watch_layers
from backend.policy.load import load_fast_policy
from backend.policy.model import chat_ids, task_prompts
from backend.rollout import (TRUNCATED, JudgedEarly, Scored, agreement, asking, diagnosis_rows, from_episode,
                             from_generation, group_stats, rollout_row, score_all, turn_rows)
from backend.store import Store, dumps, now
from backend.store.reader import harness_code_known
from backend.progress import StepProgress
from backend import outcomes


EVAL_BATCH_CPU = 16
"""Held-out problems per generation batch on the CPU (a few seconds each): the progress the header
shows moves, and a pause waits at most one batch. On a GPU the engine's own batch size."""


def _rng_state() -> tuple:
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None
    return torch.get_rng_state(), cuda


def _set_rng_state(state: tuple) -> None:
    torch.set_rng_state(state[0])
    if state[1] is not None:
        torch.cuda.set_rng_state_all(state[1])


class ResourceExhausted(EvoError, RuntimeError):
    """Out of GPU memory or disk: the run stops cleanly with its state saved."""


class GenerationFailed(EvoError, RuntimeError):
    """Every rollout of a training step or a held-out batch failed to generate (`check_generated`):
    the run stops with the cause; its last committed step can be resumed."""


def check_generated(items: list[Scored], where: str, last_step: int) -> None:
    """Raise `GenerationFailed` when no rollout of a training step or held-out batch (`where`) was
    generated. An episode env keeps a failed batch as error episodes, so one bad batch among others
    is data; a whole step of them would train on nothing, and a whole held-out batch would read as a
    collapse of accuracy (and roll back the last promotion)."""
    if items and all(s.finish == "error" for s in items):
        why = (items[0].obs or {}).get("error") or "no error recorded"
        raise GenerationFailed(f"{where}: all {len(items)} rollouts failed to generate ({why}); the run "
                               f"stopped after step {last_step} and resumes from there once this is fixed")


def _timed(generate):
    """(`generate`, [milliseconds spent inside it so far]): how much of an episode run was
    generation, so a step's split puts the env's tools and tests under scoring, where a
    single-turn domain's tests are."""
    spent = [0.0]

    def timed(*args, **kwargs):
        t = time.perf_counter()
        try:
            return generate(*args, **kwargs)
        finally:
            spent[0] += (time.perf_counter() - t) * 1000
    return timed, spent


class Engine:
    """Owns the model, the environment, the harness and the store for one run."""

    pending: checkpoint_overlap.Pending | None = None  # a checkpoint written during the next step
    fallback_said = False  # the fast engine's move to the torch kernels is in the run's log

    def __init__(self, run_dir: Path, cfg: RunConfig, store: Store, quiet: bool = False, lm=None, dist=None):
        self.run_dir = Path(run_dir)
        self.cfg = cfg
        self.store = store
        self.quiet = quiet
        self.control = Control(store)
        self.progress = StepProgress(cfg.steps, quiet=quiet, report=self.control.report)  # what the terminal shows
        self.control.on_activity = self.progress.activity
        self.env = make_env(cfg)
        store.fail_interrupted()
        settled = checkpoint_overlap.recover(store, self.run_dir)  # before the policy is read
        if settled:
            store.log("warn", settled)
        self.harness_version = int(store.run()["harness_version"])
        self.harness = Harness.from_code(store.get("harness_versions", self.harness_version)["code"])
        self.write_harness_file()
        pv = store.current_policy_version()  # after a rollback, older than the newest version
        self.policy_version = pv["id"] if pv else 0
        adapter = store.checkpoint_of(pv)
        self.lm = lm if lm is not None and not adapter else load_fast_policy(cfg.model, adapter, seed=cfg.seed)
        store.log("info", f"LoRA trainer: {self.lm.trainer}; device {self.lm.device}, {self.lm.dtype}")
        self.generator = make_generator(cfg.model.engine, self.lm.model, self.lm.tokenizer, self.lm.device,
                                        batch_size=cfg.model.gen_batch,
                                        log=self.say)  # auto's choice and vLLM's LoRA versions go to the run's log
        apply_engine_settings(self.generator, cfg.model, self.say)
        self.trainer = GRPOTrainer(self.lm.model, self.lm.tokenizer, cfg.train, self.lm.device)
        watch_layers(self.lm.model, self.control.honour)  # a pause or a stop is honoured inside any pass
        if adapter:
            if not self.trainer.resume(Path(adapter)):
                self.say("resumed on another share of the GPU than the run planned its micro-batches "
                         "for: they are planned afresh, so from here the arithmetic may differ from an "
                         "uninterrupted run's", "warn")
        self.metrics = MetricsExport.open(self.run_dir, cfg.report_to, store, warn=lambda m: self.say(m, "warn"))
        self.dist = dist  # rank 0 of a data-parallel run (backend/ddp), or None: one process
        if dist is not None:
            dist.attach(self)
            self.say(f"data-parallel over {dist.world} ranks: each generates its share of a step and trains on "
                     f"it; this process (rank 0) scores, stores, checkpoints, evaluates and evolves")

    # ------------------------------------------------------------ helpers
    def say(self, msg: str, level: str = "info", step: int | None = None) -> None:
        self.store.log(level, msg, step=step)
        if not self.quiet and level in ("warn", "error"):
            print(f"[{level}] {msg}", flush=True)

    def write_harness_file(self) -> None:
        # harness.py is the active version; a hand edit found there moves to harness.draft.py
        # (the TUI proposes edits of either file as interventions).
        kept = run_file.write_active(self.run_dir, self.harness.code,
                                     is_version=lambda code: harness_code_known(self.store, code))
        if kept is not None:
            self.say(f"a hand edit of harness.py is kept as {kept.name}; "
                     f"harness.py is the active v{self.harness_version} again")

    def reload_harness(self) -> None:
        """Follow the active version (after commands and rounds); harness.py follows it too, so an
        edit the operator proposed meanwhile leaves harness.py for the draft."""
        v = int(self.store.run()["harness_version"])
        if v != self.harness_version:
            self.harness_version = v
            self.harness = Harness.from_code(self.store.get("harness_versions", v)["code"])
            self.say(f"harness version {v} is now active")
        self.write_harness_file()

    def max_new_tokens(self) -> int:
        return min(int(self.harness.sampling.get("max_new_tokens", 128)), self.cfg.train.max_new_tokens_cap)

    def generate_fn(self, prompts, max_new_tokens, temperature, top_p, on_finished=None):
        """Generate one batch, honouring a pause or a stop before it and during it: inside the
        model's layers (transformers generate; the engine's layer watch), or, where an engine with
        its own kernels can be interrupted (the fast engine), by cutting the batch short; such a
        batch is drawn again after the checkpoint from the same random state, so a pause changes
        no sample."""
        while True:
            self.control.checkpoint()
            state = _rng_state()
            try:
                return self.with_oom_retry(lambda: self._generate(prompts, max_new_tokens, temperature, top_p,
                                                                  on_finished), self.generator, "batch_size")
            except GenerationInterrupted:
                _set_rng_state(state)

    def _generate(self, prompts, max_new_tokens, temperature, top_p, on_finished=None):
        kw = {"on_finished": on_finished} if on_finished is not None else {}
        if getattr(self.generator, "interruptible", False):
            return self.generator.generate(prompts, max_new_tokens, temperature, top_p,
                                           interrupt=self.control.interrupting, **kw)
        return self.generator.generate(prompts, max_new_tokens, temperature, top_p, **kw)

    def with_oom_retry(self, fn, holder, attr: str):
        """Run `fn`; on GPU out-of-memory halve `holder.attr` (a batch size) and retry.

        At batch size 1 the run stops cleanly (`ResourceExhausted`): the last
        committed step and its checkpoint are intact, so it can be resumed.
        """
        while True:
            try:
                return fn()
            except torch.cuda.OutOfMemoryError:
                if torch.cuda.is_available():
                    torch.cuda.empty_cache()
                size = int(getattr(holder, attr, 1) or 1)
                if size <= 1:
                    raise ResourceExhausted(f"GPU out of memory even at {attr}=1; the run stopped after step "
                                            f"{self.store.last_step()} and can be resumed on a larger card")
                setattr(holder, attr, size // 2)
                self.say(f"GPU out of memory: lowering {attr} from {size} to {size // 2}", "warn")

    def chat_ids_fn(self, messages, add_generation_prompt=True):
        return chat_ids(self.lm.tokenizer, messages, add_generation_prompt)

    # ------------------------------------------------------------ rollouts
    def collect(self, tasks, harness: Harness, group_size: int, greedy: bool = False,
                max_new_tokens: int | None = None, dist=None, progress=None, groups: list[int] | None = None,
                prefixes: dict[str, list[int]] | None = None) -> tuple[list[Scored], dict]:
        """Generate `group_size` rollouts per task and score them under `harness`.
        `dist`: the data-parallel ranks (backend/ddp) that generate, judge and score the
        single-turn rollouts in shares; this process then applies the harness to the whole batch.
        `progress`: a training step's (multi-turn episodes count their generation batches on it).
        `groups`: the group index of each task (default 0, 1, ...); `prefixes`: hint token ids by
        task id, placed at the start of those tasks' answers and masked from the loss
        (backend/dead_groups.py; training redraws only)."""
        s = harness.sampling
        temp = 0.0 if greedy else float(s.get("temperature", 1.0))
        top_p = float(s.get("top_p", 1.0))
        mnt = max_new_tokens or min(int(s.get("max_new_tokens", 128)), self.cfg.train.max_new_tokens_cap)
        t0 = time.perf_counter()
        items: list[Scored] = []
        worker, times = None, {}
        gids = list(groups) if groups is not None else list(range(len(tasks)))
        generate = self.generate_fn
        if prefixes:
            contexts = {tuple(self.chat_ids_fn(harness.messages(t))): prefixes[t.id] for t in tasks if t.id in prefixes}
            generate = dead_groups.prefixed(self.generate_fn, contexts, self.lm.tokenizer.decode)
        env_ms = 0.0  # an episode env's own time (tools, edits, tests) between its generation calls
        if getattr(self.env, "multi_turn", False):
            copies = [t for t in tasks for _ in range(group_size)]
            gen, generating = _timed(self._counted(generate, progress))
            # an episode's turns decode ever longer contexts at ever fewer rows: each batch shape's
            # KV cache, kept through training, would take the card's memory from the update
            turns = getattr(self.env, "takes_turns", lambda _tasks: True)(tasks)
            with hooks.scratch_shapes(self.generator) if turns else nullcontext():
                # the token budget of a turn as every domain's: the harness's, under the run's cap, or
                # the held-out evaluation's
                episode_sampling = {"max_new_tokens": mnt, **({"temperature": 0.0} if greedy else {})}
                episodes = self.env.run_episodes(copies, gen, self.chat_ids_fn, harness, sampling=episode_sampling)
            env_ms = (time.perf_counter() - t0) * 1000 - generating[0]
            for k, (task, ep) in enumerate(zip(copies, episodes)):
                msgs = harness.messages(task)
                pids = self.chat_ids_fn(msgs)
                items.append(from_episode(ep, task, gids[k // group_size], k % group_size,
                                          self.lm.tokenizer.decode(pids), pids))
        else:
            slots = []
            for g, task in zip(gids, tasks):
                msgs = harness.messages(task)
                slots += [(g, i, task, msgs) for i in range(group_size)]
            if dist is not None:  # prompted, judged and scored where generated; `times`: how rank 0 spent it
                items, worker = dist.rollouts(slots, harness, mnt, temp, top_p)
                times = dist.times
            else:
                prompts = task_prompts(self.lm.tokenizer, slots)
                if self.judges_early(prefixes):  # rows that stop early are judged and scored while the rest decode
                    with ThreadPoolExecutor(1, thread_name_prefix="harness-early") as pool:
                        early = JudgedEarly(prompts, self.env,
                                            asking(harness, mnt, pool) if self.asks_harness_early() else None)
                        items = early.items(generate([p[4] for p in prompts], mnt, temp, top_p, on_finished=early))
                else:
                    gens = generate([p[4] for p in prompts], mnt, temp, top_p)
                    items = [from_generation(p, gen) for p, gen in zip(prompts, gens)]
        if prefixes:
            dead_groups.mask_prefixes(items, {t: len(p) for t, p in prefixes.items()})
        gen_ms = (time.perf_counter() - t0) * 1000 - env_ms
        for it in items:
            it.gen_ms = gen_ms / max(len(items), 1)
        self.say_engine_fallback()
        if progress is not None:
            progress.phase("score")
        eval_ms, score_ms, diag_ms = score_all(items, harness, self.env, mnt, worker=worker)
        if times:  # rank 0: its own generation; judging its share, then applying the harness to the batch
            return items, {"gen_ms": times["gen_ms"], "score_ms": times["judge_ms"] + eval_ms + score_ms,
                           "diagnose_ms": diag_ms, "wait_ms": times["wait_ms"]}
        return items, {"gen_ms": gen_ms, "score_ms": env_ms + score_ms + eval_ms, "diagnose_ms": diag_ms}

    def say_engine_fallback(self) -> None:
        """Once a run: the fast engine left its Triton kernels for the torch ones (one failed to
        compile on this card), and why: the run goes on, slower."""
        why = getattr(getattr(self, "generator", None), "fallback", None)
        if why and not self.fallback_said:
            self.fallback_said = True
            self.say(f"fast engine: {why}; decoding with the torch kernels from now on", "warn")

    def judges_early(self, prefixes) -> bool:
        """Whether a single-turn batch's rows are judged as they stop (`rollout.JudgedEarly`): where
        the engine reports them and the env judges one rollout at a time on this thread (an env
        that judges a batch at once, code's tests in sandboxes, keeps its one batch), and no hint
        prefixes wrap the engine."""
        return (not prefixes and getattr(self.generator, "reports_finished", False)
                and not hasattr(self.env, "evaluate_many"))

    def asks_harness_early(self) -> bool:
        """Whether rows judged during decoding also go to the harness worker then: where the loop's
        thread waits on a GPU. On the CPU the decode keeps the cores busy, and each early request's
        fixed cost (the worker forks a child for it) would be added to the step, not hidden."""
        return self.lm.device.type == "cuda"

    @staticmethod
    def _counted(generate, progress):
        """`generate`, showing on `progress` how many batches an episode's turns have drawn."""
        if progress is None:
            return generate
        calls = [0]

        def counted(*args, **kwargs):
            calls[0] += 1
            progress.phase("generate", f"batch {calls[0]}")
            return generate(*args, **kwargs)
        return counted

    # ------------------------------------------------------------ one step
    def seed_step(self, step: int) -> random.Random:
        # Per-step seeds make a resumed run sample what the original would have.
        torch.manual_seed(self.cfg.seed * 1_000_003 + step)
        return random.Random(self.cfg.seed * 1_000_003 + step)

    def train_step(self, step: int, progress: StepProgress) -> dict:
        if step % self.cfg.train.checkpoint_every == 0:
            self.ensure_disk_room()
        t_start = time.perf_counter()
        rng = self.seed_step(step)
        curriculum, plan = curriculum_rule.for_step(self.store, self.env, self.harness.curriculum, step)
        held = self.revival_reserve(step)
        debit = self.search_debit(self.cfg.train.tasks_per_step - (held or 0))
        tasks = self.env.sample_tasks(self.cfg.train.tasks_per_step - (held or 0) - debit, rng, curriculum)
        progress.phase("generate")
        items, times = self.collect(tasks, self.harness, self.cfg.train.group_size, dist=self.dist,
                                    progress=progress)
        check_generated(items, f"step {step}", self.store.last_step())
        moved = self.step_moves(step, tasks, items, plan, progress, held)
        items = moved.pop("items")
        progress.phase("filter")
        gstats = group_stats(items, self.harness)
        settled_ms = self.settle_checkpoint()  # the last step's overlapped checkpoint: before the update
        with ThreadPoolExecutor(1, thread_name_prefix="step-records") as pool:
            # The step's records, built while the policy trains: the update reads the rollouts
            # and changes none of them, and its thread waits on the card most of the time.
            records = pool.submit(self.step_records, items, step, self.policy_version)
            progress.phase("train")
            t0 = time.perf_counter()
            samples, tstats = self.update_policy(items, dist=self.dist)
            train_ms = (time.perf_counter() - t0) * 1000
            rows, diags, turns = records.result()
        progress.phase("checkpoint")
        t0 = time.perf_counter()
        new_pv, writing = None, None
        overlap = False
        if samples and step % self.cfg.train.checkpoint_every == 0:
            new_pv = {"parent": self.policy_version or None, "step": step,  # its id: the store's
                      "checkpoint": str(ckpt.checkpoint_dir(self.run_dir, step)), "heldout_acc": None,
                      "harness_version": self.harness_version, "created_at": now()}
            overlap = self.cfg.train.checkpoint_overlap
            if not overlap:  # its files are written while the rows are built and inserted; the step commits after them
                writing = self.begin_checkpoint(step)
        progress.phase("store")
        total_ms = (time.perf_counter() - t_start) * 1000
        n_tok = sum(len(s.completion_ids) for s in items)
        step_row = {
            "step": step, "created_at": now(), "harness_version": self.harness_version,
            "policy_version": self.policy_version,  # the saved one's, if any
            "n_rollouts": moved[dead_groups.KEY]["drawn"] if dead_groups.KEY in moved else len(items),
            **gstats, "entropy": tstats["entropy"], "loss": tstats["loss"], "kl": tstats["kl"],
            "clip_frac": tstats["clip_frac"], "grad_norm": tstats["grad_norm"], "tokens": n_tok,
            "tokens_per_s": n_tok / max(times["gen_ms"] / 1000, 1e-9), "gen_ms": times["gen_ms"],
            "score_ms": times["score_ms"], "diagnose_ms": times["diagnose_ms"], "train_ms": train_ms,
            "store_ms": 0.0, "total_ms": total_ms,
        }
        metrics = {"trained_sequences": len(samples), "ckpt_ms": (time.perf_counter() - t0) * 1000,
                   **self.batch_shapes(trained=bool(samples)),
                   **({"wait_ms": times["wait_ms"]} if "wait_ms" in times else {}),
                   "reward_terms": reward_term_means([s.components for s in items]),
                   "truncated": sum(s.finish in TRUNCATED for s in items), **moved,
                   **({"search_debited": debit * self.cfg.train.group_size} if debit else {}),
                   **({"ckpt_settle_ms": settled_ms} if self.cfg.train.checkpoint_overlap else {})}
        if overlap:  # the version is stored at `settle`
            metrics["version_pending"] = new_pv
        step_row["metrics_json"] = dumps(metrics)
        t0 = time.perf_counter()
        saved, waited_ms = self.commit_with_checkpoint(step_row, rows, diags, turns, None if overlap else new_pv,
                                                       writing)
        if overlap:
            # The files are written from here on, beside the next step's generation: not beside this
            # step's inserts, whose statements would take the interpreter's lock back from the
            # writing thread one by one. Nothing changes the model or the optimizer before `settle`.
            self.pending = checkpoint_overlap.Pending(step, new_pv, self.begin_checkpoint(step))
        store_ms = (time.perf_counter() - t0) * 1000 - waited_ms
        step_row["metrics_json"] = dumps({**metrics, "ckpt_wait_ms": waited_ms})
        self.store.update("steps", step, {"store_ms": store_ms, "total_ms": total_ms + store_ms + waited_ms,
                                          "metrics_json": step_row["metrics_json"]})
        if saved is not None:
            self.adopt_version(saved)
            step_row["policy_version"] = saved
        step_row["store_ms"], step_row["total_ms"] = store_ms, total_ms + store_ms + waited_ms  # as stored
        return step_row

    def step_records(self, items: list[Scored], step: int, policy_version: int) -> tuple[list, list, list]:
        """The rows `step` stores of its rollouts: (rollouts, their diagnoses, their turns).
        `policy_version`: the policy that generated them."""
        mnt = self.max_new_tokens()
        return ([rollout_row(s, step, self.harness_version, policy_version, mnt) for s in items],
                [diagnosis_rows(s, step, self.harness_version, self.harness.validity) for s in items],
                [turn_rows(s) for s in items])

    def commit_with_checkpoint(self, step_row, rows, diags, turns, new_pv, writing) -> tuple[int | None, float]:
        """Commit the step once its checkpoint's files are written (`writing`: their future, or
        None): the new policy version's id, and the ms the commit waited for the files. Whatever
        happens to the commit, the writing thread is waited for before this returns."""
        waited = [0.0]

        def files_written():
            t = time.perf_counter()
            writing.result()  # raises what the writing raised: nothing of the step is stored
            waited[0] = (time.perf_counter() - t) * 1000

        try:
            saved = self.store.commit_step(step_row, rows, diags, turns, new_pv,
                                           ready=files_written if writing is not None else None).policy_version
        finally:
            if writing is not None:
                wait([writing])
        return saved, waited[0]

    def begin_checkpoint(self, step: int):
        """`step`'s checkpoint written by a thread (`checkpoint.begin_save`): the future of its path."""
        return ckpt.begin_save(self.run_dir, step, self.lm.model, self.trainer.opt, state=self.trainer.saved_state())

    def settle_checkpoint(self) -> float:
        """Store the policy version an overlapped checkpoint waits for, once its files are in place
        (`train.checkpoint_overlap`, backend/checkpoint_overlap.py): before anything changes the
        model or reads the run's policy. Milliseconds waited for the files (0: nothing pending)."""
        pending, self.pending = self.pending, None
        if pending is None:
            return 0.0
        saved, waited_ms = checkpoint_overlap.settle(pending, self.store)
        self.adopt_version(saved)
        return waited_ms

    def adopt_version(self, saved: int) -> None:
        """A policy version the store just numbered is the run's policy now; older checkpoints
        go by the retention rule."""
        self.policy_version = saved
        retention.prune(self.run_dir, self.store, self.cfg.train.keep_checkpoints)

    def search_debit(self, tasks: int) -> int:
        """Groups this step draws fewer to pay for the evolution's search (`train.search_budget =
        "within"`, `budget.debited_groups`); 0 under "extra" and in a data-parallel run."""
        if self.cfg.train.search_budget != "within" or self.dist is not None:
            return 0
        from backend.evolve.budget import debited_groups, search_budget

        return debited_groups(search_budget(self.store)["search_rollouts"], self.store.search_debited(),
                              self.cfg.train.group_size, tasks)

    def revival_reserve(self, step: int) -> int | None:
        """Groups this step keeps back for the redraws of its moves on dead groups, when they come
        out of the step's budget (`train.revival_budget`, `dead_groups.reserve`); None when the
        harness asks for no such move, a data-parallel run (no redraws), "extra", or a step of one
        task (nothing to keep back: its redraws come on top)."""
        moves = dead_groups.Moves.of(self.harness.sampling)
        if (not moves.active or self.dist is not None or self.cfg.train.revival_budget != "within"
                or self.cfg.train.tasks_per_step < 2):  # one task leaves nothing to keep back: on top
            return None
        previous = self.store.window_steps(step - 1, step - 1)
        return dead_groups.reserve(previous[0] if previous else None, self.cfg.train.tasks_per_step)

    def step_moves(self, step: int, tasks, items: list[Scored], plan: dict | None, progress,
                   held: int | None = None) -> dict:
        """The moves on dead groups a training step's harness asks for (backend/dead_groups.py),
        and the curriculum rule's record (backend/curriculum_rule.py): {"items": what the step
        trains on, and the step metrics that say what was done}. Nothing when neither is on.
        `held`: the group draws kept back for redraws (`revival_reserve`; None: no limit)."""
        out: dict = {"items": items}
        if plan is not None:
            tally, unlevelled = curriculum_rule.tally(items, self.env.has_levels)
            out[curriculum_rule.KEY] = {**plan, "tally": tally, "unlevelled": unlevelled}
        moves = dead_groups.Moves.of(self.harness.sampling)
        if not moves.active:
            return out
        if self.dist is not None:  # the ranks each train on what they drew: a redraw has no rank
            self.say("SAMPLING hint / resample_dead are not applied in a data-parallel run", "warn", step)
            return out

        def draw(ts, gids, round_, prefixes):
            torch.manual_seed(dead_groups.redraw_seed(self.cfg.seed, step, round_))
            return self.collect(ts, self.harness, self.cfg.train.group_size, progress=progress, groups=gids,
                                prefixes=prefixes)[0]
        references = dead_groups.references(self.env, self.harness.spec.prompt, self.lm.tokenizer)
        out["items"], revival = dead_groups.revive(items, tasks, moves, draw, references, self.max_new_tokens(),
                                                   budget=held)
        out[dead_groups.KEY] = revival.to_dict()
        return out

    def batch_shapes(self, trained: bool = True) -> dict:
        """The batch sizes this step ran with (a step's arithmetic depends on them): the training
        micro-batch (None when nothing was trained) and the generation batch. They change when
        planned from free memory or lowered after an out-of-memory error; benchmarks/run_shapes.py
        lists them per step."""
        shapes = {"micro_batch": self.trainer.last_shape.get("micro_batch") if trained else None}
        gen = getattr(self.generator, "batch_size", None)
        return {**shapes, "gen_batch": gen} if isinstance(gen, int) else shapes

    def ensure_disk_room(self) -> None:
        """Stop cleanly before a checkpoint that would pass the run's disk budget or fill its disk."""
        t = self.cfg.train
        why = room_problem(self.run_dir, ckpt.estimate_bytes(self.run_dir, self.lm.model), t.disk_budget_gb,
                           t.min_free_gb)
        if why:
            msg = (f"{why}; the run stopped after step {self.store.last_step()} with its state saved. Free space "
                   f"or raise the limit (--set train.disk_budget_gb=N), then "
                   f"`evotui run --headless --resume {self.run_dir}`")
            self.say(msg, "error")
            raise ResourceExhausted(msg)

    def update_policy(self, items: list[Scored], dist=None) -> tuple[list[Sample], dict]:
        """One GRPO update on the rollouts the harness trains on (training steps and trials).
        `dist`: the data-parallel ranks that generated `items` (a training step's), or None."""
        trained = [s for s in items if is_trained(s.kept, s.advantage) and s.completion_ids]
        samples = [Sample(s.prompt_ids, s.completion_ids, s.loss_mask, s.advantage) for s in trained]
        if getattr(self.generator, "name", "") == "vllm" or self.cfg.model.free_cache_for_training:
            self.generator.sleep()  # give the engine's memory back to training
        # "batch": TRL's dapo normaliser, every rollout's tokens; "live" (default): the tokens trained on
        denom = float(sum(sum(s.loss_mask) for s in items)) if self.cfg.train.loss_denominator == "batch" else None
        if dist is not None:  # every rank trains on its own rollouts; gradients summed
            return samples, dist.update(items, trained, samples, denom)
        return samples, self.with_oom_retry(lambda: self.trainer.step(samples, denom), self.trainer, "micro_batch")

    def restore_policy(self, step: int) -> None:
        """Load the policy a rollback of the promotion at `step` restores: the store pointed the
        run at it with the harness's rollback (`Store.roll_back_version`), so a resume after a
        stop here loads the same one."""
        from peft import set_peft_model_state_dict
        from safetensors.torch import load_file

        pv = self.store.current_policy_version()
        if pv:
            f = self.store.checkpoint_of(pv) / "adapter_model.safetensors"
            set_peft_model_state_dict(self.lm.model, load_file(str(f), device=str(self.lm.device)))
            self.policy_version = pv["id"]
        else:  # back to the base model: LoRA B matrices to zero
            for n, p in self.lm.model.named_parameters():
                if "lora_B" in n:
                    p.data.zero_()
            self.policy_version = 0
        if hasattr(self.generator, "refresh"):  # in-place zeroing bypasses the fast engine's change tracking
            self.generator.refresh()
        self.say(f"policy restored to version {self.policy_version} (checkpoint at or before step {step})")

    # ------------------------------------------------------------ held-out
    def evaluate(self, step: int) -> float:
        """Greedy accuracy on both held-out sets (and the out-of-distribution test where the run
        asks for one), stored as `evals` rows labelled by split. Returns the validation accuracy:
        the gate reads only that; test and ood are reported only."""
        t0 = time.perf_counter()
        sets = held_out_sets(self.env, self.cfg.eval.n_val, self.cfg.eval.n_test, self.cfg.eval.n_ood)
        tasks = [t for split in sets.values() for t in split]
        items: list[Scored] = []
        size = EVAL_BATCH_CPU if str(self.lm.device) == "cpu" else getattr(self.generator, "batch_size", len(tasks))
        when = "start" if step == 0 else f"step {step}"
        for i in range(0, len(tasks), max(1, size)):  # a pause or a stop is honoured between batches
            self.control.checkpoint(f"held-out eval {i}/{len(tasks)} at {when}")
            part, _ = self.collect(tasks[i:i + size], self.harness, 1, greedy=True,
                                   max_new_tokens=self.cfg.eval.max_new_tokens)
            check_generated(part, f"the held-out evaluation at {'the start' if step == 0 else when}",
                            self.store.last_step())
            items += part
        by_split, start = {}, 0
        for split, part in sets.items():
            by_split[split], start = items[start:start + len(part)], start + len(part)
        # the completion (its tail) and question let `evotui report` audit correct verdicts for hacks
        results = {k: [{"task_id": s.task.id, "correct": bool(s.verdict.correct), "status": s.verdict.status,
                        "reward": s.reward, "level": (s.task.meta or {}).get("level"),
                        "question": s.task.question[:2000],
                        "completion": s.completion[-4000:]} for s in v] for k, v in by_split.items()}
        agr = {k: agreement([s.reward for s in v], [s.verdict.correct for s in v], self.harness.weights)
               for k, v in by_split.items()}
        acc = self.store.record_evals(step, results, agr, self.policy_version, self.harness_version,
                                      (time.perf_counter() - t0) * 1000)
        self.say(f"test accuracy at step {step}: {acc['test']:.3f} (reported only)", step=step)
        self.progress.outcome(outcomes.eval_lines(step, results))
        return acc["validation"]

    # ------------------------------------------------------------ commands
    def handle_commands(self, step: int) -> None:
        """The boundary between two steps: apply every waiting command (`backend/dispatch.py`),
        wait here while the run is paused, raise StopRequested once a stop was asked for."""
        self.control.checkpoint(f"step {step}: waiting for commands", context=lambda: self._command_context(step))
        self.reload_harness()

    def _command_context(self, step: int):
        self.settle_checkpoint()  # a command may read or restore the run's policy
        self.reload_harness()  # a command before this one may have promoted a version
        return hooks.context(self, step)

    def _on_signal(self, signum, frame) -> None:
        if signum == signal.SIGINT and self.control.stop_requested:
            raise KeyboardInterrupt  # a second Ctrl-C: now, without waiting for the checkpoint
        self.control.request_stop()

    def _stop_for_harness(self, e: Exception) -> dict:
        """The active harness failed as a whole (crash, hang, garbage): stop with one clear
        line; the last committed step and its checkpoint are intact."""
        msg = (f"active harness v{self.harness_version} failed: {e}; the run stopped after step "
               f"{self.store.last_step()} with its state saved. Fix or roll back the harness, then "
               f"`evotui run --headless --resume {self.run_dir}`")
        self.say(msg, "error")
        self.store.set_run(status="stopped", pid=None, error=msg[:500])
        return {"status": "stopped", "error": msg}

    # ------------------------------------------------------------ the run
    def run(self) -> dict:
        start = self.store.last_step() + 1
        cfg = self.cfg
        self.store.set_run(status="running", pid=os.getpid(), error=None)
        signals = (signal.SIGTERM, signal.SIGINT) if threading.current_thread() is threading.main_thread() else ()
        old = {sig: signal.signal(sig, self._on_signal) for sig in signals}
        final = "finished"
        try:
            last = self.store.latest_eval("validation")
            if last is None or (start > 1 and self._eval_due(start - 1) and last["step"] < start - 1):
                self._evaluate_and_judge(start - 1)  # the start, or an evaluation a stop cut short
            progress = self.progress
            for step in range(start, cfg.steps + 1):
                self.handle_commands(step)
                row = self.train_step(step, progress.start(step))
                progress.done(row)
                if cfg.evolve.enabled and step % cfg.evolve.every == 0:
                    self.settle_checkpoint()  # the round reads the run's policy
                    before = outcomes.mark(self.store)
                    effects = hooks.evolution_round(self, step)
                    progress.outcome(outcomes.changes(self.store, before))
                    self.apply(effects, step)
                if self._eval_due(step):
                    self._evaluate_and_judge(step)
                self.metrics.publish()
        except StopRequested:
            final = "stopped"
            self.say(f"stopped on request; the last committed step is {self.store.last_step()}; "
                     f"continue with `evotui run --headless --resume {self.run_dir}`")
        except (HarnessError, WorkerFailure) as e:
            return self._stop_for_harness(e)
        finally:
            try:
                self.settle_checkpoint()  # a stop or an error leaves no version pending
            finally:
                for sig, handler in old.items():
                    signal.signal(sig, handler)
                self.control.report(None)
                self.metrics.close()
        self.store.set_run(status=final, pid=None, paused=0)  # --resume runs; it does not wait paused
        return {"status": final}

    def _eval_due(self, step: int) -> bool:
        return step % self.cfg.eval.every == 0 or step == self.cfg.steps

    def _evaluate_and_judge(self, step: int) -> None:
        self.settle_checkpoint()  # the evaluation records the policy version it measured
        acc = self.evaluate(step)
        self.say(f"validation accuracy at {'start' if step == 0 else f'step {step}'}: {acc:.3f}", step=step)
        if step:
            before = outcomes.mark(self.store)
            effects = hooks.after_eval(self, step, acc)
            self.progress.outcome(outcomes.changes(self.store, before))
            self.apply(effects, step)

    def apply(self, effects: Effects | None, step: int) -> None:
        """What evolution changed (`backend.evolve.Effects`), applied to the engine: its log lines,
        the policy checkpoint a rollback restores, the new active harness."""
        if effects is None:  # the round or check failed; evolve_hooks logged why
            return
        for level, message in effects.log:
            self.say(message, level, step)
        if effects.restore_policy_step is not None:
            self.restore_policy(effects.restore_policy_step)
        if effects.harness_version is not None and effects.harness is not None:
            self.harness_version, self.harness = effects.harness_version, effects.harness
            self.say(f"harness version {self.harness_version} is now active")
            self.write_harness_file()
