//! Shared helpers: where the models and fixtures are, and running the CLI.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The models folder the tests use (fetched by `scripts/setup/fetch-models.sh`).
pub fn models_dir() -> PathBuf {
    std::env::var_os("RAGBOX_MODELS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("models"))
}

/// A file under tests/fixtures.
pub fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(name)
}

/// Parses a JSON fixture.
pub fn json_fixture(name: &str) -> serde_json::Value {
    let text = std::fs::read_to_string(fixture(name)).expect("fixture exists");
    serde_json::from_str(&text).expect("fixture is JSON")
}

/// A `Vec<u32>` from a JSON array.
pub fn u32s(v: &serde_json::Value) -> Vec<u32> {
    v.as_array().expect("array").iter().map(|x| x.as_u64().expect("integer") as u32).collect()
}

/// A `Vec<f32>` from a JSON array.
pub fn f32s(v: &serde_json::Value) -> Vec<f32> {
    v.as_array().expect("array").iter().map(|x| x.as_f64().expect("number") as f32).collect()
}

/// The ragbox binary with a private data folder and the test models folder.
pub fn ragbox(data: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_ragbox"));
    c.env("RAGBOX_DATA_DIR", data)
        .env("RAGBOX_MODELS_DIR", models_dir())
        .env_remove("RAGBOX_CONFIG")
        .env_remove("RAGBOX_LOG")
        .env_remove("HF_ENDPOINT");
    c
}

/// Runs a command, returning (exit code, stdout, stderr).
pub fn run(cmd: &mut Command) -> (i32, String, String) {
    let Output { status, stdout, stderr } = cmd.output().expect("ragbox runs");
    (
        status.code().unwrap_or(-1),
        String::from_utf8_lossy(&stdout).into_owned(),
        String::from_utf8_lossy(&stderr).into_owned(),
    )
}

/// Hard-links (or copies) every file of `from` into `to`, recursively, following symlinks.
pub fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let src = entry.path();
        let dst = to.join(entry.file_name());
        if src.is_dir() {
            copy_tree(&src, &dst);
        } else {
            let real = std::fs::canonicalize(&src).unwrap();
            if std::fs::hard_link(&real, &dst).is_err() {
                std::fs::copy(&real, &dst).unwrap();
            }
        }
    }
}

/// Every file below `dir`, recursively (an unreadable folder counts as empty).
pub fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                out.extend(files_under(&p));
            } else {
                out.push(p);
            }
        }
    }
    out
}

/// `n` small Markdown notices (`notice-000.md`...) in `dir`, each with its own room, team, day
/// and badge number: a corpus many files long that ingests in a few seconds.
pub fn notices(dir: &Path, n: usize) {
    std::fs::create_dir_all(dir).unwrap();
    for i in 0..n {
        let text = format!(
            "# Notice {i}\n\nRoom {i} is booked for the meeting of team {} on day {} of the month; bring badge number {}.\n",
            i % 13,
            i % 28 + 1,
            1000 + i * 7
        );
        std::fs::write(dir.join(format!("notice-{i:03}.md")), text).unwrap();
    }
}
