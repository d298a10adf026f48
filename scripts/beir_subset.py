#!/usr/bin/env python3
"""A stated subset of a BEIR folder, for runs too slow for the whole corpus (an LLM at ingest).

Keeps the first QUERIES queries of the split that have judgements, every document judged for
them, and DISTRACTORS other documents drawn with a fixed seed; writes corpus.jsonl, queries.jsonl
and qrels/SPLIT.tsv under OUT. The same arguments always give the same files.

    scripts/beir_subset.py ../shared/data/beir/scifact /tmp/scifact-sub --queries 30 --distractors 200
"""
import argparse
import json
import os
import random


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("data", help="a BEIR folder: corpus.jsonl, queries.jsonl, qrels/SPLIT.tsv")
    ap.add_argument("out", help="the folder to write")
    ap.add_argument("--split", default="test")
    ap.add_argument("--queries", type=int, default=30)
    ap.add_argument("--distractors", type=int, default=200)
    ap.add_argument("--seed", type=int, default=12)
    a = ap.parse_args()

    judged = {}
    with open(os.path.join(a.data, "qrels", f"{a.split}.tsv")) as f:
        next(f)
        for line in f:
            q, d, score = line.rstrip("\n").split("\t")
            judged.setdefault(q, []).append((d, score))
    queries = []
    with open(os.path.join(a.data, "queries.jsonl")) as f:
        for line in f:
            q = json.loads(line)
            if q["_id"] in judged:
                queries.append(q)
            if len(queries) == a.queries:
                break
    keep_ids = {d for q in queries for d, _ in judged[q["_id"]]}
    corpus = [json.loads(line) for line in open(os.path.join(a.data, "corpus.jsonl"))]
    others = sorted(d["_id"] for d in corpus if d["_id"] not in keep_ids)
    keep_ids |= set(random.Random(a.seed).sample(others, min(a.distractors, len(others))))

    os.makedirs(os.path.join(a.out, "qrels"), exist_ok=True)
    with open(os.path.join(a.out, "corpus.jsonl"), "w") as f:
        for d in corpus:
            if d["_id"] in keep_ids:
                f.write(json.dumps(d) + "\n")
    with open(os.path.join(a.out, "queries.jsonl"), "w") as f:
        for q in queries:
            f.write(json.dumps(q) + "\n")
    with open(os.path.join(a.out, "qrels", f"{a.split}.tsv"), "w") as f:
        f.write("query-id\tcorpus-id\tscore\n")
        for q in queries:
            for d, score in judged[q["_id"]]:
                f.write(f"{q['_id']}\t{d}\t{score}\n")
    print(f"{len(queries)} queries, {len(keep_ids)} documents ({len(keep_ids) - a.distractors} judged) -> {a.out}")


if __name__ == "__main__":
    main()
