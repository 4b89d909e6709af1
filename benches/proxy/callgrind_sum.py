#!/usr/bin/env python3
"""Self cost per function of a callgrind dump (uncompressed names), per request.

callgrind_annotate 3.19 attributes everything to one symbol on these Rust binaries,
so this reads the format directly: `fn=` starts a function, a cost line after
`calls=` is the callee's inclusive cost (skipped), every other cost line is self cost.
"""
import argparse
import collections
import re


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dump")
    ap.add_argument("--requests", type=int, required=True)
    ap.add_argument("--label", default="")
    ap.add_argument("--top", type=int, default=25)
    a = ap.parse_args()
    names, cost = {}, collections.Counter()
    fn, after_call = None, False
    with open(a.dump, errors="replace") as f:
        for line in f:
            if line.startswith("fn="):
                v = line[3:].strip()
                m = re.match(r"\((\d+)\)\s*(.*)", v)
                if m:
                    if m.group(2):
                        names[m.group(1)] = m.group(2)
                    v = names.get(m.group(1), v)
                fn = v
            elif line.startswith("calls="):
                after_call = True
            elif line[:1].isdigit() or line[:1] in "+-*":
                if after_call:
                    after_call = False
                    continue
                parts = line.split()
                if fn and len(parts) >= 2:
                    cost[fn] += int(parts[1])
    total = sum(cost.values())
    n = a.requests
    if a.label:
        print(f"{a.label}: {total / n:,.0f} instructions per request ({total:,} over {n:,} requests)")
    for name, v in cost.most_common(a.top):
        print(f"{v / n:9,.0f}  {100 * v / total:5.1f}%  {name[:140]}")


if __name__ == "__main__":
    main()
