#!/usr/bin/env python3
"""Checks the hand-written question sets over ragbox's sample corpus (Harbourline Logistics).

Files checked (paths relative to the repository root):

    tests/data/eval/qa/sample-corpus.jsonl   single questions  (`ragbox eval --qa ... --corpus tests/data/corpus`)
    tests/data/eval/conversations.jsonl      2-3 turn conversations with reference standalone rewrites

For every answerable question and conversation turn it checks that `file` exists under
tests/data/corpus/ and that the evidence's normalised word sequence occurs in that document's text.
Normalisation is the one `ragbox eval` uses: lower case, split on every non-alphanumeric character,
drop "a", "an", "the". The document text is

    .md .txt .py      the file as it is
    .html             the text of the page with tags removed (<script> and <style> dropped)
    .eml .mbox        the decoded text/* parts of every message (text attachments included)
    .pdf              `pdftotext -layout` when installed, otherwise pypdf (`pip install pypdf`)

It also checks the format: fields and their types, answers of 1-12 words, evidence of 6-40 words
(a table row, with " | " between cells, may have 4-5), yes-no answers starting with Yes/No,
unanswerable items with null answer/file/evidence, dev/test alternating down each file, the
kinds and their minimum counts, no duplicate questions, no question equal to one of the 23 the
prompt was tuned on (tests/data/corpus-questions.jsonl); for conversations: ids, 2-3 turns, the
first turn's rewrite equal to its question, a topic-change follow-up's rewrite equal to its
question, a pronoun/ellipsis/what-if follow-up's rewrite different from its question (in "mixed"
conversations a follow-up may be standalone), every rewrite a single question (no "." or "?"
inside: `ragbox eval --conversations` counts those as two questions), and every `keep` phrase
(1-3 words, lowercase; "a|b" = either) present, as a word sequence, in the turn's rewrite.

Usage:  python3 scripts/eval/qa/check-sample-sets.py [--root REPO]      exit 0 when everything passes
"""

from __future__ import annotations

import argparse
import collections
import email
import html.parser
import json
import mailbox
import os
import shutil
import subprocess
import sys

QA_KINDS = {"fact", "yes-no", "how", "why", "unanswerable", "near-miss"}
# The kinds of question the documents do not answer: off their topic, or right next to what they say.
UNANSWERABLE_KINDS = {"unanswerable", "near-miss"}
CONV_KINDS = {"pronoun": 10, "ellipsis": 10, "what-if": 10, "topic-change": 8, "mixed": 0}
MIN_ANSWERABLE, MIN_UNANSWERABLE, MIN_CONVERSATIONS = 44, 14, 44


def words(text: str) -> list[str]:
    out, cur = [], []
    for ch in text.lower():
        if ch.isalnum():
            cur.append(ch)
        elif cur:
            out.append("".join(cur))
            cur = []
    if cur:
        out.append("".join(cur))
    return [w for w in out if w not in ("a", "an", "the")]


def contains(hay: list[str], needle: list[str]) -> bool:
    if not needle:
        return False
    n = len(needle)
    first = needle[0]
    for i, w in enumerate(hay):
        if w == first and hay[i:i + n] == needle:
            return True
    return False


