//! Tables of generated-text formats (Word, OpenDocument, slides, spreadsheets) written as Table
//! blocks that stay readable when cut: a long table becomes several blocks, each small enough for
//! one chunk and each starting with the header row again (or, for spreadsheets, each row labelled
//! with its column names, `Column: value | Column: value`).
//!
//! May import `types` and `error` only (through `source`).

use super::TextBuilder;
use crate::types::BlockKind;

/// Characters a table block holds before the next row starts a new block (a chunk of the
/// embedder's window is about 900 characters of prose; table text is denser in tokens).
pub const BLOCK_CHARS: usize = 700;

/// How rows are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowStyle {
    /// Cells joined by ` | `, the header rows first in every block (document tables).
    Cells,
    /// Each cell after its column's header, `Header: value`, empty cells left out (spreadsheets:
    /// a block of rows from the middle of a sheet still says what each value is).
    Labelled,
}

/// Writes `rows` (the first `header_rows` of them the header) as Table blocks of about
/// [`BLOCK_CHARS`] each. Cells are collapsed to one line; rows whose cells are all empty are left
/// out; trailing empty cells are dropped.
pub fn push_table(out: &mut TextBuilder, rows: &[Vec<String>], header_rows: usize, style: RowStyle, page: Option<u32>) {
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let mut cells: Vec<String> = r.iter().map(|c| super::one_line(c)).collect();
            while cells.last().is_some_and(String::is_empty) {
                cells.pop();
            }
            cells
        })
        .collect();
    let header_rows = header_rows.min(rows.len());
    let (header, body) = rows.split_at(header_rows);
    let header: Vec<&Vec<String>> = header.iter().filter(|r| !r.is_empty()).collect();
    let labels: Vec<String> = match style {
        RowStyle::Labelled => column_labels(&header),
        RowStyle::Cells => Vec::new(),
    };
    let head_text: String = match style {
        RowStyle::Cells => header.iter().map(|r| r.join(" | ")).collect::<Vec<_>>().join("\n"),
        RowStyle::Labelled => String::new(),
    };
    let mut block = String::new();
    let mut has_body = false;
    for row in body.iter().filter(|r| !r.is_empty()) {
        let line = match style {
            RowStyle::Cells => row.join(" | "),
            RowStyle::Labelled => labelled(row, &labels),
        };
        if has_body && block.len() + line.len() > BLOCK_CHARS {
            out.block(BlockKind::Table, &block, page);
            block.clear();
        }
        if block.is_empty() && !head_text.is_empty() {
            block.push_str(&head_text);
        }
        if !block.is_empty() {
            block.push('\n');
        }
        block.push_str(&line);
        has_body = true;
    }
    if !has_body && !head_text.is_empty() {
        block.push_str(&head_text);
    }
    if !block.trim().is_empty() {
        out.block(BlockKind::Table, &block, page);
    }
}

/// One label per column: the header cells of a column joined by ` / ` (several header rows), or
/// empty where the header has none.
fn column_labels(header: &[&Vec<String>]) -> Vec<String> {
    let width = header.iter().map(|r| r.len()).max().unwrap_or(0);
    (0..width)
        .map(|c| {
            let parts: Vec<&str> =
                header.iter().filter_map(|r| r.get(c)).map(String::as_str).filter(|s| !s.is_empty()).collect();
            parts.join(" / ")
        })
        .collect()
}

/// A row as `Label: value | Label: value`; cells without a label stand alone; empty cells are
/// left out.
fn labelled(row: &[String], labels: &[String]) -> String {
    row.iter()
        .enumerate()
        .filter(|(_, v)| !v.is_empty())
        .map(|(i, v)| match labels.get(i).filter(|l| !l.is_empty()) {
            Some(label) => format!("{label}: {v}"),
            None => v.clone(),
        })
        .collect::<Vec<_>>()
        .join(" | ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(cells: &[&[&str]]) -> Vec<Vec<String>> {
        cells.iter().map(|r| r.iter().map(|c| c.to_string()).collect()).collect()
    }

    fn blocks(out: &TextBuilder) -> Vec<&str> {
        out.blocks.iter().map(|(_, span, _)| &out.text[span.range()]).collect()
    }

    #[test]
    fn a_small_table_is_one_block_header_first() {
        let mut out = TextBuilder::default();
        let t = rows(&[&["City", "Cap"], &["London", "GBP 210"], &["", ""], &["Paris", "EUR 190", ""]]);
        push_table(&mut out, &t, 1, RowStyle::Cells, Some(2));
        assert_eq!(blocks(&out), vec!["City | Cap\nLondon | GBP 210\nParis | EUR 190"]);
        assert_eq!(out.blocks[0].2, Some(2));
    }

    #[test]
    fn a_long_table_repeats_its_header_in_every_block() {
        let mut out = TextBuilder::default();
        let mut t = rows(&[&["Record", "Kept for"]]);
        for i in 0..200 {
            t.push(vec![format!("record type number {i}"), format!("{i} years")]);
        }
        push_table(&mut out, &t, 1, RowStyle::Cells, None);
        let b = blocks(&out);
        assert!(b.len() > 3);
        for block in &b {
            assert!(block.starts_with("Record | Kept for\n"), "{block}");
            assert!(block.len() <= BLOCK_CHARS + 40);
        }
        let body_rows: usize = b.iter().map(|x| x.lines().count() - 1).sum();
        assert_eq!(body_rows, 200);
    }

    #[test]
    fn labelled_rows_name_their_columns() {
        let mut out = TextBuilder::default();
        let t = rows(&[&["City", "Cap", ""], &["London", "210", "note"], &["New York", "", ""]]);
        push_table(&mut out, &t, 1, RowStyle::Labelled, None);
        assert_eq!(blocks(&out), vec!["City: London | Cap: 210 | note\nCity: New York"]);
    }

    #[test]
    fn a_header_alone_is_still_a_table() {
        let mut out = TextBuilder::default();
        push_table(&mut out, &rows(&[&["A", "B"]]), 1, RowStyle::Cells, None);
        assert_eq!(blocks(&out), vec!["A | B"]);
        let mut out = TextBuilder::default();
        push_table(&mut out, &rows(&[&["", ""]]), 1, RowStyle::Cells, None);
        assert!(out.blocks.is_empty());
    }
}
