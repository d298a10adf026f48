//! The common shape of word-processing and slide formats (Word, OpenDocument, PowerPoint, RTF):
//! their walkers collect structural [`Item`]s, and [`Composer`] writes them out as the normalised
//! text and its blocks: headings, paragraphs, lists (consecutive items one List block, `- item` /
//! `1. item`, nested ones indented), tables ([`table`](super::table)), and the notes a document
//! keeps beside its body (footnotes, comments, speaker notes) as their own sections at the end.
//!
//! May import `types` and `error` only (through `source`).

use super::table::{push_table, RowStyle};
use super::{one_line, TextBuilder};
use crate::types::BlockKind;

/// One structural unit found by a format's walker.
#[derive(Debug, Clone, PartialEq)]
pub enum Item {
    /// A heading, level 1 (top) and down; levels past 6 are written as 6.
    Heading(u8, String),
    /// Running text.
    Paragraph(String),
    /// One list entry: nesting depth (0 is the top), ordered or bulleted, text.
    ListEntry(usize, bool, String),
    /// A table: rows of cells, the first `usize` rows the header.
    Table(Vec<Vec<String>>, usize),
}

/// Writes items as text and blocks.
#[derive(Debug, Default)]
pub struct Composer {
    /// The text and blocks so far.
    pub out: TextBuilder,
    /// Entries of the list being gathered, written as one block when something else comes.
    list: Vec<(usize, bool, String)>,
    /// Page (slide) number given to the blocks written next.
    pub page: Option<u32>,
}

impl Composer {
    /// Writes one item (a list entry waits for the rest of its list).
    pub fn push(&mut self, item: Item) {
        if !matches!(item, Item::ListEntry(..)) {
            self.flush_list();
        }
        match item {
            Item::Heading(level, title) => {
                let title = one_line(&title);
                if !title.is_empty() {
                    self.out.block(BlockKind::Heading { level: level.clamp(1, 6), title: title.clone() }, &title, self.page);
                }
            }
            Item::Paragraph(text) => self.out.block(BlockKind::Paragraph, &tidy(&text), self.page),
            Item::ListEntry(depth, ordered, text) => {
                let text = one_line(&text);
                // A numbered list right after a bulleted one (or the other way round) is another list.
                let other_kind = self.list.iter().rev().find(|(d, _, _)| *d == 0).is_some_and(|(_, o, _)| *o != ordered);
                if depth == 0 && other_kind {
                    self.flush_list();
                }
                if !text.is_empty() {
                    self.list.push((depth, ordered, text));
                }
            }
            Item::Table(rows, header) => push_table(&mut self.out, &rows, header, RowStyle::Cells, self.page),
        }
    }

    /// Writes every item in order.
    pub fn extend(&mut self, items: impl IntoIterator<Item = Item>) {
        for item in items {
            self.push(item);
        }
    }

    /// Writes a section of notes at the end (`Footnotes`, `Comments`): a level-1 heading, then
    /// each note as a paragraph. Nothing when there are none.
    pub fn notes(&mut self, heading: &str, notes: &[String]) {
        self.flush_list();
        if notes.iter().all(|n| n.trim().is_empty()) {
            return;
        }
        self.push(Item::Heading(1, heading.to_string()));
        for note in notes {
            self.push(Item::Paragraph(note.clone()));
        }
    }

    /// Writes the list being gathered.
    pub fn flush_list(&mut self) {
        if self.list.is_empty() {
            return;
        }
        let mut counters: Vec<usize> = Vec::new();
        let mut lines = Vec::with_capacity(self.list.len());
        for (depth, ordered, text) in self.list.drain(..) {
            let depth = depth.min(8);
            counters.resize(depth + 1, 0);
            counters[depth] += 1;
            let marker = if ordered { format!("{}.", counters[depth]) } else { "-".to_string() };
            lines.push(format!("{}{marker} {text}", "  ".repeat(depth)));
        }
        self.out.block(BlockKind::List, &lines.join("\n"), self.page);
    }

    /// The text and blocks, the last list written.
    pub fn finish(mut self) -> TextBuilder {
        self.flush_list();
        self.out
    }
}

/// The title of the first heading among `blocks`, for a document whose metadata names none.
pub fn first_heading(blocks: &[super::RawBlock]) -> Option<String> {
    blocks.iter().find_map(|(k, _, _)| match k {
        BlockKind::Heading { title, .. } => Some(title.clone()),
        _ => None,
    })
}

/// Paragraph text as written: each line's whitespace runs collapsed, blank lines dropped (a
/// paragraph is one block; its line breaks stay).
pub fn tidy(text: &str) -> String {
    text.lines().map(one_line).filter(|l| !l.is_empty()).collect::<Vec<_>>().join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn items_become_blocks_lists_gathered() {
        let mut c = Composer::default();
        c.extend([
            Item::Heading(1, "Travel".into()),
            Item::Paragraph("Book  early.\n\n second line".into()),
            Item::ListEntry(0, true, "Ask".into()),
            Item::ListEntry(1, false, "your manager".into()),
            Item::ListEntry(0, true, "Book".into()),
            Item::Heading(9, "Deep".into()),
        ]);
        c.notes("Footnotes", &["[footnote 1] A note.".into()]);
        let out = c.finish();
        let blocks: Vec<(&BlockKind, &str)> = out.blocks.iter().map(|(k, s, _)| (k, &out.text[s.range()])).collect();
        assert_eq!(blocks[1], (&BlockKind::Paragraph, "Book early.\nsecond line"));
        assert_eq!(blocks[2], (&BlockKind::List, "1. Ask\n  - your manager\n2. Book"));
        assert_eq!(blocks[3].0, &BlockKind::Heading { level: 6, title: "Deep".into() });
        assert_eq!(blocks[4].0, &BlockKind::Heading { level: 1, title: "Footnotes".into() });
        assert_eq!(blocks[5].1, "[footnote 1] A note.");
    }
}
