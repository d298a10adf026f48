#!/usr/bin/env python3
"""A stated subset of a BEIR folder, for runs too slow for the whole corpus (an LLM at ingest).

Keeps the first QUERIES queries of the split that have judgements, every document judged for
them, each query's HARD best-ranked unjudged documents by BM25 over the whole corpus (the
distractors a retriever would meet there), and DISTRACTORS more drawn with a fixed seed; writes
corpus.jsonl, queries.jsonl and qrels/SPLIT.tsv under OUT. The same arguments give the same files.

    scripts/eval/beir-subset.py ../shared/data/beir/scifact /tmp/scifact-sub --queries 30 --hard 6 --distractors 50
"""
import argparse
import collections
import json
import math
import os
import random
import re


def words(text):
    return re.findall(r"[a-z0-9]+", text.lower())


def bm25_top(query, docs, index, n, k1=0.9, b=0.4):
    """The ids of the n best documents for `query` by BM25 (Lucene's defaults of Anserini)."""
    df, lengths, avg = index
    scores = collections.Counter()
    for w in set(words(query)):
        if w not in df:
            continue
        idf = math.log(1 + (len(docs) - len(df[w]) + 0.5) / (len(df[w]) + 0.5))
        for i, tf in df[w].items():
            scores[i] += idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * lengths[i] / avg))
    return [docs[i]["_id"] for i, _ in scores.most_common(n)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("data", help="a BEIR folder: corpus.jsonl, queries.jsonl, qrels/SPLIT.tsv")
    ap.add_argument("out", help="the folder to write")
    ap.add_argument("--split", default="test")
    ap.add_argument("--queries", type=int, default=30)
    ap.add_argument("--hard", type=int, default=6, help="per query, best-ranked unjudged documents by BM25")
    ap.add_argument("--distractors", type=int, default=50, help="more documents, drawn at random")
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
    df, lengths = collections.defaultdict(dict), []
    for i, d in enumerate(corpus):
        ws = words((d.get("title") or "") + " " + d["text"])
        lengths.append(len(ws))
        for w, tf in collections.Counter(ws).items():
            df[w][i] = tf
    index = (df, lengths, sum(lengths) / len(lengths))
    judged_ids = set(keep_ids)
    for q in queries:
        ranked = [d for d in bm25_top(q["text"], corpus, index, a.hard + 20) if d not in judged_ids]
        keep_ids |= set(ranked[: a.hard])
    hard = len(keep_ids) - len(judged_ids)
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
    print(f"{len(queries)} queries, {len(keep_ids)} documents: {len(judged_ids)} judged, {hard} hard, the rest drawn -> {a.out}")


if __name__ == "__main__":
    main()
