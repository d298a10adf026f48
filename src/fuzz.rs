//! Parser fuzzing on stable Rust: seeded mutation of real files and generated hostile inputs, run
//! through every parser and the chunkers, checking the properties the write path relies on.
//!
//! May import `types`, `error`, `source` and `chunk`.
//!
//! Each case `i` of a run is a pure function of the run's seed and `i` ([`case`]), so any finding
//! can be regenerated from two numbers. A case picks a target (a parser, by file name: markdown,
//! text, HTML, `.eml`, `.mbox`, PDF, and each code language), then either mutates one of the
//! target's seeds (bit flips, interesting bytes and numbers, format tokens from a dictionary,
//! deletions, duplications of a range (which builds nesting), splices with another seed,
//! truncation) or generates a hostile input (deep nesting, long lines, huge numbers, many parts).
//! [`check_case`] then runs [`source::parse`] (the parser itself, not its guard, so that a panic
//! counts) and one chunker chosen by the case, and checks:
//! - the document: normalised text; blocks in order, not overlapping, non-empty, on character
//!   boundaries inside the text; lines agreeing with spans; heading levels 1-6;
//! - the chunks: ordinals `0..n`; every span on character boundaries inside the text and
//!   non-blank; a child's parent an earlier parent chunk that contains it.
//!
//! [`run`] drives a range of cases, catching panics and timing each case. The driver that
//! survives aborts (a stack overflow kills the process) and hangs lives in
//! `examples/fuzz_parsers.rs`; docs/RELIABILITY.md has the figures and the command.
//!
//! ```
//! use ragbox::fuzz::{run, Corpus, FuzzOptions};
//! let report = run(&Corpus::builtin(), &FuzzOptions { count: 50, ..FuzzOptions::default() }, &mut |_| {}, &mut |_| {});
//! assert_eq!(report.inputs(), 50);
//! assert_eq!(report.failures(), 0);
//! ```

use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::chunk::{
    ChunkOptions, Chunker, CodeChunker, FixedChunker, FixedOptions, SemanticChunker, SemanticOptions, SentenceEmbedder,
    StructuralChunker, WholeChunker, WordCounter,
};
use crate::source::guard::panic_message;
use crate::source::{parser_for, LineIndex};
use crate::types::{BlockKind, ChunkRole, ParsedDocument};

/// One parser target: a label and the file name that routes to it.
#[derive(Debug, Clone, Copy)]
pub struct Target {
    /// Label in reports.
    pub name: &'static str,
    /// File name given to the parser.
    pub file: &'static str,
    /// Relative share of the cases.
    pub weight: u32,
}

/// Every target. PDFs cost a hundred times more per case than the text formats, so they get a
/// smaller share; every target still gets tens of thousands of cases in a long run.
pub const TARGETS: &[Target] = &[
    Target { name: "markdown", file: "fuzz.md", weight: 12 },
    Target { name: "text", file: "fuzz.txt", weight: 10 },
    Target { name: "html", file: "fuzz.html", weight: 12 },
    Target { name: "eml", file: "fuzz.eml", weight: 10 },
    Target { name: "mbox", file: "fuzz.mbox", weight: 6 },
    Target { name: "pdf", file: "fuzz.pdf", weight: 3 },
    Target { name: "rust", file: "fuzz.rs", weight: 6 },
    Target { name: "python", file: "fuzz.py", weight: 6 },
    Target { name: "javascript", file: "fuzz.js", weight: 5 },
    Target { name: "typescript", file: "fuzz.ts", weight: 5 },
    Target { name: "tsx", file: "fuzz.tsx", weight: 3 },
    Target { name: "go", file: "fuzz.go", weight: 5 },
];

/// A small, fast, seedable generator (SplitMix64).
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator from a seed.
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }
    /// The next 64 random bits.
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// A number in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }
    /// True with probability `1/n`.
    pub fn one_in(&mut self, n: usize) -> bool {
        self.below(n) == 0
    }
    /// A size skewed towards small values: up to `max`, each power of two as likely.
    pub fn size(&mut self, max: usize) -> usize {
        let bits = usize::BITS - max.leading_zeros();
        let cap = 1usize << self.below(bits as usize + 1);
        self.below(cap.min(max) + 1)
    }
    /// One element of a non-empty slice.
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

/// Seeds per target.
#[derive(Debug, Clone)]
pub struct Corpus {
    seeds: Vec<Vec<Vec<u8>>>,
}

