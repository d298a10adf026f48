#!/usr/bin/env python3
"""Builds the "python-faq" question-answering corpus and checks its questions against it.

Source
------
Debian's ``python3.11-doc`` package (bookworm): the eight pages of the Python 3.11 FAQ,
``usr/share/doc/python3.11/html/faq/*.html`` without ``index.html`` (a table of contents):
design, extending, general, gui, installed, library, programming and windows.

The questions in ``tests/data/eval/qa/python-faq.jsonl`` were checked against
python3.11-doc 3.11.2-6+deb12u9 (QUESTIONS_VERSION below; 3.11.2-6+deb12u8 also passes).
Another version prints a warning, and fails only if a file or an evidence sentence is gone.

What it writes
--------------
    OUTDIR/python-faq/<page>.html   the eight FAQ pages, byte for byte as in the package
    OUTDIR/python-faq.SOURCE.txt    package, version, .deb file name and its sha256, licence

SOURCE.txt lies beside the folder, not in it, so that ``ragbox eval --corpus OUTDIR/python-faq``
does not ingest it. Then it checks every answerable question of the question file: its ``file``
must exist in the folder and its ``evidence`` must occur in the visible text of that page (body
text with tags removed, <script>/<style> dropped; compared as lower-case words split on every
non-alphanumeric character, without "a", "an", "the"). It exits 1, listing the bad lines,
if any check fails, or if a line breaks the format (fields, dev/test alternation, kinds,
answer of 1-12 words, evidence of 6-40 words).

How to run
----------
    python3 scripts/eval/qa/python-faq.py /tmp/qa-corpora
    python3 scripts/eval/qa/python-faq.py --deb python3.11-doc_3.11.2-6+deb12u9_all.deb /tmp/qa-corpora

Without ``--deb`` it runs ``apt-get download python3.11-doc`` in a temporary folder (run
``apt-get update`` once before on a fresh machine); whatever version apt gets is used, with a
warning when it is not QUESTIONS_VERSION. With ``--deb`` it needs nothing but Python 3.8+: the
.deb is read with the standard library (ar, tar.xz/gz).

Licence of the source
---------------------
The Python documentation is licensed under the PSF License Agreement (``html/license.html`` in
the package); since 3.8.6 the code examples in it are dual licensed under the PSF License
Agreement and the Zero-Clause BSD license. Copyright (c) 2001 onwards, Python Software Foundation.
The pages are copied here unchanged at build time and are not committed to the repository.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
import tempfile
from pathlib import Path

from debpkg import download, fail, read_files
from pagetext import visible_text

PACKAGE = "python3.11-doc"
QUESTIONS_VERSION = "3.11.2-6+deb12u9"
FAQ_ROOT = "usr/share/doc/python3.11/html/faq/"
FAQ_PAGES = ["design", "extending", "general", "gui", "installed", "library", "programming", "windows"]
COLLECTION = "python-faq"
QUESTIONS = (Path(__file__).resolve().parents[3]
             / "tests" / "data" / "eval" / "qa" / f"{COLLECTION}.jsonl")
KINDS = {"fact", "yes-no", "how", "why", "unanswerable", "near-miss"}
# The kinds of a question the documents do not answer (a near miss sits right next to what they
# say, and carries the question it is near and a note: tests/data/eval/qa/README.md).
UNANSWERABLE_KINDS = {"unanswerable", "near-miss"}
STOP_WORDS = {"a", "an", "the"}


def read_deb(path: Path) -> tuple[str, dict[str, bytes]]:
    """(package version, {page file name: the page's bytes}) of the FAQ pages."""
    wanted = {f"{p}.html" for p in FAQ_PAGES}
    version, pages = read_files(path, PACKAGE, FAQ_ROOT, lambda rel: rel in wanted)
    missing = sorted(wanted - pages.keys())
    if missing:
        fail(f"{path} lacks the FAQ pages {missing} under {FAQ_ROOT}")
    return version, pages


# --- visible text and the checker ------------------------------------------------------------


def words(text: str) -> list[str]:
    return [w for w in re.split(r"[^0-9a-z]+", text.lower()) if w and w not in STOP_WORDS]


def contains(haystack: list[str], needle: list[str]) -> bool:
    if not needle:
        return False
    hay = " " + " ".join(haystack) + " "
    return (" " + " ".join(needle) + " ") in hay


def check_questions(questions: Path, folder: Path) -> tuple[list[str], dict]:
    """(problems, counts {split: {kind: n}}) of the question file against the corpus folder."""
    problems: list[str] = []
    counts: dict[str, dict[str, int]] = {}
    page_words: dict[str, list[str]] = {}
    seen: set[str] = set()
    lines = questions.read_text(encoding="utf-8").splitlines()
    expected_split = "dev"
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{questions.name}:{number}"
        try:
            q = json.loads(line)
        except json.JSONDecodeError as e:
            problems.append(f"{where}: not JSON ({e})")
            continue
        keys = {"question", "answer", "file", "evidence", "answerable", "split", "kind"}
        if q.get("kind") == "near-miss":
            keys |= {"near", "note"}
        if set(q) != keys:
            problems.append(f"{where}: fields {sorted(q)} instead of {sorted(keys)}")
            continue
        if q.get("kind") != "near-miss":
            # The near misses are balanced between the halves (below), the rest alternate.
            if q["split"] != expected_split:
                problems.append(f"{where}: split {q['split']!r}, expected {expected_split!r} (dev/test alternate)")
            expected_split = "test" if expected_split == "dev" else "dev"
        if q["kind"] not in KINDS:
            problems.append(f"{where}: kind {q['kind']!r} not one of {sorted(KINDS)}")
        key = " ".join(words(q["question"]))
        if key in seen:
            problems.append(f"{where}: repeated question")
        seen.add(key)
        counts.setdefault(q["split"], {}).setdefault(q["kind"], 0)
        counts[q["split"]][q["kind"]] += 1
        if not q["answerable"]:
            if q["kind"] not in UNANSWERABLE_KINDS or any(q[k] is not None for k in ("answer", "file", "evidence")):
                problems.append(f"{where}: an unanswerable question needs kind 'unanswerable' "
                                f"and null answer, file and evidence")
            continue
        if q["kind"] in UNANSWERABLE_KINDS:
            problems.append(f"{where}: answerable but of kind 'unanswerable'")
        if not q["answer"] or not q["file"] or not q["evidence"]:
            problems.append(f"{where}: an answerable question needs answer, file and evidence")
            continue
        if not 1 <= len(q["answer"].split()) <= 12:
            problems.append(f"{where}: answer has {len(q['answer'].split())} words (1-12)")
        n = len(words(q["evidence"]))
        if not 6 <= len(q["evidence"].split()) <= 40:
            problems.append(f"{where}: evidence has {len(q['evidence'].split())} words (6-40)")
        path = folder / q["file"]
        if not path.is_file():
            problems.append(f"{where}: file {q['file']} is not in {folder}")
            continue
        if q["file"] not in page_words:
            page_words[q["file"]] = words(visible_text(path.read_text(encoding="utf-8")))
        if n == 0 or not contains(page_words[q["file"]], words(q["evidence"])):
            problems.append(f"{where}: evidence not found in {q['file']}: {q['evidence']!r}")
    near = [counts.get(split, {}).get("near-miss", 0) for split in ("dev", "test")]
    if abs(near[0] - near[1]) > 1:
        problems.append(f"{questions.name}: near misses {near[0]} dev against {near[1]} test (balance them)")
    return problems, counts


# --- main -----------------------------------------------------------------------------------


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out", type=Path, help=f"output folder; {COLLECTION}/ in it is (re)written")
    ap.add_argument("--deb", type=Path, help=f"a {PACKAGE} .deb to use instead of apt-get download")
    ap.add_argument("--questions", type=Path, default=QUESTIONS,
                    help="the question file to check (default: %(default)s)")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="python-faq-deb-") as tmp:
        deb = args.deb if args.deb else download(PACKAGE, Path(tmp))
        if not deb.is_file():
            fail(f"{deb} is not a file")
        deb_sha256 = hashlib.sha256(deb.read_bytes()).hexdigest()
        version, pages = read_deb(deb)
        deb_name = deb.name
    if version != QUESTIONS_VERSION:
        print(f"warning: {PACKAGE} {version}; the questions were checked against {QUESTIONS_VERSION}",
              file=sys.stderr)

    folder = args.out / COLLECTION
    folder.mkdir(parents=True, exist_ok=True)
    for stale in folder.glob("*.html"):
        if stale.name not in pages:
            stale.unlink()
    for name, blob in sorted(pages.items()):
        (folder / name).write_bytes(blob)
    (args.out / f"{COLLECTION}.SOURCE.txt").write_text(
        f"collection: {COLLECTION} ({len(pages)} pages of the Python 3.11 FAQ, unchanged HTML)\n"
        f"package: {PACKAGE}\n"
        f"version: {version}\n"
        f"deb: {deb_name}\n"
        f"sha256: {deb_sha256}\n"
        f"pages: {', '.join(f'{FAQ_ROOT}{p}' for p in sorted(pages))}\n"
        f"licence: PSF License Agreement (code examples also Zero-Clause BSD); see html/license.html\n"
        f"questions: {args.questions.name}, checked against {QUESTIONS_VERSION}\n",
        encoding="utf-8",
    )
    print(f"{folder}: {len(pages)} pages from {PACKAGE} {version}")

    problems, counts = check_questions(args.questions, folder)
    for split in sorted(counts):
        kinds = ", ".join(f"{k} {n}" for k, n in sorted(counts[split].items()))
        print(f"  {split}: {sum(counts[split].values())} questions ({kinds})")
    if problems:
        print(f"python_faq: {len(problems)} bad line(s) in {args.questions}:", file=sys.stderr)
        for p in problems:
            print(f"  {p}", file=sys.stderr)
        sys.exit(1)
    print(f"  all evidence found ({args.questions})")


if __name__ == "__main__":
    main()
