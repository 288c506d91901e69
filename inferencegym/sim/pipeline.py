"""Pipeline parallelism in the execution-time model (``ExecutionModel(pipeline_parallel=P)``).

The replica's layers are split into ``P`` consecutive stages, one GPU group (of ``tensor_parallel x
expert_parallel`` GPUs) each; a stage sends its tokens' hidden states to the next over the node's
GPU link. As vLLM V1 (``--pipeline-parallel-size``) and Vidur (one batch per stage in flight) run
it, an engine step's batch is cut into ``m = min(P, sequences)`` micro-batches that follow each
other through the stages, so in steady state every stage works on one of them:

* a stage's time for a micro-batch ``b`` is ``kernel(b) / P`` (its ``1/P`` of the layers; the whole
  model's kernel time of ``b`` on one group) plus the point-to-point send of ``b``'s hidden states
  (``latency + tokens x hidden x 2 bytes / link``);
* a step, in which every sequence advances once, takes ``max(m, P)`` stage slots of the slowest
  micro-batch: with ``m = P`` the pipeline is full (``P`` slots); with fewer sequences than stages
  (``m < P``) each micro-batch still needs ``P`` slots to cross the pipeline and ``P - m`` of them
  are the **bubble** (a single sequence gains nothing from the extra GPUs and pays the sends);
* unequal micro-batches (a prefill chunk beside decodes) pace the pipeline at the slowest one;
* each micro-batch has the whole token budget (vLLM schedules every in-flight batch with its own
  ``max_num_batched_tokens``), so a step carries up to ``P x chunk_size`` tokens
  (``batching.SarathiScheduler``): in a burst's prefill phase a step is P full micro-batches and a
  running sequence waits for all of them, about the P = 1 step time of ``P x chunk_size`` tokens.

What PP buys is memory: each GPU holds ``ceil(L / P)`` layers' weights and KV (and the embedding or
the LM head), so the KV capacity per token grows about ``P``-fold; the memory-bound decode of the
whole batch reads every weight once per step as before (``P`` micro-batches x ``1/P`` of the
weights), and a compute-bound step gains up to ``P``-fold. Speculative decoding with PP is refused.
"""

from __future__ import annotations

from collections.abc import Sequence

PP_DEGREES = (1, 2, 4, 8)


def split_microbatches(prefill_chunks: Sequence[tuple[int, int]], decode_batch: int,
                       decode_context_tokens: int, m: int) -> list[tuple[list[tuple[int, int]], int, float]]:
    """``m`` micro-batches ``(prefill chunks, decode sequences, their total context)``: the decodes
    split as evenly as counts allow (context in proportion), the prefill chunks dealt in turn to the
    micro-batch with the fewest tokens so far (largest chunk first)."""
    parts: list[list] = [[[], 0, 0.0] for _ in range(m)]
    base, extra = divmod(int(decode_batch), m)
    for j in range(m):
        b = base + (1 if j < extra else 0)
        parts[j][1] = b
        parts[j][2] = decode_context_tokens * b / decode_batch if decode_batch else 0.0
    load = [p[1] for p in parts]
    for n, c in sorted(prefill_chunks, key=lambda x: -x[0]):
        j = min(range(m), key=lambda i: (load[i], i))
        parts[j][0].append((n, c))
        load[j] += n
    return [(p[0], p[1], p[2]) for p in parts if p[0] or p[1]]


def microbatch_count(sequences: int, stages: int) -> int:
    """Micro-batches a step is cut into: one per stage, at most one per sequence."""
    return max(1, min(int(stages), int(sequences)))


def step_time_s(stage_times_s: Sequence[float], stages: int, microbatches: int) -> float:
    """One engine step: ``max(m, P)`` slots of the slowest stage time (the pipeline's pace)."""
    if not stage_times_s:
        return 0.0
    return max(int(microbatches), int(stages)) * max(stage_times_s)


def p2p_time_s(tokens: float, hidden: int, link_bytes_per_s: float, latency_s: float) -> float:
    """Send of ``tokens`` hidden states (BF16) from one stage to the next."""
    if tokens <= 0:
        return 0.0
    return latency_s + tokens * hidden * 2.0 / link_bytes_per_s
