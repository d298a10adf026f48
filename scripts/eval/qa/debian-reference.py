#!/usr/bin/env python3
"""Builds the "debian-reference" question-answering corpus and checks its questions.

What it makes
-------------
    OUTDIR/debian-reference/               the corpus folder (`ragbox eval --corpus`), 14 HTML files:
        pr01.en.html                       Preface
        ch01.en.html ... ch12.en.html      Chapters 1-12 (tutorials, package management, system
                                           initialization, authentication, network setup, network
                                           applications, GUI, I18N/L10N, system tips, data
                                           management, data conversion, programming)
        apa.en.html                        Appendix A (document history and format)
    OUTDIR/debian-reference.SOURCE.txt     package, version, sha256 of the .deb, files written; it
                                           lies BESIDE the folder so it is not ingested.

The files are written exactly as the package ships them (original HTML, no changes). Only
``index.en.html`` (title page and a 133 KB table of contents that repeats the chapter headings) and the
PDF / plain-text renderings are left out; the 14 files come to about 2.2 MB.

The questions live in the repository, ``tests/data/eval/qa/debian-reference.jsonl`` (see
``tests/data/eval/qa/README-debian-reference.md``). After writing the corpus the script checks every
line of that file: the format, and for each answerable question that its ``file`` exists in the corpus
folder and that its ``evidence`` occurs in the visible text of that file (body text with tags removed,
<script>/<style> dropped; compared after lowercasing, splitting on every non-alphanumeric character and
dropping "a", "an", "the"). Any failure is listed and the script exits with status 1.

Source
------
Debian package ``debian-reference-en`` (source package ``debian-reference``), version 2.100 from
Debian 12 "bookworm" main: "Debian Reference" (version 2.100, 2023-02-04) by Osamu Aoki, the English
original. The HTML is under ``usr/share/debian-reference/`` in the package. The questions were written
and checked against 2.100 (sha256 of the .deb:
9f31d3a17df505de09689ca255512ea58c1fc47c59bb1b0c7bf1c23362e9743f). Another version only warns; it
fails if a file is missing or an evidence sentence is gone.

Licence of the source
---------------------
``usr/share/doc/debian-reference-en/copyright`` says (Files: *, Copyright: 2007-2013 Osamu Aoki
<osamu@debian.org>), License: GPL-2+: "This document may used under the terms the GNU General Public
License version 2 or higher." followed by the permission notice "Permission is granted to make and
distribute verbatim copies of this document provided the copyright notice and this permission notice
are preserved on all copies. Permission is granted to copy and distribute modified versions of this
document under the conditions for verbatim copying, provided that the entire resulting derived work is
distributed under the terms of a permission notice identical to this one. [...]" (translations: the
same, under the above conditions for modified versions). The copyright file names no MIT-style or
other second licence. The corpus is the unmodified HTML, generated here and not committed.

How to run
----------
    python3 scripts/eval/qa/debian-reference.py /tmp/qa-corpora
    python3 scripts/eval/qa/debian-reference.py --deb debian-reference-en_2.100_all.deb /tmp/qa-corpora

Without ``--deb`` it runs ``apt-get download debian-reference-en`` in a temporary folder (run
``apt-get update`` once before on a fresh machine). With ``--deb`` it needs nothing but Python 3.8+:
the .deb is read with the standard library (ar, tar.xz/gz/bz2).
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import re
import shutil
import sys
import tempfile
from pathlib import Path

import pagetext
from debpkg import download, fail, read_files

PACKAGE = "debian-reference-en"
JUDGED_VERSION = "2.100"
JUDGED_SHA256 = "9f31d3a17df505de09689ca255512ea58c1fc47c59bb1b0c7bf1c23362e9743f"
HTML_ROOT = "usr/share/debian-reference/"
PAGES = ["pr01.en.html"] + [f"ch{n:02d}.en.html" for n in range(1, 13)] + ["apa.en.html"]
COLLECTION = "debian-reference"
QUESTIONS = (Path(__file__).resolve().parents[3]
             / "tests" / "data" / "eval" / "qa" / f"{COLLECTION}.jsonl")
KINDS = {"fact", "yes-no", "how", "why", "unanswerable", "near-miss"}
# The kinds of a question the documents do not answer (a near miss sits right next to what they
# say, and carries the question it is near and a note: tests/data/eval/qa/README.md).
UNANSWERABLE_KINDS = {"unanswerable", "near-miss"}
STOPWORDS = {"a", "an", "the"}
EVIDENCE_WORDS = (6, 40)

# Tags that end a run of text: their boundaries separate words in the visible text.
BLOCK_TAGS = {
    "p", "div", "pre", "li", "ul", "ol", "dl", "dt", "dd", "tr", "td", "th", "table", "thead",
    "tbody", "tfoot", "blockquote", "section", "br", "h1", "h2", "h3", "h4", "h5", "h6",
    "figure", "caption", "hr", "body", "img",
}


def read_deb(path: Path) -> tuple[str, dict[str, bytes]]:
    """(package version, {file name: original HTML bytes}) of the pages the corpus uses."""
    # Some versions may ship the pages compressed.
    version, files = read_files(path, PACKAGE, HTML_ROOT, lambda rel: rel.removesuffix(".gz") in PAGES)
    pages: dict[str, bytes] = {}
    for rel, blob in files.items():
        if rel.endswith(".gz"):
            rel, blob = rel[:-3], gzip.decompress(blob)
        pages[rel] = blob
    return version, pages


# --- visible text and the check -------------------------------------------------------------


def visible_text(markup: str) -> str:
    return pagetext.visible_text(markup, BLOCK_TAGS, "\n")


def words(text: str) -> list[str]:
    """Lowercased alphanumeric runs (every other character splits), without a/an/the."""
    return [w for w in re.findall(r"[^\W_]+", text.lower()) if w not in STOPWORDS]


def contains(haystack: list[str], needle: list[str]) -> bool:
    if not needle:
        return False
    first, n = needle[0], len(needle)
    for i, w in enumerate(haystack):
        if w == first and haystack[i:i + n] == needle:
            return True
    return False


def check_questions(questions: Path, corpus: Path) -> list[str]:
    """Problems found in the question file, one line each (empty when all is well)."""
    problems: list[str] = []
    doc_words: dict[str, list[str] | None] = {}
    counts: dict[tuple[str, str], int] = {}
    expected_split = "dev"
    seen_questions: set[str] = set()
    lines = questions.read_text(encoding="utf-8").splitlines()
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{questions.name}:{number}"
        try:
            item = json.loads(line)
        except json.JSONDecodeError as err:
            problems.append(f"{where}: not JSON ({err})")
            continue
        question, kind = item.get("question"), item.get("kind")
        answerable, split = item.get("answerable"), item.get("split")
        if not isinstance(question, str) or not question.strip():
            problems.append(f"{where}: no question")
        elif question.strip().lower() in seen_questions:
            problems.append(f"{where}: the same question twice")
        else:
            seen_questions.add(question.strip().lower())
        if kind not in KINDS:
            problems.append(f"{where}: kind {kind!r} is not one of {sorted(KINDS)}")
        if kind != "near-miss":
            # The near misses are balanced between the halves (below), the rest alternate.
            if split != expected_split:
                problems.append(f"{where}: split {split!r}, expected {expected_split!r} (alternate)")
            expected_split = "test" if expected_split == "dev" else "dev"
        if not isinstance(answerable, bool):
            problems.append(f"{where}: answerable must be true or false")
            continue
        counts[(str(split), str(kind))] = counts.get((str(split), str(kind)), 0) + 1
        if not answerable:
            if kind not in UNANSWERABLE_KINDS:
                problems.append(f"{where}: unanswerable question with kind {kind!r}")
            for key in ("answer", "file", "evidence"):
                if item.get(key) is not None:
                    problems.append(f"{where}: {key} must be null for an unanswerable question")
            continue
        if kind in UNANSWERABLE_KINDS:
            problems.append(f"{where}: answerable question with kind {kind!r}")
        answer, name, evidence = item.get("answer"), item.get("file"), item.get("evidence")
        if not isinstance(answer, str) or not answer.strip():
            problems.append(f"{where}: no answer")
        if not isinstance(name, str) or not name:
            problems.append(f"{where}: no file")
            continue
        if not isinstance(evidence, str) or not evidence.strip():
            problems.append(f"{where}: no evidence")
            continue
        if name not in doc_words:
            path = corpus / name
            inside = str(path.resolve()).startswith(str(corpus.resolve()) + "/")
            if path.is_file() and inside:
                doc_words[name] = words(visible_text(path.read_text(encoding="utf-8")))
            else:
                doc_words[name] = None
        if doc_words[name] is None:
            problems.append(f"{where}: file {name!r} is not in {corpus}")
            continue
        needle = words(evidence)
        if not EVIDENCE_WORDS[0] <= len(needle) <= EVIDENCE_WORDS[1]:
            problems.append(f"{where}: evidence has {len(needle)} words, "
                            f"not {EVIDENCE_WORDS[0]}-{EVIDENCE_WORDS[1]}")
        if not contains(doc_words[name], needle):
            problems.append(f"{where}: evidence not found in {name}: {evidence[:90]!r}")
    near = [counts.get((split, "near-miss"), 0) for split in ("dev", "test")]
    if abs(near[0] - near[1]) > 1:
        problems.append(f"{questions.name}: near misses {near[0]} dev against {near[1]} test (balance them)")
    report_counts(counts)
    return problems


def report_counts(counts: dict[tuple[str, str], int]) -> None:
    kinds = sorted({k for _, k in counts})
    print(f"{'split':<6}" + "".join(f"{k:>14}" for k in kinds) + f"{'total':>8}")
    for split in ("dev", "test"):
        row = [counts.get((split, k), 0) for k in kinds]
        print(f"{split:<6}" + "".join(f"{n:>14}" for n in row) + f"{sum(row):>8}")
    answerable = sum(n for (_, k), n in counts.items() if k not in UNANSWERABLE_KINDS)
    print(f"answerable: {answerable}, unanswerable: "
          f"{sum(n for (_, k), n in counts.items() if k in UNANSWERABLE_KINDS)}")


# --- main -----------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("outdir", type=Path, help="where debian-reference/ and its SOURCE.txt go")
    parser.add_argument("--deb", type=Path, help=f"a {PACKAGE} .deb (default: apt-get download)")
    parser.add_argument("--questions", type=Path, default=QUESTIONS,
                        help=f"the question file to check (default: {QUESTIONS})")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        deb = args.deb if args.deb else download(PACKAGE, Path(tmp))
        if not deb.is_file():
            fail(f"{deb} does not exist")
        sha256 = hashlib.sha256(deb.read_bytes()).hexdigest()
        version, pages = read_deb(deb)

    if version != JUDGED_VERSION:
        print(f"debian_reference: warning: {PACKAGE} {version}, but the questions were checked "
              f"against {JUDGED_VERSION}; failing only if a file or an evidence is gone",
              file=sys.stderr)
    missing = [p for p in PAGES if p not in pages]
    if missing:
        print(f"debian_reference: warning: the .deb lacks {missing}", file=sys.stderr)

    corpus = args.outdir / COLLECTION
    if corpus.exists():
        shutil.rmtree(corpus)
    corpus.mkdir(parents=True)
    total = 0
    for name in PAGES:
        if name in pages:
            (corpus / name).write_bytes(pages[name])
            total += len(pages[name])
    source = args.outdir / f"{COLLECTION}.SOURCE.txt"
    source.write_text(
        f"package: {PACKAGE}\nversion: {version}\nsha256: {sha256}\n"
        f"deb: {deb.name}\nhtml root in package: {HTML_ROOT}\n"
        f"files ({len(pages)}, {total} bytes, unmodified): "
        f"{' '.join(p for p in PAGES if p in pages)}\n"
        f"licence: GPL-2+ with verbatim/modified-copy permission notice "
        f"(usr/share/doc/{PACKAGE}/copyright)\n",
        encoding="utf-8")
    print(f"wrote {len(pages)} files ({total} bytes) to {corpus} and {source}")

    if not args.questions.is_file():
        fail(f"no question file {args.questions}")
    problems = check_questions(args.questions, corpus)
    if problems:
        print(f"debian_reference: {len(problems)} problem(s) in {args.questions}:", file=sys.stderr)
        for line in problems:
            print(f"  {line}", file=sys.stderr)
        sys.exit(1)
    print(f"all questions in {args.questions} check out against {corpus}")


if __name__ == "__main__":
    main()
