"""first_token_iterations keeps the free slots as a count beside a heap of release times (speed);
it must give bit-for-bit the estimate of one heap holding every slot (the reference below)."""
import heapq, random
from types import SimpleNamespace as NS
from inferencegym.sim.estimates import first_token_iterations
from inferencegym.sim.request import Request
def _req(*, prefill_target, prefilled_tokens, output_tokens, generated_tokens, prompt_tokens):
    """A real ``Request`` in that state (compiled, the estimate checks its class)."""
    r = Request(req_id=0, arrival_s=0.0, prompt_tokens=prompt_tokens, output_tokens=output_tokens)
    r.prefill_target, r.prefilled_tokens, r.generated_tokens = prefill_target, prefilled_tokens, generated_tokens
    return r


def reference(rep, prompt_tokens, *, expected_output_tokens, cached_tokens=0):
    chunk = max(1, rep.cfg.chunk_size); cap = rep.cfg.batch_cap; running = rep.running
    slots = [0.0] * max(0, cap - len(running)); ahead = 0; clair = expected_output_tokens is None
    for r in running:
        left = max(0, r.prefill_target - r.prefilled_tokens); ahead += left
        rem = (r.output_tokens - r.generated_tokens) if clair else expected_output_tokens
        slots.append(left / chunk + rem)
    heapq.heapify(slots)
    for q in (rep.prio_waiting, rep.waiting):
        for r in q:
            t = heapq.heappop(slots) if slots else 0.0
            ahead += r.prompt_tokens
            out = r.output_tokens if clair else expected_output_tokens
            heapq.heappush(slots, t + r.prompt_tokens / chunk + out)
    start = slots[0] if slots else 0.0
    return start + (ahead + prompt_tokens - cached_tokens) / chunk


def test_free_slot_count_matches_one_heap_of_every_slot():
    rnd = random.Random(0)
    for trial in range(3000):
        cap = rnd.choice([0, 1, 2, 4, 8, 256]); nr = rnd.randint(0, cap + 3)
        req = lambda: _req(prefill_target=rnd.randint(0, 3000), prefilled_tokens=rnd.randint(0, 3000), output_tokens=rnd.randint(0, 500), generated_tokens=rnd.randint(0, 600), prompt_tokens=rnd.randint(0, 4000))
        rep = NS(cfg=NS(chunk_size=rnd.choice([0, 256, 512]), batch_cap=cap), running=[req() for _ in range(nr)],
                 prio_waiting=[req() for _ in range(rnd.randint(0, 3))], waiting=[req() for _ in range(rnd.randint(0, 300) if rnd.random() < .5 else 0)])
        e = rnd.choice([None, 0.0, 120.5])
        p = rnd.randint(1, 5000); c = rnd.randint(0, p)
        a, b = reference(rep, p, expected_output_tokens=e, cached_tokens=c), first_token_iterations(rep, p, expected_output_tokens=e, cached_tokens=c)
        assert a.hex() == b.hex(), (trial, a, b)
