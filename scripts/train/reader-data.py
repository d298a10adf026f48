#!/usr/bin/env python3
"""Builds the reader's training examples from ../shared/data (DATA.md: data/train, data/corpora)
and the questions under scripts/train/questions, as JSON lines that
`ragbox eval --reader-features FILE --out DIR` reads: `id`, `question`, `context`, `text`,
`evidence` (the units that state the answer, verbatim; [] when the passage does not answer),
plus `source` and `split` (`train` or `held-out`, by article or page, never by question).

    scripts/train/reader-data.py [--shared ../shared] [--squad-max N] [--rounds N] OUT.jsonl

Sources:
  - SelQA answer-sentence selection (dev and test files): a Wikipedia section and its labelled
    sentences; each question is also paired with another article's section of its topic, which
    does not answer it. Held out: the dev file.
  - SQuAD 2.0 (first 10 articles of train): a paragraph, the sentence holding the answer span;
    the 348 questions written to be unanswerable from their paragraph have none. Held out: the
    tenth article.
  - The training questions over the four organisational collections: the page's section that
    holds the quoted evidence (near misses: the closest sentence, and no evidence). Held out:
    pages whose path hashes to 0 mod 5.
  - Swapped near misses: an answered question with one of its specific words that its evidence
    also holds (a name, a figure, a month) swapped for one of the same kind that its passage never
    holds ("How many complaints in May?" over "37 complaints in April"): the passage on the
    subject, no answer. What the evaluation sets' near misses are made of, learned, not a rule.
Every input file's sha256 is checked first (../shared's own README lists them); the question
files are the repository's own. Only the Python standard library; the output is deterministic.
"""
import argparse, glob, hashlib, json, os, random, re, sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

PINNED = {
    "data/train/answer-sentences/selqa/selqa-ass-dev.json": "b4e6687e44a30b486e24d2b06aa3012ec07d61145f3521f35b7d49daae3e0ca4",
    "data/train/answer-sentences/selqa/selqa-ass-test.json": "ca1184d94cc9030883723fab76ef8180b3cf5fb142549a5648d22f59fe7c6fc6",
    "data/train/answer-sentences/squad2-train-subset/train-v2.0.first10articles.json": "53e67dd96e8597a8ef600e795d54d3fdef18486d42721884d38d652e2a2638cb",
}

SEED = 20261207


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def detokenise(text):
    """SelQA's sentences are tokenised ("Israel 's museum , in 1950 ."): joined back."""
    t = re.sub(r" ([.,;:!?%)\]}])", r"\1", text)
    t = re.sub(r"([(\[{$]) ", r"\1", t)
    t = re.sub(r" (n't|'s|'re|'ve|'ll|'d|'m)\b", r"\1", t)
    t = re.sub(r"\s+", " ", t)
    return t.strip()


def selqa(shared, rows):
    for name, split in (("selqa-ass-test.json", "train"), ("selqa-ass-dev.json", "held-out")):
        items = json.load(open(os.path.join(shared, "data/train/answer-sentences/selqa", name), encoding="utf-8"))
        by_topic = {}
        for i, it in enumerate(items):
            by_topic.setdefault(it["topic"], []).append(i)
        rng = random.Random(SEED)
        for i, it in enumerate(items):
            sents = [detokenise(c) for c in it["candidates"] if c.strip()]
            kept = [detokenise(it["candidates"][a]) for a in it["answers"] if it["candidates"][a].strip()]
            qid = f"selqa-{split}-{i}"
            q = detokenise(it["question"])
            rows.append(dict(id=qid, source="selqa", split=split, question=q, context=it["section"], text=" ".join(sents), evidence=kept))
            # Another article's section of the same topic: on a neighbouring subject, no answer.
            others = [j for j in by_topic[it["topic"]] if items[j]["article"] != it["article"]]
            if others:
                o = items[rng.choice(others)]
                text = " ".join(detokenise(c) for c in o["candidates"] if c.strip())
                rows.append(dict(id=qid + "-other", source="selqa-other", split=split, question=q, context=o["section"], text=text, evidence=[]))


SENTENCE_END = re.compile(r"(?<=[.!?])[\"')\]]*\s+(?=[A-Z0-9\"'(\[])")


def sentence_at(text, at):
    start = 0
    for m in SENTENCE_END.finditer(text):
        if m.start() >= at:
            return text[start : m.start()].strip()
        start = m.end()
    return text[start:].strip()


def squad(shared, rows, limit):
    data = json.load(open(os.path.join(shared, "data/train/answer-sentences/squad2-train-subset/train-v2.0.first10articles.json"), encoding="utf-8"))["data"]
    out = []
    for a, article in enumerate(data):
        split = "held-out" if a == len(data) - 1 else "train"
        title = article["title"].replace("_", " ")
        for paragraph in article["paragraphs"]:
            text = paragraph["context"]
            for qa in paragraph["qas"]:
                evidence = [] if qa.get("is_impossible") else sorted({sentence_at(text, x["answer_start"]) for x in qa["answers"]})
                out.append(dict(id=f"squad-{qa['id']}", source="squad2", split=split, question=qa["question"], context=title, text=text, evidence=evidence))
    # All unanswerable ones, and answerable ones up to `limit` in all (a fixed draw).
    rng = random.Random(SEED)
    answerable = [r for r in out if r["evidence"]]
    rng.shuffle(answerable)
    keep = {r["id"] for r in answerable[: max(0, limit - (len(out) - len(answerable)))]}
    rows.extend(r for r in out if not r["evidence"] or r["id"] in keep)


HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def section_of(page, at):
    """The markdown section holding offset `at`: (its heading, its text), at most ~2,400
    characters around `at` on line boundaries."""
    lines = page.split("\n")
    offsets, n = [], 0
    for line in lines:
        offsets.append(n)
        n += len(line) + 1
    row = max(i for i, o in enumerate(offsets) if o <= at)
    top = next((i for i in range(row, -1, -1) if HEADING.match(lines[i])), None)
    bottom = next((i for i in range(row + 1, len(lines)) if HEADING.match(lines[i])), len(lines))
    first = 0 if top is None else top + 1
    heading = HEADING.match(lines[top]).group(2) if top is not None else ""
    while offsets[row] - offsets[first] > 1200:
        first += 1
    while bottom - 1 > row and offsets[bottom - 1] - offsets[row] > 1200:
        bottom -= 1
    return heading, "\n".join(lines[first:bottom])


def round_of(path):
    """The round a question file was written in: `C.jsonl` 1, `C.N.jsonl` N."""
    parts = os.path.basename(path).split(".")
    return int(parts[1]) if len(parts) == 3 else 1


def organisational(shared, rows, rounds):
    for path in sorted(glob.glob(os.path.join(ROOT, "scripts/train/questions/*.jsonl"))):
        if round_of(path) > rounds:
            continue
        collection = os.path.basename(path).split(".")[0]
        for line in open(path, encoding="utf-8"):
            q = json.loads(line)
            page = open(os.path.join(shared, "data/corpora", collection, q["path"]), encoding="utf-8").read()
            quote = q.get("evidence") or q["closest"]
            haystack = page.replace("\n", " ") if q.get("joined") else page
            at = haystack.find(quote)
            if at < 0:
                sys.exit(f"{path}: {q['id']}: the quote is not in {q['path']} (run scripts/train/check-questions.py)")
            heading, text = section_of(page, at)
            context = heading or q["heading"].split(" > ")[-1]
            split = "held-out" if int(hashlib.sha1(f"{collection}/{q['path']}".encode()).hexdigest(), 16) % 5 == 0 else "train"
            evidence = [q["evidence"]] if q.get("evidence") else []
            rows.append(dict(id=q["id"], source=f"{collection}:{q['kind']}", split=split, question=q["question"], context=context, text=text, evidence=evidence))


MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September", "October", "November", "December"]
WORD = re.compile(r"[A-Za-z0-9][\w'.-]*[A-Za-z0-9]|[A-Za-z0-9]")


def kind_of(word, first):
    """The kind of a swappable word, or None: a month, a figure, or a name (capitalised, not the
    question's first word)."""
    if word in MONTHS:
        return "month"
    if re.fullmatch(r"\d[\d,.]*", word):
        return "figure"
    if not first and word[0].isupper() and word.lower() not in ("i", "i'm", "i've", "i'd"):
        return "name"
    return None


def swapped(rows):
    """One swapped near miss per answered example where one can be made (examples in order, a
    fixed draw)."""
    rng = random.Random(SEED)
    names = sorted({w for r in rows if r["evidence"] for i, w in enumerate(WORD.findall(r["question"])) if kind_of(w, i == 0) == "name"})
    out = []
    for r in rows:
        if not r["evidence"]:
            continue
        words = WORD.findall(r["question"])
        evidence = " ".join(r["evidence"])
        spots = [(i, w, kind_of(w, i == 0)) for i, w in enumerate(words) if kind_of(w, i == 0) and re.search(rf"\b{re.escape(w)}\b", evidence)]
        if not spots:
            continue
        i, w, kind = rng.choice(spots)
        for _ in range(20):
            if kind == "month":
                other = rng.choice(MONTHS)
            elif kind == "figure":
                digits = re.sub(r"\D", "", w)
                other = str(int(digits) + rng.choice([-3, -2, -1, 1, 2, 3, 7, 10]) * max(1, 10 ** (len(digits) - 2)))
            else:
                other = rng.choice(names)
            if other != w and other.lower() not in r["text"].lower() and int(other != "0"):
                break
        else:
            continue
        question = re.sub(rf"\b{re.escape(w)}\b", other, r["question"], count=1)
        out.append(dict(r, id=r["id"] + "-swap", source=r["source"].split(":")[0] + ":swap", question=question, evidence=[]))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shared", default=os.path.join(ROOT, "..", "shared"))
    ap.add_argument("--squad-max", type=int, default=2500, help="SQuAD questions kept (all unanswerable ones among them)")
    ap.add_argument("--rounds", type=int, default=3, help="the rounds of training questions taken (`C.jsonl` is the first, "
                    "`C.N.jsonl` the Nth; the shipped reader's: all three)")
    ap.add_argument("out")
    args = ap.parse_args()
    for rel, want in PINNED.items():
        got = sha256(os.path.join(args.shared, rel))
        if got != want:
            sys.exit(f"{rel}: sha256 {got}, expected {want}: not the data this recipe was written for")
    rows = []
    selqa(args.shared, rows)
    squad(args.shared, rows, args.squad_max)
    organisational(args.shared, rows, args.rounds)
    rows.extend(swapped(rows))
    with open(args.out, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    counts = {}
    for r in rows:
        k = (r["source"].split(":")[0], r["split"], "answers" if r["evidence"] else "does not")
        counts[k] = counts.get(k, 0) + 1
    for k in sorted(counts):
        print(*k, counts[k], sep="\t")
    print(f"{len(rows)} examples -> {args.out}")


if __name__ == "__main__":
    main()