/// Small seeds of every target, so a run needs no files.
const BUILTIN: &[(&str, &str)] = &[
    ("markdown", "---\ntitle: T\n---\n# Policy\n\nIntro **bold** [^1].\n\n## 4.2 Travel\n\n- a\n- b\n  1. c\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n```rust\nfn x() {}\n```\n\n> quote\n\n**Term**: def\n\n[^1]: note\n"),
    ("text", "POLICY\n\n1. Scope\n\nThis applies to all staff. It is short.\n\n4.2 Travel insurance\n\n- one\n- two\n  continued\n\nTitle\n=====\n\n(i) item\n(ii) item\n"),
    ("html", "<!DOCTYPE html><html><head><title>T</title><style>x{}</style></head><body><nav>n</nav><main><h1>H</h1><p>P <b>b</b><br>c</p><ol start=3><li>a<ul><li>b</li></ul></li></ol><table><caption>c</caption><thead><tr><th>a</th></tr></thead><tr><td>1</td></tr></table><pre class=\"language-rust\">fn x(){}</pre><dl><dt>t</dt><dd>d</dd></dl><blockquote>q</blockquote></main></body></html>"),
    ("eml", "From: A <a@example.com>\r\nTo: b@example.com\r\nSubject: =?UTF-8?B?SGVsbG8=?=\r\nDate: Tue, 5 Mar 2024 10:15:00 +0100\r\nContent-Type: multipart/mixed; boundary=\"X\"\r\n\r\n--X\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Transfer-Encoding: quoted-printable\r\n\r\nHi =E2=82=AC\r\n\r\nOn Mon, B wrote:\r\n> q\r\n--X\r\nContent-Type: text/html\r\n\r\n<p>html <b>part</b></p>\r\n--X\r\nContent-Type: message/rfc822\r\n\r\nFrom: c@example.com\r\nSubject: inner\r\n\r\ninner body\r\n--X--\r\n"),
    ("mbox", "From a@example.com Mon Mar  4 09:00:00 2024\nFrom: a@example.com\nSubject: One\n\nBody one.\n>From escaped\n\nFrom b@example.com Mon Mar  4 10:00:00 2024\nFrom: b@example.com\nSubject: Two\nContent-Type: text/html\n\n<p>two</p>\n"),
    ("pdf", "%PDF-1.4\n1 0 obj << /Type /Catalog /Pages 2 0 R >> endobj\n2 0 obj << /Type /Pages /Kids [3 0 R] /Count 1 >> endobj\n3 0 obj << /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R /Resources << /Font << /F1 5 0 R >> >> >> endobj\n4 0 obj << /Length 44 >>\nstream\nBT /F1 12 Tf 72 720 Td (Hello PDF) Tj ET\nendstream\nendobj\n5 0 obj << /Type /Font /Subtype /Type1 /BaseFont /Helvetica >> endobj\ntrailer << /Root 1 0 R /Size 6 >>\n%%EOF\n"),
    ("rust", "//! Doc\nuse std::fmt;\n/// A thing.\npub struct A { x: u8 }\nimpl A {\n    /// New.\n    pub fn new() -> Self { A { x: 1 } }\n}\nfn main() { let s = \"str\"; }\n"),
    ("python", "\"\"\"Doc.\"\"\"\nimport os\n\nclass A:\n    \"\"\"A.\"\"\"\n    def f(self, x):\n        return x + 1\n\n@decorator\ndef g():\n    pass\n"),
    ("javascript", "// c\nimport x from 'y';\nexport function f(a) { return a; }\nclass K { m() { return `t${1}`; } }\nconst g = (x) => x * 2;\n"),
    ("typescript", "interface I { a: number }\ntype T = I | null;\nexport class C implements I { a = 1; m(): void {} }\nfunction f<T>(x: T): T { return x; }\n"),
    ("tsx", "import React from 'react';\nexport const App = () => <div className=\"a\">{1}</div>;\nfunction B(): JSX.Element { return <span/>; }\n"),
    ("go", "package main\n\nimport \"fmt\"\n\n// T is a type.\ntype T struct{ a int }\n\nfunc (t *T) M() int { return t.a }\n\nfunc main() { fmt.Println(1) }\n"),
];

