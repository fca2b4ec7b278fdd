"""Replay of the literal ``pytest -n auto fuzz/`` on one H200 (19th session): 4 shared-gpu places, each running
its (implementation, W) combinations in collection order (unfused before fused, W ascending), a combination
starting when its place is free and its W rank tokens are (25 on an H200, first come first served, the head of
the queue blocking the rest), with the per-combination times measured in that run. ``python3 deal-simulation.py``
prints the measured deal, the W = 16 chain that was tried, and (``--search``) the best of all 4^10 deals."""

import heapq
import itertools
import sys

MEASURED_S = {("fused", 1): 48, ("fused", 2): 63, ("fused", 4): 73, ("fused", 8): 133, ("fused", 16): 187,
              ("unfused", 1): 21, ("unfused", 2): 29, ("unfused", 4): 37, ("unfused", 8): 79, ("unfused", 16): 68}
BUDGET, START_S = 25, 14


def simulate(places: list[list[tuple]]) -> tuple[int, list[int]]:
    """(makespan, each place's end) of ``places`` (the combinations of each place, in run order)."""
    free, now = BUDGET, START_S
    nxt = [0] * len(places)
    end = [START_S] * len(places)
    waiting = [(START_S, p) for p in range(len(places))]
    running: list[tuple] = []
    while True:
        waiting.sort()
        while waiting:
            p = waiting[0][1]
            combo = places[p][nxt[p]]
            need = min(combo[1], BUDGET)
            if need > free:
                break
            free -= need
            heapq.heappush(running, (now + MEASURED_S[combo], p, need))
            waiting.pop(0)
        if not running:
            return max(end), end
        now, p, need = heapq.heappop(running)
        free += need
        nxt[p] += 1
        if nxt[p] < len(places[p]):
            waiting.append((now, p))
        else:
            end[p] = now


MEASURED_DEAL = [[("unfused", 1), ("unfused", 4), ("unfused", 8)], [("fused", 1), ("fused", 4), ("fused", 8)],
                 [("fused", 2), ("fused", 16)], [("unfused", 2), ("unfused", 16)]]
W16_CHAIN = [[("unfused", 16), ("fused", 16)], [("unfused", 2), ("fused", 8)],
             [("unfused", 1), ("fused", 1), ("fused", 4)], [("unfused", 4), ("unfused", 8), ("fused", 2)]]

if __name__ == "__main__":
    print("measured deal:", simulate(MEASURED_DEAL))  # 332 s simulated; 321 s measured
    print("W = 16 chain: ", simulate(W16_CHAIN))
    if "--search" in sys.argv:
        combos = [(i, w) for i in ("unfused", "fused") for w in (1, 2, 4, 8, 16)]
        best = (1 << 30, None)
        for deal in itertools.product(range(4), repeat=len(combos)):
            places = [[c for c, p in zip(combos, deal) if p == q] for q in range(4)]
            if deal[0] == 0 and all(places):
                best = min(best, (simulate(places)[0], places))
        print("best deal:", best)
