//! SMB shares: a folder of an SMB2/3 share mirrored file for file, by the pure-Rust `smb` client
//! (NTLM, signing and encryption as the server asks; no libsmbclient).
//!
//! One sync is one connection: resolve, connect and negotiate, log in (`DOMAIN\user` when the
//! source names a domain), connect to the share, then list `path` recursively, every file
//! included (hidden ones too: `.ragbox-access`, `.ragboxignore`), each directory opened for
//! listing only. The mirror keeps the share's layout: `<mirror>/sub/b.txt` is `path\sub\b.txt`.
//! Requests are kept in flight side by side on that connection, as SMB2 allows: up to
//! [`IN_FLIGHT`] folders listed, or files read, at once (files held in memory until written, up
//! to [`FETCH_BUDGET`] bytes of them at a time; a larger file is read alone).
//!
//! Only once that listing is complete is the mirror compared with it. A file whose size and
//! last-write time equal its mirror copy's is unchanged and not read, so a sync of a share that
//! did not change reads directory listings and nothing else. A new or changed file is read whole
//! and written with the server's last-write time as its modification time; a mirror file the
//! share no longer lists is removed. Removals go first, so a file that became a folder (or a
//! folder that became a file) finds its place free. The mirror's own state files, named
//! `.ragbox-sync*`, are neither compared nor removed, and a share's file of that name
//! (or one named like a half-written mirror file, `.NAME.part`) is reported and skipped.
//!
//! Failures, and what they leave:
//! - Not reached, not negotiated, not logged in, no such share or folder, a listing that stops
//!   answering: [`crate::unreachable`], with the mirror untouched.
//! - A sub-folder the server refuses to list (access denied): reported in the problems, and the
//!   mirror's files under it are kept as they were, neither removed nor counted.
//! - A file that cannot be read after the listing: reported in the problems (`path: why`); its
//!   earlier copy stays and it is tried again next time. Once the connection is lost (a step
//!   times out, or the client stops), the files still to fetch are reported without being tried.
//!
//! Each network step (resolving, connecting, each log-in and tree-connect, each directory open,
//! listing batch and close, each file open and read) waits at most the source's `timeout_ms`.
//! Nothing on the share changes: files and folders are opened for reading only.

use std::collections::BTreeMap;
use std::future::Future;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::stream::{FuturesUnordered, StreamExt};
use smb::{Client, ClientConfig, ConnectionConfig, DirAccessMask, Directory, FileAccessMask, FileCreateArgs, FileDirectoryInformation, Resource, Tree, UncPath};

use crate::{unreachable, Mirror, SourceConfig, SyncEvent, SyncReport};
use ragbox_core::error::Result;

/// The start of the names of the mirror's own files (its sync state), never the share's.
const STATE_PREFIX: &str = ".ragbox-sync";

/// The suffix of a mirror file being written (`.NAME.part`), which the mirror clears as stale.
const PART_SUFFIX: &str = ".part";

/// The largest single read; the server's own maximum when it is smaller.
const READ_CHUNK: u32 = 1 << 20;

/// Requests kept in flight on the connection at once (folders being listed, files being read):
/// each request waits on a round trip, so a share of many small files is read this many at a time.
const IN_FLIGHT: usize = 32;

/// The bytes of files being read at once (they are held whole until written to the mirror).
const FETCH_BUDGET: u64 = 64 << 20;

/// Folder levels followed below the source's folder: a backstop against a share whose links
/// lead back into themselves.
const MAX_DEPTH: usize = 64;

/// Seconds from 1601-01-01 (the SMB clock's epoch) to 1970-01-01.
const FILETIME_TO_UNIX_SECS: u64 = 11_644_473_600;

/// Why a step failed.
#[derive(Debug)]
enum Failure {
    /// The server answered, and said no (access denied, no such file, a sharing violation).
    Refused(String),
    /// No answer in time, or the connection is gone: the steps after it would fail the same way.
    Lost(String),
}

impl Failure {
    /// Sorts an error of the `smb` crate, for the step `what`.
    fn of(what: &str, e: smb::Error) -> Failure {
        let text = format!("{what}: {e}");
        match e {
            smb::Error::ConnectionStopped | smb::Error::OperationTimeout(..) => Failure::Lost(text),
            smb::Error::IoError(io) if connection_gone(&io) => Failure::Lost(text),
            _ => Failure::Refused(text),
        }
    }

