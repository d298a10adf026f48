//! Legacy Excel workbooks (`.xls`, Excel 97-2003), read by calamine in a child process that has
//! a memory bound and a deadline.
//!
//! calamine reads `.xls`, but a mutated workbook made it allocate 24 GB (found by fuzzing:
//! `tests/fixtures/fuzz/xls-calamine-memory-bomb.xls`). A panic can be caught inside the process;
//! an allocation that size cannot, and it would take an ingest or the server down with it. So the
//! workbook is read by the `ragbox` executable itself, started as a child ([`CHILD_ARG`]) with its
//! data segment limited to [`MEMORY_LIMIT`] and its CPU time to [`TIME_LIMIT`]: it reads the file
//! from its standard input (an unnamed temporary file, never a pipe the parent writes to) and
//! writes the sheets' cell text as JSON. A child that runs out of memory dies alone, and the file
//! is skipped as [`SkipReason::OverLimit`]; one that runs past the deadline is killed, and the file is
//! skipped as over that limit too. The parent writes the sheets as every sheet is written
//! ([`push_sheet`]).
//!
//! The child is the running executable, registered by `main` with [`use_reader`]. A process that
//! registered none (the library in another program, unit tests) skips `.xls` as
//! [`SkipReason::Legacy`], with the command that converts it.
//!
//! Title: the file stem. Metadata: `sheets`, and `truncated` when [`MAX_CELLS`] ran out.

use std::collections::BTreeMap;
use std::io::{Cursor, Read, Seek, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use calamine::{Reader, Xls, XlsError};
use serde::{Deserialize, Serialize};
use wait_timeout::ChildExt;

use super::package;
use super::sheet::{push_sheet, SparseCells, MAX_CELLS};
use super::{finish, title_from_path, InputKind, Parser, SkipReason, TextBuilder};
use crate::types::ParsedDocument;

/// The first argument that makes `ragbox` a workbook reader ([`child_main`]) instead of the CLI.
pub const CHILD_ARG: &str = "__read-xls";

/// The most a reader child may allocate (its data segment: heap and private mappings). A
/// well-formed `.xls` holds at most 65,536 × 256 cells per sheet; [`MAX_CELLS`] of them as text
/// fit in a fraction of this.
pub const MEMORY_LIMIT: u64 = 2 << 30;

/// How long a reader child may run, in wall-clock time (the parent kills it) and in CPU time (the
/// kernel stops it, should the parent be gone).
pub const TIME_LIMIT: Duration = Duration::from_secs(50);

/// The most JSON a reader child may write back.
const MAX_REPLY_BYTES: u64 = 1 << 30;

static READER: OnceLock<PathBuf> = OnceLock::new();

/// Registers `exe` (the running `ragbox` executable) as the program `.xls` files are read by.
pub fn use_reader(exe: PathBuf) {
    let _ = READER.set(exe);
}

/// The `.xls` parser.
#[derive(Debug, Clone, Copy)]
pub struct XlsParser;

impl Parser for XlsParser {
    fn name(&self) -> &'static str {
        "xls"
    }

    fn input(&self) -> InputKind {
        InputKind::Binary
    }

    fn parse(&self, path: &Path, bytes: &[u8]) -> Result<ParsedDocument, SkipReason> {
        if !package::is_ole(bytes) {
            return Err(SkipReason::corrupt("not an Excel 97-2003 workbook (no OLE header)"));
        }
        let Some(exe) = READER.get() else {
            return Err(package::ole_reason(bytes, "Excel"));
        };
        let Workbook { sheets, truncated } = match read_in_child(exe, bytes)? {
            Reply::Sheets(book) => book,
            Reply::Skipped(reason) => return Err(reason.into()),
        };
        let mut out = TextBuilder::default();
        let count = sheets.len();
        for sheet in sheets {
            push_sheet(&mut out, &sheet.name, sheet.rows);
        }
        let mut metadata = BTreeMap::new();
        metadata.insert("sheets".to_string(), count.to_string());
        if truncated {
            metadata.insert("truncated".to_string(), format!("read the first {MAX_CELLS} cells"));
        }
        Ok(finish(self.name(), title_from_path(path), out.text, out.blocks, metadata))
    }
}

/// What a reader child writes back.
#[derive(Debug, Serialize, Deserialize)]
enum Reply {
    Sheets(Workbook),
    Skipped(ChildSkip),
}

