#!/usr/bin/env python3
"""Checks the reader's training questions (scripts/train/questions/*.jsonl):
  - every line parses, ids are unique across the files, each kind has its fields;
  - a file is named after its collection (`COLLECTION.jsonl`, `COLLECTION.N.jsonl`);
  - every quoted sentence (evidence, lead_in, closest) is verbatim in its page under CORPORA
    (default ../shared/data/corpora next to the checkout);
  - no question repeats or paraphrases a question of an evaluation or tuning set: the same words,
    or 60% or more of its words in common (Jaccard) with any question under tests/data/ or
    EXTRA files (JSON lines with `question`, `text` or `query`: NQ-open, SciFact's claims).
Exits 1 and names each offending line.

  scripts/train/check-questions.py [--corpora DIR] [EXTRA.jsonl ...]
"""
import argparse, glob, json, os, re, sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def words(text):
    return set(re.sub(r"[^a-z0-9 ]", " ", text.lower()).split())


def eval_questions(extra):
    files = glob.glob(os.path.join(ROOT, "tests/data/**/*.jsonl"), recursive=True) + extra
    found = []
    for f in files:
        for line in open(f, encoding="utf-8"):
            try:
                o = json.loads(line)
            except ValueError:
                continue
            items = [o] + [t for t in o.get("turns", []) if isinstance(t, dict)] if isinstance(o, dict) else []
            for item in items:
                for key in ("question", "text", "query"):
                    if isinstance(item.get(key), str) and len(words(item[key])) >= 3:
                        found.append((os.path.relpath(f, ROOT), item[key], words(item[key])))
    return found


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpora", default=os.path.join(ROOT, "..", "shared", "data", "corpora"))
    ap.add_argument("extra", nargs="*")
    args = ap.parse_args()
    evals = eval_questions(args.extra)
    problems, count, ids = [], 0, set()
    for path in sorted(glob.glob(os.path.join(ROOT, "scripts/train/questions/*.jsonl"))):
        corpus = os.path.basename(path).split(".")[0]
        for n, line in enumerate(open(path, encoding="utf-8"), 1):
            where = f"{os.path.relpath(path, ROOT)}:{n}"
            o = json.loads(line)
            count += 1
            if o["id"] in ids:
                problems.append(f"{where}: id {o['id']} twice")
            ids.add(o["id"])
            need = ["closest", "why_not"] if o["kind"] == "near_miss" else ["evidence"]
            problems += [f"{where}: no {k}" for k in need if not o.get(k)]
            page = open(os.path.join(args.corpora, corpus, o["path"]), encoding="utf-8").read()
            if o.get("joined"):
                page = page.replace("\n", " ")
            problems += [f"{where}: {k} is not verbatim in {o['path']}" for k in ("evidence", "lead_in", "closest") if o.get(k) and o[k] not in page]
            q = words(o["question"])
            for f, text, e in evals:
                if q and len(q & e) / len(q | e) >= 0.6:
                    problems.append(f"{where}: {o['question']!r} is too close to {text!r} ({f})")
    for p in problems:
        print(p)
    print(f"{count} questions checked against {len(evals)} evaluation questions: {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
