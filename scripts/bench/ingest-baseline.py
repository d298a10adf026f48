#!/usr/bin/env python3
"""Ingest baseline: a LangChain-style RAG ingest pipeline in Python, timed stage by stage.

The counterpart of `ragbox ingest FOLDER --json`, built the way a typical Python RAG tutorial does it:

  1. load + parse  walk FOLDER (sorted, symlinks not followed, regular files only); .html/.htm through
                   BeautifulSoup (html.parser) get_text(separator="\\n"); text formats (.md, .txt, .rst,
                   .py, ...) read as UTF-8; files with a NUL byte in the first 8 KiB or that do not
                   decode as UTF-8 are skipped as binary; other extensions (.pdf, images...) are skipped
  2. split         langchain-text-splitters RecursiveCharacterTextSplitter(chunk_size=1000,
                   chunk_overlap=150), characters, per file
  3. embed         sentence-transformers all-MiniLM-L6-v2 (BERT -> mean pooling -> L2 normalise,
                   256-token truncation, as ragbox and scripts/bench/embed-sentence-transformers.py use it), CPU, batch 32,
                   torch.set_num_threads(THREADS)
  4. index         a Chroma PersistentClient collection (cosine HNSW) in a temporary folder, added in
                   batches of at most 5000 (and at most Chroma's own max batch size)

Prints ONE JSON line on stdout (everything else goes to stderr): counts, seconds per stage, peak RSS,
index size on disk, versions. Normally run by scripts/bench/ingest-baseline.sh, which builds the
pinned venv and runs ragbox on the same folder.

Runs offline: the model is read from a local snapshot folder (config.json, tokenizer.json,
model.safetensors), Chroma telemetry is off, and no embedding function of Chroma's own is used.
"""

from __future__ import annotations

import time

T_START = time.perf_counter()  # before the heavy imports: "total" covers what a user waits for

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import resource  # noqa: E402
import shutil  # noqa: E402
import stat  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from collections import Counter  # noqa: E402

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")  # Chroma

HTML_EXTS = {".html", ".htm", ".xhtml"}
TEXT_EXTS = {
    ".md", ".markdown", ".txt", ".text", ".rst", ".adoc", ".org", ".csv", ".tsv", ".log",
    ".py", ".rs", ".go", ".java", ".js", ".ts", ".c", ".h", ".cpp", ".hpp", ".sh", ".sql",
    ".toml", ".yaml", ".yml", ".json", ".ini", ".cfg", ".eml", ".mbox",
}
BINARY_SNIFF = 8192
MAX_ADD_BATCH = 5000


def log(msg: str) -> None:
    print(f"[ingest-baseline] {msg}", file=sys.stderr, flush=True)


def walk(root: str) -> list[str]:
    """Regular files under root, relative paths in sorted (code point) order; symlinks not followed."""
    out: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames.sort()
        for name in filenames:
            path = os.path.join(dirpath, name)
            try:
                st = os.lstat(path)
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode):
                out.append(os.path.relpath(path, root))
    out.sort()
    return out


def load(root: str, rel: str, skipped: Counter) -> str | None:
    """Text of one file, or None (with the reason counted in `skipped`)."""
    ext = os.path.splitext(rel)[1].lower()
    if ext not in HTML_EXTS and ext not in TEXT_EXTS:
        skipped["unsupported extension"] += 1
        return None
    try:
        with open(os.path.join(root, rel), "rb") as f:
            raw = f.read()
    except OSError:
        skipped["unreadable"] += 1
        return None
    if b"\0" in raw[:BINARY_SNIFF]:
        skipped["binary"] += 1
        return None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        skipped["not UTF-8"] += 1
        return None
    if ext in HTML_EXTS:
        from bs4 import BeautifulSoup

        text = BeautifulSoup(text, "html.parser").get_text(separator="\n")
    if not text.strip():
        skipped["empty"] += 1
        return None
    return text