/// A workbook's cell text.
#[derive(Debug, Serialize, Deserialize)]
struct Workbook {
    sheets: Vec<Sheet>,
    /// Whether [`MAX_CELLS`] ran out before the last sheet's end.
    truncated: bool,
}

#[derive(Debug, Serialize, Deserialize)]
struct Sheet {
    name: String,
    rows: Vec<Vec<String>>,
}

/// Why the child read nothing.
#[derive(Debug, Serialize, Deserialize)]
enum ChildSkip {
    Encrypted,
    Corrupt(String),
}

impl From<ChildSkip> for SkipReason {
    fn from(skip: ChildSkip) -> Self {
        match skip {
            ChildSkip::Encrypted => SkipReason::Encrypted,
            ChildSkip::Corrupt(detail) => SkipReason::Corrupt { detail },
        }
    }
}

/// Runs the reader child on `bytes` and waits for its reply, at most [`TIME_LIMIT`].
fn read_in_child(exe: &Path, bytes: &[u8]) -> Result<Reply, SkipReason> {
    let failed = |what: &str, e: std::io::Error| SkipReason::Crashed { detail: format!("{what} the .xls reader: {e}") };
    // The workbook goes in as a file, not through a pipe: writing to a pipe whose reader died
    // would raise SIGPIPE in this process.
    let mut input = tempfile::tempfile().map_err(|e| failed("could not stage the workbook for", e))?;
    input.write_all(bytes).and_then(|()| input.rewind()).map_err(|e| failed("could not stage the workbook for", e))?;
    let mut child = Command::new(exe)
        .arg(CHILD_ARG)
        .stdin(Stdio::from(input))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| failed(&format!("could not start {} as", exe.display()), e))?;
    let stdout = child.stdout.take().expect("piped stdout");
    let reader = std::thread::spawn(move || {
        let mut reply = Vec::new();
        stdout.take(MAX_REPLY_BYTES + 1).read_to_end(&mut reply).map(|_| reply)
    });
    let status = match child.wait_timeout(TIME_LIMIT) {
        Ok(Some(status)) => status,
        Ok(None) => {
            let _ = child.kill();
            let _ = child.wait();
            let _ = reader.join();
            return Err(over_time());
        }
        Err(e) => {
            let _ = child.kill();
            let _ = child.wait();
            return Err(failed("lost", e));
        }
    };
    let reply = reader.join().map_err(|_| SkipReason::Crashed { detail: "the .xls reply reader panicked".into() })?;
    let reply = reply.map_err(|e| failed("could not read the reply of", e))?;
    if !status.success() {
        return Err(stopped(status));
    }
    if reply.len() as u64 > MAX_REPLY_BYTES {
        return Err(SkipReason::OverLimit { what: format!("the workbook's text is over {} MiB", MAX_REPLY_BYTES >> 20) });
    }
    serde_json::from_slice(&reply)
        .map_err(|e| SkipReason::Crashed { detail: format!("the .xls reader's reply is not understood: {e}") })
}

fn over_time() -> SkipReason {
    SkipReason::OverLimit { what: format!("reading the workbook took over {} s, the most a reader may run", TIME_LIMIT.as_secs()) }
}

/// Why a reader child ended without a reply: out of memory (an allocation failure aborts),
/// out of CPU time, or something else.
fn stopped(status: std::process::ExitStatus) -> SkipReason {
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        match status.signal() {
            Some(libc::SIGABRT) | Some(libc::SIGKILL) | Some(libc::SIGSEGV) => {
                return SkipReason::OverLimit {
                    what: format!(
                        "reading the workbook needed more than the {} GiB a reader may use (a malformed file?)",
                        MEMORY_LIMIT >> 30
                    ),
                }
            }
            Some(libc::SIGXCPU) => return over_time(),
            _ => {}
        }
    }
    SkipReason::Crashed { detail: format!("the .xls reader ended with {status}") }
}

/// The reader child: bounds its own memory and CPU time, reads a workbook from standard input and
/// writes [`Reply`] as JSON to standard output. Exit status 0 whenever it wrote a reply.
pub fn child_main() -> ExitCode {
    bound_self();
    let mut bytes = Vec::new();
    if std::io::stdin().lock().read_to_end(&mut bytes).is_err() {
        return ExitCode::from(2);
    }
    let reply = std::panic::catch_unwind(|| read_workbook(&bytes)).unwrap_or_else(|panic| {
        let what = super::guard::panic_message(panic.as_ref());
        Reply::Skipped(ChildSkip::Corrupt(format!("the spreadsheet reader failed: {what}")))
    });
    let mut out = std::io::stdout().lock();
    match serde_json::to_writer(&mut out, &reply).and_then(|()| out.flush().map_err(serde_json::Error::io)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(_) => ExitCode::from(2),
    }
}