class _Text(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.skip = 0

    def handle_starttag(self, tag, attrs):
        if tag in ("script", "style"):
            self.skip += 1
        else:
            self.parts.append(" ")

    def handle_endtag(self, tag):
        if tag in ("script", "style"):
            self.skip = max(0, self.skip - 1)
        else:
            self.parts.append(" ")

    def handle_data(self, data):
        if not self.skip:
            self.parts.append(data)


def html_text(raw: str) -> str:
    p = _Text()
    p.feed(raw)
    p.close()
    return "".join(p.parts)


def message_text(msg: email.message.Message) -> str:
    parts = []
    for part in msg.walk():
        if part.get_content_maintype() != "text":
            continue
        payload = part.get_payload(decode=True)
        if payload is None:
            continue
        text = payload.decode(part.get_content_charset() or "utf-8", errors="replace")
        parts.append(html_text(text) if part.get_content_subtype() == "html" else text)
    return "\n\n".join(parts)


def pdf_text(path: str) -> str:
    if shutil.which("pdftotext"):
        return subprocess.run(["pdftotext", "-layout", path, "-"], check=True, capture_output=True, text=True).stdout
    try:
        import pypdf  # type: ignore
    except ImportError:
        sys.exit("reading the PDF needs pdftotext (poppler-utils) or pypdf: python3 -m pip install --user pypdf")
    return "\n".join(page.extract_text() or "" for page in pypdf.PdfReader(path).pages)


def document_text(path: str) -> str:
    ext = os.path.splitext(path)[1].lower()
    if ext == ".pdf":
        return pdf_text(path)
    if ext == ".mbox":
        return "\n\n".join(message_text(m) for m in mailbox.mbox(path, create=False))
    if ext == ".eml":
        with open(path, "rb") as f:
            return message_text(email.message_from_binary_file(f))
    with open(path, encoding="utf-8") as f:
        raw = f.read()
    return html_text(raw) if ext in (".html", ".htm") else raw


class Checker:
    def __init__(self, corpus: str) -> None:
        self.corpus = corpus
        self.cache: dict[str, list[str]] = {}
        self.errors: list[str] = []
        self.used_files: collections.Counter[str] = collections.Counter()

    def err(self, where: str, msg: str) -> None:
        self.errors.append(f"{where}: {msg}")

    def doc_words(self, rel: str) -> list[str] | None:
        if rel not in self.cache:
            path = os.path.join(self.corpus, rel)
            if not os.path.isfile(path):
                return None
            self.cache[rel] = words(document_text(path))
        return self.cache[rel]

    def check_item(self, where: str, item: dict, yes_no: bool = False) -> None:
        """Answer/file/evidence rules shared by questions and conversation turns."""
        q = item.get("question")
        if not isinstance(q, str) or not q.strip():
            self.err(where, "no question")
        if not isinstance(item.get("answerable"), bool):
            self.err(where, "`answerable` must be true or false")
            return
        ans, rel, ev = item.get("answer"), item.get("file"), item.get("evidence")
        if not item["answerable"]:
            if ans is not None or rel is not None or ev is not None:
                self.err(where, "an unanswerable item needs answer, file and evidence null")
            return
        if not (isinstance(ans, str) and isinstance(rel, str) and isinstance(ev, str)):
            self.err(where, "an answerable item needs answer, file and evidence strings")
            return
        n = len(words(ans))
        if not 1 <= n <= 12:
            self.err(where, f"answer has {n} words (1-12): {ans!r}")
        if yes_no and not (ans.startswith("Yes") or ans.startswith("No")):
            self.err(where, f"a yes-no answer starts with Yes or No: {ans!r}")
        ew = words(ev)
        low = 4 if " | " in ev else 6
        if not low <= len(ew) <= 40:
            self.err(where, f"evidence has {len(ew)} words ({low}-40): {ev!r}")
        dw = self.doc_words(rel)
        if dw is None:
            self.err(where, f"file not in the corpus: {rel}")
            return
        self.used_files[rel] += 1
        if not contains(dw, ew):
            self.err(where, f"evidence not found in {rel}: {ev!r}")


def load_jsonl(path: str, errors: list[str]) -> list[dict]:
    rows = []
    with open(path, encoding="utf-8") as f:
        for i, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as e:
                errors.append(f"{path}:{i}: not JSON: {e}")
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))
    args = ap.parse_args()
    root = os.path.abspath(args.root)
    corpus = os.path.join(root, "tests/data/corpus")
    qa_path = os.path.join(root, "tests/data/eval/qa/sample-corpus.jsonl")
    conv_path = os.path.join(root, "tests/data/eval/conversations.jsonl")
    tuned_path = os.path.join(root, "tests/data/corpus-questions.jsonl")

    ck = Checker(corpus)
    tuned = {" ".join(words(r["question"])) for r in load_jsonl(tuned_path, ck.errors)}
    all_docs = sorted(
        os.path.relpath(os.path.join(d, f), corpus)
        for d, _, fs in os.walk(corpus) for f in fs
        if f not in ("QUESTIONS.md", ".ragboxignore"))

    # ---- single questions
    qa = load_jsonl(qa_path, ck.errors)
    counts: collections.Counter[tuple[str, str]] = collections.Counter()
    seen: set[str] = set()
    for i, r in enumerate(qa):
        where = f"sample-corpus.jsonl:{i + 1}"
        want = "dev" if i % 2 == 0 else "test"
        if r.get("split") != want:
            ck.err(where, f"split should be {want} (alternating)")
        kind = r.get("kind")
        if kind not in QA_KINDS:
            ck.err(where, f"unknown kind {kind!r}")
        if (kind in UNANSWERABLE_KINDS) != (r.get("answerable") is False):
            ck.err(where, "kind `unanswerable` or `near-miss` if and only if answerable is false")
        key = " ".join(words(r.get("question", "")))
        if key in seen:
            ck.err(where, "duplicate question")
        if key in tuned:
            ck.err(where, "question equals one of the 23 tuned questions")
        seen.add(key)
        ck.check_item(where, r, yes_no=kind == "yes-no")
        counts[(r.get("split"), kind)] += 1
    qa_files = set(ck.used_files)
    n_ans = sum(1 for r in qa if r.get("answerable") is True)
    n_un = sum(1 for r in qa if r.get("answerable") is False)
    if n_ans < MIN_ANSWERABLE or n_un < MIN_UNANSWERABLE:
        ck.err("sample-corpus.jsonl", f"{n_ans} answerable / {n_un} unanswerable (need {MIN_ANSWERABLE} / {MIN_UNANSWERABLE})")
    for d in all_docs:
        if d not in qa_files:
            ck.err("sample-corpus.jsonl", f"no question on {d}")

    # ---- conversations
    conv = load_jsonl(conv_path, ck.errors)
    ck.used_files.clear()
    ccounts: collections.Counter[tuple[str, str]] = collections.Counter()
    ids: set[str] = set()
    n_turns = n_un_turns = 0
    for i, c in enumerate(conv):
        cid = c.get("id")
        where = f"conversations.jsonl:{i + 1} ({cid})"
        if not isinstance(cid, str) or cid in ids:
            ck.err(where, "missing or duplicate id")
        ids.add(cid)
        want = "dev" if i % 2 == 0 else "test"
        if c.get("split") != want:
            ck.err(where, f"split should be {want} (alternating)")
        kind = c.get("kind")
        if kind not in CONV_KINDS:
            ck.err(where, f"unknown kind {kind!r}")
        ccounts[(c.get("split"), kind)] += 1
        turns = c.get("turns") or []
        if not 2 <= len(turns) <= 3:
            ck.err(where, f"{len(turns)} turns (2-3)")
        for j, t in enumerate(turns):
            tw = f"{where} turn {j + 1}"
            n_turns += 1
            n_un_turns += t.get("answerable") is False
            ck.check_item(tw, t)
            rw = t.get("rewrite")
            if not isinstance(rw, str) or not rw.strip():
                ck.err(tw, "no rewrite")
                continue
            if (j == 0 or kind == "topic-change") and rw != t.get("question"):
                ck.err(tw, "this turn's rewrite must be the question itself")
            if j > 0 and kind in ("pronoun", "ellipsis", "what-if") and rw == t.get("question"):
                ck.err(tw, "a follow-up's rewrite should resolve it (differs from the question)")
            pieces = [x for x in rw.replace("?", ".").split(".") if any(ch.isalnum() for ch in x)]
            if len(pieces) != 1:
                ck.err(tw, f"a rewrite is one question (no '.' or '?' inside, as `eval --conversations` judges): {rw!r}")
            keep = t.get("keep")
            if not isinstance(keep, list) or not keep:
                ck.err(tw, "no keep phrases")
                continue
            rww = words(rw)
            for k in keep:
                if not isinstance(k, str) or k != k.lower():
                    ck.err(tw, f"keep phrase must be a lowercase string: {k!r}")
                    continue
                alts = k.split("|")
                if any(not 1 <= len(a.split()) <= 3 for a in alts):
                    ck.err(tw, f"keep phrase of 1-3 words: {k!r}")
                if not any(contains(rww, words(a)) for a in alts):
                    ck.err(tw, f"keep phrase {k!r} not in rewrite {rw!r}")
    total = collections.Counter(k for _, k in ccounts.elements())
    for k, need in CONV_KINDS.items():
        if total[k] < need:
            ck.err("conversations.jsonl", f"{total[k]} {k} conversations (need {need})")
    if len(conv) < MIN_CONVERSATIONS:
        ck.err("conversations.jsonl", f"{len(conv)} conversations (need {MIN_CONVERSATIONS})")

    # ---- report
    def table(title: str, cnt: collections.Counter, kinds) -> None:
        print(title)
        for k in kinds:
            print(f"  {k:<13} dev {cnt[('dev', k)]:>3}  test {cnt[('test', k)]:>3}")
        print(f"  {'total':<13} dev {sum(v for (s, _), v in cnt.items() if s == 'dev'):>3}"
              f"  test {sum(v for (s, _), v in cnt.items() if s == 'test'):>3}")

    table(f"sample-corpus.jsonl: {len(qa)} questions ({n_ans} answerable, {n_un} unanswerable), "
          f"{len(qa_files)}/{len(all_docs)} documents", counts, ["fact", "yes-no", "how", "why", "unanswerable", "near-miss"])
    table(f"conversations.jsonl: {len(conv)} conversations, {n_turns} turns ({n_un_turns} unanswerable)",
          ccounts, list(CONV_KINDS))
    if ck.errors:
        print(f"\n{len(ck.errors)} problem(s):")
        for e in ck.errors:
            print("  " + e)
        return 1
    print("\nall checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
