#!/usr/bin/env python3
"""Every-put latency ratios of a put-to-commit JSON, against the floor as the
issue defines it: fdatasync pN + commit pN (the harness pairs the two by rank
since the night of 2026-12-04; runs before paired them in time order, and
their JSON's p50_vs_floor / p99_vs_floor read against that floor).

    python3 bench/tools/floor_by_rank.py docs/data/put_to_commit.json

Prints, per record size and policy, each round's ratios and their median.
Only the JSON's own percentiles are used: nothing is re-measured.
"""

import json
import statistics
import sys


def ratio(own, floor_parts):
    if own is None or any(p is None for p in floor_parts):
        return None
    return own / max(1, sum(floor_parts))


def main(path):
    with open(path) as f:
        run = json.load(f)
    print(f"{run['command']} ({run['date_utc']})")
    for case in run["cases"]:
        policies = [c["policy"] for c in case["rounds"][0]["cairn"]]
        for policy in policies:
            by_pct = {"p50": [], "p99": []}
            for rnd in case["rounds"]:
                floor = rnd["floor"]
                own = next(c for c in rnd["cairn"] if c["policy"] == policy)
                line = []
                for pct in by_pct:
                    key = f"{pct}_us"
                    r = ratio(
                        own["put_to_commit"][key],
                        [floor["fdatasync"][key], floor["commit"][key]],
                    )
                    if r is not None:
                        by_pct[pct].append(r)
                    line.append(f"{pct} " + ("n/a" if r is None else f"{r:.2f}x"))
                print(
                    f"  {case['record_bytes']} B {policy} round {rnd['round']}: "
                    + ", ".join(line)
                )
            for pct, rs in by_pct.items():
                if rs:
                    print(
                        f"  {case['record_bytes']} B {policy} {pct} / floor: median "
                        f"{statistics.median(rs):.2f}x ({min(rs):.2f}-{max(rs):.2f}x)"
                    )


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "target/bench/put_to_commit.json")