/// Format tokens the mutator inserts, per target (and a shared list).
fn dictionary(target: &str) -> &'static [&'static str] {
    match target {
        "markdown" => &["# ", "\n## ", "> ", "- ", "1. ", "18446744073709551615. ", "* ", "```", "~~~", "    ", "| a |", "|---|", "**", "__", "[^1]", "[^1]: ", "[a](b)", "<div>", "---\n", "\n===\n", "$$", "\\", "<!--", "-->", "\t", "\u{feff}"],
        "text" => &["\n\n", "1. ", "4.2 ", "1.2.3.4.5.6.7.8.9.10 ", "ARTICLE IV\n", "Section 3 — ", "\n=====\n", "\n-----\n", "- ", "• ", "(iv) ", "a) ", "\x0c", "\r", "\u{a0}"],
        "html" => &["<div>", "</div>", "<ol start=18446744073709551615>", "<ol start=-9223372036854775808>", "<li>", "<ul>", "<table>", "<tr>", "<td>", "<th>", "<thead>", "<caption>", "<pre class=language-x>", "<h1>", "<h7>", "<p>", "<br>", "<b>", "<a href=#>", "<dl>", "<dt>", "<dd>", "<blockquote>", "<main>", "<article>", "<script>", "</script>", "<template>", "<svg>", "<math>", "<!--", "-->", "&amp;", "&#x10FFFF;", "&#0;", "<![CDATA[", "hidden ", "style=display:none ", "aria-hidden=true "],
        "eml" | "mbox" => &["\nFrom a@b Mon Jan  1 00:00:00 2024\n", "From: ", "Subject: ", "=?UTF-8?B?", "=?ISO-8859-1?Q?", "?=", "Content-Type: multipart/mixed; boundary=X\n", "\n--X\n", "\n--X--\n", "Content-Type: message/rfc822\n\n", "Content-Type: text/html\n\n", "Content-Transfer-Encoding: base64\n", "Content-Transfer-Encoding: quoted-printable\n", "=\n", "=E2=82", "charset=", "\r\n\r\n", "> ", "-----Original Message-----\n", "wrote:\n", "Date: ", "Mon, 32 Foo 99999 99:99:99 +9999"],
        "pdf" => &["obj", "endobj", "stream\n", "\nendstream", "<<", ">>", "[", "]", "/Length 999999999", "/Filter /FlateDecode", "/Type /Page", "/Kids [", "/Count 99999999", "xref", "trailer", "startxref", "%%EOF", "/Encrypt", "/ObjStm", "BT", "ET", "Tj", "TJ", "Tf", "(", ")", "<ff>", "-1", "1 0 R", "99999 0 R", "/Font", "/ToUnicode"],
        _ => &["{", "}", "(", ")", "[", "]", "\"", "'", "`", "/*", "*/", "//", "#", "fn ", "def ", "class ", "func ", "function ", "impl ", "=>", "<", ">", "</", "/>", "\n    ", "\t", "${", "r#\"", "\"\"\"", "\\"],
    }
}

const NUMBERS: &[&str] = &["0", "-1", "4294967295", "4294967296", "18446744073709551615", "18446744073709551616", "9223372036854775807", "-9223372036854775808", "1e308", "NaN", "99999999999999999999999999"];

impl Corpus {
    /// The built-in seeds only.
    pub fn builtin() -> Corpus {
        let mut seeds = vec![Vec::new(); TARGETS.len()];
        for (name, text) in BUILTIN {
            if let Some(i) = TARGETS.iter().position(|t| t.name == *name) {
                seeds[i].push(text.as_bytes().to_vec());
            }
        }
        Corpus { seeds }
    }

    /// Adds a file as a seed of the targets its parser serves (a `.eml` also seeds `.mbox` and
    /// the other way round; code seeds every code language).
    pub fn add_file(&mut self, path: &Path, bytes: Vec<u8>) {
        let Some(parser) = parser_for(path) else { return };
        let names: &[&str] = match parser.name() {
            "markdown" => &["markdown"],
            "text" => &["text"],
            "html" => &["html"],
            "email" => &["eml", "mbox"],
            "pdf" => &["pdf"],
            "code" => &["rust", "python", "javascript", "typescript", "tsx", "go"],
            _ => &[],
        };
        for name in names {
            if let Some(i) = TARGETS.iter().position(|t| t.name == *name) {
                self.seeds[i].push(bytes.clone());
            }
        }
    }

    /// Adds every file under `dir` (or `dir` itself when it is a file) that a parser reads.
    pub fn add_path(&mut self, dir: &Path) -> std::io::Result<usize> {
        let mut added = 0;
        for entry in crate::source::walk::walk(dir) {
            if let crate::source::walk::WalkEntry::File { path, .. } = entry {
                if parser_for(&path).is_some() {
                    self.add_file(&path, std::fs::read(&path)?);
                    added += 1;
                }
            }
        }
        Ok(added)
    }

    /// Seeds of target `t`.
    pub fn seeds(&self, t: usize) -> &[Vec<u8>] {
        &self.seeds[t]
    }
}

