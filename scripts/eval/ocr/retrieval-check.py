#!/usr/bin/env python3
"""OCR retrieval check: search for known sentences in a scanned copy and in the text copy
of the same PDFs, and report how much of what the text copy finds the scanned copy finds too.

    scripts/eval/ocr/retrieval-check.py RAGBOX TEXT_DIR SCAN_DIR [--sentences 20] [--k 5]

TEXT_DIR holds text PDFs (NAME.pdf); SCAN_DIR their image-only copies (NAME-scanned.pdf, made with
pdftoppm -r 200 -gray and img2pdf). Sentences come from `pdftotext` of the text PDFs: every page's
sentences of 8-30 words, taken at an even stride so they spread over documents and pages. A
sentence is *found* when a top-k hit of `ragbox search` is its document and its page. Each copy is
ingested into its own data folder under a temporary directory.
"""
import argparse, json, os, re, subprocess, sys, tempfile


def sentences(pdf):
    out = []
    pages = subprocess.run(["pdftotext", "-layout", pdf, "-"], capture_output=True, text=True, check=True).stdout.split("\f")
    for page_no, page in enumerate(pages, 1):
        text = re.sub(r"\s+", " ", page)
        for s in re.split(r"(?<=[.!?])\s+", text):
            words = s.split()
            if 8 <= len(words) <= 30 and sum(c.isalpha() for c in s) > 0.7 * len(s.replace(" ", "")):
                out.append((page_no, s.strip()))
    return out


def search(ragbox, data, query, k):
    env = dict(os.environ, RAGBOX_DATA_DIR=data)
    r = subprocess.run([ragbox, "--json", "search", "-k", str(k), "--", query], capture_output=True, text=True, env=env)
    if r.returncode != 0:
        sys.exit(f"search failed: {r.stderr}")
    hits = json.loads(r.stdout)["retrieval"]["hits"]
    return [(os.path.basename(h["chunk"]["path"]), h["chunk"]["page"]) for h in hits]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("ragbox"); ap.add_argument("text_dir"); ap.add_argument("scan_dir")
    ap.add_argument("--sentences", type=int, default=20); ap.add_argument("--k", type=int, default=5)
    a = ap.parse_args()
    pool = []
    for name in sorted(os.listdir(a.text_dir)):
        if name.endswith(".pdf"):
            pool += [(name[:-4], p, s) for p, s in sentences(os.path.join(a.text_dir, name))]
    stride = max(1, len(pool) // a.sentences)
    chosen = pool[::stride][: a.sentences]
    with tempfile.TemporaryDirectory() as tmp:
        found = {}
        for copy, folder in (("text", a.text_dir), ("scan", a.scan_dir)):
            data = os.path.join(tmp, copy)
            env = dict(os.environ, RAGBOX_DATA_DIR=data)
            r = subprocess.run([a.ragbox, "--json", "ingest", folder], capture_output=True, text=True, env=env)
            if r.returncode not in (0, 5):
                sys.exit(f"ingest {folder} failed: {r.stderr}")
            found[copy] = []
            for doc, page, s in chosen:
                hits = search(a.ragbox, data, s, a.k)
                ok = any(h[0].startswith(doc) and h[1] == page for h in hits)
                found[copy].append(ok)
    rows = [{"doc": d, "page": p, "sentence": s, "text": t, "scan": c} for (d, p, s), t, c in zip(chosen, found["text"], found["scan"])]
    text_found = sum(found["text"])
    both = sum(t and c for t, c in zip(found["text"], found["scan"]))
    print(json.dumps({"sentences": len(chosen), "k": a.k, "found_in_text_copy": text_found, "found_in_scanned_copy": sum(found["scan"]),
                      "scanned_finds_of_text_finds": both / text_found if text_found else None, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