    fn text(&self) -> &str {
        match self {
            Failure::Refused(t) | Failure::Lost(t) => t,
        }
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.text())
    }
}

/// Whether an I/O error means the connection itself is gone (rather than one request failing).
fn connection_gone(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::*;
    matches!(e.kind(), ConnectionReset | ConnectionAborted | BrokenPipe | NotConnected | UnexpectedEof | TimedOut)
}

/// One file the share lists.
#[derive(Debug)]
struct RemoteFile {
    /// Its path in the tree (backslashes, from the share's root).
    path: String,
    /// Bytes.
    size: u64,
    /// The server's last-write time.
    mtime: SystemTime,
}

/// What the source's folder holds now.
#[derive(Debug, Default)]
struct Listing {
    /// Every file, by mirror path.
    files: BTreeMap<PathBuf, RemoteFile>,
    /// Sub-folders (mirror paths) the server would not list: the mirror's files under them stay.
    unlisted: Vec<PathBuf>,
    /// Names skipped, folders not listed (`path: why`).
    problems: Vec<String>,
}

impl Listing {
    /// Whether a mirror file lies in a folder that could not be listed this time.
    fn covers_unlisted(&self, rel: &Path) -> bool {
        self.unlisted.iter().any(|dir| rel.starts_with(dir))
    }
}

/// A logged-in connection to the share.
struct Share {
    client: Client,
    tree: Arc<Tree>,
    /// Each step's time limit.
    limit: Duration,
    /// The largest read the connection allows, at most [`READ_CHUNK`].
    chunk: usize,
}

pub(crate) fn sync(source: &SourceConfig, password: &str, mirror: &Mirror, progress: &mut (dyn FnMut(SyncEvent) + Send)) -> Result<SyncReport> {
    crate::runtime()?.block_on(async {
        let share = Share::connect(source, password).await.map_err(|e| unreachable(source, e))?;
        let listing = match share.list(&folder(source)).await {
            Ok(listing) => listing,
            Err(e) => {
                share.close().await;
                return Err(unreachable(source, e));
            }
        };
        let result = update(&share, listing, mirror, progress).await;
        share.close().await;
        result
    })
}

pub(crate) fn probe(source: &SourceConfig, password: &str) -> Result<usize> {
    crate::runtime()?.block_on(async {
        let share = Share::connect(source, password).await.map_err(|e| unreachable(source, e))?;
        let listing = share.list(&folder(source)).await;
        share.close().await;
        Ok(listing.map_err(|e| unreachable(source, e))?.files.len())
    })
}

pub(crate) fn origin(source: &SourceConfig, rel: &Path) -> String {
    let rel = rel.to_string_lossy().replace('\\', "/");
    format!("{}/{rel}", source.location())
}

/// Brings the mirror in line with a complete listing: removals, then fetches.
async fn update(share: &Share, listing: Listing, mirror: &Mirror, progress: &mut (dyn FnMut(SyncEvent) + Send)) -> Result<SyncReport> {
    let have: BTreeMap<PathBuf, crate::mirror::Entry> = mirror
        .files(Path::new(""))?
        .into_iter()
        .filter(|(rel, _)| !is_state(rel) && !listing.covers_unlisted(rel))
        .collect();
    let mut report = SyncReport { listed: listing.files.len(), problems: listing.problems, ..SyncReport::default() };

    let to_fetch: Vec<(&PathBuf, &RemoteFile)> = listing
        .files
        .iter()
        .filter(|(rel, f)| have.get(*rel).is_none_or(|e| e.size != f.size || e.mtime != f.mtime))
        .collect();
    report.unchanged = report.listed - to_fetch.len();
    progress(SyncEvent::Listed { items: report.listed, to_fetch: to_fetch.len() });

    for rel in have.keys().filter(|rel| !listing.files.contains_key(*rel)) {
        mirror.remove(rel)?;
        report.removed += 1;
        progress(SyncEvent::Removed { path: rel.clone() });
    }

    // Several reads in flight on the one connection, within a memory budget: a file larger than
    // the budget is read alone.
    let mut lost: Option<String> = None;
    let mut queue = to_fetch.into_iter().peekable();
    let mut running = FuturesUnordered::new();
    let mut in_flight: u64 = 0;
    loop {
        while let Some(&(rel, file)) = queue.peek() {
            if let Some(why) = &lost {
                report.problems.push(format!("{}: not fetched, {why}", rel.display()));
                queue.next();
                continue;
            }
            let full = running.len() >= IN_FLIGHT || in_flight.saturating_add(file.size) > FETCH_BUDGET;
            if !running.is_empty() && full {
                break;
            }
            in_flight = in_flight.saturating_add(file.size);
            running.push(async move { (rel, file, share.read(&file.path).await) });
            queue.next();
        }
        let Some((rel, file, result)) = running.next().await else { break };
        in_flight = in_flight.saturating_sub(file.size);
        match result {
            Ok(bytes) => {
                mirror.write(rel, &bytes, Some(file.mtime))?;
                report.fetched += 1;
                report.bytes += bytes.len() as u64;
                progress(SyncEvent::Fetched { path: rel.clone(), bytes: bytes.len() as u64 });
            }
            Err(e) => {
                tracing::warn!(path = %rel.display(), "smb: {e}");
                report.problems.push(format!("{}: {e}", rel.display()));
                if let Failure::Lost(why) = e {
                    lost.get_or_insert(format!("the connection was lost ({why})"));
                }
            }
        }
    }
    Ok(report)
}