/// The settings of a run.
#[derive(Debug, Clone)]
pub struct FuzzOptions {
    /// Run seed: with the case number, it determines each input.
    pub seed: u64,
    /// First case number.
    pub start: u64,
    /// Cases to run.
    pub count: u64,
    /// A case slower than this is reported as a finding (`slow`).
    pub slow: Duration,
    /// Largest mutated input (generated hostile inputs may be larger).
    pub max_len: usize,
}

impl Default for FuzzOptions {
    fn default() -> Self {
        FuzzOptions { seed: 16, start: 0, count: 1000, slow: Duration::from_secs(10), max_len: 256 << 10 }
    }
}

/// Case `i` of a run seeded `seed`: its target (an index into [`TARGETS`]) and its input bytes.
pub fn case(corpus: &Corpus, options: &FuzzOptions, i: u64) -> (usize, Vec<u8>) {
    let mut rng = Rng::new(options.seed ^ i.wrapping_mul(0xa076_1d64_78bd_642f));
    let total: u32 = TARGETS.iter().map(|t| t.weight).sum();
    let mut roll = (rng.next() % u64::from(total)) as u32;
    let t = TARGETS.iter().position(|t| {
        if roll < t.weight {
            true
        } else {
            roll -= t.weight;
            false
        }
    });
    let t = t.unwrap_or(0);
    let name = TARGETS[t].name;
    if rng.one_in(8) {
        return (t, hostile(&mut rng, name));
    }
    let seeds = corpus.seeds(t);
    let mut data = if seeds.is_empty() { Vec::new() } else { rng.pick(seeds).clone() };
    let rounds = 1 + rng.size(16);
    for _ in 0..rounds {
        mutate(&mut rng, &mut data, dictionary(name), seeds);
    }
    data.truncate(options.max_len);
    (t, data)
}

/// One mutation of `data`.
fn mutate(rng: &mut Rng, data: &mut Vec<u8>, dict: &[&str], seeds: &[Vec<u8>]) {
    let len = data.len();
    let at = rng.below(len + 1);
    match rng.below(11) {
        0 if len > 0 => {
            let i = rng.below(len);
            data[i] ^= 1 << rng.below(8);
        }
        1 if len > 0 => {
            let i = rng.below(len);
            data[i] = *rng.pick(&[0u8, 0xff, 0x7f, 0x80, b'\n', b'\r', b'<', b'>', b'\\', b'"', 0xc3, 0xe2, 0xf0, b' ']);
        }
        2 => {
            let token = rng.pick(dict).as_bytes().to_vec();
            data.splice(at..at, token);
        }
        3 => {
            let n = rng.pick(NUMBERS).as_bytes().to_vec();
            data.splice(at..at, n);
        }
        4 if len > 0 => {
            let n = rng.size(len - at).max(1).min(len - at);
            data.drain(at..at + n);
        }
        5 if len > 0 => {
            // Repeat a range: builds nesting and long runs.
            let start = rng.below(len);
            let n = rng.size(64.min(len - start)).max(1);
            let piece = data[start..start + n].to_vec();
            let times = 1 + rng.size(2000);
            let mut rep = Vec::with_capacity(piece.len() * times);
            for _ in 0..times {
                rep.extend_from_slice(&piece);
            }
            data.splice(at..at, rep);
        }
        6 if !seeds.is_empty() => {
            let other = rng.pick(seeds);
            let from = rng.below(other.len() + 1);
            let n = rng.size(other.len() - from);
            data.splice(at..at, other[from..from + n].iter().copied());
        }
        7 => {
            let n = rng.size(32);
            let bytes: Vec<u8> = (0..n).map(|_| rng.next() as u8).collect();
            data.splice(at..at, bytes);
        }
        8 => data.truncate(at),
        9 => {
            // A multi-byte character, whole or cut.
            let c = rng.pick(&["é", "€", "𝄞", "\u{200b}", "\u{2028}", "\u{feff}", "\u{fffd}", "中"]).as_bytes();
            let cut = if rng.one_in(3) { rng.below(c.len()) } else { c.len() };
            data.splice(at..at, c[..cut].iter().copied());
        }
        _ => {
            let token = rng.pick(dict).as_bytes().to_vec();
            let times = 1 + rng.size(300);
            for _ in 0..times {
                data.splice(at..at, token.iter().copied());
            }
        }
    }
}

