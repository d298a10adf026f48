//! The real servers of the shared backend, for its tests: PostgreSQL (Debian's, 15) and the
//! Milvus 2.3.5 standalone server (its PyPI wheel), both installed by
//! `scripts/setup/shared-servers.sh` (scripts/test.sh runs it), started here on loopback ports and
//! killed with the test process.
//!
//! Milvus listens on every interface, so it is started only where the network namespace has
//! nothing but loopback (as scripts/test.sh runs the suite); anywhere else these tests refuse to
//! start it and say how to run them.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use ragbox_core::store::shared::{MilvusVectors, Postgres};

fn cache_dir() -> PathBuf {
    std::env::var_os("RAGBOX_CACHE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var("HOME").unwrap()).join(".cache/ragbox"))
}

/// A free loopback port (bound, then released for a server to take).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Refuses to go on unless the only network interface is loopback.
fn loopback_only() {
    // /proc/self/net is this process's network namespace (sysfs may still show the host's).
    let names: Vec<String> = std::fs::read_to_string("/proc/self/net/dev")
        .unwrap_or_default()
        .lines()
        .skip(2)
        .filter_map(|l| l.split(':').next().map(|n| n.trim().to_string()))
        .collect();
    assert!(
        names.iter().all(|n| n == "lo"),
        "the shared-backend tests start Milvus, which listens on every interface; run them inside a network namespace with loopback only, as scripts/test.sh does (interfaces here: {names:?})"
    );
}

/// Servers started by this process, killed when it exits (Rust's test harness ends with
/// `exit`, which runs `atexit` handlers, whether tests passed or not).
static CHILDREN: std::sync::Mutex<Vec<u32>> = std::sync::Mutex::new(Vec::new());

extern "C" fn kill_children() {
    if let Ok(pids) = CHILDREN.lock() {
        for pid in pids.iter() {
            // SAFETY: a plain kill of a process this one started.
            unsafe { libc::kill(*pid as i32, libc::SIGKILL) };
        }
    }
}

/// Spawns `cmd`, to be killed with this process if nothing stops it first.
fn spawn_tracked(cmd: &mut Command) -> Child {
    static REGISTERED: std::sync::Once = std::sync::Once::new();
    // SAFETY: registering a plain extern "C" function once.
    REGISTERED.call_once(|| unsafe {
        libc::atexit(kill_children);
    });
    let child = cmd.spawn().unwrap();
    CHILDREN.lock().unwrap().push(child.id());
    child
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// A PostgreSQL server of our own on a loopback port.
pub struct PgServer {
    child: Option<Child>,
    dir: PathBuf,
    port: u16,
}

fn pg_bin(name: &str) -> PathBuf {
    let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .expect("PostgreSQL is not installed: run scripts/setup/shared-servers.sh (scripts/test.sh does)")
        .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
        .filter(|p| p.join("postgres").exists())
        .collect();
    versions.sort();
    versions.pop().expect("no PostgreSQL server binary under /usr/lib/postgresql").join(name)
}

/// PostgreSQL refuses to run as root: as root, its commands run as the `postgres` user (set
/// before the parent-death signal, which a change of user would clear).
fn as_postgres(program: PathBuf) -> Command {
    let mut c = Command::new(program);
    if is_root() {
        let name = std::ffi::CString::new("postgres").unwrap();
        // SAFETY: getpwnam with a valid C string; the record is read at once.
        let (uid, gid) = unsafe {
            let pw = libc::getpwnam(name.as_ptr());
            assert!(!pw.is_null(), "no `postgres` user: install postgresql (scripts/setup/shared-servers.sh)");
            ((*pw).pw_uid, (*pw).pw_gid)
        };
        c.uid(uid).gid(gid);
    }
    c
}

impl PgServer {
    /// A fresh cluster in its own folder, started.
    pub fn start() -> PgServer {
        let dir = tempfile::Builder::new().prefix("ragbox-pg-").tempdir().unwrap().keep();
        std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
        let mut initdb = as_postgres(pg_bin("initdb"));
        let out = initdb
            .args(["-D"])
            .arg(dir.join("data"))
            .args(["-U", "ragbox", "-A", "trust", "-E", "UTF8", "--no-sync"])
            .env("LC_ALL", "C.UTF-8")
            .output()
            .unwrap();
        assert!(out.status.success(), "initdb failed: {}", String::from_utf8_lossy(&out.stderr));
        let mut server = PgServer { child: None, dir, port: free_port() };
        server.restart();
        server
    }

    /// Starts the server (again, after [`PgServer::kill`]) and waits until it answers.
    pub fn restart(&mut self) {
        let log = std::fs::File::create(self.dir.join("postgres.log")).unwrap();
        let mut cmd = as_postgres(pg_bin("postgres"));
        cmd.arg("-D").arg(self.dir.join("data")).args(["-p", &self.port.to_string(), "-c", "listen_addresses=127.0.0.1"]);
        cmd.arg("-k").arg(&self.dir).stdout(Stdio::null()).stderr(log);
        self.child = Some(spawn_tracked(&mut cmd));
        let deadline = Instant::now() + Duration::from_secs(60);
        while Postgres::connect(&self.url("postgres")).is_err() {
            assert!(Instant::now() < deadline, "PostgreSQL did not come up: {}", std::fs::read_to_string(self.dir.join("postgres.log")).unwrap_or_default());
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Stops the server at once (SIGKILL to its postmaster).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let pid_file = self.dir.join("data/postmaster.pid");
            let _ = child.kill();
            let _ = child.wait();
            // Its backends exit once the postmaster is gone; wait for the port to be free.
            let deadline = Instant::now() + Duration::from_secs(20);
            while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = std::fs::remove_file(pid_file);
        }
    }

    /// The URL of database `db`.
    pub fn url(&self, db: &str) -> String {
        format!("postgresql://ragbox@127.0.0.1:{}/{db}", self.port)
    }

    /// A new, empty database owned by a role of its own that is no superuser (so row-level
    /// security applies to it, as it does to a deployment's role); the URL that signs in as it.
    /// The server's data folder (its table files are under `base/`).
    pub fn data_dir(&self) -> PathBuf {
        self.dir.join("data")
    }

    pub fn database(&self, name: &str) -> String {
        let admin = Postgres::connect(&self.url("postgres")).unwrap();
        let role = format!("{name}_node");
        admin
            .with("creating a test database", |c| {
                c.simple_query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))?;
                c.simple_query(&format!("DROP ROLE IF EXISTS {role}"))?;
                c.simple_query(&format!("CREATE ROLE {role} LOGIN NOSUPERUSER NOBYPASSRLS"))?;
                c.simple_query(&format!("CREATE DATABASE {name} OWNER {role}")).map(|_| ())
            })
            .unwrap();
        format!("postgresql://{role}@127.0.0.1:{}/{name}", self.port)
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A Milvus standalone server of our own on loopback ports.
pub struct MilvusServer {
    child: Option<Child>,
    dir: PathBuf,
    port: u16,
    metrics: u16,
    auth: bool,
}

impl MilvusServer {
    /// A fresh server (authorisation on with `auth`: user `root`, password `Milvus`), started.
    pub fn start(auth: bool) -> MilvusServer {
        loopback_only();
        let dir = tempfile::Builder::new().prefix("ragbox-milvus-").tempdir().unwrap().keep();
        let mut server = MilvusServer { child: None, dir, port: free_port(), metrics: free_port(), auth };
        server.restart();
        server
    }

    /// Starts the server (again, after [`MilvusServer::kill`], over the same data) and waits
    /// until it answers.
    pub fn restart(&mut self) {
        let venv = cache_dir().join("milvus-venv");
        let runtime = cache_dir().join("milvus-runtime");
        assert!(runtime.join("bin/milvus").exists(), "no Milvus server at {runtime:?}: run scripts/setup/shared-servers.sh (scripts/test.sh does)");
        let log = std::fs::File::create(self.dir.join("milvus.log")).unwrap();
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/setup/milvus-launch.py");
        let mut cmd = Command::new(venv.join("bin/python"));
        cmd.arg(script).arg(&self.dir).args([self.port.to_string(), self.metrics.to_string()]);
        if self.auth {
            cmd.arg("--auth");
        }
        cmd.env("RAGBOX_MILVUS_RUNTIME", &runtime).stdout(log.try_clone().unwrap()).stderr(log);
        self.child = Some(spawn_tracked(&mut cmd));
        let deadline = Instant::now() + Duration::from_secs(180);
        let credentials = self.auth.then_some(("root", "Milvus"));
        while MilvusVectors::connect(&self.url(), credentials, "probe").is_err() {
            if Instant::now() > deadline {
                let log = std::fs::read_to_string(self.dir.join("milvus.log")).unwrap_or_default();
                panic!("Milvus did not come up on port {}; the end of its log:\n{}", self.port, &log[log.len().saturating_sub(3000)..]);
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// Stops the server at once.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Its gRPC URL.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

impl Drop for MilvusServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The servers every test of the binary shares: one PostgreSQL (each test takes its own
/// database) and the one Milvus a network namespace can hold (its embedded etcd keeps fixed
/// ports; each test takes its own collection prefix). A test that stops Milvus holds
/// [`Shared::gate`] for writing; every other holds it for reading.
pub struct Shared {
    /// The PostgreSQL server.
    pub pg: PgServer,
    /// The Milvus server.
    pub milvus: std::sync::Mutex<MilvusServer>,
    /// Who may use Milvus now.
    pub gate: std::sync::RwLock<()>,
    /// Milvus's URL (the same across restarts).
    pub milvus_url: String,
}

/// The shared servers, started by the first test that asks.
pub fn shared() -> &'static Shared {
    static SERVERS: OnceLock<Shared> = OnceLock::new();
    SERVERS.get_or_init(|| {
        let pg = PgServer::start();
        let milvus = MilvusServer::start(false);
        let milvus_url = milvus.url();
        Shared { pg, milvus: std::sync::Mutex::new(milvus), gate: std::sync::RwLock::new(()), milvus_url }
    })
}
