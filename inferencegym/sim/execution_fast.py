"""The iteration time of a plain execution model in one compiled call (a speed path; bit-identical).

``ExecutionModel`` stays interpreted (``docs/bench/accel.md``: its mixins cannot be one native
class), so every ``iteration_time_s`` from the compiled replica code was a Python call through six
methods: ~30,000 instructions for an iteration with prompt chunks, 20 % of a speculating
``adversarial_multitenant`` env step. :class:`IterationCosts` holds the numbers that expression
reads (taken once from a model, checked to be the exact Python types the model holds) and
evaluates ``ExecutionModel.iteration_time_s`` with the same operations in the same order: the same
float for the same arguments (``tests/sim/test_sim_execution_fast.py`` compares the two on random
batches of every engine profile and proposer). The memoised parts stay the model's: token-count
and LM-head times, decode coefficients, the proposer's pass coefficients and one-chunk prefill
times are read from the model's own memo dictionaries (and computed by the model on a miss).

Covered: one pipeline stage, no sliding-window layers, a model of exactly ``ExecutionModel``'s
type (``SlowModel`` and other wrappers keep their own method). :func:`iteration_costs` returns
None otherwise, and the caller keeps ``model.iteration_time_s``.
"""

from __future__ import annotations

from typing import Any

from .execution import ExecutionModel
from .execution_params import cudagraph_padded_tokens
from .execution_rates import ACT_BYTES
from .interpreted import mypyc_attr

_FLOATS = ("_attn_dec_per_seq", "_attn_dec_flop_per_qk", "_attn_dec_inv_c", "_attn_dec_inv_m",
           "_kv_bytes_per_token_layer", "_attn_flop_per_qk", "_attn_pf_inv_c", "_attn_pf_inv_m",
           "_attn_pf_ctx_inv_c", "_ovh_fixed", "_ovh_seq", "_ovh_tok", "_slow", "_gpu_ovh", "_gpu_seq")
"""Model attributes :class:`IterationCosts` reads as floats (each must be a Python float)."""
_INTS = ("_layers", "_dp", "_graph_max", "_q_heads", "_pp", "_sw_layers")
"""... and as ints (each must be a Python int)."""


def iteration_costs(model: Any) -> IterationCosts | None:
    """The compiled evaluator of ``model.iteration_time_s``, or None where it does not apply
    (another model type, pipeline stages, sliding-window layers, an attribute of another type)."""
    if type(model) is not ExecutionModel:
        return None
    for name in _INTS:
        if type(getattr(model, name, None)) is not int:
            return None
    for name in _FLOATS:
        if type(getattr(model, name, None)) is not float:
            return None
    k = model.kernel
    for v in (k.attn_decode_floor_s, k.attn_prefill_per_token_s, k.attn_prefill_floor_s):
        if type(v) is not float:
            return None
    if model._pp != 1 or model._sw_layers or type(model.model.head_dim) is not int:
        return None
    if model.engine_overhead and model.spec_method is not None and type(model.engine.spec_per_seq_s) is not float:
        return None
    return IterationCosts(model)