impl Share {
    /// Resolves, connects, negotiates, logs in and connects to the share.
    async fn connect(source: &SourceConfig, password: &str) -> std::result::Result<Share, Failure> {
        let limit = Duration::from_millis(source.timeout_ms);
        let share_name = source.share.as_deref().map(str::trim).filter(|s| !s.is_empty());
        let share_name = share_name.ok_or_else(|| Failure::Refused("the source names no share".into()))?;
        let server = resolve(&source.host, source.port(), limit).await?;

        let mut connection = ConnectionConfig { port: Some(source.port()), timeout: Some(limit), ..ConnectionConfig::default() };
        connection.auth_methods.ntlm = true;
        // Requests never wait on the server's notifications: one listing, some reads, done.
        connection.disable_notifications = true;
        let client = Client::new(ClientConfig { dfs: false, connection, ..ClientConfig::default() });

        let unc = UncPath::new(&server)
            .and_then(|u| u.with_share(share_name))
            .map_err(|e| Failure::Refused(format!("share name {share_name:?}: {e}")))?;
        let user = match source.domain.as_deref().map(str::trim).filter(|d| !d.is_empty()) {
            Some(domain) => format!("{domain}\\{}", source.user),
            None => source.user.clone(),
        };
        let step = "connect, negotiate, log in and connect to the share";
        timed(step, limit, client.share_connect(&unc, &user, password.to_string())).await?;
        let tree = client.get_tree(&unc).await.map_err(|e| Failure::of(step, e))?;

        let max_read = match client.get_connection(&server).await {
            Ok(c) => c.conn_info().map_or(0x10000, |i| i.negotiation.max_read_size),
            Err(_) => 0x10000,
        };
        let chunk = max_read.clamp(0x1000, READ_CHUNK) as usize;
        Ok(Share { client, tree, limit, chunk })
    }