def dir_bytes(path: str) -> int:
    """Apparent size of everything under path (what `du -sb` reports)."""
    total = 0
    for dirpath, _, filenames in os.walk(path):
        for name in filenames:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_size
            except OSError:
                pass
    return total


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True, help="the folder to ingest")
    ap.add_argument("--model-dir", required=True, help="folder with config.json, tokenizer.json, model.safetensors")
    ap.add_argument("--threads", type=int, required=True, help="torch intra-op threads")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--max-tokens", type=int, default=256, help="embedding truncation incl. [CLS]/[SEP]")
    ap.add_argument("--chunk-size", type=int, default=1000, help="characters")
    ap.add_argument("--chunk-overlap", type=int, default=150, help="characters")
    ap.add_argument("--index-dir", default=None, help="Chroma folder (default: a temporary one, deleted after)")
    args = ap.parse_args()
    if args.threads < 1 or args.batch_size < 1 or args.chunk_size < 1 or not 0 <= args.chunk_overlap < args.chunk_size:
        ap.error("--threads, --batch-size, --chunk-size must be >= 1 and 0 <= --chunk-overlap < --chunk-size")
    if not os.path.isdir(args.data):
        ap.error(f"--data {args.data} is not a folder")

    import torch

    torch.set_num_threads(args.threads)

    import bs4
    import chromadb
    import langchain_text_splitters
    import sentence_transformers
    import transformers
    from chromadb.config import Settings
    from langchain_text_splitters import RecursiveCharacterTextSplitter
    from sentence_transformers import SentenceTransformer

    try:  # sentence-transformers >= 6 layout; `models` is its deprecated alias
        from sentence_transformers.sentence_transformer import modules as models
    except ImportError:  # pragma: no cover - older releases
        from sentence_transformers import models

    seconds: dict[str, float] = {"imports": time.perf_counter() - T_START}

    # 1. load + parse
    t = time.perf_counter()
    files = walk(args.data)
    skipped: Counter = Counter()
    docs: list[tuple[str, str]] = []
    n_bytes = 0
    for rel in files:
        text = load(args.data, rel, skipped)
        if text is not None:
            docs.append((rel, text))
            n_bytes += os.path.getsize(os.path.join(args.data, rel))
    seconds["load_parse"] = time.perf_counter() - t
    log(f"{len(files)} files, {len(docs)} loaded ({n_bytes} bytes), skipped: {dict(skipped) or 'none'}")
    if not docs:
        log(f"nothing to ingest in {args.data}")
        return 1

    # 2. split
    t = time.perf_counter()
    splitter = RecursiveCharacterTextSplitter(chunk_size=args.chunk_size, chunk_overlap=args.chunk_overlap)
    chunks: list[str] = []
    sources: list[tuple[str, int]] = []
    for rel, text in docs:
        for i, piece in enumerate(splitter.split_text(text)):
            chunks.append(piece)
            sources.append((rel, i))
    seconds["split"] = time.perf_counter() - t
    log(f"{len(chunks)} chunks")
    if not chunks:
        log("the splitter produced no chunks")
        return 1

    # 3. embed (model load timed separately; it is part of the total like ragbox's start-up)
    t = time.perf_counter()
    word = models.Transformer(args.model_dir, max_seq_length=args.max_tokens)
    dim_of = getattr(word, "get_embedding_dimension", None) or word.get_word_embedding_dimension
    pooling = models.Pooling(dim_of(), pooling_mode="mean")
    model = SentenceTransformer(modules=[word, pooling, models.Normalize()], device="cpu")
    model.eval()
    seconds["model_load"] = time.perf_counter() - t

    t = time.perf_counter()
    emb = model.encode(
        chunks,
        batch_size=args.batch_size,
        show_progress_bar=False,
        convert_to_numpy=True,
        normalize_embeddings=True,
    )
    seconds["embed"] = time.perf_counter() - t
    if emb.shape[0] != len(chunks):
        log(f"got {emb.shape[0]} embeddings for {len(chunks)} chunks")
        return 1

    # 4. index
    own_dir = args.index_dir is None
    index_dir = tempfile.mkdtemp(prefix="ragbox-bench-chroma-") if own_dir else args.index_dir
    try:
        t = time.perf_counter()
        client = chromadb.PersistentClient(path=index_dir, settings=Settings(anonymized_telemetry=False))
        col = client.create_collection(
            "bench-ingest", embedding_function=None, configuration={"hnsw": {"space": "cosine"}}
        )
        step = min(MAX_ADD_BATCH, client.get_max_batch_size())
        for lo in range(0, len(chunks), step):
            hi = min(lo + step, len(chunks))
            col.add(
                ids=[f"{sources[i][0]}#{sources[i][1]}" for i in range(lo, hi)],
                embeddings=emb[lo:hi],
                documents=chunks[lo:hi],
                metadatas=[{"source": sources[i][0], "chunk": sources[i][1]} for i in range(lo, hi)],
            )
        seconds["index"] = time.perf_counter() - t
        indexed = col.count()
        index_bytes = dir_bytes(index_dir)
        seconds["total"] = time.perf_counter() - T_START
        # Sanity check outside the timings: the first chunk finds itself.
        top = col.query(query_embeddings=emb[:1], n_results=1)["ids"][0]
        query_ok = top == [f"{sources[0][0]}#{sources[0][1]}"]
    finally:
        if own_dir:
            shutil.rmtree(index_dir, ignore_errors=True)
    if indexed != len(chunks):
        log(f"Chroma holds {indexed} vectors for {len(chunks)} chunks")
        return 1

    # Tokens as the model saw them (after truncation), counted outside the timings: how much text
    # the 1000-character chunks lose to the 256-token limit.
    lengths = [
        len(ids)
        for ids in word.tokenizer(chunks, truncation=False, padding=False, add_special_tokens=True)["input_ids"]
    ]
    n_tokens = sum(min(n, args.max_tokens) for n in lengths)
    truncated = sum(n > args.max_tokens for n in lengths)

    self_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    child_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    total = seconds["total"]
    result = {
        "impl": "python-langchain-chroma",
        "model": "all-minilm-l6-v2",
        "files_seen": len(files),
        "files": len(docs),
        "files_skipped": dict(sorted(skipped.items())),
        "bytes": n_bytes,
        "chunks": len(chunks),
        "chars": sum(len(c) for c in chunks),
        "tokens": n_tokens,
        "chunks_truncated": truncated,
        "seconds": {k: round(v, 3) for k, v in seconds.items()},
        "wall_s": round(total, 3),
        "files_per_s": round(len(docs) / total, 2),
        "chunks_per_s": round(len(chunks) / total, 2),
        "embed_chunks_per_s": round(len(chunks) / seconds["embed"], 2),
        "peak_rss_mb": round(self_kib / 1024, 1),
        "peak_rss_children_mb": round(child_kib / 1024, 1),
        "index_bytes": index_bytes,
        "index_mb": round(index_bytes / 1e6, 2),
        "query_ok": query_ok,
        "threads": args.threads,
        "batch_size": args.batch_size,
        "max_tokens": args.max_tokens,
        "chunk_size": args.chunk_size,
        "chunk_overlap": args.chunk_overlap,
        "dims": int(emb.shape[1]),
        "versions": {
            "python": sys.version.split()[0],
            "torch": torch.__version__,
            "sentence_transformers": sentence_transformers.__version__,
            "transformers": transformers.__version__,
            "langchain_text_splitters": getattr(langchain_text_splitters, "__version__", None)
            or _dist_version("langchain-text-splitters"),
            "chromadb": chromadb.__version__,
            "beautifulsoup4": bs4.__version__,
        },
    }
    print(json.dumps(result), flush=True)
    return 0


def _dist_version(name: str) -> str | None:
    try:
        from importlib.metadata import version

        return version(name)
    except Exception:  # noqa: BLE001 - a version string is informational only
        return None


if __name__ == "__main__":
    sys.exit(main())