/// A generated hostile input for `target`: deep nesting, long lines, huge numbers, many parts;
/// at most about 1 MB.
pub fn hostile(rng: &mut Rng, target: &str) -> Vec<u8> {
    let depth = 1 + rng.size(20_000);
    let long = 1 + rng.size(200_000);
    let s = match (target, rng.below(4)) {
        ("html", 0) => {
            let tag = *rng.pick(&["div", "span", "ul", "ol", "li", "table", "td", "blockquote", "dl", "dd", "b", "a", "p", "section", "main", "pre"]);
            format!("<html><body>{}deep{}</body></html>", format!("<{tag}>").repeat(depth), format!("</{tag}>").repeat(depth))
        }
        ("html", 1) => format!("<ol start={}><li>a</li><li>b</li></ol><ol start=\"{}\"><li>c</li></ol>", rng.pick(NUMBERS), rng.pick(NUMBERS)),
        ("html", 2) => format!("<p>{}</p>", "x".repeat(long)),
        ("html", _) => "<ul><li>a".repeat(depth),
        ("markdown", 0) => format!("{}deep\n", "> ".repeat(depth)),
        ("markdown", 1) => (0..depth.min(700)).map(|d| format!("{}- item {d}\n", "  ".repeat(d))).collect(),
        ("markdown", 2) => format!("{} item\n{}. next\n", rng.pick(NUMBERS), rng.pick(NUMBERS)),
        ("markdown", _) => format!("{}{}\n", "[".repeat(depth), "*_`".repeat(depth / 3)),
        ("text", 0) => format!("{} Title\n\nBody text.\n", (1..=depth.min(500)).map(|n| n.to_string()).collect::<Vec<_>>().join(".")),
        ("text", 1) => format!("{}\n\nmore\n", "word ".repeat(long / 5 + 1)),
        ("text", 2) => format!("{}. Heading\n\n{}\n", rng.pick(NUMBERS), "- a\n  b\n".repeat(depth)),
        ("text", _) => format!("TITLE\n{}\n\ntext\n", "=".repeat(long)),
        ("eml" | "mbox", 0) => {
            let mut m = String::from("From: a@example.com\nSubject: nested\n");
            for d in 0..depth.min(5000) {
                m.push_str(&format!("Content-Type: multipart/mixed; boundary=b{d}\n\n--b{d}\n"));
            }
            m.push_str("Content-Type: text/plain\n\ninnermost\n");
            m
        }
        ("eml" | "mbox", 1) => {
            let mut m = String::from("From: a@example.com\nSubject: rfc822\n");
            for _ in 0..depth.min(5000) {
                m.push_str("Content-Type: message/rfc822\n\nFrom: b@example.com\nSubject: inner\n");
            }
            m.push_str("\nbody\n");
            m
        }
        ("eml" | "mbox", 2) => {
            let mut m = String::from("From: a@example.com\nSubject: parts\nContent-Type: multipart/mixed; boundary=b\n\n");
            m.push_str(&"--b\nContent-Type: text/plain\n\nx\n".repeat(depth.min(20_000)));
            m.push_str("--b--\n");
            m
        }
        ("eml" | "mbox", _) => format!("From x Mon Jan  1 00:00:00 2024\nFrom: a@example.com\nSubject: {}\n\n{}\n", "=?UTF-8?B?QUFB?=".repeat(depth.min(5000)), "y".repeat(long)),
        ("pdf", 0) => format!("%PDF-1.4\n1 0 obj {}1{} endobj\ntrailer << /Root 1 0 R >>\n%%EOF\n", "[".repeat(depth), "]".repeat(depth)),
        ("pdf", 1) => format!("%PDF-1.4\n1 0 obj {}/A 1{} endobj\ntrailer << /Root 1 0 R >>\n%%EOF\n", "<< /K ".repeat(depth), " >>".repeat(depth)),
        ("pdf", 2) => format!("%PDF-1.4\n1 0 obj << /Type /Catalog /Pages 2 0 R >> endobj\n2 0 obj << /Type /Pages /Kids [2 0 R] /Count {} >> endobj\ntrailer << /Root 1 0 R >>\n%%EOF\n", rng.pick(NUMBERS)),
        ("pdf", _) => {
            let mut p = String::from("%PDF-1.4\n");
            for n in 1..=depth.min(3000) {
                p.push_str(&format!("{n} 0 obj << /Type /Pages /Kids [{} 0 R] /Parent {} 0 R /Count 1 >> endobj\n", n + 1, n.saturating_sub(1).max(1)));
            }
            p.push_str("trailer << /Root 1 0 R >>\n%%EOF\n");
            p
        }
        (_, 0) => format!("fn f() {{ {}1{} }}\n", "(".repeat(depth), ")".repeat(depth)),
        (_, 1) => format!("{}x{}\n", "{".repeat(depth), "}".repeat(depth)),
        (_, 2) => format!("const s = \"{}\n", "a".repeat(long)),
        (_, _) => (0..depth.min(500)).map(|d| format!("{}def f{d}():\n", "    ".repeat(d))).collect(),
    };
    s.into_bytes()
}

