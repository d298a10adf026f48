//! The long fuzz run of every parser and the chunkers, on stable Rust.
//!
//! ```text
//! cargo build --offline -p ragbox-fuzz --config 'profile.dev.package.ragbox-core.opt-level=3'
//! "$CARGO_TARGET_DIR/debug/fuzz_parsers" --inputs 1000000 --seed 16 --out target/fuzz \
//!     [--corpus tests/data/corpus --corpus tests/fixtures/source/lppl.pdf] [--hang-s 60] [--slow-ms 10000] \
//!     [--targets docx,odt,odp,ods,pptx,xlsx,xls,csv,tsv,epub,rtf] [--xls-reader target/debug/ragbox] \
//!     [--mutated-only]
//! ```
//!
//! `--xls-reader` names the `ragbox` executable that reads `.xls` in a bounded child process, as
//! the `ragbox` binary does for itself (`ragbox_core::source::xls`); without it, `.xls` inputs are
//! skipped as legacy files and only the OLE check is exercised.
//!
//! `--mutated-only` leaves out the generated hostile inputs (1 case in 8 otherwise): every case
//! mutates a seed file. Its mutated cases are those of a run with the same seed, so give it seeds
//! of its own. The report counts each target's generated inputs apart (`generated`).
//!
//! `--targets` runs only the named targets (see `ragbox_fuzz::TARGETS`), drawn by their weights;
//! a case number then means another input than in a run of every target.
//!
//! A driver process runs the cases in worker processes (this same program with `--worker`). Each
//! worker records the number of the case it is on in a memory-mapped file; when a worker dies (a
//! stack overflow or an abort cannot be caught in-process) or stops advancing for `--hang-s`, the
//! driver saves that case as a finding, and a new worker goes on from the next case. Panics,
//! broken invariants and slow cases are caught inside the worker. Findings are written to
//! `OUT/<kind>-<case>-<target>.<ext>` with a `.txt` beside each; `OUT/report.json` has the counts
//! per target. Any case can be regenerated from `--seed` and its number (`ragbox_fuzz::case`).

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use ragbox_fuzz::{case, run, Case, Corpus, Finding, FindingKind, FuzzOptions, FuzzReport, TARGETS};

#[derive(Debug, Clone)]
struct Args {
    inputs: u64,
    seed: u64,
    out: PathBuf,
    corpus: Vec<PathBuf>,
    hang_s: u64,
    slow_ms: u64,
    targets: Vec<String>,
    xls_reader: Option<PathBuf>,
    mutated_only: bool,
    worker: Option<(u64, u64, PathBuf)>,
}

fn parse_args() -> Result<Args, String> {
    let root = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."));
    let mut a = Args {
        inputs: 100_000,
        seed: 16,
        out: root.join("target/fuzz"),
        corpus: Vec::new(),
        hang_s: 60,
        slow_ms: 10_000,
        targets: Vec::new(),
        xls_reader: None,
        mutated_only: false,
        worker: None,
    };
    let mut it = std::env::args().skip(1);
    let (mut start, mut count, mut progress) = (None, None, None);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--inputs" => a.inputs = value()?.parse().map_err(|e| format!("--inputs: {e}"))?,
            "--seed" => a.seed = value()?.parse().map_err(|e| format!("--seed: {e}"))?,
            "--out" => a.out = PathBuf::from(value()?),
            "--corpus" => a.corpus.push(PathBuf::from(value()?)),
            "--hang-s" => a.hang_s = value()?.parse().map_err(|e| format!("--hang-s: {e}"))?,
            "--slow-ms" => a.slow_ms = value()?.parse().map_err(|e| format!("--slow-ms: {e}"))?,
            "--targets" => {
                for name in value()?.split(',').filter(|n| !n.is_empty()) {
                    if !TARGETS.iter().any(|t| t.name == name) {
                        let known: Vec<&str> = TARGETS.iter().map(|t| t.name).collect();
                        return Err(format!("--targets: no target {name}; the targets are {}", known.join(", ")));
                    }
                    a.targets.push(name.to_string());
                }
            }
            "--xls-reader" => a.xls_reader = Some(PathBuf::from(value()?)),
            "--mutated-only" => a.mutated_only = true,
            "--worker-start" => start = Some(value()?.parse::<u64>().map_err(|e| e.to_string())?),
            "--worker-count" => count = Some(value()?.parse::<u64>().map_err(|e| e.to_string())?),
            "--worker-progress" => progress = Some(PathBuf::from(value()?)),
            other => return Err(format!("unknown argument {other}; see the header of crates/fuzz/src/main.rs")),
        }
    }
    if a.corpus.is_empty() {
        a.corpus = vec![
            root.join("tests/data/corpus"),
            root.join("tests/data/corpus-office"),
            root.join("tests/fixtures/source/lppl.pdf"),
            root.join("tests/fixtures/fuzz"),
        ];
    }
    if let (Some(s), Some(c), Some(p)) = (start, count, progress) {
        a.worker = Some((s, c, p));
    }
    Ok(a)
}

