#!/usr/bin/env python3
"""OCR character error rate and speed through ragbox itself.

    scripts/eval/ocr/cer.py RAGBOX OUT PDF[:FIRST-LAST]... [--dpi 200] [--split tune|report|all]

Each text PDF's pages are rendered with `pdftoppm -r DPI -gray`, wrapped as one image-only PDF
with img2pdf (OUT/NAME-scanned.pdf), read back by `ragbox --json parse` (the ingest parser, OCR
included), and each page's text compared with `pdftotext -layout` of the original page: CER =
edit distance / reference length, whitespace runs collapsed to one space in both, dot leaders
(". . . ." runs of table-of-contents pages, which OCR leaves out) collapsed to "...". `--split`
keeps the even (tune) or odd (report) pages of each document: settings are chosen on one half and
reported on the other. Prints one JSON object: per document and overall CER, pages, seconds, pages
per minute (wall time of `ragbox parse`, model load included), and the parse's peak RSS. With
`--tesseract`, Debian's tesseract (what a user would otherwise pick) reads the same page images
(`tesseract IMG - -l eng`, one process per page, OMP_THREAD_LIMIT=2) and is scored the same way.
"""
import argparse, json, os, re, subprocess, sys, time


def collapse(s):
    s = re.sub(r"(?:\.\s*){3,}", "... ", s)
    return re.sub(r"\s+", " ", s).strip()


def distance(a, b):
    if len(a) < len(b):
        a, b = b, a
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i]
        for j, cb in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb)))
        prev = cur
    return prev[-1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("ragbox"); ap.add_argument("out"); ap.add_argument("pdfs", nargs="+")
    ap.add_argument("--dpi", type=int, default=200); ap.add_argument("--split", default="all", choices=["tune", "report", "all"])
    ap.add_argument("--tesseract", action="store_true")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    docs, total_err, total_ref, total_pages, total_s, peak = [], 0, 0, 0, 0.0, 0
    t_err, t_s = 0, 0.0
    for spec in a.pdfs:
        path, _, rng = spec.partition(":")
        first, last = (int(x) for x in rng.split("-")) if rng else (1, 10**6)
        name = os.path.splitext(os.path.basename(path))[0]
        info = subprocess.run(["pdfinfo", path], capture_output=True, text=True, check=True).stdout
        pages = int(re.search(r"Pages:\s+(\d+)", info).group(1))
        numbers = [n for n in range(first, min(last, pages) + 1)
                   if a.split == "all" or (n - first) % 2 == (0 if a.split == "tune" else 1)]
        images = []
        for n in numbers:
            stem = os.path.join(a.out, f"{name}-{n:04d}")
            subprocess.run(["pdftoppm", "-r", str(a.dpi), "-gray", "-f", str(n), "-l", str(n), "-singlefile", path, stem], check=True)
            images.append(stem + ".pgm")
        scan = os.path.join(a.out, f"{name}-scanned.pdf")
        subprocess.run(["img2pdf", *images, "-o", scan], check=True)
        t = time.time()
        r = subprocess.run(["/usr/bin/time", "-v", a.ragbox, "--json", "parse", scan], capture_output=True, text=True)
        seconds = time.time() - t
        peak = max(peak, int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", r.stderr).group(1)))
        parsed = json.loads(r.stdout)
        doc = parsed.get("document") or sys.exit(f"{scan}: {parsed.get('skipped')}")
        with open(os.path.join(a.out, f"{name}-parsed.json"), "w") as f:
            json.dump(parsed, f)
        text = doc["text"].encode()  # spans are byte offsets
        by_page = {}
        for b in doc["blocks"]:
            by_page.setdefault(b["page"], []).append(text[b["span"]["start"]:b["span"]["end"]].decode())
        err = ref_len = doc_t_err = 0
        doc_t_s = 0.0
        for i, n in enumerate(numbers, 1):
            ref = subprocess.run(["pdftotext", "-layout", "-f", str(n), "-l", str(n), path, "-"], capture_output=True, text=True).stdout
            ref, hyp = collapse(ref), collapse(" ".join(by_page.get(i, [])))
            err += distance(ref, hyp)
            ref_len += len(ref)
            if a.tesseract:
                t = time.time()
                out = subprocess.run(["tesseract", images[i - 1], "-", "-l", "eng"], capture_output=True, text=True,
                                     env=dict(os.environ, OMP_THREAD_LIMIT="2")).stdout
                doc_t_s += time.time() - t
                doc_t_err += distance(ref, collapse(out))
        row = {"document": name, "pages": len(numbers), "cer": err / max(ref_len, 1), "seconds": round(seconds, 1),
               "pages_per_minute": round(60 * len(numbers) / seconds, 1)}
        if a.tesseract:
            row.update(tesseract_cer=doc_t_err / max(ref_len, 1), tesseract_pages_per_minute=round(60 * len(numbers) / doc_t_s, 1))
            t_err += doc_t_err; t_s += doc_t_s
        docs.append(row)
        total_err += err; total_ref += ref_len; total_pages += len(numbers); total_s += seconds
    summary = {"split": a.split, "dpi": a.dpi, "documents": docs, "pages": total_pages, "cer": total_err / max(total_ref, 1),
               "seconds": round(total_s, 1), "pages_per_minute": round(60 * total_pages / total_s, 1), "peak_rss_mib": peak // 1024}
    if a.tesseract:
        summary.update(tesseract_cer=t_err / max(total_ref, 1), tesseract_pages_per_minute=round(60 * total_pages / t_s, 1))
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
