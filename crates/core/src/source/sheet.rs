//! Spreadsheets: Excel workbooks (`.xlsx`, `.xlsm`) read with calamine, delimited text
//! (`.csv`, `.tsv`) with csv, and how any sheet (OpenDocument's too, from [`odf`](super::odf)) is
//! written ([`push_sheet`]).
//!
//! Each sheet is a section titled by its name. A row of one cell above the table (a caption) is
//! a paragraph; a first row of text cells is the header, and every later row is written with its
//! column names, `Header: value | Header: value`, so a chunk from the middle of a long sheet still
//! says what its values are ([`table`](super::table), blocks of about 700 characters). Values are
//! what the cell holds or, for a formula, its cached result; dates are written as dates
//! (`2024-07-01`, with the time when it has one), numbers without float noise.
//!
//! Bounds: `.xlsx` cells are streamed (never a dense grid, so a sheet that claims 2^20 × 2^14
//! cells costs only the cells it has), and at most [`MAX_CELLS`] are kept over all sheets. Legacy
//! `.xls` is read in a child process ([`xls`](super::xls)), written here. A CSV that is not UTF-8 is read as
//! Windows-1252.
//!
//! Title: the file stem. Metadata: `sheets`, and `truncated` when the cell budget ran out.

use std::collections::BTreeMap;
use std::io::Cursor;
use std::path::Path;

use calamine::{Data, ExcelDateTime, Reader, Xlsx, XlsxError};

use super::compose::tidy;
use super::package::{self, Package};
use super::table::{push_table, RowStyle};
use super::{finish, looks_binary, normalise, title_from_path, InputKind, Parser, SkipReason, TextBuilder};
use crate::types::{BlockKind, ParsedDocument};

/// Cells one workbook may have read (all sheets; positions of a row's empty cells count).
pub const MAX_CELLS: usize = 4_000_000;

/// Which spreadsheet format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SheetFormat {
    /// Office Open XML workbook (`.xlsx`, `.xlsm`).
    Xlsx,
    /// Comma-separated values.
    Csv,
    /// Tab-separated values.
    Tsv,
}

/// The spreadsheet parser of one format.
#[derive(Debug, Clone, Copy)]
pub struct SheetParser(pub SheetFormat);

impl Parser for SheetParser {
    fn name(&self) -> &'static str {
        match self.0 {
            SheetFormat::Xlsx => "xlsx",
            SheetFormat::Csv => "csv",
            SheetFormat::Tsv => "tsv",
        }
    }

    fn input(&self) -> InputKind {
        InputKind::Binary
    }

    fn parse(&self, path: &Path, bytes: &[u8]) -> Result<ParsedDocument, SkipReason> {
        let mut out = TextBuilder::default();
        let mut budget = MAX_CELLS;
        let sheets = match self.0 {
            SheetFormat::Xlsx => calamine_guarded(|| read_xlsx(bytes, &mut out, &mut budget))?,
            SheetFormat::Csv | SheetFormat::Tsv => {
                let delimiter = if self.0 == SheetFormat::Csv { b',' } else { b'\t' };
                let rows = delimited(bytes, delimiter, &mut budget)?;
                push_rows(&mut out, rows);
                1
            }
        };
        let mut metadata = BTreeMap::new();
        metadata.insert("sheets".to_string(), sheets.to_string());
        if budget == 0 {
            metadata.insert("truncated".to_string(), format!("read the first {MAX_CELLS} cells"));
        }
        Ok(finish(self.name(), title_from_path(path), out.text, out.blocks, metadata))
    }
}

/// Runs a calamine read with its panics caught: malformed workbooks make calamine 0.38 index out
/// of bounds and overflow (found by fuzzing); such a file is `Corrupt`, not a crash.
fn calamine_guarded(read: impl FnOnce() -> Result<usize, SkipReason>) -> Result<usize, SkipReason> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(read)).unwrap_or_else(|panic| {
        let what = super::guard::panic_message(panic.as_ref());
        Err(SkipReason::corrupt(format!("the spreadsheet reader failed: {what}")))
    })
}