/// The run's settings, the same in the driver and its workers (the driver regenerates the case a
/// worker died on from them).
fn options(args: &Args) -> FuzzOptions {
    FuzzOptions {
        seed: args.seed,
        slow: Duration::from_millis(args.slow_ms),
        targets: args.targets.clone(),
        generated: !args.mutated_only,
        ..FuzzOptions::default()
    }
}

fn corpus(args: &Args) -> Corpus {
    let mut c = Corpus::builtin();
    for p in &args.corpus {
        if let Err(e) = c.add_path(p) {
            eprintln!("warning: seeds under {}: {e}", p.display());
        }
    }
    c
}

fn extension(target: &str) -> &'static str {
    TARGETS.iter().find(|t| t.name == target).and_then(|t| t.file.rsplit('.').next()).unwrap_or("bin")
}

fn save(out: &Path, f: &Finding) {
    let kind = format!("{:?}", f.kind).to_lowercase();
    let base = out.join(format!("{kind}-{}-{}", f.index, f.target));
    let _ = std::fs::write(base.with_extension(extension(f.target)), &f.input);
    let _ = std::fs::write(base.with_extension("txt"), format!("case {} ({}): {:?}\n{}\n", f.index, f.target, f.kind, f.detail));
}

/// Panics seen by the hook (escaped or caught inside a parser).
static PANICS: AtomicU64 = AtomicU64::new(0);

fn worker(args: &Args, start: u64, count: u64, progress: &Path) -> Result<(), String> {
    std::panic::set_hook(Box::new(|_| {
        PANICS.fetch_add(1, Ordering::Relaxed);
    }));
    let file = std::fs::OpenOptions::new().read(true).write(true).open(progress).map_err(|e| e.to_string())?;
    // SAFETY: the file is ours (made by the driver for this worker) and 8 bytes long; the driver
    // only reads it.
    let mut map = unsafe { memmap2::MmapMut::map_mut(&file) }.map_err(|e| e.to_string())?;
    let corpus = corpus(args);
    let options = FuzzOptions { start, count, ..options(args) };
    let out = args.out.clone();
    let handle = std::thread::Builder::new()
        .stack_size(ragbox_core::source::guard::PARSE_STACK_BYTES)
        .spawn(move || {
            let mut found = 0u64;
            let report = run(
                &corpus,
                &options,
                &mut |i| map[..8].copy_from_slice(&i.to_le_bytes()),
                &mut |f| {
                    found += 1;
                    save(&out, f);
                },
            );
            (report, found)
        })
        .map_err(|e| e.to_string())?;
    let (report, _) = handle.join().map_err(|_| "the fuzz thread panicked".to_string())?;
    let escaped: u64 = report.targets.values().map(|t| t.panics).sum();
    let line = serde_json::json!({ "report": report, "panics_seen": PANICS.load(Ordering::Relaxed), "panics_escaped": escaped });
    println!("{line}");
    Ok(())
}

/// Cases one worker runs before the driver starts a fresh one (bounds what a leak could grow to).
const WORKER_CASES: u64 = 50_000;

/// How one worker run ended.
enum Ended {
    /// It ran its range: its counts and panic counts (seen by the hook, escaped).
    Done(FuzzReport, u64, u64),
    /// It died or hung on this case.
    Died { at: u64, hung: bool, status: String },
}

fn run_worker(exe: &Path, args: &Args, start: u64, count: u64, progress: &Path) -> Result<Ended, String> {
    std::fs::write(progress, start.to_le_bytes()).map_err(|e| e.to_string())?;
    let mut cmd = Command::new(exe);
    cmd.args(["--seed", &args.seed.to_string(), "--out"]).arg(&args.out);
    cmd.args(["--slow-ms", &args.slow_ms.to_string()]);
    if !args.targets.is_empty() {
        cmd.args(["--targets", &args.targets.join(",")]);
    }
    for c in &args.corpus {
        cmd.arg("--corpus").arg(c);
    }
    if let Some(reader) = &args.xls_reader {
        cmd.arg("--xls-reader").arg(reader);
    }
    if args.mutated_only {
        cmd.arg("--mutated-only");
    }
    cmd.args(["--worker-start", &start.to_string(), "--worker-count", &count.to_string(), "--worker-progress"]).arg(progress);
    let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::null()).spawn().map_err(|e| e.to_string())?;
    // Drain stdout meanwhile (one line at the end, but never let a pipe fill).
    let mut stdout = child.stdout.take().expect("piped");
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stdout.read_to_string(&mut s);
        s
    });
    let read_at = || {
        std::fs::read(progress).ok().and_then(|b| b.get(..8).map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes"))))
    };
    let mut last = (start, Instant::now());
    let mut hung = false;
    let status = loop {
        if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
            break status;
        }
        std::thread::sleep(Duration::from_millis(200));
        let at = read_at().unwrap_or(start);
        if at != last.0 {
            last = (at, Instant::now());
        } else if last.1.elapsed() > Duration::from_secs(args.hang_s) {
            let _ = child.kill();
            hung = true;
            break child.wait().map_err(|e| e.to_string())?;
        }
    };
    let stdout = reader.join().unwrap_or_default();
    if status.success() && !hung {
        let v: serde_json::Value = serde_json::from_str(stdout.trim()).map_err(|e| format!("worker printed {stdout:?}: {e}"))?;
        let targets = serde_json::from_value(v["report"]["targets"].clone()).map_err(|e| e.to_string())?;
        return Ok(Ended::Done(
            FuzzReport { targets },
            v["panics_seen"].as_u64().unwrap_or(0),
            v["panics_escaped"].as_u64().unwrap_or(0),
        ));
    }
    Ok(Ended::Died { at: read_at().unwrap_or(start), hung, status: status.to_string() })
}

