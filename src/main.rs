//! The `ragbox` binary: parse arguments, install logging, run, map errors to exit codes.

mod cli;
mod tools;

/// mimalloc keeps freed tensor buffers for reuse; glibc's malloc returns every large buffer to
/// the kernel and page-faults it back in on the next forward pass.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::process::ExitCode;

use clap::Parser;

fn install_logging(g: &ragbox_cli::GlobalArgs) {
    let default = match (g.quiet, g.verbose) {
        (true, _) => "error",
        (false, 0) => "warn",
        (false, 1) => "info",
        (false, 2) => "debug",
        _ => "trace",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("RAGBOX_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(format!("ragbox={default},warn")));
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_target(false).init();
}

fn exit_code(err: &anyhow::Error) -> u8 {
    for cause in err.chain() {
        if let Some(e) = cause.downcast_ref::<ragbox_core::Error>() {
            return e.fault().exit_code() as u8;
        }
        if let Some(e) = cause.downcast_ref::<std::io::Error>() {
            if e.kind() == std::io::ErrorKind::BrokenPipe {
                return 0;
            }
        }
    }
    // Errors that are not ragbox's own come from the environment (I/O, malformed data files).
    ragbox_core::Fault::Runtime.exit_code() as u8
}

/// `mi_option_purge_delay` in mimalloc v2's `mi_option_t` (libmimalloc-sys names no constant).
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Refuses, before anything else runs, a CPU that lacks the instruction sets the build uses
/// (x86-64-v3): a clear message instead of an illegal-instruction crash later.
#[inline(never)]
fn require_cpu_baseline() -> Result<(), String> {
    ragbox_core::model::cpu::baseline().refusal().map_or(Ok(()), Err)
}

fn main() -> ExitCode {
    // `ragbox __read-xls`: this process is the bounded reader of one legacy workbook.
    if std::env::args_os().nth(1).is_some_and(|a| a == ragbox_core::source::xls::CHILD_ARG) {
        return ragbox_core::source::xls::child_main();
    }
    if let Err(msg) = require_cpu_baseline() {
        eprintln!("error: {msg}");
        return ExitCode::from(2);
    }
    // Never hand freed pages back to the kernel: each forward pass frees and reallocates the same
    // large activation buffers, and re-faulting them in cost 11% of embedding time (perf).
    // SAFETY: sets a process-wide allocator option; called before any other thread exists.
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, -1) };
    // `ragbox search … | head` must end quietly when the reader goes away, as other Unix tools do,
    // not panic on a broken pipe: restore the default SIGPIPE action Rust's runtime ignores.
    // SAFETY: changes a signal disposition before any other thread exists.
    #[cfg(unix)]
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL)
    };
    if let Ok(exe) = std::env::current_exe() {
        ragbox_core::source::xls::use_reader(exe);
    }
    let cli = cli::Cli::parse();
    install_logging(&cli.global);
    match cli::run(cli) {
        Ok(code) => ExitCode::from(code),
        Err(err) => {
            let code = exit_code(&err);
            if code != 0 {
                eprintln!("error: {err:#}");
            }
            ExitCode::from(code)
        }
    }
}