/// What a case did, when it did not fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Parsed into this many blocks and chunks.
    Parsed {
        /// Blocks.
        blocks: usize,
        /// Chunks.
        chunks: usize,
    },
    /// Skipped with a reason (not a failure: hostile input is meant to be skipped).
    Skipped,
}

/// A sentence embedder for the semantic chunker that needs no model: bytes hashed into 8 dims.
struct ByteEmbedder;

impl SentenceEmbedder for ByteEmbedder {
    fn embed_sentences(&self, sentences: &[&str]) -> crate::error::Result<Vec<Vec<f32>>> {
        Ok(sentences
            .iter()
            .map(|s| {
                let mut v = vec![0.01f32; 8];
                for (i, b) in s.bytes().enumerate() {
                    v[(b as usize + i) % 8] += 1.0;
                }
                v
            })
            .collect())
    }
}

/// Runs case `i`'s input through its parser and one chunker (chosen by `i`) and checks the
/// invariants. `Err` is an invariant broken; a panic is left to the caller.
pub fn check_case(file: &str, bytes: &[u8], i: u64) -> Result<Outcome, String> {
    let path = Path::new(file);
    let doc = match crate::source::parse(path, bytes, u64::MAX) {
        Ok(doc) => doc,
        Err(_) => return Ok(Outcome::Skipped),
    };
    check_document(&doc)?;
    let mut rng = Rng::new(i ^ 0x5eed);
    let child = 4 + rng.size(300);
    let options = ChunkOptions {
        child_tokens: child,
        max_child_tokens: child + rng.size(200),
        parent_tokens: child + rng.size(2000),
        overlap_tokens: if rng.one_in(3) { rng.size(child) } else { 0 },
    };
    let chunker: Box<dyn Chunker> = match (doc.parser.as_str(), rng.below(6)) {
        ("code", 0..=2) => Box::new(CodeChunker::new(options)),
        (_, 0 | 1) => Box::new(StructuralChunker::new(options)),
        (_, 2) => Box::new(FixedChunker::new(FixedOptions::default(), options)),
        (_, 3) => Box::new(WholeChunker),
        (_, 4) => Box::new(SemanticChunker::new(options, SemanticOptions::default(), Arc::new(ByteEmbedder))),
        _ => Box::new(StructuralChunker::new(options)),
    };
    let chunks = chunker.chunk(&doc, &WordCounter);
    check_chunks(&doc, &chunks).map_err(|e| format!("chunker {}: {e}", chunker.name()))?;
    Ok(Outcome::Parsed { blocks: doc.blocks.len(), chunks: chunks.len() })
}

/// The parser invariants of [`crate::source`], as an error instead of a panic.
pub fn check_document(doc: &ParsedDocument) -> Result<(), String> {
    let fail = |what: String| Err(what);
    if doc.text.contains('\r') || doc.text.contains('\0') || doc.text.starts_with('\u{feff}') {
        return fail("text is not normalised (CR, NUL or BOM)".into());
    }
    if doc.title.contains('\n') {
        return fail(format!("title spans lines: {:?}", doc.title));
    }
    let index = LineIndex::new(&doc.text);
    let mut prev_end = 0;
    for (i, b) in doc.blocks.iter().enumerate() {
        let Some(s) = doc.text.get(b.span.range()) else {
            return fail(format!("block {i} {:?} is outside the text ({} bytes) or inside a character", b.span, doc.text.len()));
        };
        if b.span.start < prev_end {
            return fail(format!("block {i} overlaps the one before or is out of order: {b:?}"));
        }
        if s.trim().is_empty() {
            return fail(format!("block {i} is blank"));
        }
        if s.ends_with(char::is_whitespace) || s.starts_with('\n') {
            return fail(format!("block {i} is not trimmed: {:?}", s.chars().take(40).collect::<String>()));
        }
        if b.lines != index.lines(b.span) {
            return fail(format!("block {i} lines {:?} disagree with its span", b.lines));
        }
        if let BlockKind::Heading { level, title } = &b.kind {
            if !(1..=6).contains(level) || title.is_empty() {
                return fail(format!("block {i}: heading level {level}, title {title:?}"));
            }
        }
        prev_end = b.span.end;
    }
    Ok(())
}

