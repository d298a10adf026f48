#!/usr/bin/env python3
"""Builds the "python-docs" BEIR set: natural questions over the Python FAQ and HOWTO pages.

What it makes
-------------
A BEIR folder that ``ragbox eval --data DIR`` reads:

    DIR/corpus.jsonl      one document per section of the source pages
    DIR/queries.jsonl     the hand-written questions (copied)
    DIR/qrels/dev.tsv     judgments of the odd-numbered questions (copied)
    DIR/qrels/test.tsv    judgments of the even-numbered questions (copied)
    DIR/SOURCE.txt        the package, version and sha256 the corpus was built from

The corpus comes from the HTML documentation in Debian's ``python3.11-doc`` package: every page
of ``faq/`` (but ``index.html``, a table of contents) and seven pages of ``howto/`` (see HOWTO_PAGES).
Each ``<section>`` of a page, down to h3, that has text of its own becomes one document; the text
of deeper sections (h4 and below) is folded into their h3 section. In the FAQ that gives one
document per question and answer. A document is

    {"_id": "faq/programming#<anchor>", "title": "Programming FAQ > Numbers and strings > <question>",
     "text": "<plain text of the section; code blocks kept as text, line breaks and indentation kept>"}

The title is the page title and the headings down to the section, joined by " > ". The id is the
page path (without ``.html``) and the section's HTML anchor, so a judgment can be checked against
the page by eye.

The questions and their judgments are written by hand and live in the repository, in
``tests/data/eval/python-docs/`` (see the README there); this script only copies them and checks
that every judged document id exists in the corpus it built, failing otherwise.

How to run
----------
    python3 scripts/eval/make-natural-questions-set.py /tmp/python-docs-beir
    python3 scripts/eval/make-natural-questions-set.py --deb python3.11-doc_3.11.2-6+deb12u7_all.deb OUT

Without ``--deb`` it runs ``apt-get download python3.11-doc`` in a temporary folder (run
``apt-get update`` once before on a fresh machine). With ``--deb`` it needs nothing but Python 3.8+:
the .deb is read with the standard library (ar, tar.xz/gz). The judgments were made against
3.11.2-6+deb12u7; another version warns, and fails if a judged section is gone.

Licence of the source
---------------------
The Python documentation is licensed under the PSF License Agreement (Python 3.11.2,
``html/license.html`` in the package); since 3.8.6 the code examples in it are dual licensed under
the PSF License Agreement and the Zero-Clause BSD license. Copyright (c) 2001-2023 Python Software
Foundation. The corpus is derived text of those pages and falls under the same licence; it is
generated here and not committed.
"""

from __future__ import annotations

import argparse
import hashlib
import html.parser
import json
import re
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "qa"))
from debpkg import download, fail, read_files

PACKAGE = "python3.11-doc"
JUDGED_VERSION = "3.11.2-6+deb12u7"
HTML_ROOT = "usr/share/doc/python3.11/html/"
FAQ_SKIP = {"index"}
HOWTO_PAGES = ["logging", "sorting", "regex", "unicode", "argparse", "functional", "enum"]
DEEPEST_DOCUMENT_LEVEL = 3  # h3; text of h4+ sections goes to their h3 ancestor
# ragbox writes each document to a file named by its id, hex-encoded when it has '#' or '/':
# 2 * len + 5 bytes, which must stay under the usual 255-byte limit on a file name.
MAX_ID_BYTES = 125
QUESTIONS_DIR = Path(__file__).resolve().parents[2] / "tests" / "data" / "eval" / "python-docs"
QRELS_HEADER = "query-id\tcorpus-id\tscore"

BLOCK_TAGS = {
    "p", "div", "pre", "li", "ul", "ol", "dl", "dt", "dd", "tr", "table", "blockquote",
    "section", "br", "h1", "h2", "h3", "h4", "h5", "h6", "figure", "caption", "hr",
}
HEADINGS = {"h1": 1, "h2": 2, "h3": 3, "h4": 4, "h5": 5, "h6": 6}
VOID_TAGS = {"br", "img", "hr", "input", "meta", "link", "col", "wbr", "area", "base", "source"}


def read_deb(path: Path) -> tuple[str, dict[str, str]]:
    """(package version, {path under html/ : HTML text}) of the pages the corpus uses."""
    wanted = {f"howto/{p}.html" for p in HOWTO_PAGES}

    def used(rel: str) -> bool:
        is_faq = rel.startswith("faq/") and rel.endswith(".html") and rel.count("/") == 1
        return (is_faq and Path(rel).stem not in FAQ_SKIP) or rel in wanted

    version, files = read_files(path, PACKAGE, HTML_ROOT, used)
    pages = {rel: blob.decode("utf-8") for rel, blob in files.items()}
    missing = sorted(wanted - pages.keys())
    if missing:
        fail(f"{path} lacks the HOWTO pages {missing}")
    if not any(p.startswith("faq/") for p in pages):
        fail(f"{path} has no FAQ pages under {HTML_ROOT}faq/")
    return version, pages


