#!/usr/bin/env python3
"""The reader's floor tried on the rows of `ragbox --json eval --qa ... --prompts-only` runs: at
each floor, per collection, the share of answerable questions answered with their evidence quoted,
answered with another unit, and declined, and the share of unanswerable questions (near misses
apart) declined. Rows refused by retrieval's floor count as declined (they never reach the reader).

    ragbox --json eval --split dev --prompts-only --qa SET --corpus DIR ... > dev.json
    python3 scripts/eval/qa/reader-floor.py dev.json [--floors 0.3,0.4,0.5]
"""
import argparse
import json


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("reports", nargs="+")
    ap.add_argument("--floors", default="0.2,0.3,0.4,0.5,0.6,0.7")
    args = ap.parse_args()
    rows = []
    for p in args.reports:
        for c in json.load(open(p))["collections"]:
            if c["collection"] != "all":
                rows.extend(c["rows"])
    collections = sorted({r["collection"] for r in rows})

    def declined(r, floor):
        return r["refusal"] == "no_good_source" or not r.get("decision") or r["decision"]["score"] < floor

    for floor in (float(f) for f in args.floors.split(",")):
        cells = []
        for c in collections + ["all"]:
            mine = [r for r in rows if c == "all" or r["collection"] == c]
            a = [r for r in mine if r["answerable"]]
            u = [r for r in mine if not r["answerable"] and r.get("kind") != "near-miss"]
            n = [r for r in mine if r.get("kind") == "near-miss"]
            right = sum(1 for r in a if not declined(r, floor) and r["evidence_stage"] == "shown")
            dec = sum(1 for r in a if declined(r, floor))
            share = lambda k, of: f"{100 * k / max(len(of), 1):.0f}%"
            cells.append(f"{c}: quoted {share(right, a)}, declined {share(dec, a)} of {len(a)}; "
                         f"unanswerable declined {share(sum(declined(r, floor) for r in u), u)} of {len(u)}, "
                         f"near misses {share(sum(declined(r, floor) for r in n), n)} of {len(n)}")
        print(f"floor {floor:.2f}:\n  " + "\n  ".join(cells))


if __name__ == "__main__":
    main()
