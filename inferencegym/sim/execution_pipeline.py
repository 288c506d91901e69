"""An engine step with pipeline stages: the execution model's side of ``sim/pipeline.py``.

One job: the time of one engine step of a replica with ``pipeline_parallel = P > 1`` stages. The
step's sequences are cut into micro-batches (``pipeline.split_microbatches``); each stage runs its
``1/P`` of the layers on a micro-batch (the whole model's kernel time of that micro-batch, from a
pipeline-free copy of the model, divided by ``P``) and sends its hidden states to the next stage
(``pipeline.p2p_time_s`` over the node's GPU link); the step takes ``max(m, P)`` slots of the
slowest micro-batch (``pipeline.step_time_s``), and the engine's CPU work is paid once per step
(overlapped with the kernels under asynchronous scheduling). Speculative decoding with PP is refused.

:class:`PipelineCosts` is a base of :class:`~inferencegym.sim.execution.ExecutionModel`. State
contract: the subclass sets ``model``, ``kernel``, ``gpu``, ``pipeline_parallel`` and the engine's
overhead terms (``_slow``, ``_ovh_fixed``, ``_ovh_seq``, ``_ovh_tok``, ``_async``), provides
``_replace(**changes)`` (a copy with other constructor arguments), and calls
:meth:`PipelineCosts._setup_pipeline`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from inferencegym.sim.execution_params import KernelParams
from inferencegym.sim.pipeline import microbatch_count, p2p_time_s, split_microbatches, step_time_s
from inferencegym.sim.presets import GPUPreset, ModelPreset


class StageModel(Protocol):
    """What a stage needs of the pipeline-free, overhead-free copy of the model."""

    def iteration_time_s(self, prefill_chunks: Sequence[tuple[int, int]] = (), decode_batch: int = 0,
                         decode_context_tokens: int = 0, speculation_depth: int = 0) -> float: ...


class PipelineCosts:
    """Step time with ``pipeline_parallel`` stages."""

    model: ModelPreset
    gpu: GPUPreset
    kernel: KernelParams
    pipeline_parallel: int
    _slow: float
    _ovh_fixed: float
    _gpu_ovh: float
    _gpu_seq: float
    _ovh_seq: float
    _ovh_tok: float
    _async: bool
    _replace: Callable[..., StageModel]

    def _setup_pipeline(self) -> None:
        self._pp = self.pipeline_parallel
        self._p2p_lat = self.kernel.allreduce(2)[0]
        self._p2p_bw = self.gpu.intra_node_gbytes_per_s * 1e9
        self._stage_model: StageModel | None = None

    def _pipeline_time(self, prefill_chunks, decode_batch: int, decode_context_tokens: float,
                       speculation_depth: int) -> float:
        """One engine step with pipeline stages (``sim/pipeline.py``): micro-batches of the step
        through ``P`` stages, ``max(m, P)`` slots of the slowest stage, the engine's CPU work once."""
        if speculation_depth:
            raise ValueError("speculative decoding with pipeline_parallel > 1 is not modelled; "
                             "use speculation_depth=0 or pipeline_parallel=1")
        st = self._stage_model
        if st is None:
            st = self._stage_model = self._replace(pipeline_parallel=1, engine_overhead=False,
                                                   check_memory=False, draft=None)
        P = self._pp
        nseq = len(prefill_chunks) + decode_batch
        if nseq == 0:
            return 0.0
        m = microbatch_count(nseq, P)
        stage = []
        ntok = 0
        for pf, b, ctx in split_microbatches(prefill_chunks, decode_batch, decode_context_tokens, m):
            tok = sum(n for n, _c in pf) + b
            ntok += tok
            kern = st.iteration_time_s(pf, b, ctx, 0) * (1.0 + self._slow * tok)
            stage.append(kern / P + p2p_time_s(tok, self.model.hidden_size, self._p2p_bw, self._p2p_lat))
        t = step_time_s(stage, P, m) + self._gpu_ovh + self._gpu_seq * nseq
        cpu = self._ovh_fixed + self._ovh_seq * nseq + self._ovh_tok * ntok
        if self._async:
            return t if t >= cpu else cpu
        return t + cpu
