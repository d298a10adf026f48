#!/usr/bin/env python3
"""The wait a terminal user has: `ragbox ask` from the command to its first word, and to its exit.

    RAGBOX_DATA_DIR=D scripts/bench/ask-wait.py BIN[,BIN...] "question" [RUNS]

Runs each binary RUNS times (default 5), alternating, and prints per binary the median time from
starting `BIN ask QUESTION` to the first non-blank byte on its standard output, and to its exit.
Unlike `eval`'s first token (timed from the LLM request, the model loaded), this includes process
start, opening the store, loading the models and retrieving.
"""
import os, statistics, subprocess, sys, time


def main():
    bins, question = sys.argv[1].split(","), sys.argv[2]
    runs = int(sys.argv[3]) if len(sys.argv) > 3 else 5
    times = {b: ([], []) for b in bins}
    for _ in range(runs):
        for b in bins:
            start = time.time()
            p = subprocess.Popen([b, "ask", question], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
            first = None
            while True:
                c = p.stdout.read(1)
                if not c:
                    break
                if first is None and c.strip():
                    first = time.time() - start
            p.wait()
            times[b][0].append(first if first is not None else float("nan"))
            times[b][1].append(time.time() - start)
    for b in bins:
        first, done = times[b]
        print(f"{b}: first output p50 {statistics.median(first):.2f} s {[round(x, 2) for x in first]}; "
              f"exit p50 {statistics.median(done):.2f} s {[round(x, 2) for x in done]}")


if __name__ == "__main__":
    main()
