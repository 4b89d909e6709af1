#!/usr/bin/env python3
"""How many threads of the indexer (and of the bench process, which runs the members)
are running at once during an ingest, sampled from /proc every 10 ms.

Start it, then the bench, in the same shell:
    python3 benches/search/threads.py 60 & target/release/bench-search ...
It waits for `causeway search serve` to start, lets 5 s pass, samples for the given
seconds and prints the share of samples with 0, 1, 2... running threads, and the cores
each process used over the window. Mostly one running indexer thread means that one
thread (the store's single writer) bounds the ingest, whatever the cores left idle.
"""
import collections
import os
import sys
import time


def find(pred):
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                c = open(f"/proc/{p}/cmdline", "rb").read().split(b"\0")
            except OSError:
                continue
            if pred(c):
                return p
    return None


def cores_used(p):
    st = open(f"/proc/{p}/stat").read()
    r = st[st.rindex(")") + 2 :].split()
    return (int(r[11]) + int(r[12])) / os.sysconf("SC_CLK_TCK")


def running(p):
    n = 0
    for t in os.listdir(f"/proc/{p}/task"):
        try:
            st = open(f"/proc/{p}/task/{t}/stat").read()
        except OSError:
            continue
        n += st[st.rindex(")") + 2] == "R"
    return n


def main():
    window = float(sys.argv[1]) if len(sys.argv) > 1 else 60.0
    deadline = time.time() + 600
    indexer = None
    while indexer is None and time.time() < deadline:
        indexer = find(lambda c: len(c) > 2 and b"causeway" in c[0] and b"search" in c and b"serve" in c)
        time.sleep(0.05)
    if indexer is None:
        sys.exit("no `causeway search serve` process started within 10 minutes")
    bench = find(lambda c: c[0].endswith(b"bench-search"))
    time.sleep(5)
    start = {p: cores_used(p) for p in (indexer, bench) if p}
    t0 = time.time()
    hist = {p: collections.Counter() for p in start}
    while time.time() - t0 < window:
        try:
            for p in start:
                hist[p][running(p)] += 1
        except OSError:
            break  # the indexer exited
        time.sleep(0.01)
    el = time.time() - t0
    for p, name in ((indexer, "indexer"), (bench, "bench process (members)")):
        if p not in hist:
            continue
        try:
            used = (cores_used(p) - start[p]) / el
        except OSError:
            used = float("nan")
        total = sum(hist[p].values()) or 1
        shares = ", ".join(f"{k}: {v * 100 / total:.0f}%" for k, v in sorted(hist[p].items()))
        print(f"{name}: {used:.2f} cores over {el:.0f} s; running threads per sample: {shares}")


if __name__ == "__main__":
    main()
