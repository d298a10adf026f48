#!/usr/bin/env python3
"""Builds a labelled set for ``ragbox eval --support`` from ``ragbox --json eval --qa`` output.

True sentences: every cited sentence of an answer that reached the reference (token recall
>= 0.5) and cited the passage holding the evidence, on answerable questions; the sentence is
kept as the model wrote it (citation markers removed) with the texts of the passages it cites.

False sentences, made from each true one where it can be done (one of each kind at most):
- ``figure``: a number in it replaced by another that none of its passages holds;
- ``name``: a capitalised word after the first replaced by a capitalised word taken from another
  question's passages that its own passages do not hold;
- ``negation``: "not" put after its first "is/are/can/must/should/will/does/do" (or "not"
  taken out when it has one).
The swaps are deterministic (seeded), so the set can be rebuilt from the same run.

    ragbox --json eval --qa … --split dev > dev.json
    python3 scripts/eval/make-support-set.py dev.json tests/data/eval/support-dev.jsonl [--exclude COLLECTION]...

``--exclude debian-reference`` leaves out the Debian Reference's rows: its text is GPL-2+, and the
committed sets carry passage text (the Python FAQ is under the PSF licence, the PostgreSQL manual
under the PostgreSQL licence, the sample corpus is the project's own).
"""

from __future__ import annotations

import json
import random
import re
import sys

MARKER = re.compile(r"\s*\[\d+(?:\s*,\s*\d+)*\]")
AUX = ["is", "are", "can", "must", "should", "will", "does", "do", "was", "has"]


def rows_of(report: dict, exclude: set[str]) -> list[dict]:
    if "collections" in report:
        return [r for c in report["collections"] if c["collection"] not in exclude for r in c["rows"]]
    return report["rows"]


def words_of(texts: list[str]) -> set[str]:
    return {w.lower() for t in texts for w in re.findall(r"[\w.,]+", t)} | {
        w.lower() for t in texts for w in re.findall(r"\w+", t)
    }


def swap_figure(sentence: str, held: set[str], rng: random.Random) -> str | None:
    numbers = [m for m in re.finditer(r"\d+(?:[.,]\d+)*", sentence)]
    if not numbers:
        return None
    m = rng.choice(numbers)
    digits = m.group(0).replace(",", "")
    try:
        value = float(digits)
    except ValueError:
        return None
    for candidate in (value + 1, value * 2, value + 7, value * 3 + 1):
        text = str(int(candidate)) if candidate == int(candidate) else f"{candidate:g}"
        if text.lower() not in held:
            return sentence[: m.start()] + text + sentence[m.end():]
    return None


def swap_name(sentence: str, held: set[str], pool: list[str], rng: random.Random) -> str | None:
    tokens = list(re.finditer(r"[A-Za-z][\w-]*", sentence))
    names = [t for t in tokens[1:] if t.group(0)[0].isupper() and t.group(0) not in ("I", "Yes", "No")]
    if not names:
        return None
    m = rng.choice(names)
    candidates = [p for p in pool if p.lower() not in held and p.lower() != m.group(0).lower()]
    if not candidates:
        return None
    return sentence[: m.start()] + rng.choice(candidates) + sentence[m.end():]


def swap_negation(sentence: str) -> str | None:
    if re.search(r"\bnot\b", sentence):
        return re.sub(r"\s*\bnot\b", "", sentence, count=1)
    if re.search(r"\bcannot\b", sentence):
        return re.sub(r"\bcannot\b", "can", sentence, count=1)
    for aux in AUX:
        m = re.search(rf"\b{aux}\b", sentence)
        if m:
            return sentence[: m.end()] + " not" + sentence[m.end():]
    return None


def main() -> int:
    args = sys.argv[1:]
    exclude = {args[i + 1] for i, a in enumerate(args) if a == "--exclude" and i + 1 < len(args)}
    args = [a for i, a in enumerate(args) if a != "--exclude" and (i == 0 or args[i - 1] != "--exclude")]
    if len(args) != 2:
        print(__doc__)
        return 2
    report = json.load(open(args[0]))
    rng = random.Random(33)
    true_rows = []
    for row in rows_of(report, exclude):
        if not row["answerable"] or row["refusal"] is not None:
            continue
        if row["recall"] < 0.5 or not row["evidence_cited"]:
            continue
        for s in row["sentences"]:
            if not s["passages"]:
                continue
            sentence = MARKER.sub("", s["text"]).strip()
            if len(sentence.split()) < 2:
                continue
            true_rows.append({"question": row["question"], "sentence": sentence, "passages": s["passages"]})
    pool = sorted({w for r in true_rows for p in r["passages"] for w in re.findall(r"\b[A-Z][a-z]{3,}\b", p)})
    out = []
    for r in true_rows:
        out.append({**r, "supported": True, "kind": "true"})
        held = words_of(r["passages"] + [r["question"]])
        for kind, made in (
            ("figure", swap_figure(r["sentence"], held, rng)),
            ("name", swap_name(r["sentence"], held, pool, rng)),
            ("negation", swap_negation(r["sentence"])),
        ):
            if made and made != r["sentence"]:
                out.append({**r, "sentence": made, "supported": False, "kind": kind})
    with open(args[1], "w") as f:
        for line in out:
            f.write(json.dumps(line, ensure_ascii=False) + "\n")
    kinds = {}
    for line in out:
        kinds[line["kind"]] = kinds.get(line["kind"], 0) + 1
    print(f"{len(out)} sentences: {kinds}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
