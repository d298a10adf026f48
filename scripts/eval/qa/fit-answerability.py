#!/usr/bin/env python3
"""Fits the answerability decision's logistic regression (crates/core/src/answer/evidence.rs,
WEIGHTS and ANSWERED_FLOOR) on the rows of `ragbox --json eval --qa ... --prompts-only` runs.

    ragbox --json eval --split dev --prompts-only --qa SET --corpus DIR ... > dev.json
    python3 scripts/eval/qa/fit-answerability.py dev.json [--weights w0,w1,w2,w3,w4 --floor F]

Every row whose retrieval cleared the floor and whose answer carries a decision is a sample:
answerable questions are positives, unanswerable ones (near misses included) negatives. Each
collection weighs the same, and within it each class (so a set with few unanswerable questions
still counts them). With --weights the given weights are scored instead of fitted. It prints the
weights, then, per floor, the share of answerable questions declined and of unanswerable and
near-miss questions declined in every collection (rows refused by retrieval's floor count as
declined; they never reach the decision).
"""
import argparse
import json
import math


def features(s):
    n = max(len(s["terms"]), 1)
    return [
        max(-12.0, min(12.0, s["best_logit"])),
        len(s["missing"]) / n,
        1.0 if s["missing_everywhere"] else 0.0,
        0.0 if s["kind_present"] else 1.0,
        s["uncovered"],
        1.0,
    ]


def load(paths):
    rows = []
    for p in paths:
        with open(p) as f:
            report = json.load(f)
        for c in report["collections"]:
            rows.extend(c["rows"])
    return rows


def fit(samples, l2=0.01, steps=4000, rate=0.3):
    w = [0.0] * len(samples[0][0])
    total = sum(weight for _, _, weight in samples)
    for _ in range(steps):
        grad = [l2 * x for x in w]
        grad[-1] = 0.0
        for x, y, weight in samples:
            z = sum(a * b for a, b in zip(w, x))
            p = 1.0 / (1.0 + math.exp(-z))
            for i, xi in enumerate(x):
                grad[i] += weight * (p - y) * xi / total
        w = [wi - rate * g for wi, g in zip(w, grad)]
    return w


def prob(w, x):
    return 1.0 / (1.0 + math.exp(-sum(a * b for a, b in zip(w, x))))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("reports", nargs="+")
    ap.add_argument("--weights")
    ap.add_argument("--floor", type=float)
    ap.add_argument("--shown-only", action="store_true", help="train on the answerable rows whose evidence was quoted only")
    args = ap.parse_args()
    rows = load(args.reports)
    collections = sorted({r["collection"] for r in rows})
    decided = [r for r in rows if r.get("decision") and r["refusal"] != "no_good_source"]
    samples = []
    for c in collections:
        mine = [r for r in decided if r["collection"] == c]
        pos = [r for r in mine if r["answerable"] and (not args.shown_only or r["evidence_stage"] == "shown")]
        neg = [r for r in mine if not r["answerable"]]
        for group in (pos, neg):
            for r in group:
                samples.append((features(r["decision"]["signals"]), 1.0 if r["answerable"] else 0.0, 1.0 / (len(collections) * 2 * max(len(group), 1))))
    w = [float(x) for x in args.weights.split(",")] if args.weights else fit(samples)
    print("weights (logit, missing share, missing everywhere, kind absent, uncovered, bias):", ", ".join(f"{x:.3f}" for x in w))
    floors = [args.floor] if args.floor is not None else [0.3, 0.4, 0.5, 0.6, 0.7, 0.8]
    for floor in floors:
        line = [f"floor {floor:.2f}:"]
        tot = {"a": 0, "ad": 0, "u": 0, "ud": 0, "n": 0, "nd": 0, "kept": 0}
        for c in collections:
            mine = [r for r in rows if r["collection"] == c]

            def declined(r):
                if r["refusal"] == "no_good_source" or not r.get("decision"):
                    return True
                return prob(w, features(r["decision"]["signals"])) < floor

            a = [r for r in mine if r["answerable"]]
            u = [r for r in mine if not r["answerable"]]
            n = [r for r in u if r.get("kind") == "near-miss"]
            ad, ud, nd = sum(map(declined, a)), sum(map(declined, u)), sum(map(declined, n))
            tot["kept"] += sum(1 for r in a if not declined(r) and r["evidence_stage"] == "shown")
            for k, v in (("a", len(a)), ("ad", ad), ("u", len(u)), ("ud", ud), ("n", len(n)), ("nd", nd)):
                tot[k] += v
            line.append(f"{c}: answerable declined {ad}/{len(a)}, unanswerable declined {ud}/{len(u)} (near misses {nd}/{len(n)});")
        line.append(
            f"all: answerable declined {tot['ad']}/{tot['a']} ({100 * tot['ad'] / max(tot['a'], 1):.0f}%), "
            f"unanswerable declined {tot['ud']}/{tot['u']} ({100 * tot['ud'] / max(tot['u'], 1):.0f}%), near misses {tot['nd']}/{tot['n']}; "
            f"answered with the evidence quoted {tot['kept']}/{tot['a']} ({100 * tot['kept'] / max(tot['a'], 1):.0f}%)"
        )
        print("\n  ".join(line))


if __name__ == "__main__":
    main()
