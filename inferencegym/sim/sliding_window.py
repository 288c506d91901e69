"""Sliding-window attention layers (gpt-oss): how many keys a chunk's queries attend to.

A model may interleave full-attention layers with sliding-window layers whose queries see only the
last ``W`` positions (``ModelPreset.sliding_window``; gpt-oss alternates 18 layers of a 128-token
window with 18 full-attention layers, ``layer_types`` of its Hugging Face config). For such a layer
the execution model charges:

* **prefill**: a chunk of ``n`` queries after ``c`` cached tokens attends to ``min(W, c + i + 1)``
  keys at its ``i``-th query, split (as for full attention) into the keys inside the chunk and the
  cached ones (:func:`window_keys`), and reads at most ``W`` cached tokens' KV;
* **decode**: each sequence reads the KV of at most ``W`` tokens, a per-sequence constant (the
  contexts being almost always longer than the window), instead of its whole context;
* **KV memory**: vLLM's hybrid KV-cache manager (``docs.vllm.ai``, design "Hybrid KV Cache Manager":
  sliding-window layers "reserve slots only for the most recent sliding_window_size tokens", gpt-oss
  named) frees the blocks that leave the window, so a long sequence holds KV for the full-attention
  layers only. The execution model counts the KV bytes per token over the full-attention layers
  (the pool's block size); the windows themselves are blocks of the same pool (vLLM's hybrid
  allocator gives both layer groups pages of one size), held per running sequence:
  :func:`window_blocks` (gpt-oss: 128 tokens span at most 9 blocks of 16, ~35 % of a ShareGPT
  sequence's ~400 tokens), charged by the replica's KV cache (``KVCache.window_blocks``) from a
  request's admission to its release. The attention sinks of gpt-oss (one learned logit per head)
  add no measurable work and are not modelled.
"""

from __future__ import annotations


def window_keys(n: int, c: int, w: int) -> tuple[float, float]:
    """``(own, cached)``: keys attended by a chunk of ``n`` queries after ``c`` cached tokens in a
    layer of window ``w``, summed over the queries: ``own`` among the chunk's tokens (the causal
    part, at most ``w`` per query), ``cached`` among the ``c`` tokens before it.

    Query ``i`` (0-based) sees ``min(w, i + 1)`` chunk tokens and ``min(w - i - 1, c)`` cached ones
    while ``i < w - 1``, none after. Full attention is ``w`` >= ``c + n``:
    ``(n (n + 1) / 2, n c)``.
    """
    if n <= 0:
        return 0.0, 0.0
    m = min(n, w)
    own = m * (m + 1) / 2 + (n - m) * w
    # cached: sum over j = w - 1 - i for i in [0, min(n, w - 1)) of min(j, c)
    k = min(n, w - 1)
    if k <= 0 or c <= 0:
        return float(own), 0.0
    lo, hi = w - k, w - 1  # j runs over [lo, hi]
    if c >= hi:
        cached = (lo + hi) * k / 2
    elif c < lo:
        cached = c * k
    else:  # j in [lo, c] contributes j, j in (c, hi] contributes c
        cached = (lo + c) * (c - lo + 1) / 2 + c * (hi - c)
    return float(own), float(cached)


def window_blocks(model, block_size: int) -> int:
    """KV-pool blocks a running sequence holds for the sliding-window layers of ``model`` (an
    execution model or anything with a ``model`` preset; 0 without sliding-window layers): the blocks
    a window of ``W`` tokens can span, ``ceil((W - 1) / block_size) + 1`` (vLLM's sliding-window
    manager frees only blocks wholly before the window), in blocks of the full-attention layers'
    size (x sliding / full-attention layers; 1 for gpt-oss's 18 and 18)."""
    m = getattr(model, "model", None)
    w = int(getattr(m, "sliding_window", 0) or 0)
    sw = int(getattr(m, "sliding_window_layers", 0) or 0)
    if not w or not sw:
        return 0
    full = int(m.num_layers) - sw
    if full <= 0:
        return 0
    span = -(-(w - 1) // int(block_size)) + 1
    return -(-span * sw // full)