/// The chunk invariants: ordinals `0..n`, spans on character boundaries inside the text and not
/// blank, a child's parent an earlier parent that contains it.
pub fn check_chunks(doc: &ParsedDocument, chunks: &[crate::types::Chunk]) -> Result<(), String> {
    for (i, c) in chunks.iter().enumerate() {
        if c.ordinal as usize != i {
            return Err(format!("chunk {i} has ordinal {}", c.ordinal));
        }
        let Some(t) = doc.text.get(c.span.range()) else {
            return Err(format!("chunk {i} span {:?} is outside the text ({} bytes) or inside a character", c.span, doc.text.len()));
        };
        if t.trim().is_empty() {
            return Err(format!("chunk {i} is blank"));
        }
        if let (ChunkRole::Child, Some(p)) = (c.role, c.parent) {
            let Some(parent) = chunks.get(p as usize) else {
                return Err(format!("chunk {i} names parent {p}, which does not exist"));
            };
            if parent.role != ChunkRole::Parent || p as usize >= i {
                return Err(format!("chunk {i}'s parent {p} is not an earlier parent"));
            }
            if parent.span.start > c.span.start || c.span.end > parent.span.end {
                return Err(format!("chunk {i} {:?} lies outside its parent {:?}", c.span, parent.span));
            }
        }
    }
    Ok(())
}

/// What went wrong on one case.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum FindingKind {
    /// A panic escaped the parser or chunker.
    Panic,
    /// An invariant broke.
    Invariant,
    /// The case took longer than [`FuzzOptions::slow`].
    Slow,
    /// The process died on this case (a stack overflow, an abort); found by the driver.
    Abort,
    /// The case never finished; found by the driver's watchdog.
    Hang,
}

/// A case that failed, with what is needed to reproduce it.
#[derive(Debug, Clone)]
pub struct Finding {
    /// Case number.
    pub index: u64,
    /// Target label.
    pub target: &'static str,
    /// What happened.
    pub kind: FindingKind,
    /// Message.
    pub detail: String,
    /// The input.
    pub input: Vec<u8>,
}

/// Counts of one target.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct TargetStats {
    /// Cases run.
    pub inputs: u64,
    /// Parsed and chunked.
    pub parsed: u64,
    /// Skipped with a reason.
    pub skipped: u64,
    /// Chunks checked.
    pub chunks: u64,
    /// Panics that escaped.
    pub panics: u64,
    /// Invariants broken.
    pub invariants: u64,
    /// Slow cases.
    pub slow: u64,
    /// Process deaths (driver).
    pub aborts: u64,
    /// Hangs (driver).
    pub hangs: u64,
    /// Slowest case, ms.
    pub max_ms: u64,
    /// Total time, ms.
    pub total_ms: u64,
}

impl TargetStats {
    /// Adds `other` in.
    pub fn add(&mut self, other: &TargetStats) {
        self.inputs += other.inputs;
        self.parsed += other.parsed;
        self.skipped += other.skipped;
        self.chunks += other.chunks;
        self.panics += other.panics;
        self.invariants += other.invariants;
        self.slow += other.slow;
        self.aborts += other.aborts;
        self.hangs += other.hangs;
        self.max_ms = self.max_ms.max(other.max_ms);
        self.total_ms += other.total_ms;
    }
}

/// Counts of a run, per target.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct FuzzReport {
    /// Per target label.
    pub targets: BTreeMap<String, TargetStats>,
}

impl FuzzReport {
    /// Cases run.
    pub fn inputs(&self) -> u64 {
        self.targets.values().map(|t| t.inputs).sum()
    }
    /// Panics, invariant failures, aborts and hangs (slow cases are not failures).
    pub fn failures(&self) -> u64 {
        self.targets.values().map(|t| t.panics + t.invariants + t.aborts + t.hangs).sum()
    }
    /// Adds `other` in.
    pub fn add(&mut self, other: &FuzzReport) {
        for (k, v) in &other.targets {
            self.targets.entry(k.clone()).or_default().add(v);
        }
    }
}