# --- HTML to sections -----------------------------------------------------------------------


class Section:
    def __init__(self, anchor: str, parent: "Section | None"):
        self.anchor = anchor
        self.parent = parent
        self.level = 0  # from its heading
        self.heading: list[str] = []
        self.parts: list[str] = []  # text of its own (or of folded-in deeper sections)
        self.owner: Section = self  # where its text goes

    def path(self) -> list[str]:
        names, node = [], self
        while node is not None:
            names.append(clean_inline("".join(node.heading)))
            node = node.parent
        return list(reversed(names))


def clean_inline(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


class PageParser(html.parser.HTMLParser):
    """Collects the <section>s of a Sphinx page (the sidebar has none) with their text."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.sections: list[Section] = []
        self.stack: list[Section] = []
        self.skip: list[str] = []  # open tags whose content is dropped
        self.heading_of: Section | None = None
        self.heading_tag = ""
        self.pre = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        classes = (a.get("class") or "").split()
        if self.skip:
            if tag not in VOID_TAGS:
                self.skip.append(tag)
            return
        drop = (
            tag in ("script", "style")
            or (tag == "a" and "headerlink" in classes)
            or (tag == "nav" and "contents" in classes)  # a local table of contents
            or (tag == "div" and "toctree-wrapper" in classes)
        )
        if drop:
            self.skip.append(tag)
            return
        if tag == "section":
            parent = self.stack[-1] if self.stack else None
            section = Section(a.get("id") or "", parent)
            self.stack.append(section)
            self.sections.append(section)
            return
        if not self.stack:
            return
        current = self.stack[-1]
        if tag in HEADINGS and not current.heading and self.heading_of is None:
            current.level = HEADINGS[tag]
            if current.level > DEEPEST_DOCUMENT_LEVEL and current.parent is not None:
                current.owner = current.parent.owner
            self.heading_of, self.heading_tag = current, tag
            return
        if tag == "pre":
            self.pre += 1
        if tag in BLOCK_TAGS:
            self.emit("\n")
        if tag == "li":
            self.emit("- ")

    def handle_endtag(self, tag: str) -> None:
        if self.skip:
            # Pop to the matching open tag, tolerating unclosed ones inside it.
            if tag in self.skip:
                while self.skip and self.skip.pop() != tag:
                    pass
            return
        if tag == "section":
            if self.stack:
                self.stack.pop()
            return
        if self.heading_of is not None and tag == self.heading_tag:
            section = self.heading_of
            self.heading_of = None
            if section.owner is not section:  # a folded-in deeper section: keep its heading as text
                self.emit("\n" + clean_inline("".join(section.heading)) + "\n")
            return
        if tag == "pre":
            self.pre = max(0, self.pre - 1)
        if tag in BLOCK_TAGS:
            self.emit("\n")

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "br" and self.stack and not self.skip:
            self.emit("\n")

    def handle_data(self, data: str) -> None:
        if self.skip or not self.stack:
            return
        if self.heading_of is not None:
            self.heading_of.heading.append(data)
            return
        if self.pre:
            self.emit("\0PRE" + data + "\0END")  # kept as is by finish_text
        else:
            self.emit(data)

    def emit(self, text: str) -> None:
        if self.stack:
            self.stack[-1].owner.parts.append(text)


def finish_text(parts: list[str]) -> str:
    """Plain text: runs of spaces collapsed outside code blocks, at most one blank line."""
    raw = "".join(parts)
    out = []
    for i, chunk in enumerate(re.split(r"\0PRE|\0END", raw)):
        if i % 2 == 1:  # inside <pre>
            out.append(chunk)
        else:
            chunk = re.sub(r"[ \t\r\f\v]+", " ", chunk)
            chunk = re.sub(r" *\n *", "\n", chunk)
            out.append(chunk)
    text = "".join(out).replace("\u00b6", "")
    text = re.sub(r"\n[ \t]*\n(\s*\n)+", "\n\n", text)
    text = "\n".join(line.rstrip() for line in text.split("\n"))
    text = re.sub(r"(?m)^- *\n+(?=\S)", "- ", text)  # a list item's bullet on its paragraph's line
    return text.strip("\n").strip()


def page_documents(rel: str, source: str) -> list[dict]:
    parser = PageParser()
    parser.feed(source)
    parser.close()
    page = rel[: -len(".html")]
    docs = []
    for section in parser.sections:
        if section.owner is not section:
            continue
        text = finish_text(section.parts)
        if not text or not section.anchor:
            continue
        doc_id = f"{page}#{section.anchor}"
        if len(doc_id.encode("utf-8")) > MAX_ID_BYTES:
            fail(f"document id longer than {MAX_ID_BYTES} bytes: {doc_id}")
        docs.append({"_id": doc_id, "title": " > ".join(section.path()), "text": text})
    if not docs:
        fail(f"{rel}: no sections found (has the HTML layout changed?)")
    return docs


# --- questions and judgments -------------------------------------------------------------


def read_qrels(path: Path) -> list[tuple[str, str, int]]:
    lines = path.read_text(encoding="utf-8").splitlines()
    if not lines or lines[0].strip() != QRELS_HEADER:
        fail(f"{path}: first line must be the header `{QRELS_HEADER}`")
    rows = []
    for number, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        fields = line.split("\t")
        if len(fields) != 3 or not fields[2].strip().lstrip("-").isdigit():
            fail(f"{path}:{number}: expected `query-id<TAB>corpus-id<TAB>score`, got {line!r}")
        rows.append((fields[0], fields[1], int(fields[2])))
    return rows


def check_judgments(questions: Path, corpus_ids: set[str]) -> dict[str, int]:
    queries = {}
    for number, line in enumerate((questions / "queries.jsonl").read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            q = json.loads(line)
            if q["_id"] in queries:
                fail(f"queries.jsonl:{number}: repeated id {q['_id']}")
            queries[q["_id"]] = q["text"]
    problems, seen = [], {}
    for split in ("dev", "test"):
        for query, doc, score in read_qrels(questions / f"qrels-{split}.tsv"):
            if query not in queries:
                problems.append(f"qrels-{split}.tsv: query {query} is not in queries.jsonl")
            if doc not in corpus_ids:
                problems.append(f"qrels-{split}.tsv: {query} judges {doc}, which is not in the corpus")
            if score <= 0:
                problems.append(f"qrels-{split}.tsv: {query} {doc} has score {score}; only relevant pairs are listed")
            if seen.get(query, split) != split:
                problems.append(f"query {query} is judged in both dev and test")
            seen[query] = split
    unjudged = sorted(set(queries) - set(seen))
    if unjudged:
        problems.append(f"queries without judgments: {', '.join(unjudged)}")
    if problems:
        fail("the judgments do not fit the corpus built:\n  " + "\n  ".join(problems))
    counts = {s: sum(1 for v in seen.values() if v == s) for s in ("dev", "test")}
    return counts


# --- main -----------------------------------------------------------------------------------


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out", type=Path, help="output folder (created; its BEIR files are replaced)")
    ap.add_argument("--deb", type=Path, help=f"a {PACKAGE} .deb to use instead of apt-get download")
    ap.add_argument("--questions", type=Path, default=QUESTIONS_DIR,
                    help="folder with queries.jsonl, qrels-dev.tsv, qrels-test.tsv (default: %(default)s)")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="python-docs-deb-") as tmp:
        deb = args.deb if args.deb else download(PACKAGE, Path(tmp))
        if not deb.is_file():
            fail(f"{deb} is not a file")
        deb_sha256 = hashlib.sha256(deb.read_bytes()).hexdigest()
        version, pages = read_deb(deb)
        deb_name = deb.name
    if version != JUDGED_VERSION:
        print(f"warning: {PACKAGE} {version}; the judgments were made on {JUDGED_VERSION}", file=sys.stderr)

    corpus, ids = [], set()
    for rel in sorted(pages, key=lambda r: (not r.startswith("faq/"), r)):
        for doc in page_documents(rel, pages[rel]):
            if doc["_id"] in ids:
                fail(f"repeated document id {doc['_id']}")
            ids.add(doc["_id"])
            corpus.append(doc)

    counts = check_judgments(args.questions, ids)

    out = args.out
    (out / "qrels").mkdir(parents=True, exist_ok=True)
    with open(out / "corpus.jsonl", "w", encoding="utf-8") as f:
        for doc in corpus:
            f.write(json.dumps(doc, ensure_ascii=False) + "\n")
    shutil.copyfile(args.questions / "queries.jsonl", out / "queries.jsonl")
    for split in ("dev", "test"):
        shutil.copyfile(args.questions / f"qrels-{split}.tsv", out / "qrels" / f"{split}.tsv")
    (out / "SOURCE.txt").write_text(
        f"corpus: {len(corpus)} sections of the Python 3.11 FAQ and HOWTO pages\n"
        f"package: {PACKAGE} {version} ({deb_name}, sha256 {deb_sha256})\n"
        f"pages: {', '.join(sorted(pages))}\n"
        f"licence: PSF License Agreement (code examples also Zero-Clause BSD); see html/license.html\n"
        f"questions: {args.questions} (dev {counts['dev']}, test {counts['test']})\n",
        encoding="utf-8",
    )
    per_page = {}
    for doc in corpus:
        page = doc["_id"].split("#")[0]
        per_page[page] = per_page.get(page, 0) + 1
    print(f"{out}: {len(corpus)} documents from {len(pages)} pages ({PACKAGE} {version}); "
          f"{counts['dev']} dev and {counts['test']} test questions")
    for page, n in per_page.items():
        print(f"  {page}: {n}")


if __name__ == "__main__":
    main()
