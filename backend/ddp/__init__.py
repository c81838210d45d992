"""One run data-parallel over N processes of one host (`train.gpus`, `evotui run --gpus N|auto`).

Rank 0 is the process that runs the loop (`backend/loop.py`): it alone samples
tasks, scores with the harness, diagnoses, evaluates the held-out sets, runs
evolution rounds and writes the run database and the checkpoints. Ranks
1..N-1 are child processes (`follower.py`) that hold a copy of the policy on
their own device (the r-th visible GPU, or the CPU with gloo) and do two things when rank 0
asks: generate their share of a training step's prompts, and take their part
of the GRPO update.

A training step on N ranks:

1. rank 0 splits the step's rollouts (each a task's chat messages) into N
   contiguous shares, broadcasts the LoRA weights (so a rollback on rank 0
   reaches every rank) and a seed per rank; every rank builds its share's
   prompts (`policy.model.task_prompts`), generates them, then judges and scores it (the
   evaluator, and the harness's per-rollout rewards and labels in its own
   sandboxed harness worker: `share.py`) while the others do the same; rank 0
   gathers completions, verdicts and scores as plain data.
2. rank 0 applies the harness to the whole batch with those scores: weighted
   rewards, filters and group-relative advantages over whole groups (a group is
   never split for its statistics), as one process would.
3. rank 0 deals the trained rollouts out by token count (`balance.py`: a rank
   keeps its own up to its share of the work, the surplus moves with its token
   ids) and sends each rank their advantages and the batch's token
   denominator; every rank computes the loss on its rollouts, divided by the
   whole batch's count, and the LoRA gradients are summed (one all-reduce of a
   flat buffer) before clipping, so the update equals the one-process update on
   the whole batch (tests/test_distributed.py).

Messages go through the rendezvous key-value store (`comm.Channel`), so a rank
that waits (while rank 0 evaluates, evolves or is paused) holds no collective
open and no timeout runs out; tensors (weights, gradients) go through
torch.distributed (nccl on CUDA, gloo on the CPU). Evolution rounds and
held-out evaluations run on rank 0 only. Multi-turn domains (swe) run on one
process.
"""