/// Runs cases `options.start..options.start + options.count`, calling `progress` with each case
/// number before it runs and `on_finding` for each finding. Call it on a thread with the stack of
/// a guarded parse ([`PARSE_STACK_BYTES`](crate::source::guard::PARSE_STACK_BYTES)), as
/// [`run_on_parse_stack`] does, so that stack depth is what it is in production.
pub fn run(
    corpus: &Corpus,
    options: &FuzzOptions,
    progress: &mut dyn FnMut(u64),
    on_finding: &mut dyn FnMut(&Finding),
) -> FuzzReport {
    let mut report = FuzzReport::default();
    for i in options.start..options.start.saturating_add(options.count) {
        progress(i);
        let (t, input) = case(corpus, options, i);
        let target = TARGETS[t];
        let started = Instant::now();
        let result = catch_unwind(AssertUnwindSafe(|| check_case(target.file, &input, i)));
        let elapsed = started.elapsed();
        let stats = report.targets.entry(target.name.to_string()).or_default();
        stats.inputs += 1;
        let ms = elapsed.as_millis() as u64;
        stats.max_ms = stats.max_ms.max(ms);
        stats.total_ms += ms;
        let finding = |kind, detail: String| Finding { index: i, target: target.name, kind, detail, input: input.clone() };
        match result {
            Ok(Ok(Outcome::Parsed { chunks, .. })) => {
                stats.parsed += 1;
                stats.chunks += chunks as u64;
            }
            Ok(Ok(Outcome::Skipped)) => stats.skipped += 1,
            Ok(Err(detail)) => {
                stats.invariants += 1;
                on_finding(&finding(FindingKind::Invariant, detail));
            }
            Err(panic) => {
                stats.panics += 1;
                on_finding(&finding(FindingKind::Panic, panic_message(panic.as_ref())));
            }
        }
        if elapsed > options.slow {
            stats.slow += 1;
            on_finding(&finding(FindingKind::Slow, format!("took {elapsed:?}")));
        }
    }
    report
}

/// [`run`] on a thread with the stack a guarded parse gets.
pub fn run_on_parse_stack(corpus: Corpus, options: FuzzOptions) -> (FuzzReport, Vec<Finding>) {
    std::thread::Builder::new()
        .name("ragbox-fuzz".into())
        .stack_size(crate::source::guard::PARSE_STACK_BYTES)
        .spawn(move || {
            let mut findings = Vec::new();
            let report = run(&corpus, &options, &mut |_| {}, &mut |f| findings.push(f.clone()));
            (report, findings)
        })
        .expect("a thread starts")
        .join()
        .unwrap_or_else(|p| std::panic::resume_unwind(p))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn corpus() -> Corpus {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut c = Corpus::builtin();
        c.add_path(&root.join("tests/data/corpus")).unwrap();
        c.add_path(&root.join("tests/fixtures/source/lppl.pdf")).unwrap();
        c
    }

    #[test]
    fn cases_are_reproducible() {
        let c = Corpus::builtin();
        let o = FuzzOptions::default();
        for i in [0, 1, 77, 123_456] {
            assert_eq!(case(&c, &o, i), case(&c, &o, i));
        }
        let targets: std::collections::BTreeSet<usize> = (0..500).map(|i| case(&c, &o, i).0).collect();
        assert_eq!(targets.len(), TARGETS.len(), "every target is drawn");
    }

    /// The short run of the suite: 1,500 cases over the sample corpus, seconds.
    #[test]
    fn short_run_finds_nothing() {
        let options = FuzzOptions { seed: 0x16, count: 1500, slow: Duration::from_secs(20), ..FuzzOptions::default() };
        let (report, findings) = run_on_parse_stack(corpus(), options);
        let findings: Vec<String> =
            findings.iter().map(|f| format!("{:?} case {} ({}): {}", f.kind, f.index, f.target, f.detail)).collect();
        assert!(findings.is_empty(), "{findings:#?}");
        assert_eq!(report.inputs(), 1500);
        let parsed: u64 = report.targets.values().map(|t| t.parsed).sum();
        assert!(parsed > 150, "most mutated inputs still parse: {report:?}");
    }

    /// Every input a fuzz run ever broke a parser with is kept in tests/fixtures/fuzz/ and checked.
    #[test]
    fn r16_past_findings_stay_fixed() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/fuzz");
        let mut n = 0;
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if parser_for(&path).is_none() || path.ends_with("README.md") {
                continue;
            }
            let bytes = std::fs::read(&path).unwrap();
            let name = format!("fuzz.{}", path.extension().unwrap().to_string_lossy());
            let checked = std::thread::Builder::new()
                .stack_size(crate::source::guard::PARSE_STACK_BYTES)
                .spawn(move || (0..6).map(|i| check_case(&name, &bytes, i).map(|_| ())).collect::<Result<Vec<()>, String>>())
                .unwrap()
                .join();
            assert!(matches!(checked, Ok(Ok(_))), "{path:?}: {checked:?}");
            n += 1;
        }
        assert!(n >= 2, "the regression inputs are there");
    }
}