/// Writes one sheet: a heading with its name, then its rows ([`push_rows`]). Nothing for a sheet
/// with no value.
pub(crate) fn push_sheet(out: &mut TextBuilder, name: &str, rows: Vec<Vec<String>>) {
    if rows.iter().all(|r| r.iter().all(|c| c.trim().is_empty())) {
        return;
    }
    let name = super::one_line(name);
    let title = if name.is_empty() { "Sheet".to_string() } else { name };
    out.block(BlockKind::Heading { level: 1, title: title.clone() }, &title, None);
    push_rows(out, rows);
}

/// Writes a sheet's rows: one-cell rows above the table as paragraphs (captions), a first row of
/// text as the header, the rest labelled with it; without a header, cells joined by ` | `.
pub(crate) fn push_rows(out: &mut TextBuilder, rows: Vec<Vec<String>>) {
    let filled = |r: &Vec<String>| r.iter().filter(|c| !c.trim().is_empty()).count();
    let rows: Vec<Vec<String>> = rows.into_iter().filter(|r| filled(r) > 0).collect();
    let width = rows.iter().map(|r| filled(r)).max().unwrap_or(0);
    let mut start = 0;
    while width > 1 && start < rows.len() && filled(&rows[start]) == 1 {
        let caption = rows[start].iter().find(|c| !c.trim().is_empty()).cloned().unwrap_or_default();
        out.block(BlockKind::Paragraph, &tidy(&caption), None);
        start += 1;
    }
    let rows = &rows[start..];
    let Some(first) = rows.first() else { return };
    let is_header = rows.len() > 1
        && filled(first) * 2 >= first.len().max(1)
        && first.iter().filter(|c| !c.trim().is_empty()).all(|c| !is_number(c));
    if is_header {
        push_table(out, rows, 1, RowStyle::Labelled, None);
    } else {
        push_table(out, rows, 0, RowStyle::Cells, None);
    }
}

fn is_number(cell: &str) -> bool {
    let c = cell.trim().trim_start_matches(['$', '£', '€']).trim_end_matches('%').replace(',', "");
    c.parse::<f64>().is_ok()
}

/// calamine 0.38 reserves room for as many shared strings as the part's `uniqueCount` declares
/// before it reads one: a 7 KB workbook declaring 10^13 asked for 240 TB, and a failed allocation
/// aborts the process, which no `catch_unwind` stops (found by fuzzing). A count the
/// part's own bytes cannot hold (a string takes at least `<si/>`, 5 bytes) is refused here.
fn check_shared_string_count(package: &mut Package) -> Result<(), SkipReason> {
    for name in package.names().into_iter().filter(|n| n.to_ascii_lowercase().ends_with("sharedstrings.xml")) {
        let Some(part) = package.bytes(&name)? else { continue };
        if let Some(n) = declared_unique_count(&part).filter(|&n| n > part.len() as u64 / 5) {
            return Err(SkipReason::corrupt(format!("{name} declares {n} shared strings in {} bytes", part.len())));
        }
    }
    Ok(())
}

/// The largest `uniqueCount` the part's `sst` start tag could give calamine 0.38: the tag found
/// as calamine finds it (the same quick-xml reader and settings, the first start tag named
/// `sst`), then every `uniqueCount=` in its raw bytes, quoted or not, read as digits. calamine
/// parses the attributes with its own lenient reader, so the scan takes any it could see rather
/// than emulate it (a first version read the tag to its first `>` and missed mutated tags whose
/// attribute values hold one: found by the fuzz run).
fn declared_unique_count(part: &[u8]) -> Option<u64> {
    use quick_xml::events::Event;
    let mut xml = quick_xml::Reader::from_reader(part);
    let config = xml.config_mut();
    config.check_end_names = false;
    config.trim_text(false);
    config.check_comments = false;
    config.expand_empty_elements = true;
    let mut buf = Vec::new();
    let tag = loop {
        buf.clear();
        match xml.read_event_into(&mut buf) {
            Ok(Event::Start(e)) if e.local_name().as_ref() == "sst" => break e.attributes_raw().as_bytes().to_vec(),
            Ok(Event::Eof) | Err(_) => return None,
            Ok(_) => {}
        }
    };
    const KEY: &[u8] = b"uniqueCount";
    (0..tag.len().saturating_sub(KEY.len() - 1))
        .filter(|&at| tag[at..].starts_with(KEY))
        .filter_map(|at| {
            let rest = &tag[at + KEY.len()..];
            let rest = &rest[rest.iter().position(|b| !b.is_ascii_whitespace())?..];
            let rest = rest.strip_prefix(b"=")?;
            let rest = &rest[rest.iter().position(|b| !b.is_ascii_whitespace())?..];
            let digits = rest.strip_prefix(b"\"").or_else(|| rest.strip_prefix(b"'")).unwrap_or(rest);
            let digits = &digits[..digits.iter().position(|b| !b.is_ascii_digit()).unwrap_or(digits.len())];
            // Past u64 counts as the most: calamine's own parse would refuse it, but nothing is lost.
            (!digits.is_empty()).then(|| digits.iter().fold(0u64, |n, d| n.saturating_mul(10).saturating_add(u64::from(d - b'0'))))
        })
        .max()
}

