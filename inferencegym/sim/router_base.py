"""Shared pieces of the routers: fair tie-breaking (rotating start) for argmin / argmax rules."""

from __future__ import annotations


class _Rotating:
    """Argmin over the candidates; ties go to the candidate after the previous choice (rotating),
    never always to replica 0 (Vidur's LOR does that and leaves replicas idle)."""

    needs_sync = False

    def __init__(self) -> None:
        self._last = -1

    def _argmin(self, cands: list[int], key) -> int:
        n = len(cands)
        start = (self._last + 1) % n
        best = None
        best_v = None
        for i in range(n):
            c = cands[(start + i) % n]
            v = key(c)
            if best_v is None or v < best_v:
                best, best_v = c, v
        self._last = cands.index(best)
        return best
