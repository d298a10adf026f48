#!/usr/bin/env python3
"""Embedding-throughput baseline: all-MiniLM-L6-v2 through sentence-transformers (PyTorch; CPU, or a GPU with --device cuda).

The counterpart of `ragbox bench embed --json`: the same texts (BEIR corpus.jsonl in file order,
`title + " " + text`, whole documents, no chunking), the same truncation (256 tokens including
[CLS]/[SEP]), the same batch size and thread count. Prints ONE JSON line on stdout; everything
else goes to stderr. Normally run by scripts/bench/embed-baseline.sh, which builds the pinned venv.

Runs offline: the model is loaded from a local folder holding config.json, tokenizer.json and
model.safetensors (the snapshot that scripts/setup/fetch-models.sh puts under models/).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time

# Never reach for the hub; everything is local.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")


def log(msg: str) -> None:
    print(f"[embed-sentence-transformers] {msg}", file=sys.stderr, flush=True)


def load_texts(data_dir: str, limit: int | None) -> list[str]:
    path = os.path.join(data_dir, "corpus.jsonl")
    texts: list[str] = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            if limit is not None and len(texts) >= limit:
                break
            doc = json.loads(line)
            texts.append(f"{doc.get('title', '')} {doc.get('text', '')}")
    return texts


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True, help="BEIR dataset folder (holds corpus.jsonl)")
    ap.add_argument("--model-dir", required=True, help="folder with config.json, tokenizer.json, model.safetensors")
    ap.add_argument("--threads", type=int, required=True, help="torch intra-op threads")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--max-tokens", type=int, default=256, help="truncation length incl. [CLS]/[SEP]")
    ap.add_argument("--limit", type=int, default=None, help="first N documents (default: all)")
    ap.add_argument("--warmup", type=int, default=None, help="texts encoded before timing (default: one batch)")
    ap.add_argument("--device", default="cpu", help="torch device: cpu (default) or cuda")
    ap.add_argument("--half", action="store_true", help="float16 weights and activations (what a GPU user may switch on)")
    args = ap.parse_args()
    if args.threads < 1 or args.batch_size < 1 or args.max_tokens < 2:
        ap.error("--threads, --batch-size must be >= 1 and --max-tokens >= 2")
    if args.limit is not None and args.limit < 1:
        ap.error("--limit must be >= 1")

    import torch

    torch.set_num_threads(args.threads)

    import sentence_transformers
    import transformers
    from sentence_transformers import SentenceTransformer

    try:  # sentence-transformers >= 6 layout; `models` is its deprecated alias
        from sentence_transformers.sentence_transformer import modules as models
    except ImportError:  # pragma: no cover - older releases
        from sentence_transformers import models

    texts = load_texts(args.data, args.limit)
    if not texts:
        log(f"no documents in {args.data}/corpus.jsonl")
        return 1

    # The pipeline of all-MiniLM-L6-v2, built explicitly (the snapshot has no sentence-transformers
    # config files): BERT -> mean pooling -> L2 normalisation, truncation at max_tokens.
    word = models.Transformer(args.model_dir, max_seq_length=args.max_tokens)
    dim_of = getattr(word, "get_embedding_dimension", None) or word.get_word_embedding_dimension
    pooling = models.Pooling(dim_of(), pooling_mode="mean")
    model = SentenceTransformer(modules=[word, pooling, models.Normalize()], device=args.device)
    if args.half:
        model.half()
    model.eval()

    # Tokens as the model sees them: ids after truncation to max_tokens, [CLS]/[SEP] included, no
    # padding. (The shipped tokenizer.json pads to 128; padding=False overrides that.)
    tok = word.tokenizer
    enc = tok(texts, truncation=True, max_length=args.max_tokens, padding=False, add_special_tokens=True)
    lengths = [len(ids) for ids in enc["input_ids"]]
    n_tokens = sum(lengths)
    if max(lengths) > args.max_tokens:
        log(f"tokenizer did not truncate: longest {max(lengths)} > {args.max_tokens}")
        return 1

    warm_n = args.batch_size if args.warmup is None else args.warmup
    if warm_n > 0:
        t = time.perf_counter()
        model.encode(texts[:warm_n], batch_size=args.batch_size, show_progress_bar=False, convert_to_numpy=True)
        log(f"warm-up: {min(warm_n, len(texts))} texts in {time.perf_counter() - t:.2f}s")

    log(
        f"encoding {len(texts)} texts ({n_tokens} tokens), batch {args.batch_size}, "
        f"threads {torch.get_num_threads()}, max {args.max_tokens} tokens"
    )
    t0 = time.perf_counter()
    emb = model.encode(texts, batch_size=args.batch_size, show_progress_bar=False, convert_to_numpy=True)
    seconds = time.perf_counter() - t0

    if emb.shape[0] != len(texts):
        log(f"got {emb.shape[0]} embeddings for {len(texts)} texts")
        return 1

    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    result = {
        "impl": "sentence-transformers",
        "model": "all-minilm-l6-v2",
        "device": args.device + (" float16" if args.half else " float32"),
        "texts": len(texts),
        "tokens": n_tokens,
        "seconds": round(seconds, 3),
        "chunks_per_s": round(len(texts) / seconds, 2),
        "tokens_per_s": round(n_tokens / seconds, 1),
        "peak_rss_mb": round(peak_kib / 1024, 1),
        "threads": args.threads,
        "batch_size": args.batch_size,
        "max_tokens": args.max_tokens,
        "dims": int(emb.shape[1]),
        "versions": {
            "torch": torch.__version__,
            "sentence_transformers": sentence_transformers.__version__,
            "transformers": transformers.__version__,
        },
    }
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