/// Reads every sheet of an `.xlsx` by streaming its cells.
fn read_xlsx(bytes: &[u8], out: &mut TextBuilder, budget: &mut usize) -> Result<usize, SkipReason> {
    // The container checks (encrypted, legacy renamed, not a zip) say more than calamine would,
    // and calamine inflates members without a cap: a zip bomb is refused here, not by it.
    check_shared_string_count(&mut Package::open(bytes, "Excel")?)?;
    let cap = package::MAX_MEMBER_BYTES * 2;
    if package::inflated_bytes(bytes, cap) > cap {
        return Err(SkipReason::OverLimit {
            what: format!("the workbook's members inflate past {} MiB (a zip bomb?)", cap >> 20),
        });
    }
    let mut book: Xlsx<_> = Xlsx::new(Cursor::new(bytes)).map_err(xlsx_reason)?;
    let names = book.sheet_names();
    let mut sheets = 0;
    for name in &names {
        let mut cells = SparseCells::default();
        {
            let mut reader = match book.worksheet_cells_reader(name) {
                Ok(r) => r,
                Err(XlsxError::WorksheetNotFound(_)) => continue, // a chart sheet
                Err(e) => return Err(xlsx_reason(e)),
            };
            while let Some(cell) = reader.next_cell().map_err(xlsx_reason)? {
                let (row, col) = cell.get_position();
                if cells.push(row, col, cell.get_value().clone().into()) >= *budget {
                    break;
                }
            }
        }
        let rows = cells.into_rows(budget);
        push_sheet(out, name, rows);
        sheets += 1;
        if *budget == 0 {
            break;
        }
    }
    Ok(sheets)
}

/// A sheet's cells that hold a value, by row, as a reader meets them (`.xlsx` streamed, `.xls`
/// from calamine's grid): never a grid of the sheet's empty positions.
pub(super) struct SparseCells {
    rows: BTreeMap<u32, Vec<(u32, String)>>,
    min_col: u32,
    count: usize,
}

impl Default for SparseCells {
    fn default() -> Self {
        SparseCells { rows: BTreeMap::new(), min_col: u32::MAX, count: 0 }
    }
}

impl SparseCells {
    /// Keeps the cell at (`row`, `col`) if it holds a value; the number of cells kept so far.
    pub(super) fn push(&mut self, row: u32, col: u32, value: Data) -> usize {
        let value = cell_text(value);
        if !value.is_empty() {
            self.min_col = self.min_col.min(col);
            self.rows.entry(row).or_default().push((col, value));
            self.count += 1;
        }
        self.count
    }

    /// The rows ([`dense_rows`]) within `budget` positions.
    pub(super) fn into_rows(self, budget: &mut usize) -> Vec<Vec<String>> {
        dense_rows(self.rows, self.min_col, budget)
    }
}

/// Rows from sparse cells: each row as wide as its last value (from the sheet's first column),
/// within `budget` positions.
fn dense_rows(cells: BTreeMap<u32, Vec<(u32, String)>>, min_col: u32, budget: &mut usize) -> Vec<Vec<String>> {
    let mut rows = Vec::with_capacity(cells.len());
    for (_, mut row) in cells {
        row.sort_by_key(|(c, _)| *c);
        let width = row.last().map_or(0, |(c, _)| (c - min_col) as usize + 1);
        if width > *budget {
            *budget = 0;
            break;
        }
        *budget -= width;
        let mut dense = vec![String::new(); width];
        for (c, v) in row {
            dense[(c - min_col) as usize] = v;
        }
        rows.push(dense);
    }
    rows
}

