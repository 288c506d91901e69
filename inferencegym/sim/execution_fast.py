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

Memo misses are computed here too (compiled) where the inputs have the exact types needed: a new
``(B, k)``'s decode coefficients (:meth:`IterationCosts.coeffs`), a dense model's token-count time
(``layer_op_times_s``' values summed by the builtin ``sum``), the LM-head time and the proposer's
pass coefficients (the draft model's own evaluator): the same IEEE operations in the same order,
stored in the model's own memos (``tests/sim/test_sim_execution_misses.py``). Anything else (a
mixture-of-experts model's token time, an invalid argument) is asked of the model, as before.
"""

from __future__ import annotations

import math
from typing import Any

from .execution import ExecutionModel
from .execution_params import cudagraph_padded_tokens
from .execution_rates import ACT_BYTES
from .interpreted import mypyc_attr

_sum: Any = sum
"""The builtin ``sum`` called generically (as ``KernelCosts._token_time`` calls it on floats)."""


def _pow(x: float, y: float) -> float:
    """``x ** y`` of floats, ``x >= 0`` finite and ``y > 0`` (:func:`_token_terms` checks the
    exponents): C's ``pow`` as Python's float power calls it there (compiled: no boxed floats)."""
    return math.pow(x, y)


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


def _floats(*vals: Any) -> bool:
    """Whether every value is exactly a Python float."""
    return all(type(v) is float for v in vals)


def _finite_nonneg(*vals: float) -> bool:
    """Whether every value is finite and >= 0 (the bases :func:`_pow` may be given)."""
    return all(0.0 <= v < math.inf for v in vals)


def _token_terms(m: Any) -> tuple | None:
    """What :meth:`IterationCosts._token_miss` reads of a dense model's ``layer_op_times_s`` /
    ``_token_time``, in their order, or None where those are not plain floats and ints (then the
    model computes its misses itself)."""
    k = m.kernel
    if m._moe is not None or type(m.tensor_parallel) is not int or type(m._n_elem_ops) is not int:
        return None
    if not (_floats(m._gemm_p, m._gemm_inv_p, k.gemm_floor_s, k.elem_floor_s, m._outer_elem_per_token,
                    m._ar_lat, m._ar_time_per_token, m._lm_flop_time, m._lm_weight_time, m._lm_act_time)
            and 0.0 < m._gemm_p < math.inf and 0.0 < m._gemm_inv_p < math.inf  # (pow is float power)
            and _finite_nonneg(m._lm_flop_time, m._lm_weight_time, m._lm_act_time)):
        return None
    gemms: list[tuple[float, float, float]] = []
    for _name, terms in zip(m._GEMM_NAMES, m._gemm_terms):
        if len(terms) != 3 or not _floats(*terms) or not _finite_nonneg(*terms):
            return None
        gemms.append((terms[0], terms[1], terms[2]))
    elems: list[tuple[int, float, bool]] = []  # (floor multiple, coefficient, "0.0 * n")
    for name, coef in m._elem_coef.items():
        if type(coef) is not float:
            return None
        aq = name == "act_quant"
        elems.append((m._n_elem_ops - 5 if aq else 1, coef, aq and coef == 0.0))
    return gemms, elems


def _draft_terms(m: Any) -> tuple | None:
    """What :meth:`IterationCosts._draft_miss` reads of ``SpeculativeCosts._draft_pass_coeffs``:
    ``(draft evaluator or None, per-sequence rate, per-pass constant)``, or None (the model
    computes its misses itself)."""
    e = m.engine
    if m.spec_method == "ngram":
        if not m.engine_overhead:
            return None, 0.0, 0.0
        rate = e.per_seq_s if e.ngram_per_seq_s is None else e.ngram_per_seq_s
        return (None, rate, 0.0) if type(rate) is float else None
    if m.spec_method is None or m._draft_model is None:
        return None
    dm = m._draft_model
    dc = iteration_costs(dm)
    if dc is None or dc.tok_terms is None or type(dm._layers) is not int:
        return None
    if not m.engine_overhead:
        return dc, 0.0, 0.0
    if not _floats(e.per_layer_s, e.gpu_per_layer_s, e.per_seq_s):
        return None
    return dc, e.per_seq_s, dm._layers * (e.per_layer_s + e.gpu_per_layer_s)


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
        self.full_layers: int = m._full_layers
        tt = _token_terms(m)
        self.tok_terms: tuple | None = tt
        """:func:`_token_terms` (None: the model computes token-time misses)."""
        ok = tt is not None  # (else the fields below are unused placeholders)
        self.gemms: list[tuple[float, float, float]] = tt[0] if tt is not None else []
        self.elems: list[tuple[int, float, bool]] = tt[1] if tt is not None else []
        self.p: float = m._gemm_p if ok else 0.0
        self.ip: float = m._gemm_inv_p if ok else 0.0
        self.gemm_floor: float = k.gemm_floor_s if ok else 0.0
        self.elem_floor: float = k.elem_floor_s if ok else 0.0
        self.outer: float = m._outer_elem_per_token if ok else 0.0
        self.tp: int = m.tensor_parallel if ok else 1
        self.ar_lat: float = m._ar_lat if ok else 0.0
        self.ar_tok: float = m._ar_time_per_token if ok else 0.0
        self.lm_flop: float = m._lm_flop_time if ok else 0.0
        self.lm_weight: float = m._lm_weight_time if ok else 0.0
        self.lm_act: float = m._lm_act_time if ok else 0.0
        dt = _draft_terms(m) if self.spec_on else None
        self.draft_terms: tuple | None = dt
        """:func:`_draft_terms` (None: the model computes its proposer's pass misses)."""
        self.draft_costs: IterationCosts | None = dt[0] if dt is not None else None
        self.draft_rate: float = dt[1] if dt is not None else 0.0
        self.draft_const: float = dt[2] if dt is not None else 0.0

    def time(self, pf: list[tuple[int, int]], B: int, S: int, k: int) -> float:
        """``model.iteration_time_s(pf, B, S, k)``: ``pf`` the prompt chunks' ``(tokens,
        context)``, ``B`` decoding sequences with ``S`` context tokens in all, depth ``k``."""
        if not pf:
            c: Any = self.coeff_cache.get((B, k))
            if c is None:
                c = self._coeff_miss(B, k)
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
                d = self._draft_miss(B)
            da: float = d[0]
            db: float = d[1]
            passes = 1 if self.ngram else k
            t += passes * (da + db * S)
        return t

    def _token_time(self, n: int) -> float:
        v: Any = self.tok_cache.get(n)
        if v is None:
            v = self._token_miss(n)
        return v

    def _lm_head_time(self, n: int) -> float:
        v: Any = self.lm_cache.get(n)
        if v is None:
            v = self._lm_miss(n)
        return v

    def coeffs(self, B: int, k: int) -> Any:
        """``model.decode_coeffs(B, k)``: the memo's ``(a, b)`` tuple (computed here on a miss)."""
        c: Any = self.coeff_cache.get((B, k))
        if c is None:
            c = self._coeff_miss(B, k)
        return c

    def _coeff_miss(self, B: int, k: int) -> Any:
        # ExecutionModel.decode_coeffs (one stage, no sliding-window layers), in the same order
        if B < 0 or k < 0 or (k > 0 and not self.spec_on) or self.tok_terms is None:
            return self.m.decode_coeffs(B, k)  # (its errors, or the model's own token times)
        if k > 0 and self.draft_terms is None:
            return self.m.decode_coeffs(B, k)
        if B == 0:
            c: Any = (0.0, 0.0)
        else:
            q = k + 1
            ntok = B * q
            nseq = ntok if (k and self.expand) else B
            f = 1.0 + self.slow * ntok
            gtok = ntok
            if self.graph_max:
                g: Any = self.graph_tokens.get(ntok)
                if g is None:
                    g = self.graph_tokens[ntok] = cudagraph_padded_tokens(ntok, self.graph_max)
                gtok = g
            kern_a = f * (self._token_time(gtok) + self._lm_head_time(ntok)
                          + self.layers * (self.dec_floor + self.dec_per_seq * nseq)) \
                + self.gpu_ovh + self.gpu_seq * ntok
            cpu = self.ovh_fixed + self.ovh_seq * nseq + self.ovh_tok * ntok
            if k and self.overhead:
                cpu += self.spec_cpu * B
            if self.asynchronous:
                a = kern_a if kern_a >= cpu else cpu
            else:
                a = kern_a + cpu
            b = f * self.full_layers * self._dec_slope(q)
            if k > 0:  # SpeculativeCosts._add_draft_coeffs
                d: Any = self.draft_cache.get(B)
                if d is None:
                    d = self._draft_miss(B)
                da: float = d[0]
                db: float = d[1]
                if self.ngram:
                    a = a + da
                else:
                    a, b = a + k * da, b + k * db
            c = (a, b)
        self.coeff_cache[(B, k)] = c
        return c

    def _draft_miss(self, B: int) -> Any:
        # SpeculativeCosts._draft_pass_coeffs, in the same order
        if self.draft_terms is None:
            return self.m._draft_pass_coeffs(B)
        dc = self.draft_costs
        if dc is None:  # n-gram: CPU lookup per sequence
            c: Any = (self.draft_rate * B, 0.0) if self.overhead else (0.0, 0.0)
        else:
            dd: Any = dc.coeffs(B, 0)
            a: float = dd[0]
            b: float = dd[1]
            if self.overhead:
                f = 1.0 + self.slow * B
                a = f * a + self.draft_const + self.draft_rate * B
                b = f * b
            c = (a, b)
        self.draft_cache[B] = c
        return c

    def _gemm(self, tc: float, tm: float) -> float:
        # a GEMM's time as KernelCosts takes it: the floor plus the p-norm of its compute and memory times
        return self.gemm_floor + _pow(_pow(tc, self.p) + _pow(tm, self.p), self.ip)

    def _token_miss(self, n: int) -> float:
        # KernelCosts._token_time of a dense model (layer_op_times_s summed in its order)
        if self.tok_terms is None:
            return self.m._token_time(n)
        if n <= 0:
            total = 0.0
        else:
            vals: list[float] = []
            for fc, wt, at in self.gemms:
                vals.append(self._gemm(fc * n, wt + at * n))
            for mult, coef, zero in self.elems:
                vals.append(0.0 * n if zero else self.elem_floor * mult + coef * n)
            vals.append(2.0 * (self.ar_lat + self.ar_tok * n) if self.tp > 1 else 0.0 * n)
            layer: float = _sum(vals)  # (the builtin, as the model's: same rounding on every version)
            total = self.layers * layer + 2 * self.elem_floor + self.outer * n
        self.tok_cache[n] = total
        return total

    def _lm_miss(self, n: int) -> float:
        # KernelCosts._lm_head_time, in the same order
        if self.tok_terms is None:
            return self.m._lm_head_time(n)
        if n <= 0:
            v = 0.0
        else:
            n_r = -(-n // self.dp)
            v = self._gemm(self.lm_flop * n_r, self.lm_weight + self.lm_act * n_r)
        self.lm_cache[n] = v
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