    /// Lists `root` (a path in the tree, `""` for the share's root) and everything below it.
    /// Fails when `root` itself, or any folder below it, cannot be listed for another reason than
    /// the server's refusal of that one folder.
    async fn list(&self, root: &str) -> std::result::Result<Listing, Failure> {
        let mut listing = Listing::default();
        // Folders to list: (path in the tree, mirror path, depth); several listed at a time.
        let mut waiting: Vec<(String, PathBuf, usize)> = vec![(root.to_string(), PathBuf::new(), 0)];
        let mut running = FuturesUnordered::new();
        loop {
            while running.len() < IN_FLIGHT {
                let Some((dir, rel, depth)) = waiting.pop() else { break };
                running.push(async move {
                    let entries = self.list_dir(&dir).await;
                    (dir, rel, depth, entries)
                });
            }
            let Some((dir, rel, depth, entries)) = running.next().await else { break };
            let entries = match entries {
                Ok(entries) => entries,
                Err(Failure::Refused(why)) if depth > 0 => {
                    listing.problems.push(format!("{}: not listed ({why})", rel.display()));
                    listing.unlisted.push(rel);
                    continue;
                }
                Err(e) => return Err(e),
            };
            for entry in entries {
                let Ok(name) = String::try_from(entry.file_name) else {
                    listing.problems.push(format!("{}: a name that is not valid UTF-16 was skipped", display_dir(&rel)));
                    continue;
                };
                if name == "." || name == ".." {
                    continue;
                }
                let child_rel = match Mirror::safe(rel.iter().filter_map(|p| p.to_str()).chain([name.as_str()])) {
                    Some(r) => r,
                    None => {
                        listing.problems.push(format!("{}: the name {name:?} cannot be mirrored, skipped", display_dir(&rel)));
                        continue;
                    }
                };
                let child = if dir.is_empty() { name.clone() } else { format!("{dir}\\{name}") };
                let attributes = entry.file_attributes;
                if attributes.directory() {
                    if attributes.reparse_point() {
                        // A link to a folder elsewhere (a junction, a symbolic link): not followed.
                        tracing::debug!(path = %child_rel.display(), "smb: a linked folder is not followed");
                    } else if depth + 1 > MAX_DEPTH {
                        listing.problems.push(format!("{}: deeper than {MAX_DEPTH} folders, not listed", child_rel.display()));
                        listing.unlisted.push(child_rel);
                    } else {
                        waiting.push((child, child_rel, depth + 1));
                    }
                    continue;
                }
                if reserved(&name) {
                    listing.problems.push(format!("{}: a name the mirror keeps for itself, skipped", child_rel.display()));
                    continue;
                }
                let mtime = system_time(entry.last_write_time.since_epoch());
                listing.files.insert(child_rel, RemoteFile { path: child, size: entry.end_of_file, mtime });
            }
        }
        Ok(listing)
    }

    /// The entries of one folder.
    async fn list_dir(&self, dir: &str) -> std::result::Result<Vec<FileDirectoryInformation>, Failure> {
        let what = format!("list {}", shown(dir));
        let access = DirAccessMask::new().with_list_directory(true).with_read_attributes(true).with_synchronize(true);
        let resource = timed(&what, self.limit, self.tree.create(dir, &FileCreateArgs::make_open_existing(access.into()))).await?;
        let directory = match resource {
            Resource::Directory(d) => Arc::new(d),
            other => {
                close(other, self.limit).await;
                return Err(Failure::Refused(format!("{what}: not a folder")));
            }
        };
        let mut entries = Vec::new();
        let listed: std::result::Result<(), Failure> = async {
            let mut stream = timed(&what, self.limit, Directory::query::<FileDirectoryInformation>(&directory, "*")).await?;
            loop {
                match tokio::time::timeout(self.limit, stream.next()).await {
                    Ok(Some(Ok(entry))) => entries.push(entry),
                    Ok(Some(Err(e))) => return Err(Failure::of(&what, e)),
                    Ok(None) => return Ok(()),
                    Err(_) => return Err(Failure::Lost(format!("{what}: no answer within {} ms", self.limit.as_millis()))),
                }
            }
        }
        .await;
        let _ = tokio::time::timeout(self.limit, directory.close()).await;
        listed.map(|()| entries)
    }

    /// Reads one file whole.
    async fn read(&self, path: &str) -> std::result::Result<Vec<u8>, Failure> {
        let what = format!("read {}", shown(path));
        let access = FileAccessMask::new().with_file_read_data(true).with_file_read_attributes(true).with_synchronize(true);
        let resource = timed(&what, self.limit, self.tree.create(path, &FileCreateArgs::make_open_existing(access))).await?;
        let file = match resource {
            Resource::File(f) => f,
            other => {
                close(other, self.limit).await;
                return Err(Failure::Refused(format!("{what}: not a file")));
            }
        };
        let read: std::result::Result<Vec<u8>, Failure> = async {
            // The size the server gave at open; reads stop there (or earlier, should it shrink).
            let len = timed(&what, self.limit, smb::GetLen::get_len(&file)).await?;
            let len = usize::try_from(len).map_err(|_| Failure::Refused(format!("{what}: {len} bytes is too large")))?;
            let mut bytes = vec![0u8; len];
            let mut done = 0;
            while done < len {
                let end = len.min(done + self.chunk);
                let n = timed(&what, self.limit, smb::ReadAt::read_at(&file, &mut bytes[done..end], done as u64)).await?;
                if n == 0 {
                    break;
                }
                done += n;
            }
            bytes.truncate(done);
            Ok(bytes)
        }
        .await;
        let _ = tokio::time::timeout(self.limit, file.close()).await;
        read
    }