@mypyc_attr(serializable=True, allow_interpreted_subclasses=True)  # deep-copied (sim/interpreted.py)
class IterationCosts:
    """``ExecutionModel.iteration_time_s`` of one model (see the module docstring)."""

    def __init__(self, m: Any) -> None:
        k = m.kernel
        self.m = m
        """The model (its memo dictionaries and methods for what is not evaluated here)."""
        self.tok_cache: dict = m._tok_cache
        self.lm_cache: dict = m._lm_cache
        self.coeff_cache: dict = m._coeff_cache
        self.prefill1_cache: dict = m._prefill1_cache
        self.draft_cache: dict = m._draft_cache
        self.graph_tokens: dict[int, int] = {}
        """``cudagraph_padded_tokens(n, graph_max)`` per token count ``n`` (a pure function's memo)."""
        self.layers: int = m._layers
        self.dp: int = m._dp
        self.graph_max: int = m._graph_max
        self.dec_floor: float = k.attn_decode_floor_s
        self.pf_per_token: float = k.attn_prefill_per_token_s
        self.pf_floor: float = k.attn_prefill_floor_s
        self.dec_per_seq: float = m._attn_dec_per_seq
        self.dec_fpq: float = m._attn_dec_flop_per_qk
        self.dec_inv_c: float = m._attn_dec_inv_c
        self.dec_inv_m: float = m._attn_dec_inv_m
        self.kvb: float = m._kv_bytes_per_token_layer
        self.fpq: float = m._attn_flop_per_qk
        self.pf_inv_c: float = m._attn_pf_inv_c
        self.pf_inv_m: float = m._attn_pf_inv_m
        self.pf_ctx_inv_c: float = m._attn_pf_ctx_inv_c
        self.qo_bytes: float = 2.0 * m._q_heads * m.model.head_dim * ACT_BYTES
        self.ovh_fixed: float = m._ovh_fixed
        self.ovh_seq: float = m._ovh_seq
        self.ovh_tok: float = m._ovh_tok
        self.slow: float = m._slow
        self.gpu_ovh: float = m._gpu_ovh
        self.gpu_seq: float = m._gpu_seq
        self.expand: bool = bool(m._spec_expand)
        self.overhead: bool = bool(m.engine_overhead)
        self.asynchronous: bool = bool(m._async)
        self.spec_on: bool = m.spec_method is not None
        self.ngram: bool = m.spec_method == "ngram"
        self.spec_cpu: float = float(m.engine.spec_per_seq_s) if (self.overhead and self.spec_on) else 0.0

    def time(self, pf: list[tuple[int, int]], B: int, S: int, k: int) -> float:
        """``model.iteration_time_s(pf, B, S, k)``: ``pf`` the prompt chunks' ``(tokens,
        context)``, ``B`` decoding sequences with ``S`` context tokens in all, depth ``k``."""
        if not pf:
            c: Any = self.coeff_cache.get((B, k))
            if c is None:
                c = self.m.decode_coeffs(B, k)
            a: float = c[0]
            b: float = c[1]
            return a + b * S
        if not B and len(pf) == 1:  # the model's memo of one prompt chunk alone
            key = pf[0]
            t1: Any = self.prefill1_cache.get(key)
            if t1 is None:
                t1 = self.prefill1_cache[key] = self._time(pf, 0, 0, 0)
            return t1
        return self._time(pf, B, S, k)

    def _time(self, pf: list[tuple[int, int]], B: int, S: int, k: int) -> float:
        # ExecutionModel._iteration_time_s, its helpers inlined, in the same order
        n_pf = 0
        for n, _c in pf:
            n_pf += n
        q = k + 1
        ntok = n_pf + B * q
        npf = len(pf)
        nseq = npf + B
        gtok = ntok
        if self.graph_max:
            g: Any = self.graph_tokens.get(ntok)
            if g is None:
                g = self.graph_tokens[ntok] = cudagraph_padded_tokens(ntok, self.graph_max)
            gtok = g
        L = self.layers
        t = (self._token_time(gtok) + self._lm_head_time(npf + B * q)) + L * self._attn_prefill(pf)
        if B > 0:
            nd = B * q if (k and self.expand) else B
            nseq += nd - B
            t += L * (self.dec_floor + self.dec_per_seq * nd + self._dec_slope(q) * S)
        cpu = self.ovh_fixed + self.ovh_seq * nseq + self.ovh_tok * ntok
        if B and k and self.overhead:
            cpu += self.spec_cpu * B
        t = t * (1.0 + self.slow * ntok) + self.gpu_ovh + self.gpu_seq * (npf + B * q)
        if self.asynchronous:
            if cpu > t:
                t = cpu
        else:
            t += cpu
        if B > 0 and k > 0:
            if not self.spec_on:
                return t + self.m._draft_time_s(B, k, S)  # (raises the model's error)
            d: Any = self.draft_cache.get(B)
            if d is None:
                d = self.m._draft_pass_coeffs(B)
            da: float = d[0]
            db: float = d[1]
            passes = 1 if self.ngram else k
            t += passes * (da + db * S)
        return t

    def _token_time(self, n: int) -> float:
        v: Any = self.tok_cache.get(n)
        if v is None:
            v = self.m._token_time(n)
        return v

    def _lm_head_time(self, n: int) -> float:
        v: Any = self.lm_cache.get(n)
        if v is None:
            v = self.m._lm_head_time(n)
        return v

    def _attn_prefill(self, pf: list[tuple[int, int]]) -> float:
        # KernelCosts._attn_prefill_layer for full attention
        total = 0.0
        any_chunk = False
        fpq = self.fpq
        kvb = self.kvb
        qo = self.qo_bytes
        for n, c in pf:
            if n <= 0:
                continue
            any_chunk = True
            byts = (c + n) * kvb + n * qo
            tc = fpq * n * 0.5 * (n + 1) * self.pf_inv_c
            tm = byts * self.pf_inv_m
            tc += fpq * n * c * self.pf_ctx_inv_c
            total += (tc if tc > tm else tm) + self.pf_per_token * n  # (max(tm, tc))
        if not any_chunk:
            return 0.0
        return total / self.dp + self.pf_floor

    def _dec_slope(self, q: int) -> float:
        tc = self.dec_fpq * q * self.dec_inv_c
        tm = self.kvb * self.dec_inv_m
        return (tc if tc > tm else tm) / self.dp  # (max(tm, tc))
