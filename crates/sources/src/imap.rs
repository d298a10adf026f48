//! IMAP mailboxes: each configured folder mirrored as one `.eml` file per message, and the
//! attachments the e-mail parser does not read itself (PDFs, Office files, images...) taken out
//! beside it, so that every format's own parser reads them.
//!
//! Mirror layout, one folder of the mirror per mailbox folder (`Policies/2026` nests):
//!
//! ```text
//! <mirror>/INBOX/<UIDVALIDITY>-<UID>.eml             the message, byte for byte
//! <mirror>/INBOX/<UIDVALIDITY>-<UID>.parts/1-a.pdf   its attachments that are not text
//! ```
//!
//! A message is in the mirror once its `.eml` is (its parts are written first), so a sync
//! killed mid-way refetches only what it had not finished. Messages never change on an IMAP
//! server: a message is fetched once, for as long as its folder's UIDVALIDITY stays the same
//! (a new UIDVALIDITY renames every message, so the whole folder is fetched again and the old
//! names pruned). A message deleted or moved out of the folder is no longer listed by
//! `UID SEARCH ALL`, and its files leave the mirror. Folders are opened with EXAMINE (read-only):
//! nothing on the server changes, not even a message's \Seen flag (`BODY.PEEK`).
//!
//! TLS is rustls with the ring provider (implicit, or STARTTLS before LOGIN), trusting the
//! source's `ca_file` or else the system's CA certificates.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use futures::TryStreamExt;
use mail_parser::{MessageParser, MimeHeaders, PartType};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

use crate::{unreachable, Mirror, SourceConfig, SourceTls, SyncEvent, SyncReport};
use ragbox_core::error::{Error, Result};

/// Messages fetched by one `UID FETCH`.
const FETCH_BATCH: usize = 64;

/// The suffix of a message's folder of attachments.
const PARTS_SUFFIX: &str = ".parts";

/// A connection, plain or TLS.
trait Stream: AsyncRead + AsyncWrite + Unpin + Send + std::fmt::Debug {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send + std::fmt::Debug> Stream for T {}

type Session = async_imap::Session<Box<dyn Stream>>;

/// What one folder holds now.
struct Listing {
    folder: String,
    dir: PathBuf,
    validity: u32,
    uids: BTreeSet<u32>,
}

pub(crate) fn sync(source: &SourceConfig, password: &str, mirror: &Mirror, progress: &mut (dyn FnMut(SyncEvent) + Send)) -> Result<SyncReport> {
    crate::runtime()?.block_on(async {
        let mut session = login(source, password).await?;
        let listings = list(source, &mut session).await?;
        let mut report = SyncReport { listed: listings.iter().map(|l| l.uids.len()).sum(), ..SyncReport::default() };

        // What the mirror has: the complete messages of each folder, by name.
        let mut have: Vec<BTreeMap<PathBuf, ()>> = Vec::new();
        let mut to_fetch = 0;
        for l in &listings {
            let files: BTreeMap<PathBuf, ()> = mirror.files(&l.dir)?.into_keys().map(|p| (p, ())).collect();
            to_fetch += l.uids.iter().filter(|&&uid| !files.contains_key(&message_path(l, uid))).count();
            have.push(files);
        }
        progress(SyncEvent::Listed { items: report.listed, to_fetch });

        for (l, files) in listings.iter().zip(&have) {
            let missing: Vec<u32> = l.uids.iter().copied().filter(|&uid| !files.contains_key(&message_path(l, uid))).collect();
            report.unchanged += l.uids.len() - missing.len();
            if missing.is_empty() {
                continue;
            }
            step(source, "EXAMINE", session.examine(&l.folder)).await?;
            for batch in missing.chunks(FETCH_BATCH) {
                fetch(source, &mut session, l, batch, mirror, &mut report, progress).await?;
            }
        }

        // Only now, with every folder listed and fetched: what the server no longer lists goes.
        for (l, files) in listings.iter().zip(&have) {
            // A configured folder nested in this one (`A/B` under `A`) is judged by its own listing.
            let nested = |path: &Path| listings.iter().any(|o| o.dir != l.dir && o.dir.starts_with(&l.dir) && path.starts_with(&o.dir));
            for path in files.keys().filter(|p| !nested(p)) {
                let keep = kept_message(l, path).is_some_and(|uid| l.uids.contains(&uid));
                if !keep {
                    mirror.remove(path)?;
                    if path.extension().is_some_and(|e| e == "eml") {
                        report.removed += 1;
                    }
                    progress(SyncEvent::Removed { path: path.clone() });
                }
            }
        }
        // Folders no longer configured.
        let configured: BTreeSet<&Path> = listings.iter().map(|l| l.dir.as_path()).collect();
        for path in mirror.files(Path::new(""))?.into_keys() {
            let inside = configured.iter().any(|dir| path.starts_with(dir));
            if !inside && !path.starts_with(".ragbox-sync") {
                mirror.remove(&path)?;
                if path.extension().is_some_and(|e| e == "eml") {
                    report.removed += 1;
                }
                progress(SyncEvent::Removed { path });
            }
        }
        let _ = tokio::time::timeout(timeout(source), session.logout()).await;
        Ok(report)
    })
}

pub(crate) fn probe(source: &SourceConfig, password: &str) -> Result<usize> {
    crate::runtime()?.block_on(async {
        let mut session = login(source, password).await?;
        let listings = list(source, &mut session).await?;
        let _ = tokio::time::timeout(timeout(source), session.logout()).await;
        Ok(listings.iter().map(|l| l.uids.len()).sum())
    })
}

/// `imap://user@host:port/FOLDER;UIDVALIDITY=V/;UID=N` (RFC 5092), then `/NAME` for an attachment.
pub(crate) fn origin(source: &SourceConfig, rel: &Path) -> Option<String> {
    let parts: Vec<String> = rel.components().map(|c| c.as_os_str().to_string_lossy().into_owned()).collect();
    let at = parts.iter().position(|p| p.ends_with(".eml") || p.ends_with(PARTS_SUFFIX))?;
    let stem = parts[at].trim_end_matches(".eml").trim_end_matches(PARTS_SUFFIX);
    let (validity, uid) = stem.split_once('-')?;
    let folder = parts[..at].join("/");
    let mut url = format!("{}/{folder};UIDVALIDITY={validity}/;UID={uid}", source.location());
    if let Some(name) = parts.get(at + 1) {
        url.push('/');
        url.push_str(name);
    }
    Some(url)
}

fn timeout(source: &SourceConfig) -> Duration {
    Duration::from_millis(source.timeout_ms)
}

/// One network step under the source's time limit; any failure is "unreachable".
async fn step<T, E: std::fmt::Display>(source: &SourceConfig, what: &str, f: impl std::future::Future<Output = std::result::Result<T, E>>) -> Result<T> {
    match tokio::time::timeout(timeout(source), f).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(unreachable(source, format!("{what}: {e}"))),
        Err(_) => Err(unreachable(source, format!("{what}: no answer within {} ms", source.timeout_ms))),
    }
}

