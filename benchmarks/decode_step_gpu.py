"""Where a decode step's GPU time goes beyond the per-op kernels (issue 23, fifth session).

The simulator's decode step is the sum of per-op kernel times (each op timed alone, 20 copies in one
CUDA graph) plus the engine profile's CPU work, which vLLM V1's asynchronous scheduling hides. This
script measures, on one GPU, what a real decode step adds to that sum, at the decode anchors of the
three BLIS roleplay runs (Llama-2-7B TP1, batch 12, context 911; one GPU's shard of CodeLlama-34B
TP2, batch 22 and of Llama-2-70B TP4, batch 27, without their all-reduces):

* ``shape`` rows: ``isolated_s`` (each GEMM and the attention of a layer timed alone, x layers: what
  the per-op rows give), ``graph_step_s`` (the whole step, unfused PyTorch elementwise ops, one
  CUDA-graph replay) and ``compiled_step_s`` (the same with each layer through ``torch.compile``:
  Inductor fuses the norms with their residual adds, RoPE, SiLU x up, as vLLM's compiled graph
  does), with every kernel of the compiled step profiled (``torch.profiler``: GEMM / attention /
  small);
* ``sampler`` rows: vLLM V1's PyTorch sampling paths (``vllm/v1/sample/ops/topk_topp_sampler.py``,
  ``apply_top_k_top_p`` + ``random_sample``): top-p 0.9 at temperature 0.6 (the Llama-2
  checkpoints' generation config), plain random sampling (a checkpoint whose generation config sets
  no top-p) and greedy, at batch 1-64 over a 32,000-token vocabulary (and top-p over Llama-3's
  128,256), graph-replayed (GPU time) and eager.

    python benchmarks/decode_step_gpu.py --out decode_step.json                  # GPU, ~60-90 s
    python benchmarks/decode_step_gpu.py --device cpu --tiny --out /tmp/d.json   # CPU check
    python benchmarks/decode_step_gpu.py --compare decode_step.json              # vs the simulator

Decides whether the BLIS Llama-2-7B TP1 TPOT miss (-14 %, ~1 ms a step) is GPU work outside the
per-op kernels that asynchronous scheduling cannot hide, and how it scales with the model (layers,
shard) and the batch.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import torch
import torch.nn.functional as F

DT = torch.bfloat16
VOCAB = 32000
TEMPERATURE, TOP_P = 0.6, 0.9


def _shape(tiny: bool, model: str = "llama-2-7b"):
    if tiny:
        return SimpleNamespace(name="tiny", hidden_size=256, num_heads=4, num_kv_heads=4, head_dim=64,
                               ffn_size=512, num_layers=2, vocab_size=VOCAB)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from inferencegym.sim.presets import get_model
    return get_model(model)


def _sync(dev):
    if dev == "cuda":
        torch.cuda.synchronize()


def _time(fn, dev, reps=15, warm=3) -> float:
    """Median seconds of ``fn`` (CUDA events on a GPU, wall clock on CPU)."""
    for _ in range(warm):
        fn()
    _sync(dev)
    ts = []
    for _ in range(reps):
        if dev == "cuda":
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            fn()
            e.record()
            torch.cuda.synchronize()
            ts.append(s.elapsed_time(e) / 1e3)
        else:
            t0 = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t0)
    ts.sort()
    return ts[len(ts) // 2]


def _graph(fn, dev):
    """``fn`` captured in a CUDA graph (its replay), or ``fn`` itself on CPU."""
    if dev != "cuda":
        return fn
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    return g.replay


class Step:
    """One Llama decode step (RMSNorm, RoPE, attention over a contiguous KV cache, SwiGLU), TP 1,
    random weights; ``fused`` runs each layer's elementwise work through ``torch.compile``."""

    def __init__(self, mp, dev: str, batch: int, context: int, tp: int = 1) -> None:
        """``tp`` > 1: one GPU's shard (heads, KV heads, FFN and vocabulary divided; no all-reduce)."""
        self.dev, self.b, self.c = dev, batch, context
        self.mp = mp = SimpleNamespace(hidden_size=mp.hidden_size, num_heads=mp.num_heads // tp,
                                       num_kv_heads=max(1, mp.num_kv_heads // tp), head_dim=mp.head_dim,
                                       ffn_size=mp.ffn_size // tp, num_layers=mp.num_layers)
        h, nh, nkv, d, ffn = mp.hidden_size, mp.num_heads, mp.num_kv_heads, mp.head_dim, mp.ffn_size
        g = lambda *s: torch.randn(*s, device=dev, dtype=DT) * 0.02
        self.emb, self.head = g(VOCAB // tp, h), g(h, VOCAB // tp)
        self.layers = [dict(qkv=g(h, (nh + 2 * nkv) * d), o=g(nh * d, h), up=g(h, 2 * ffn), down=g(ffn, h),
                            n1=torch.ones(h, device=dev, dtype=DT), n2=torch.ones(h, device=dev, dtype=DT))
                       for _ in range(mp.num_layers)]
        self.kv = [(g(batch, nkv, context + 1, d), g(batch, nkv, context + 1, d)) for _ in self.layers]
        self.ids = torch.randint(0, VOCAB // tp, (batch, 1), device=dev)
        inv = 1.0 / (10000 ** (torch.arange(0, d // 2, device=dev, dtype=torch.float32) / (d // 2)))
        ang = torch.tensor([float(context)], device=dev)[:, None] * inv[None]
        self.cos, self.sin = ang.cos().to(DT), ang.sin().to(DT)
        self.layer = self._layer

    def compile(self) -> None:
        """Fuse each layer's elementwise work (norms with their residual adds, RoPE, SiLU x up) with
        Inductor, as vLLM's compiled graph does; GEMMs stay cuBLAS, attention stays SDPA."""
        self.layer = torch.compile(self._layer, dynamic=False)

    def _layer(self, x, L, k_cache, v_cache):
        mp, d, b, c = self.mp, self.mp.head_dim, x.shape[0], self.c
        y = F.rms_norm(x, (x.shape[-1],), L["n1"], 1e-5)
        q, k, v = (y @ L["qkv"]).split([mp.num_heads * d, mp.num_kv_heads * d, mp.num_kv_heads * d], dim=-1)

        def rope(t, n):
            t = t.view(b, 1, n, d).transpose(1, 2)
            t1, t2 = t[..., : d // 2], t[..., d // 2:]
            return torch.cat((t1 * self.cos - t2 * self.sin, t2 * self.cos + t1 * self.sin), dim=-1)
        q, k = rope(q, mp.num_heads), rope(k, mp.num_kv_heads)
        k_cache[:, :, c:c + 1] = k
        v_cache[:, :, c:c + 1] = v.view(b, 1, mp.num_kv_heads, d).transpose(1, 2)
        a = F.scaled_dot_product_attention(q, k_cache, v_cache, enable_gqa=mp.num_kv_heads != mp.num_heads)
        x = x + a.transpose(1, 2).reshape(b, 1, -1) @ L["o"]
        gt, up = (F.rms_norm(x, (x.shape[-1],), L["n2"], 1e-5) @ L["up"]).chunk(2, dim=-1)
        return x + (F.silu(gt) * up) @ L["down"]

    def isolated_s(self, dev) -> dict:
        """The per-op way (``benchmarks/gpu_profile.py``): each GEMM and the attention of one layer
        timed alone (20 copies in one graph), times the layer count."""
        mp, b, c, L = self.mp, self.b, self.c, self.layers[0]
        x = torch.randn(b, mp.hidden_size, device=dev, dtype=DT)
        a = torch.randn(b, mp.num_heads * mp.head_dim, device=dev, dtype=DT)
        u = torch.randn(b, mp.ffn_size, device=dev, dtype=DT)
        q = torch.randn(b, mp.num_heads, 1, mp.head_dim, device=dev, dtype=DT)
        k, v = self.kv[0]
        gqa = mp.num_kv_heads != mp.num_heads
        ops = {"qkv": lambda: x @ L["qkv"], "o": lambda: a @ L["o"], "up": lambda: x @ L["up"],
               "down": lambda: u @ L["down"],
               "attention": lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=gqa)}
        out = {}
        for name, fn in ops.items():
            run = _graph(lambda fn=fn: [fn() for _ in range(20)], dev)
            out[name] = _time(run, dev, reps=7) / 20 * mp.num_layers
        return out

    def __call__(self):
        x = self.emb[self.ids]
        for L, kv in zip(self.layers, self.kv):
            x = self.layer(x, L, kv[0], kv[1])
        return F.rms_norm(x, (x.shape[-1],), self.layers[0]["n1"], 1e-5) @ self.head


def _kind(name: str) -> str:
    n = name.lower()
    if any(s in n for s in ("gemm", "gemv", "cutlass", "sm90_xmma", "cublas", "matmul", "splitk", "nvjet")):
        return "gemm"
    if any(s in n for s in ("flash", "fmha", "attention", "attn", "sdpa", "efficient")):
        return "attention"
    return "small"


def kernel_profile(fn, dev) -> dict:
    """Device durations of every kernel ``fn`` launches (one eager run), grouped."""
    from torch.profiler import ProfilerActivity, profile
    fn()
    _sync(dev)
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev == "cuda" else [])
    with profile(activities=acts) as prof:
        fn()
        _sync(dev)
    out = {"gemm": [0, 0.0], "attention": [0, 0.0], "small": [0, 0.0]}
    names: dict[str, list] = {}
    for ev in prof.events():
        if dev == "cuda" and ev.device_type == torch.autograd.DeviceType.CUDA:
            k, dur = _kind(ev.name), ev.time_range.elapsed_us() / 1e6
            out[k][0] += 1
            out[k][1] += dur
            e = names.setdefault(ev.name[:80], [0, 0.0])
            e[0] += 1
            e[1] += dur
    top = sorted(names.items(), key=lambda kv: -kv[1][1])[:15]
    return {**{k: {"kernels": n, "sum_s": s} for k, (n, s) in out.items()},
            "top": [{"name": n, "count": c, "sum_s": t, "kind": _kind(n)} for n, (c, t) in top]}


def sampler_fn(batch: int, dev: str, kind: str = "top_p", vocab: int = VOCAB):
    """vLLM V1's PyTorch sampling path over float32 logits (``vllm/v1/sample/sampler.py``,
    ``ops/topk_topp_sampler.py``): ``top_p``: temperature 0.6 and top-p 0.9 (the Llama-2
    checkpoints' generation config: sort, softmax, cumsum, mask, scatter back, softmax, then
    ``probs / Exp(1)`` argmax); ``random``: temperature 1, no top-k/top-p (a checkpoint whose
    generation config sets neither: softmax, ``probs / Exp(1)`` argmax); ``greedy``: argmax."""
    logits0 = torch.randn(batch, vocab, device=dev, dtype=DT)
    temp = torch.full((batch,), TEMPERATURE, device=dev)
    p = torch.full((batch,), TOP_P, device=dev)

    def top_p():
        logits = logits0.float().div_(temp[:, None])
        ls, idx = logits.sort(dim=-1, descending=False)
        probs_sum = ls.softmax(dim=-1).cumsum_(dim=-1)
        mask = probs_sum <= 1 - p[:, None]
        mask[:, -1] = False
        ls.masked_fill_(mask, -float("inf"))
        logits = ls.scatter(dim=-1, index=idx, src=ls)
        probs = logits.softmax(dim=-1, dtype=torch.float32)
        q = torch.empty_like(probs).exponential_()
        return probs.div_(q).argmax(dim=-1)

    def random():
        probs = logits0.float().softmax(dim=-1, dtype=torch.float32)
        q = torch.empty_like(probs).exponential_()
        return probs.div_(q).argmax(dim=-1)

    def greedy():
        return logits0.float().argmax(dim=-1)
    return {"top_p": top_p, "random": random, "greedy": greedy}[kind]


SHAPES = (("llama-2-7b", 1, 12, 911), ("codellama-34b", 2, 22, 912), ("llama-2-70b", 4, 27, 913))
"""(model, tensor-parallel shard, batch, context): the decode anchors of the three BLIS roleplay runs."""


@torch.inference_mode()
def measure(dev: str, tiny: bool, budget_s: float, shapes=SHAPES) -> dict:
    t_start = time.perf_counter()
    res = {"info": {"device": torch.cuda.get_device_name() if dev == "cuda" else "cpu", "torch": torch.__version__,
                    "tiny": tiny}, "rows": []}
    for kind, vocab, batches in (("top_p", VOCAB, (1, 12, 27, 64)), ("random", VOCAB, (12, 27)),
                                 ("greedy", VOCAB, (12,)), ("top_p", 128256, (1, 12))):
        for b in batches:
            fn = sampler_fn(b, dev, kind, vocab)
            res["rows"].append({"op": "sampler", "kind": kind, "vocab": vocab, "batch": b,
                                "graph_s": _time(_graph(fn, dev), dev), "eager_s": _time(fn, dev)})
            print(json.dumps(res["rows"][-1]), flush=True)
    for model, tp, b, c in shapes:
        if time.perf_counter() - t_start > budget_s * 0.6:
            res["rows"].append({"op": "shape", "model": model, "tp": tp, "skipped": "time budget"})
            continue
        mp = _shape(tiny, model)
        st = Step(mp, dev, b, c, tp=(1 if tiny else tp))
        row = {"op": "shape", "model": model, "tp": tp, "batch": b, "context": c, "layers": st.mp.num_layers,
               "isolated_s": st.isolated_s(dev), "graph_step_s": _time(_graph(st, dev), dev)}
        try:
            st.compile()
            row["compiled_step_s"] = _time(_graph(st, dev), dev)
            row["kernels"] = kernel_profile(st, dev)
        except Exception as e:  # the compile path is optional: record why it did not run
            row["compile_error"] = f"{type(e).__name__}: {e}"[:300]
        res["rows"].append(row)
        print(json.dumps({k: v for k, v in row.items() if k != "kernels"}), flush=True)
        del st
        torch._dynamo.reset()
        if dev == "cuda":
            torch.cuda.empty_cache()
    res["info"]["wall_s"] = time.perf_counter() - t_start
    return res


def compare(path: Path) -> str:
    """Markdown: each measured shape against the simulator's kernels (``vllm-v1``, no all-reduce),
    and the GPU time a layer beyond the per-op rows and beyond the simulator's kernels."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from inferencegym.sim.execution import ExecutionModel
    rows = ["| shard | layers | per-op GEMM + attention ms | simulator's kernels ms | compiled step ms "
            "| us a layer beyond per-op rows | beyond the simulator |", "|---|---|---|---|---|---|---|"]
    for r in json.loads(Path(path).read_text())["rows"]:
        if r.get("op") != "shape" or "compiled_step_s" not in r:
            continue
        B, L, iso = r["batch"], r["layers"], r["isolated_s"]
        m = ExecutionModel.from_preset(model=r["model"], gpu="h100-80gb", tensor_parallel=r["tp"],
                                       engine_profile="vllm-v1")._replace(engine_overhead=False)
        a, b = m.decode_coeffs(B, 0)
        ops = m.layer_op_times_s(float(B))
        sim = a + b * B * (r["context"] + 1) - L * ops["all_reduce"]
        other = sim - L * sum(ops[g] for g in m._GEMM_NAMES) - L * m.attention_decode_layer_s(B, B * (r["context"] + 1))
        gemm = sum(iso[k] for k in ("qkv", "o", "up", "down"))
        beyond_rows = (r["compiled_step_s"] - gemm - iso["attention"] - other) / L
        rows.append(f"| {r['model']} TP{r['tp']}, batch {B} | {L} | {1e3 * gemm:.2f} + {1e3 * iso['attention']:.2f} "
                    f"| {1e3 * sim:.2f} | {1e3 * r['compiled_step_s']:.2f} | {1e6 * beyond_rows:.1f} "
                    f"| {1e6 * (r['compiled_step_s'] - sim) / L:.1f} |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", help="JSON file to write")
    ap.add_argument("--compare", type=Path, help="no GPU: compare a result file with the simulator")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--tiny", action="store_true", help="a 2-layer toy shape (CPU check)")
    ap.add_argument("--budget-s", type=float, default=80.0, help="start no new shape past 60 %% of this")
    a = ap.parse_args(argv)
    if a.compare is not None:
        print(compare(a.compare))
        return 0
    if not a.out:
        ap.error("--out FILE is required to measure (or --compare FILE to read a result)")
    if a.device == "cuda" and not torch.cuda.is_available():
        print("error: --device cuda needs a CUDA GPU; use --device cpu --tiny for a CPU check", file=sys.stderr)
        return 2
    res = measure(a.device, a.tiny, a.budget_s)
    Path(a.out).write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