fn driver(args: &Args) -> Result<(), String> {
    std::fs::create_dir_all(&args.out).map_err(|e| format!("{}: {e}", args.out.display()))?;
    let corpus = corpus(args);
    let seeds: Vec<String> = TARGETS
        .iter()
        .enumerate()
        .filter(|(_, t)| args.targets.is_empty() || args.targets.iter().any(|n| n == t.name))
        .map(|(i, t)| format!("{} {}", t.name, corpus.seeds(i).len())).collect();
    eprintln!("fuzzing {} inputs, seed {}, seeds per target: {}", args.inputs, args.seed, seeds.join(", "));
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let progress = args.out.join(".progress");
    let options = options(args);
    let mut total = FuzzReport::default();
    let (mut panics_seen, mut panics_escaped) = (0u64, 0u64);
    let started = Instant::now();
    // Ranges still to run, last first. A worker that dies on case `at` loses the counts of its
    // range: the cases before `at` go back on the queue, the culprit is recorded, the rest
    // follows.
    let mut queue: Vec<(u64, u64)> = Vec::new();
    let mut s = 0;
    while s < args.inputs {
        let c = WORKER_CASES.min(args.inputs - s);
        queue.push((s, c));
        s += c;
    }
    queue.reverse();
    let mut done = 0u64;
    while let Some((start, count)) = queue.pop() {
        match run_worker(&exe, args, start, count, &progress)? {
            Ended::Done(report, seen, escaped) => {
                total.add(&report);
                panics_seen += seen;
                panics_escaped += escaped;
                done += count;
            }
            Ended::Died { at, hung, status } => {
                let Case { target: t, input, generated } = case(&corpus, &options, at);
                let kind = if hung { FindingKind::Hang } else { FindingKind::Abort };
                let f = Finding { index: at, target: TARGETS[t].name, kind, detail: format!("worker exit: {status}"), input };
                save(&args.out, &f);
                eprintln!("finding: {kind:?} on case {at} ({})", f.target);
                let stats = total.targets.entry(f.target.to_string()).or_default();
                stats.inputs += 1;
                stats.generated += u64::from(generated);
                if hung {
                    stats.hangs += 1;
                } else {
                    stats.aborts += 1;
                }
                done += 1;
                if at + 1 < start + count {
                    queue.push((at + 1, start + count - at - 1));
                }
                if at > start {
                    queue.push((start, at - start));
                }
            }
        }
        let secs = started.elapsed().as_secs_f64();
        eprintln!("{done} / {} inputs, {:.0}/s, {} failures", args.inputs, done as f64 / secs, total.failures());
    }
    let secs = started.elapsed().as_secs_f64();
    let summary = serde_json::json!({
        "inputs": total.inputs(),
        "seed": args.seed,
        "mutated_only": args.mutated_only,
        "targets_run": if args.targets.is_empty() { "all".to_string() } else { args.targets.join(",") },
        "seconds": secs.round(),
        "failures": total.failures(),
        "panics_seen_by_hook": panics_seen,
        "panics_escaped": panics_escaped,
        "panics_contained_inside_parsers": panics_seen.saturating_sub(panics_escaped),
        "targets": total.targets,
    });
    let text = serde_json::to_string_pretty(&summary).map_err(|e| e.to_string())?;
    std::fs::write(args.out.join("report.json"), &text).map_err(|e| e.to_string())?;
    println!("{text}");
    let _ = std::fs::remove_file(&progress);
    Ok(())
}

fn main() {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(2);
        }
    };
    if let Some(reader) = &args.xls_reader {
        ragbox_core::source::xls::use_reader(reader.clone());
    }
    let result = match &args.worker {
        Some((start, count, progress)) => worker(&args, *start, *count, progress),
        None => driver(&args),
    };
    if let Err(e) = result {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}