fn xlsx_reason(e: XlsxError) -> SkipReason {
    match e {
        XlsxError::Password => SkipReason::Encrypted,
        XlsxError::Zip(zip::result::ZipError::UnsupportedArchive(msg))
            if msg == zip::result::ZipError::PASSWORD_REQUIRED =>
        {
            SkipReason::Encrypted
        }
        e => SkipReason::corrupt(format!("Excel workbook: {e}")),
    }
}

/// A cell's text (`.xlsx` streamed cells converted from `DataRef`, `.xls` cells as read).
fn cell_text(d: Data) -> String {
    match d {
        Data::Int(i) => i.to_string(),
        Data::Float(f) => number(f),
        Data::String(s) | Data::DateTimeIso(s) | Data::DurationIso(s) => s,
        Data::Bool(b) => if b { "TRUE" } else { "FALSE" }.to_string(),
        Data::DateTime(dt) => date_time(&dt),
        Data::Error(e) => e.to_string(),
        Data::Empty => String::new(),
    }
}

/// A number as a person reads it: whole numbers without `.0`, others to at most 10 significant
/// decimals (no `0.30000000000000004`).
fn number(f: f64) -> String {
    if !f.is_finite() {
        return f.to_string();
    }
    if f.fract() == 0.0 && f.abs() < 1e15 {
        return format!("{}", f as i64);
    }
    let s = format!("{f:.10}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// A date (`2024-07-01`), a date and time (`2024-07-01 09:30`), or a duration (`1:30:00`).
fn date_time(dt: &ExcelDateTime) -> String {
    if dt.is_duration() {
        let secs = (dt.as_f64() * 86_400.0).round() as i64;
        return format!("{}:{:02}:{:02}", secs / 3600, (secs / 60) % 60, secs % 60);
    }
    let v = dt.as_f64();
    if !(0.0..=2_958_465.0).contains(&v) {
        return number(v);
    }
    let (y, m, d, h, min, s, _) = dt.to_ymd_hms_milli();
    match (h, min, s) {
        (0, 0, 0) => format!("{y:04}-{m:02}-{d:02}"),
        _ if v < 1.0 => format!("{h:02}:{min:02}"),
        _ => format!("{y:04}-{m:02}-{d:02} {h:02}:{min:02}"),
    }
}

/// The rows of delimited text: UTF-8 (a byte-order mark dropped) or, failing that,
/// Windows-1252; ragged rows allowed; within `budget` cells.
fn delimited(bytes: &[u8], delimiter: u8, budget: &mut usize) -> Result<Vec<Vec<String>>, SkipReason> {
    if looks_binary(bytes) {
        return Err(SkipReason::Binary);
    }
    let text = match std::str::from_utf8(bytes) {
        Ok(t) => normalise(t),
        Err(_) => normalise(&encoding_rs::WINDOWS_1252.decode(bytes).0),
    };
    // Byte-order marks past the first (files joined with `cat`) are not text.
    let text = text.replace('\u{feff}', "");
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .delimiter(delimiter)
        .from_reader(text.as_bytes());
    let mut rows = Vec::new();
    for record in reader.records() {
        let record = record.map_err(|e| SkipReason::corrupt(format!("delimited text: {e}")))?;
        if record.len() > *budget {
            *budget = 0;
            break;
        }
        *budget -= record.len().max(1);
        rows.push(record.iter().map(str::to_string).collect());
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::testutil::fixture;

    #[test]
    fn the_declared_shared_string_count_is_read_as_calamine_reads_it() {
        let count = |xml: &str| declared_unique_count(xml.as_bytes());
        assert_eq!(count(r#"<?xml version="1.0"?><sst xmlns="x" count="3" uniqueCount="2"><si><t>a</t></si></sst>"#), Some(2));
        assert_eq!(count("<x:sst uniqueCount = '10000000000000'>"), Some(10_000_000_000_000));
        assert_eq!(count(r#"<sst count="3">"#), None);
        assert_eq!(count(r#"<sstx uniqueCount="9">"#), None);
        assert_eq!(count(r#"<sst uniqueCount="-1">"#), None);
        // Mutated tags the fuzz run made: a `>` inside a value, a broken attribute before it.
        assert_eq!(count(r#"<sst xmlns="a>b" count/f="11" uniqueCount="10000000000000"><si/></sst>"#), Some(10_000_000_000_000));
        assert_eq!(count(r#"<sst count="1" uniqueCount=99 >"#), Some(99));
    }

    fn texts(out: &TextBuilder) -> Vec<&str> {
        out.blocks.iter().map(|(_, s, _)| &out.text[s.range()]).collect()
    }

    #[test]
    fn a_sheet_with_a_caption_and_a_header_labels_its_rows() {
        let mut out = TextBuilder::default();
        let rows = vec![
            vec!["Hotel caps 2024".to_string(), String::new()],
            vec!["City".into(), "Nightly cap".into()],
            vec!["London".into(), "GBP 210".into()],
        ];
        push_sheet(&mut out, "Caps", rows);
        assert_eq!(texts(&out), vec!["Caps", "Hotel caps 2024", "City: London | Nightly cap: GBP 210"]);
    }

    #[test]
    fn numbers_in_the_first_row_mean_no_header() {
        let mut out = TextBuilder::default();
        push_rows(&mut out, vec![vec!["1".into(), "2".into()], vec!["3".into(), "4".into()]]);
        assert_eq!(texts(&out), vec!["1 | 2\n3 | 4"]);
    }

    #[test]
    fn numbers_and_dates_read_as_a_person_reads_them() {
        assert_eq!(number(210.0), "210");
        assert_eq!(number(0.1 + 0.2), "0.3");
        assert_eq!(number(-2.5), "-2.5");
        let date = ExcelDateTime::new(45474.0, calamine::ExcelDateTimeType::DateTime, false);
        assert_eq!(date_time(&date), "2024-07-01");
        let with_time = ExcelDateTime::new(45474.5, calamine::ExcelDateTimeType::DateTime, false);
        assert_eq!(date_time(&with_time), "2024-07-01 12:00");
    }

    #[test]
    fn csv_reads_ragged_rows_and_windows_1252() {
        let mut budget = 100;
        let rows = delimited(b"City,Cap\nLondon,\xa3210\nParis\n", b',', &mut budget).unwrap();
        assert_eq!(rows, vec![vec!["City", "Cap"], vec!["London", "£210"], vec!["Paris"]]);
        let mut budget = 3;
        let rows = delimited(b"a,b\nc,d\ne,f\n", b',', &mut budget).unwrap();
        assert_eq!(rows.len(), 1);
        assert_eq!(budget, 0);
    }

    #[test]
    fn sparse_cells_become_rows_within_the_budget() {
        let mut cells = BTreeMap::new();
        cells.insert(0, vec![(2, "a".to_string())]);
        cells.insert(1_000_000, vec![(16_383, "far".to_string())]);
        let mut budget = 100;
        let rows = dense_rows(cells, 2, &mut budget);
        assert_eq!(rows, vec![vec!["a".to_string()]]);
        assert_eq!(budget, 0);
    }

    #[test]
    fn xlsx_csv_and_tsv_give_the_same_rows() {
        let want = "Depot: Rotterdam | Week starting: 2024-05-06 | Parcels: 41250 | Fuel (litres): 5120.5";
        let total = "Depot: Total | Parcels: 75380 | Fuel (litres): 9311.5";
        for (file, format) in [
            ("sheet.xlsx", SheetFormat::Xlsx),
            ("sheet.csv", SheetFormat::Csv),
            ("sheet.tsv", SheetFormat::Tsv),
        ] {
            let doc = SheetParser(format).parse(Path::new(file), &fixture(&format!("office/{file}"))).unwrap();
            crate::source::testutil::check_document(&doc);
            assert!(doc.text.contains(want), "{file}: {}", doc.text);
            assert!(doc.text.contains(total), "{file}: {}", doc.text);
            if format == SheetFormat::Xlsx {
                assert!(doc.text.contains("Figures are for the week starting 6 May 2024."), "{file}");
                assert_eq!(doc.metadata["sheets"], "2");
                assert_eq!(doc.blocks[0].kind, BlockKind::Heading { level: 1, title: "Shipments".into() });
            }
        }
    }
}
