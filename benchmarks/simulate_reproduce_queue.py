"""The main job's makespan on two workers by queue order, simulated from per-experiment times.

Each worker takes the next experiment of the queue when it is free (as ``jaxdyn reproduce``'s
pool does). Compares the registry's order, longest first (``jaxdyn._cli._schedule``) and random
orders against the lower bound max(sum / workers, longest), with the times of
``QUICK_WALL_S`` (docs/benchmarks.md's cold column; ``FULL_WALL_S``, its full-size table, with
``--full``) and with each time multiplied by a random log-normal factor while the order still
comes from the table. Prints one JSON object.

    python benchmarks/simulate_reproduce_queue.py [--workers 2] [--draws 2000] [--full]
"""

import argparse
import heapq
import json
import random
import statistics

from jaxdyn._cli._schedule import FULL_WALL_S, QUICK_WALL_S, longest_first
from jaxdyn.runs import list_experiments


def makespan(queue, times, workers):
    free = [0.0] * workers
    for name in queue:
        heapq.heappush(free, heapq.heappop(free) + times[name])
    return max(free)


def bound(times, workers):
    return max(sum(times.values()) / workers, max(times.values()))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--draws", type=int, default=2000)
    parser.add_argument("--full", action="store_true", help="the full-size table")
    args = parser.parse_args()
    rng = random.Random(0)
    registry = [e.name for e in list_experiments() if e.paper]
    lpt = longest_first(registry, not args.full, None)
    times = {n: (FULL_WALL_S if args.full else QUICK_WALL_S)[n] for n in registry}
    result = {
        "benchmark": "reproduce_queue",
        "size": "full" if args.full else "quick",
        "workers": args.workers,
        "lower_bound_s": round(bound(times, args.workers), 1),
        "registry_order_s": round(makespan(registry, times, args.workers), 1),
        "longest_first_s": round(makespan(lpt, times, args.workers), 1),
    }
    for sigma in (0.2, 0.5):
        over = {"registry": [], "longest_first": []}
        for _ in range(args.draws):
            actual = {n: t * rng.lognormvariate(0.0, sigma) for n, t in times.items()}
            lb = bound(actual, args.workers)
            over["registry"].append(makespan(registry, actual, args.workers) / lb - 1)
            over["longest_first"].append(makespan(lpt, actual, args.workers) / lb - 1)
        for key, values in over.items():
            values.sort()
            result[f"sigma{sigma}_{key}_over_bound_mean"] = round(statistics.mean(values), 4)
            result[f"sigma{sigma}_{key}_over_bound_p95"] = round(values[int(0.95 * len(values))], 4)
    shuffled = []
    for _ in range(args.draws):
        queue = registry[:]
        rng.shuffle(queue)
        shuffled.append(makespan(queue, times, args.workers) / bound(times, args.workers) - 1)
    result["random_order_over_bound_mean"] = round(statistics.mean(shuffled), 4)
    result["random_order_over_bound_max"] = round(max(shuffled), 4)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
