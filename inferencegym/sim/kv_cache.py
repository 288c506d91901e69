"""KV cache of one replica as PagedAttention blocks (vLLM).

Only block counts are tracked (which physical block holds what does not change any timing): a
request holds ``Request.kv_blocks`` blocks, the cache holds the total. The replica allocates on
admission and as decoding grows, frees on completion and preemption.
"""

from __future__ import annotations


class KVCacheError(RuntimeError):
    """An allocation or free that would break the cache's invariants (a simulator bug)."""


class KVCache:
    """Block allocator: ``used_blocks + free_blocks == capacity_blocks`` at all times."""

    __slots__ = ("block_size", "capacity_blocks", "used_blocks", "watermark_blocks")

    def __init__(self, *, capacity_tokens: int, block_size: int = 16, watermark_fraction: float = 0.01) -> None:
        if block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {block_size}")
        if capacity_tokens < block_size:
            raise ValueError(f"KV capacity of {capacity_tokens} tokens is less than one block of "
                             f"{block_size}; raise kv_budget_fraction or use a larger GPU / lower quantization")
        self.block_size = int(block_size)
        self.capacity_blocks = int(capacity_tokens) // self.block_size
        self.used_blocks = 0
        self.watermark_blocks = int(watermark_fraction * self.capacity_blocks)

    @property
    def free_blocks(self) -> int:
        return self.capacity_blocks - self.used_blocks

    def blocks_for(self, tokens: int) -> int:
        """Blocks needed to hold ``tokens`` tokens."""
        return -(-tokens // self.block_size)

    def allocate(self, n: int) -> None:
        if n < 0 or n > self.capacity_blocks - self.used_blocks:
            raise KVCacheError(f"cannot allocate {n} blocks: {self.free_blocks} free of {self.capacity_blocks}")
        self.used_blocks += n

    def free(self, n: int) -> None:
        if n < 0 or n > self.used_blocks:
            raise KVCacheError(f"cannot free {n} blocks: {self.used_blocks} in use")
        self.used_blocks -= n

    def resize(self, capacity_tokens: int, watermark_fraction: float) -> None:
        """New capacity (the caller preempts first so that ``used_blocks`` fits)."""
        cap = int(capacity_tokens) // self.block_size
        if cap < 1:
            raise ValueError(f"KV capacity of {capacity_tokens} tokens is less than one block")
        if self.used_blocks > cap:
            raise KVCacheError(f"resize to {cap} blocks with {self.used_blocks} in use")
        self.capacity_blocks = cap
        self.watermark_blocks = int(watermark_fraction * cap)

    def fragmentation_tokens(self, held: list[tuple[int, int]]) -> int:
        """Internal fragmentation: token slots allocated but unused, from ``(kv_tokens, kv_blocks)`` pairs."""
        return sum(b * self.block_size - t for t, b in held)