async fn login(source: &SourceConfig, password: &str) -> Result<Session> {
    let port = source.port();
    let tcp = step(source, "connect", TcpStream::connect((source.host.as_str(), port))).await?;
    let stream: Box<dyn Stream> = match source.tls {
        SourceTls::Implicit => Box::new(tls(source, tcp).await?),
        SourceTls::None => Box::new(tcp),
        SourceTls::Starttls => {
            let mut client = async_imap::Client::new(tcp);
            greeting(source, &mut client).await?;
            step(source, "STARTTLS", client.run_command_and_check_ok("STARTTLS", None)).await?;
            Box::new(tls(source, client.into_inner()).await?)
        }
    };
    let mut client = async_imap::Client::new(stream);
    if source.tls != SourceTls::Starttls {
        greeting(source, &mut client).await?;
    }
    match tokio::time::timeout(timeout(source), client.login(&source.user, password)).await {
        Ok(Ok(session)) => Ok(session),
        Ok(Err((e, _))) => Err(unreachable(source, format!("LOGIN as {} refused: {e}; check user and password_file/password_env", source.user))),
        Err(_) => Err(unreachable(source, format!("LOGIN: no answer within {} ms", source.timeout_ms))),
    }
}

async fn greeting<T: AsyncRead + AsyncWrite + Unpin + Send + std::fmt::Debug>(source: &SourceConfig, client: &mut async_imap::Client<T>) -> Result<()> {
    match step(source, "greeting", client.read_response()).await? {
        Some(_) => Ok(()),
        None => Err(unreachable(source, "the server closed the connection before greeting")),
    }
}

async fn tls(source: &SourceConfig, tcp: TcpStream) -> Result<tokio_rustls::client::TlsStream<TcpStream>> {
    let config = tls_config(source)?;
    let name = rustls::pki_types::ServerName::try_from(source.host.clone())
        .map_err(|e| Error::Config(format!("source `{}`: host `{}` is not a TLS server name ({e})", source.name, source.host)))?;
    step(source, "TLS handshake", tokio_rustls::TlsConnector::from(config).connect(name, tcp)).await
}

