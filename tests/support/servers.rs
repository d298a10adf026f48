//! The real mail and file servers the source tests run against, started on loopback by the
//! launchers in scripts/sources/ and stopped when dropped: Debian's Dovecot (`imap-launch.sh`,
//! the `archive` / `archive-pw` mailbox, STARTTLS with the launcher's own CA) and Samba's smbd
//! (`smb-launch.sh`, the read-only share `docs` for `reader` / `reader-pw`). Included by path
//! (`#[path]`) from the connector tests of crates/sources and from the integration tests, so
//! both drive the servers the same way.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// The repository's root: the nearest folder above the including crate that has the launchers.
pub fn repo() -> PathBuf {
    let mut dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    while !dir.join("scripts/sources").is_dir() {
        assert!(dir.pop(), "no scripts/sources above {}", env!("CARGO_MANIFEST_DIR"));
    }
    dir
}

/// A port nothing listens on now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Sends SIGTERM to each pid and waits (10 s at most) until they are gone.
fn stop_pids(pid_file: &Path) {
    let Ok(text) = std::fs::read_to_string(pid_file) else { return };
    let _ = std::fs::remove_file(pid_file);
    let pids: Vec<&str> = text.split_whitespace().collect();
    for pid in &pids {
        let _ = Command::new("kill").arg(pid).status();
    }
    let end = Instant::now() + Duration::from_secs(10);
    while pids.iter().any(|p| Path::new(&format!("/proc/{p}")).exists()) && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A Dovecot on loopback, its state under `dir`; stopped on drop.
pub struct Dovecot {
    pub dir: PathBuf,
    pub port: u16,
}

impl Dovecot {
    /// Starts Dovecot on `port`; `keep_mail` keeps the mailboxes of an earlier start in `dir`.
    pub fn start(dir: &Path, port: u16, keep_mail: bool) -> Dovecot {
        let out = Command::new(repo().join("scripts/sources/imap-launch.sh"))
            .arg(dir)
            .arg(port.to_string())
            .env("IMAP_KEEP_MAIL", if keep_mail { "1" } else { "0" })
            .output()
            .unwrap();
        assert!(out.status.success(), "imap-launch: {}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        Dovecot { dir: dir.to_path_buf(), port }
    }

    /// The CA the server's certificate is signed by.
    pub fn ca(&self) -> PathBuf {
        self.dir.join("tls/ca.pem")
    }

    pub fn stop(&self) {
        stop_pids(&self.dir.join("dovecot.pid"));
    }

    /// Appends messages to `folder` (files, or `--generate N [--seed S]`); the script's output.
    pub fn fill(&self, folder: &str, args: &[&str]) -> String {
        let out = Command::new("python3")
            .arg(repo().join("scripts/sources/imap-fill.py"))
            .args(["--starttls", self.ca().to_str().unwrap(), "127.0.0.1", &self.port.to_string(), "archive", "archive-pw", folder])
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "imap-fill: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Deletes or moves messages (`delete FOLDER SUBJECT`, `move FOLDER SUBJECT TO`).
    pub fn change(&self, args: &[&str]) {
        let out = Command::new("python3")
            .arg(repo().join("scripts/sources/imap-change.py"))
            .args(["127.0.0.1", &self.port.to_string(), "archive", "archive-pw"])
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "imap-change: {}", String::from_utf8_lossy(&out.stderr));
    }
}

impl Drop for Dovecot {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A Samba smbd sharing a folder as `docs` on loopback; stopped on drop.
pub struct Samba {
    state: tempfile::TempDir,
    pub share: PathBuf,
    pub port: u16,
}

impl Samba {
    /// Starts smbd sharing `share`, or `None` (with a message) where Samba is not installed.
    pub fn start(share: &Path) -> Option<Samba> {
        if !Path::new("/usr/sbin/smbd").exists() {
            eprintln!("SKIPPED: /usr/sbin/smbd is not installed (scripts/setup/smb-server.sh installs it)");
            return None;
        }
        let server = Samba { state: tempfile::tempdir().unwrap(), share: share.to_path_buf(), port: free_port() };
        server.launch();
        Some(server)
    }

    /// (Re)starts smbd on the same port and folder.
    pub fn launch(&self) {
        let out = Command::new("bash")
            .arg(repo().join("scripts/sources/smb-launch.sh"))
            .arg(self.state.path())
            .arg(self.port.to_string())
            .arg(&self.share)
            .output()
            .unwrap();
        assert!(out.status.success(), "smb-launch.sh failed:\n{}", String::from_utf8_lossy(&out.stderr));
    }

    /// Stops smbd and samba-dcerpcd, waiting until they are gone.
    pub fn stop(&self) {
        stop_pids(&self.state.path().join("smbd.pid"));
    }
}

impl Drop for Samba {
    fn drop(&mut self) {
        self.stop();
    }
}
