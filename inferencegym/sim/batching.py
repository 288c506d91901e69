"""Batching policies of a replica: which requests run in the next iteration.

Each policy is a one-method class: ``plan(replica) -> (prefill_chunks, with_decodes)`` where
``prefill_chunks`` is a list of ``(request, tokens)`` to prefill in this iteration and
``with_decodes`` says whether the running decoding sequences take a step in it. The policy uses the
replica's admission helpers (``head``, ``try_admit``, ``reserve_decode``; typed against
:class:`~inferencegym.sim.views.BatchingReplicaView`, never the concrete ``Replica``) so KV accounting,
watermark, preemption and priority live in one place (``replica.py``).

* ``vllm``    prefill-first (vLLM v0): whole prompts up to a token budget; an iteration with
              prefills runs no decodes (the "generation stall" of a long prompt). With
              ``num_scheduler_steps`` N > 1 (v0.6 multi-step) a pure-decode batch is a block of N
              steps and nothing is admitted until it ends.
* ``sarathi`` chunked prefill (Sarathi-Serve): every iteration carries all decodes plus prompt
              chunks up to ``chunk_size`` tokens in all (stall-free batching; with pipeline
              stages, ``chunk_size`` per micro-batch).
* ``static``  request-level batching (FasterTransformer, pre-Orca): a batch is admitted only when
              the replica is empty, prefilled together, and runs until its last request finishes;
              KV is reserved for the full length at admission, so it never preempts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar, cast

from .interpreted import mypyc_attr

if TYPE_CHECKING:
    from .request import Request
    from .views import BatchingReplicaView

Plan = tuple[list[tuple["Request", int]], bool]


@mypyc_attr(serializable=True, allow_interpreted_subclasses=True)  # deep-copied (sim/interpreted.py)
class VLLMScheduler:
    """Prefill-first iteration-level batching (Orca/vLLM)."""

    name: ClassVar[str] = "vllm"

    def plan(self, rep: "BatchingReplicaView") -> Plan:
        steps = rep.cfg.num_scheduler_steps
        if steps == 1 and not rep.waiting and not rep.prio_waiting and not rep.partials_possible:
            rep.reserve_decode()  # nothing to admit or finish prefilling: the decodes alone (the
            return [], True       # common case of the loop below, without its queue look-ups)
        if steps > 1 and rep.in_step_block():
            # multi-step (vLLM v0.6 ``--num-scheduler-steps``): inside a decode block the engine does
            # not call the scheduler (``LLMEngine.step`` skips it while ``_has_remaining_steps``), so
            # a waiting prompt is admitted only at the block's end
            rep.reserve_decode()
            return [], True
        chunks: list = []
        budget = rep.cfg.max_tokens_per_iter
        r: Request | None
        if rep.partials_possible:
            for r in rep.running:  # prompts left half-done by a switch from chunked prefill
                rem = r.prefill_target - r.prefilled_tokens
                if rem > 0:
                    chunks.append((r, rem))
                    budget -= rem
        while True:
            r = rep.head()
            if r is None:
                break
            # the token budget is checked in try_admit only (after the prefix-cache lookup); a
            # longer single prompt is admitted alone (no budget while no chunk is planned)
            if not rep.try_admit(r, False, budget if chunks else None):
                break
            need = r.prefill_target - r.prefilled_tokens
            if need > 0:
                chunks.append((r, need))
                budget -= need
        if chunks:
            return chunks, False
        rep.reserve_decode()
        if steps > 1 and rep.running:  # the decodes run a block of ``steps`` steps (a prefill step is one)
            rep.start_step_block(steps)
        return chunks, True


@mypyc_attr(serializable=True, allow_interpreted_subclasses=True)  # deep-copied (sim/interpreted.py)
class SarathiScheduler:
    """Chunked prefill with decodes piggybacked, ``chunk_size`` tokens per iteration (Sarathi-Serve).

    With ``pipeline_parallel`` P > 1 an iteration is P micro-batches, each scheduled by its own
    scheduler call with the whole ``chunk_size`` budget (vLLM V1's batch queue:
    ``EngineCore.step_with_batch_queue`` calls ``Scheduler.schedule()`` once per in-flight batch, each
    with ``max_num_batched_tokens``; a request in flight is skipped): up to ``P x chunk_size`` tokens
    an iteration, one prompt's chunk at most ``chunk_size`` (it sits in one micro-batch)."""

    name: ClassVar[str] = "sarathi"

    def plan(self, rep: "BatchingReplicaView") -> Plan:
        rep.reserve_decode()
        n_dec = 0
        r: Request | None
        running = cast("list[Request]", rep.running)  # (a list: the compiled scans read it natively)
        for r in running:
            if r.prefilled_tokens >= r.prefill_target:
                n_dec += 1
        cfg = rep.cfg
        per = cfg.chunk_size
        budget = per * cfg.pipeline_parallel - n_dec
        chunks: list = []
        for r in running:
            if budget <= 0:
                break
            rem = r.prefill_target - r.prefilled_tokens
            if rem > 0:
                c = rem if rem < budget else budget
                if c > per:
                    c = per
                chunks.append((r, c))
                budget -= c
        while budget > 0:
            r = rep.head()
            if r is None or not rep.try_admit(r, False):
                break
            rem = r.prefill_target - r.prefilled_tokens
            if rem > 0:
                c = rem if rem < budget else budget
                if c > per:
                    c = per
                chunks.append((r, c))
                budget -= c
        return chunks, True


@mypyc_attr(serializable=True, allow_interpreted_subclasses=True)  # deep-copied (sim/interpreted.py)
class StaticScheduler:
    """Request-level batching: a new batch only when the replica is empty (FasterTransformer)."""

    name: ClassVar[str] = "static"

    def plan(self, rep: "BatchingReplicaView") -> Plan:
        if rep.running:
            partial = [(r, r.prefill_target - r.prefilled_tokens) for r in rep.running
                       if r.prefilled_tokens < r.prefill_target]  # after a switch from another policy
            if partial:
                return partial, False
            rep.reserve_decode()
            return [], True
        chunks: list = []
        while True:
            r = rep.head()
            if r is None or not rep.try_admit(r, True):
                break
            need = r.prefill_target - r.prefilled_tokens
            if need > 0:
                chunks.append((r, need))
        return chunks, not chunks


SCHEDULERS: dict[str, type] = {
    "vllm": VLLMScheduler,
    "sarathi": SarathiScheduler,
    "static": StaticScheduler,
}


def make_scheduler(name: str):
    try:
        return SCHEDULERS[name]()
    except KeyError:
        raise ValueError(f"unknown scheduler {name!r}; valid: {', '.join(sorted(SCHEDULERS))}") from None