/// The source's CA file, or the system's roots; the ring provider.
fn tls_config(source: &SourceConfig) -> Result<Arc<rustls::ClientConfig>> {
    let mut roots = rustls::RootCertStore::empty();
    match &source.ca_file {
        Some(file) => {
            let pem = std::fs::read(file).map_err(|e| Error::Config(format!("source `{}`: ca_file {}: {e}", source.name, file.display())))?;
            let certs: Vec<_> = rustls_pemfile::certs(&mut pem.as_slice())
                .collect::<std::result::Result<_, _>>()
                .map_err(|e| Error::Config(format!("source `{}`: ca_file {}: {e}", source.name, file.display())))?;
            let (added, _) = roots.add_parsable_certificates(certs);
            if added == 0 {
                return Err(Error::Config(format!("source `{}`: ca_file {} holds no certificate", source.name, file.display())));
            }
        }
        None => {
            let found = rustls_native_certs::load_native_certs();
            let (added, _) = roots.add_parsable_certificates(found.certs);
            if added == 0 {
                return Err(Error::Config(format!(
                    "source `{}`: TLS needs CA certificates and the system has none; install ca-certificates or set ca_file",
                    source.name
                )));
            }
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::Config(format!("TLS cannot be set up ({e})")))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

/// Every configured folder's UIDVALIDITY and UIDs, all or an error.
async fn list(source: &SourceConfig, session: &mut Session) -> Result<Vec<Listing>> {
    let mut out = Vec::new();
    for folder in &source.folders {
        let dir = Mirror::safe(folder.split('/')).ok_or_else(|| {
            Error::Config(format!("source `{}`: folder `{folder}` cannot be a folder of the mirror (empty part, `.` or `..`)", source.name))
        })?;
        let mailbox = step(source, &format!("EXAMINE {folder}"), session.examine(folder)).await?;
        let validity = mailbox
            .uid_validity
            .ok_or_else(|| unreachable(source, format!("EXAMINE {folder}: the server sent no UIDVALIDITY")))?;
        let uids = if mailbox.exists == 0 {
            BTreeSet::new()
        } else {
            step(source, &format!("UID SEARCH in {folder}"), session.uid_search("ALL")).await?.into_iter().collect()
        };
        out.push(Listing { folder: folder.clone(), dir, validity, uids });
    }
    Ok(out)
}

fn message_path(l: &Listing, uid: u32) -> PathBuf {
    l.dir.join(format!("{}-{uid}.eml", l.validity))
}

/// The UID of the message a mirror file belongs to, when the file is one of this listing's
/// UIDVALIDITY (a message or one of its parts).
fn kept_message(l: &Listing, path: &Path) -> Option<u32> {
    let rel = path.strip_prefix(&l.dir).ok()?;
    let first = rel.components().next()?.as_os_str().to_str()?;
    let stem = if rel.components().count() == 1 { first.strip_suffix(".eml")? } else { first.strip_suffix(PARTS_SUFFIX)? };
    let (validity, uid) = stem.split_once('-')?;
    (validity.parse::<u32>().ok()? == l.validity).then_some(())?;
    uid.parse().ok()
}

async fn fetch(
    source: &SourceConfig,
    session: &mut Session,
    l: &Listing,
    uids: &[u32],
    mirror: &Mirror,
    report: &mut SyncReport,
    progress: &mut (dyn FnMut(SyncEvent) + Send),
) -> Result<()> {
    let set = uids.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
    let what = format!("UID FETCH in {}", l.folder);
    let fetched: Vec<async_imap::types::Fetch> = step(source, &what, async {
        let stream = session.uid_fetch(&set, "(UID BODY.PEEK[])").await?;
        stream.try_collect().await
    })
    .await?;
    let mut seen = BTreeSet::new();
    for message in &fetched {
        let (Some(uid), Some(body)) = (message.uid, message.body()) else { continue };
        if !seen.insert(uid) || !uids.contains(&uid) {
            continue;
        }
        let eml = message_path(l, uid);
        let parts_dir = eml.with_extension("parts");
        for (name, bytes) in attachments(body) {
            let rel = parts_dir.join(&name);
            mirror.write(&rel, &bytes, None)?;
            report.bytes += bytes.len() as u64;
        }
        mirror.write(&eml, body, None)?;
        report.fetched += 1;
        report.bytes += body.len() as u64;
        progress(SyncEvent::Fetched { path: eml, bytes: body.len() as u64 });
    }
    for uid in uids.iter().filter(|u| !seen.contains(u)) {
        report.problems.push(format!("{}: UID {uid}: the server sent no message (deleted meanwhile?)", l.folder));
    }
    Ok(())
}

/// The attachments of a message the e-mail parser leaves out (anything that is not text or a
/// message), as (mirror file name, bytes), numbered in order: `1-report.pdf`.
fn attachments(raw: &[u8]) -> Vec<(String, Vec<u8>)> {
    let Some(message) = MessageParser::default().parse(raw) else { return Vec::new() };
    let mut out = Vec::new();
    for part in message.attachments() {
        let bytes = match &part.body {
            PartType::Binary(b) | PartType::InlineBinary(b) => b.to_vec(),
            // Text and attached messages are read by the e-mail parser, in the message.
            PartType::Text(_) | PartType::Html(_) | PartType::Message(_) | PartType::Multipart(_) => continue,
        };
        let name = part.attachment_name().map(file_name).unwrap_or_else(|| "attachment.bin".into());
        out.push((format!("{}-{name}", out.len() + 1), bytes));
    }
    out
}

/// A sender's attachment name made safe as one file name: no folders, no control characters,
/// not hidden, at most 120 bytes (the extension kept).
fn file_name(name: &str) -> String {
    let base = name.rsplit(['/', '\\']).next().unwrap_or("");
    let clean: String = base.chars().map(|c| if c.is_control() || c == ':' { '_' } else { c }).collect();
    let clean = clean.trim().trim_start_matches('.').to_string();
    if clean.is_empty() {
        return "attachment.bin".into();
    }
    if clean.len() <= 120 {
        return clean;
    }
    let ext = Path::new(&clean).extension().and_then(|e| e.to_str()).filter(|e| e.len() <= 10).unwrap_or("");
    let mut stem: String = clean.chars().take(100).collect();
    while stem.len() > 100 {
        stem.pop();
    }
    if ext.is_empty() { stem } else { format!("{stem}.{ext}") }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binary_attachments_come_out_text_ones_stay() {
        let raw = b"From: a@example.org\r\nSubject: s\r\nMIME-Version: 1.0\r\n\
Content-Type: multipart/mixed; boundary=\"b\"\r\n\r\n--b\r\nContent-Type: text/plain\r\n\r\nbody\r\n\
--b\r\nContent-Type: text/markdown\r\nContent-Disposition: attachment; filename=\"notes.md\"\r\n\r\n# n\r\n\
--b\r\nContent-Type: application/pdf\r\nContent-Disposition: attachment; filename=\"../../etc/report.pdf\"\r\n\
Content-Transfer-Encoding: base64\r\n\r\nJVBERi0xLjQK\r\n--b--\r\n";
        let parts = attachments(raw);
        assert_eq!(parts, vec![("1-report.pdf".to_string(), b"%PDF-1.4\n".to_vec())]);
    }

    #[test]
    fn names_are_one_safe_file() {
        assert_eq!(file_name(".hidden"), "hidden");
        assert_eq!(file_name("a\u{7}b.pdf"), "a_b.pdf");
        assert_eq!(file_name(""), "attachment.bin");
        let long = format!("{}.docx", "x".repeat(300));
        assert_eq!(file_name(&long), format!("{}.docx", "x".repeat(100)));
    }

    #[test]
    fn mirror_names_map_back_to_messages() {
        let l = Listing { folder: "INBOX".into(), dir: "INBOX".into(), validity: 7, uids: [3].into() };
        assert_eq!(kept_message(&l, Path::new("INBOX/7-3.eml")), Some(3));
        assert_eq!(kept_message(&l, Path::new("INBOX/7-3.parts/1-a.pdf")), Some(3));
        assert_eq!(kept_message(&l, Path::new("INBOX/6-3.eml")), None, "another UIDVALIDITY");
        assert_eq!(kept_message(&l, Path::new("INBOX/stray.txt")), None);
        let source: SourceConfig = SourceConfig {
            name: "m".into(),
            kind: crate::SourceKind::Imap,
            tenant: "default".into(),
            host: "127.0.0.1".into(),
            port: Some(1143),
            user: "archive".into(),
            password_file: None,
            password_env: Some("P".into()),
            tls: SourceTls::Starttls,
            ca_file: None,
            folders: vec!["INBOX".into()],
            share: None,
            path: String::new(),
            domain: None,
            interval: "15m".into(),
            groups: vec![],
            timeout_ms: 1000,
        };
        assert_eq!(origin(&source, Path::new("INBOX/7-3.eml")).unwrap(), "imap://archive@127.0.0.1:1143/INBOX;UIDVALIDITY=7/;UID=3");
        assert_eq!(
            origin(&source, Path::new("A/B/7-3.parts/1-a.pdf")).unwrap(),
            "imap://archive@127.0.0.1:1143/A/B;UIDVALIDITY=7/;UID=3/1-a.pdf"
        );
    }
}