    /// Logs off and disconnects, within one time limit; a failure changes nothing now.
    async fn close(self) {
        if tokio::time::timeout(self.limit, self.client.close()).await.is_err() {
            tracing::debug!("smb: closing the connection took longer than {} ms", self.limit.as_millis());
        }
    }
}

/// The source's folder as a path in the tree: backslashes, no leading or trailing one.
fn folder(source: &SourceConfig) -> String {
    source.path.replace('/', "\\").split('\\').filter(|p| !p.is_empty()).collect::<Vec<_>>().join("\\")
}

/// The address to reach `host` at: an IP literal as it is, a name resolved now (within `limit`).
async fn resolve(host: &str, port: u16, limit: Duration) -> std::result::Result<String, Failure> {
    let host = host.trim().trim_start_matches('[').trim_end_matches(']');
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Ok(ip.to_string());
    }
    let lookup = tokio::net::lookup_host((host, port));
    match tokio::time::timeout(limit, lookup).await {
        Ok(Ok(mut addrs)) => addrs.next().map(|a| a.ip().to_string()).ok_or_else(|| Failure::Lost(format!("resolve {host}: no address"))),
        Ok(Err(e)) => Err(Failure::Lost(format!("resolve {host}: {e}"))),
        Err(_) => Err(Failure::Lost(format!("resolve {host}: no answer within {} ms", limit.as_millis()))),
    }
}

/// Runs one network step within `limit`.
async fn timed<T>(what: &str, limit: Duration, step: impl Future<Output = smb::Result<T>>) -> std::result::Result<T, Failure> {
    match tokio::time::timeout(limit, step).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(Failure::of(what, e)),
        Err(_) => Err(Failure::Lost(format!("{what}: no answer within {} ms", limit.as_millis()))),
    }
}

/// Closes a handle that turned out to be of the wrong kind.
async fn close(resource: Resource, limit: Duration) {
    let closing = async {
        match &resource {
            Resource::File(f) => f.close().await,
            Resource::Directory(d) => d.close().await,
            Resource::Pipe(p) => p.close().await,
        }
    };
    let _ = tokio::time::timeout(limit, closing).await;
}

/// Whether a mirror path is one of the mirror's own state files.
fn is_state(rel: &Path) -> bool {
    rel.file_name().is_some_and(|n| n.to_string_lossy().starts_with(STATE_PREFIX))
}

/// Whether a share's file name is one the mirror keeps for itself: a state file's, or that of a
/// file being written (which the mirror would clear as stale).
fn reserved(name: &str) -> bool {
    name.starts_with(STATE_PREFIX) || name.starts_with('.') && name.ends_with(PART_SUFFIX)
}

/// A tree path for messages: `\` for the share's root.
fn shown(path: &str) -> String {
    format!("\\{path}")
}

/// A mirror folder for messages: `.` for the mirror's root.
fn display_dir(rel: &Path) -> String {
    if rel.as_os_str().is_empty() {
        ".".into()
    } else {
        rel.display().to_string()
    }
}

/// The server's time (a span since 1601-01-01 UTC) as a system time; times before 1970 are
/// read as 1970, which the mirror can store and compare.
fn system_time(since_1601: Duration) -> SystemTime {
    since_1601.checked_sub(Duration::from_secs(FILETIME_TO_UNIX_SECS)).map_or(UNIX_EPOCH, |d| UNIX_EPOCH + d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_times_become_system_times() {
        let t = Duration::from_secs(FILETIME_TO_UNIX_SECS + 1_700_000_000) + Duration::from_nanos(1_234_500);
        assert_eq!(system_time(t), UNIX_EPOCH + Duration::from_secs(1_700_000_000) + Duration::from_nanos(1_234_500));
        assert_eq!(system_time(Duration::ZERO), UNIX_EPOCH);
    }

    #[test]
    fn state_files_are_the_mirrors() {
        assert!(is_state(Path::new(".ragbox-sync.json")));
        assert!(is_state(Path::new("sub/.ragbox-sync-state")));
        assert!(!is_state(Path::new("a.md")));
        assert!(!is_state(Path::new(".ragbox-access")));
        assert!(reserved(".ragbox-sync.json") && reserved(".a.md.part"));
        assert!(!reserved(".ragbox-access") && !reserved(".ragboxignore") && !reserved("a.part"));
    }
}
