#!/usr/bin/env python3
"""Builds the "postgresql" question-answering corpus: 38 pages of the PostgreSQL 15 manual.

Source
------
The HTML manual in Debian's ``postgresql-doc-15`` package (bookworm), version 15.20-0+deb12u1,
under ``usr/share/doc/postgresql-doc-15/html/``. The pages kept (see PAGES) are the ones an
ordinary user or administrator reads: part of the tutorial, the common server configuration
chapters, client authentication, backup and restore, routine vacuuming, some data types and
some SQL command reference pages.

Licence of the source
---------------------
The PostgreSQL Licence, a permissive BSD/MIT-like licence (``html/legalnotice.html`` and
``/usr/share/doc/postgresql-doc-15/copyright`` in the package):

    Portions Copyright © 1996-2026, PostgreSQL Global Development Group
    Portions Copyright © 1994, The Regents of the University of California

    Permission to use, copy, modify, and distribute this software and its documentation for any
    purpose, without fee, and without a written agreement is hereby granted, provided that the
    above copyright notice and this paragraph and the following two paragraphs appear in all
    copies.

The pages are copied unchanged; they are generated here and not committed.

What it writes
--------------
    OUTDIR/postgresql/<page>.html   the chosen pages, byte for byte as in the package
    OUTDIR/postgresql.SOURCE.txt    package, version and sha256 of the .deb (beside the folder,
                                    so that it is not ingested with the pages)

Then it checks ``tests/data/eval/qa/postgresql.jsonl`` against the pages written: every
answerable question's ``file`` must exist, and its ``evidence`` (lowercased, split on every
non-alphanumeric character, "a", "an", "the" dropped) must occur as a word sequence in the
visible text of that page (the body with tags removed, <script>/<style> dropped). It exits 1,
listing the bad lines, when one does not. Another package version warns and fails only if an
evidence is gone.

How to run
----------
    python3 scripts/eval/qa/postgresql.py /tmp/qa-corpora
    python3 scripts/eval/qa/postgresql.py --deb postgresql-doc-15_15.20-0+deb12u1_all.deb /tmp/qa-corpora

Without ``--deb`` it runs ``apt-get download postgresql-doc-15=15.20-0+deb12u1`` in a temporary
folder (falling back to whatever version apt offers, with a warning; run ``apt-get update``
first on a fresh machine). Only the Python 3.8+ standard library is used.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
import tempfile
from collections import Counter
from pathlib import Path

from debpkg import download, fail, read_files
from pagetext import visible_text

NAME = "postgresql"
PACKAGE = "postgresql-doc-15"
PINNED_VERSION = "15.20-0+deb12u1"
HTML_ROOT = "usr/share/doc/postgresql-doc-15/html/"
QUESTIONS = Path(__file__).resolve().parents[3] / "tests" / "data" / "eval" / "qa" / f"{NAME}.jsonl"

PAGES = [
    # Tutorial (chapters 1-3)
    "tutorial-arch.html",
    "tutorial-createdb.html",
    "tutorial-accessdb.html",
    "tutorial-table.html",
    "tutorial-populate.html",
    "tutorial-select.html",
    "tutorial-join.html",
    "tutorial-agg.html",
    "tutorial-views.html",
    "tutorial-fk.html",
    "tutorial-transactions.html",
    "tutorial-window.html",
    "tutorial-inheritance.html",
    # Server configuration (chapter 20)
    "runtime-config-connection.html",
    "runtime-config-resource.html",
    "runtime-config-wal.html",
    "runtime-config-query.html",
    "runtime-config-logging.html",
    "runtime-config-autovacuum.html",
    "runtime-config-client.html",
    # Client authentication (chapter 21)
    "auth-pg-hba-conf.html",
    "auth-password.html",
    # Backup and restore (chapter 26) and routine maintenance (chapter 25)
    "backup-dump.html",
    "continuous-archiving.html",
    "routine-vacuuming.html",
    # Data types (chapter 8)
    "datatype-numeric.html",
    "datatype-character.html",
    "datatype-datetime.html",
    "datatype-boolean.html",
    "datatype-json.html",
    # SQL commands and client applications (reference)
    "sql-createindex.html",
    "sql-vacuum.html",
    "sql-analyze.html",
    "sql-copy.html",
    "sql-explain.html",
    "sql-createrole.html",
    "sql-grant.html",
    "app-pgdump.html",
]

KINDS = {"fact", "yes-no", "how", "why", "unanswerable", "near-miss"}
# The kinds of a question the documents do not answer (a near miss sits right next to what they
# say, and carries the question it is near and a note: tests/data/eval/qa/README.md).
UNANSWERABLE_KINDS = {"unanswerable", "near-miss"}
STOPWORDS = {"a", "an", "the"}
BLOCK_TAGS = {
    "p", "div", "pre", "li", "ul", "ol", "dl", "dt", "dd", "tr", "td", "th", "table", "thead",
    "tbody", "blockquote", "section", "br", "h1", "h2", "h3", "h4", "h5", "h6", "hr", "caption",
    "title", "body", "head", "html",
}


def read_deb(path: Path):
    """(version, {page name: bytes}) of the pages in PAGES."""
    wanted = set(PAGES)
    version, pages = read_files(path, PACKAGE, HTML_ROOT, lambda rel: rel in wanted)
    missing = sorted(wanted - pages.keys())
    if missing:
        fail(f"{path} lacks the pages {missing}")
    return version, pages


# --- the checker ----------------------------------------------------------------------------


def words(text: str) -> list:
    return [w for w in re.split(r"[^0-9a-z]+", text.lower()) if w and w not in STOPWORDS]


def page_words(source: bytes) -> str:
    return " " + " ".join(words(visible_text(source.decode("utf-8"), BLOCK_TAGS))) + " "


def check(questions: Path, folder: Path) -> tuple:
    """(problems, Counter of (split, kind)) of the question file against the pages in folder."""
    problems, counts, cache, seen = [], Counter(), {}, set()
    lines = questions.read_text(encoding="utf-8").splitlines()
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{questions.name}:{number}"
        try:
            q = json.loads(line)
        except json.JSONDecodeError as err:
            problems.append(f"{where}: not JSON ({err})")
            continue
        keys = {"question", "answer", "file", "evidence", "answerable", "split", "kind"}
        if q.get("kind") == "near-miss":
            keys |= {"near", "note"}
        if set(q) != keys:
            problems.append(f"{where}: keys {sorted(q)} (want {sorted(keys)})")
            continue
        if q["split"] not in ("dev", "test") or q["kind"] not in KINDS:
            problems.append(f"{where}: bad split {q['split']!r} or kind {q['kind']!r}")
        if q["question"].strip().lower() in seen:
            problems.append(f"{where}: repeated question")
        seen.add(q["question"].strip().lower())
        counts[(q["split"], q["kind"])] += 1
        if not q["answerable"]:
            if q["kind"] not in UNANSWERABLE_KINDS or any(q[k] is not None for k in ("answer", "file", "evidence")):
                problems.append(f"{where}: an unanswerable question needs kind 'unanswerable' and null answer/file/evidence")
            continue
        if q["kind"] in UNANSWERABLE_KINDS or not q["answer"] or not q["file"] or not q["evidence"]:
            problems.append(f"{where}: an answerable question needs answer, file, evidence and a real kind")
            continue
        n = len(q["evidence"].split())
        if not 6 <= n <= 40:
            problems.append(f"{where}: evidence has {n} words (want 6-40)")
        path = folder / q["file"]
        if not path.is_file():
            problems.append(f"{where}: file {q['file']} is not in {folder}")
            continue
        if path not in cache:
            cache[path] = page_words(path.read_bytes())
        if " " + " ".join(words(q["evidence"])) + " " not in cache[path]:
            problems.append(f"{where}: evidence not found in {q['file']}: {q['evidence']!r}")
    return problems, counts


# --- main -----------------------------------------------------------------------------------


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("outdir", type=Path, help=f"writes OUTDIR/{NAME}/ and OUTDIR/{NAME}.SOURCE.txt")
    ap.add_argument("--deb", type=Path, help=f"a {PACKAGE} .deb to use instead of apt-get download")
    ap.add_argument("--questions", type=Path, default=QUESTIONS, help="default: %(default)s")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix=f"{NAME}-deb-") as tmp:
        deb = args.deb if args.deb else download(PACKAGE, Path(tmp), [f"{PACKAGE}={PINNED_VERSION}", PACKAGE])
        if not deb.is_file():
            fail(f"{deb} is not a file")
        sha256 = hashlib.sha256(deb.read_bytes()).hexdigest()
        version, pages = read_deb(deb)
    if version != PINNED_VERSION:
        print(f"warning: {PACKAGE} {version}; the questions were written on {PINNED_VERSION}",
              file=sys.stderr)

    folder = args.outdir / NAME
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("*.html"):
        if old.name not in pages:
            old.unlink()
    for name, blob in pages.items():
        (folder / name).write_bytes(blob)
    (args.outdir / f"{NAME}.SOURCE.txt").write_text(
        f"package: {PACKAGE}\nversion: {version}\nsha256: {sha256}\nfile: {deb.name}\n"
        f"html root: {HTML_ROOT}\npages: {len(pages)}\nlicence: PostgreSQL Licence\n",
        encoding="utf-8")
    total = sum(len(b) for b in pages.values())
    print(f"wrote {len(pages)} pages ({total} bytes) to {folder}", file=sys.stderr)

    problems, counts = check(args.questions, folder)
    for split in ("dev", "test"):
        row = ", ".join(f"{k} {counts[(split, k)]}" for k in sorted(KINDS) if counts[(split, k)])
        print(f"{split}: {sum(v for (s, _), v in counts.items() if s == split)} ({row})", file=sys.stderr)
    if problems:
        fail(f"{len(problems)} bad line(s) in {args.questions}:\n  " + "\n  ".join(problems))
    print(f"{args.questions.name}: all evidence found", file=sys.stderr)


if __name__ == "__main__":
    main()