/// Sets this process's limits: [`MEMORY_LIMIT`] on the data segment, [`TIME_LIMIT`] of CPU time.
fn bound_self() {
    #[cfg(unix)]
    for (resource, value) in [(libc::RLIMIT_DATA, MEMORY_LIMIT), (libc::RLIMIT_CPU, TIME_LIMIT.as_secs())] {
        let limit = libc::rlimit { rlim_cur: value as libc::rlim_t, rlim_max: value as libc::rlim_t };
        // SAFETY: setrlimit reads the struct passed by reference and changes only this process's
        // limits; the call has no other effect on memory.
        unsafe { libc::setrlimit(resource, &limit) };
    }
}

/// Every sheet of a workbook, at most [`MAX_CELLS`] positions in all. Only the cells that hold a
/// value are taken from calamine's grid, as the `.xlsx` reader streams them: a sheet that spans
/// 65,536 × 256 positions for three values replies three values, not 16 million empty strings
/// (a 5.6 KB workbook cost 1.2 GB that way and lost its far cells to the budget).
fn read_workbook(bytes: &[u8]) -> Reply {
    let mut book: Xls<_> = match Xls::new(Cursor::new(bytes)) {
        Ok(book) => book,
        Err(e) => return Reply::Skipped(skip(e)),
    };
    let mut budget = MAX_CELLS;
    let mut sheets = Vec::new();
    for name in book.sheet_names() {
        let range = match book.worksheet_range(&name) {
            Ok(range) => range,
            Err(e) => return Reply::Skipped(skip(e)),
        };
        let mut cells = SparseCells::default();
        for (row, col, value) in range.used_cells() {
            if cells.push(row as u32, col as u32, value.clone()) >= budget {
                break;
            }
        }
        drop(range);
        sheets.push(Sheet { name, rows: cells.into_rows(&mut budget) });
        if budget == 0 {
            break;
        }
    }
    Reply::Sheets(Workbook { sheets, truncated: budget == 0 })
}

fn skip(e: XlsError) -> ChildSkip {
    match e {
        XlsError::Password => ChildSkip::Encrypted,
        e => ChildSkip::Corrupt(format!("Excel 97-2003 workbook: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_child_reads_the_fixture_in_process() {
        let bytes = crate::source::testutil::fixture("office/sheet.xls");
        let Reply::Sheets(book) = read_workbook(&bytes) else { panic!("not read") };
        assert_eq!(book.sheets.len(), 2);
        assert!(!book.truncated);
        let rows = &book.sheets[0].rows;
        assert!(rows.iter().any(|r| r.iter().any(|c| c == "Rotterdam")), "{rows:?}");
    }

    #[test]
    fn a_sheet_spanning_the_whole_grid_replies_only_its_values() {
        // Three values at (0,0)..(1,1) and (65535,255): calamine's grid holds 16.7 million
        // positions, the reply three rows.
        let bytes = crate::source::testutil::fixture("../fixtures/fuzz/xls-sparse-sheet-expanded.xls");
        let Reply::Sheets(book) = read_workbook(&bytes) else { panic!("not read") };
        assert!(!book.truncated);
        let rows = &book.sheets[0].rows;
        assert_eq!(rows.len(), 3, "{:?}", &rows[..rows.len().min(4)]);
        assert_eq!(rows[1], ["London", "210"]);
        assert_eq!(rows[2].len(), 256);
        assert_eq!(rows[2][255], "far corner");
        assert_eq!(rows[2].iter().filter(|c| !c.is_empty()).count(), 1);
    }

    #[test]
    fn without_a_registered_reader_a_workbook_is_skipped_with_the_command_that_converts_it() {
        if READER.get().is_some() {
            return; // another test of this process registered one
        }
        let bytes = crate::source::testutil::fixture("office/sheet.xls");
        let reason = XlsParser.parse(Path::new("old.xls"), &bytes).unwrap_err();
        assert_eq!(reason, SkipReason::Legacy { format: "Excel" });
        assert_eq!(
            XlsParser.parse(Path::new("x.xls"), b"not ole").unwrap_err(),
            SkipReason::corrupt("not an Excel 97-2003 workbook (no OLE header)")
        );
    }
}
