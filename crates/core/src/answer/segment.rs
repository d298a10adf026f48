//! A passage cut into units, the one segmentation that the focus, the evidence, the quotes and
//! the support check all read: sentences (UAX#29, with the chunk splitter's fix-ups), list items
//! and table rows (each row with its table's header row, which gives the row's cells their
//! meaning). Heading lines are dropped: a passage's section is in its source label already, and
//! a small model answers with a heading it sees ("[1] 3 Passwords").
//!
//! Imports `chunk::sentence` only.
//!
//! ```
//! use ragbox_core::answer::segment::units;
//! let text = "## 3 Passwords\n\n3.1 Every password must be at least 14 characters long. It is never\nshared.\n\n\
//!             | Record | Kept |\n|---|---|\n| Receipts | 7 years |\n\n- Lock your screen.\n- Report a loss.";
//! let got: Vec<String> = units(text).into_iter().map(|u| u.shown()).collect();
//! assert_eq!(got, [
//!     "3.1 Every password must be at least 14 characters long.",
//!     "It is never shared.",
//!     "| Record | Kept | | Receipts | 7 years |",
//!     "- Lock your screen.",
//!     "- Report a loss.",
//! ]);
//! ```

use crate::chunk::sentence::sentences;

/// One unit of a passage: a sentence, a list item or a table row.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Unit {
    /// The unit's text, whitespace collapsed.
    pub text: String,
    /// A table row's header row (empty for other units).
    pub header: String,
    /// The block of the passage it stands in (blocks are separated by blank lines): a list's
    /// items, a table's rows and a paragraph's sentences share one.
    pub block: usize,
    /// A list item (or a sentence of one).
    pub item: bool,
}

impl Unit {
    /// A sentence that asks (ends with a question mark, closing quotes and brackets aside).
    pub fn is_question(&self) -> bool {
        self.text.trim_end_matches(['"', '\'', '”', '’', ')', ']', '*', '_', ' ']).ends_with('?')
    }

    /// The unit as the prompt shows it and the embedder reads it: a table row after its header.
    pub fn shown(&self) -> String {
        if self.header.is_empty() {
            self.text.clone()
        } else {
            format!("{} {}", self.header, self.text)
        }
    }
}

fn collapse(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// A markdown heading (`# …`) or a setext underline (`===`, `---`, `~~~`).
fn is_underline(line: &str) -> bool {
    line.len() >= 3 && line.chars().all(|c| matches!(c, '=' | '-' | '~'))
}

/// A list item's opening: `-`, `*`, `+`, `1.` or `1)` and a space.
fn opens_item(line: &str) -> bool {
    let digits = line.chars().take_while(char::is_ascii_digit).count();
    let rest = &line[digits..];
    let marker = if digits > 0 { rest.starts_with(". ") || rest.starts_with(") ") } else { false };
    marker || line.starts_with("- ") || line.starts_with("* ") || line.starts_with("+ ")
}

/// The units of `text`, in order. Heading lines are left out; a passage of nothing but headings
/// has no units.
pub fn units(text: &str) -> Vec<Unit> {
    // Lines without headings, grouped into blocks at blank lines.
    let mut blocks: Vec<Vec<&str>> = vec![Vec::new()];
    for line in text.lines().map(str::trim) {
        if line.starts_with('#') {
            continue;
        }
        if is_underline(line) {
            // A setext heading's title is the line above its underline.
            blocks.last_mut().map(Vec::pop);
            continue;
        }
        if line.is_empty() {
            blocks.push(Vec::new());
        } else {
            blocks.last_mut().expect("one block at least").push(line);
        }
    }
    let mut out = Vec::new();
    for (b, block) in blocks.into_iter().filter(|b| !b.is_empty()).enumerate() {
        if block[0].starts_with('|') {
            let rows: Vec<&str> =
                block.into_iter().filter(|l| !l.chars().all(|c| matches!(c, '|' | '-' | ':' | ' '))).collect();
            let Some((header, body)) = rows.split_first() else { continue };
            if body.is_empty() {
                out.push(Unit { text: collapse(header), block: b, ..Unit::default() });
            }
            out.extend(body.iter().map(|row| Unit { text: collapse(row), header: collapse(header), block: b, item: false }));
            continue;
        }
        let mut items: Vec<String> = Vec::new();
        for line in block {
            match items.last_mut() {
                Some(item) if !opens_item(line) => {
                    item.push(' ');
                    item.push_str(line);
                }
                _ => items.push(line.to_string()),
            }
        }
        for item in items {
            let listed = opens_item(&item);
            out.extend(
                sentences(&item)
                    .into_iter()
                    .map(|r| collapse(&item[r]))
                    .filter(|s| !s.is_empty())
                    .map(|text| Unit { text, block: b, item: listed, ..Unit::default() }),
            );
        }
    }
    out
}
