//! Zip containers (Office Open XML, OpenDocument, EPUB) and the XML inside them, read with
//! bounds: how many members, how much a member inflates to, how many XML nodes, how deep the
//! walkers go. Also the checks that tell an encrypted or legacy binary Office file from a corrupt
//! one, so the user is told what to do.
//!
//! May import `types` and `error` only (through `source`).
//!
//! - Members are read through [`Package::text`] / [`Package::bytes`], each capped at
//!   [`MAX_MEMBER_BYTES`]; [`inflated_bytes`] (run by [`guard`](super::guard) before any parser)
//!   counts what every member inflates to without keeping it, so a zip bomb is refused up front.
//! - XML parts are parsed by roxmltree ([`xml`]), which refuses a DTD (so no entity expansion)
//!   and parses without recursion; at most [`MAX_XML_NODES`] nodes. Walkers of the tree recurse at
//!   most [`MAX_DEPTH`] elements deep and read anything deeper as plain text.
//! - A file that is an OLE compound file where a zip is expected is either an encrypted Office
//!   file (it holds an `EncryptedPackage` stream) or a legacy binary one renamed
//!   ([`SkipReason::Encrypted`], [`SkipReason::Legacy`]).

use std::io::{Cursor, Read};

use zip::result::ZipError;
use zip::ZipArchive;

use super::SkipReason;

/// Members a container may hold.
pub const MAX_MEMBERS: usize = 20_000;

/// Bytes one member may inflate to.
pub const MAX_MEMBER_BYTES: u64 = 256 << 20;

/// Nodes one XML part may have (a 100,000-row sheet has a few million).
pub const MAX_XML_NODES: u32 = 16_000_000;

/// Elements a tree walker descends before it reads the rest of a subtree as plain text.
pub const MAX_DEPTH: usize = 256;

/// The magic number of an OLE compound file (legacy `.doc`/`.xls`/`.ppt`, and encrypted OOXML).
const OLE_MAGIC: [u8; 8] = [0xd0, 0xcf, 0x11, 0xe0, 0xa1, 0xb1, 0x1a, 0xe1];

/// Whether `bytes` are an OLE compound file.
pub fn is_ole(bytes: &[u8]) -> bool {
    bytes.starts_with(&OLE_MAGIC)
}

/// Why an OLE compound file was given where a zip container was expected: encrypted when it
/// holds the `EncryptedPackage` stream (its name is stored in UTF-16), else a legacy binary file
/// with a new extension.
pub fn ole_reason(bytes: &[u8], legacy: &'static str) -> SkipReason {
    let name: Vec<u8> = "EncryptedPackage".encode_utf16().flat_map(u16::to_le_bytes).collect();
    if bytes.windows(name.len()).any(|w| w == name.as_slice()) {
        SkipReason::Encrypted
    } else {
        SkipReason::Legacy { format: legacy }
    }
}

/// An open zip container.
pub struct Package<'a> {
    zip: ZipArchive<Cursor<&'a [u8]>>,
}

impl<'a> Package<'a> {
    /// Opens `bytes` as a zip container. `legacy` names the binary format an OLE file would be
    /// (for the skip reason).
    pub fn open(bytes: &'a [u8], legacy: &'static str) -> Result<Package<'a>, SkipReason> {
        if is_ole(bytes) {
            return Err(ole_reason(bytes, legacy));
        }
        if !bytes.starts_with(b"PK") {
            return Err(SkipReason::corrupt("not a zip container (no PK header)"));
        }
        let zip = ZipArchive::new(Cursor::new(bytes)).map_err(|e| zip_reason(&e))?;
        if zip.len() > MAX_MEMBERS {
            return Err(SkipReason::OverLimit {
                what: format!("a container of {} members (the limit is {MAX_MEMBERS})", zip.len()),
            });
        }
        Ok(Package { zip })
    }

    /// The members' names, in the container's order.
    pub fn names(&self) -> Vec<String> {
        self.zip.file_names().filter_map(|n| n.ok().map(|n| n.into_owned())).collect()
    }

    /// Member `name`'s bytes, or `None` when there is no such member.
    pub fn bytes(&mut self, name: &str) -> Result<Option<Vec<u8>>, SkipReason> {
        let mut member = match self.zip.by_name(name) {
            Ok(member) => member,
            Err(ZipError::FileNotFound) => return Ok(None),
            Err(e) => return Err(zip_reason(&e)),
        };
        let mut out = Vec::with_capacity(member.size().min(16 << 20) as usize);
        (&mut member)
            .take(MAX_MEMBER_BYTES + 1)
            .read_to_end(&mut out)
            .map_err(|e| SkipReason::corrupt(format!("member {name}: {e}")))?;
        if out.len() as u64 > MAX_MEMBER_BYTES {
            return Err(member_over_limit(name));
        }
        Ok(Some(out))
    }

    /// Member `name` as text (UTF-8, a byte-order mark dropped), or `None` when absent.
    pub fn text(&mut self, name: &str) -> Result<Option<String>, SkipReason> {
        let Some(bytes) = self.bytes(name)? else { return Ok(None) };
        let text = String::from_utf8(bytes).map_err(|e| {
            SkipReason::corrupt(format!("member {name} is not UTF-8 (byte {})", e.utf8_error().valid_up_to()))
        })?;
        Ok(Some(match text.strip_prefix('\u{feff}') {
            Some(rest) => rest.to_string(),
            None => text,
        }))
    }

    /// Member `name`, which the format requires, as text; `Corrupt` naming it when absent.
    pub fn required(&mut self, name: &str) -> Result<String, SkipReason> {
        self.text(name)?.ok_or_else(|| SkipReason::corrupt(format!("no {name} in the container")))
    }
}

fn member_over_limit(name: &str) -> SkipReason {
    SkipReason::OverLimit {
        what: format!("member {name} inflates past {} MiB (a zip bomb?)", MAX_MEMBER_BYTES >> 20),
    }
}

/// The skip reason for a zip error: a password-protected archive is [`SkipReason::Encrypted`].
fn zip_reason(e: &ZipError) -> SkipReason {
    match e {
        ZipError::UnsupportedArchive(msg) if *msg == ZipError::PASSWORD_REQUIRED => SkipReason::Encrypted,
        ZipError::InvalidPassword => SkipReason::Encrypted,
        e => SkipReason::corrupt(format!("broken zip container: {e}")),
    }
}

/// Counts what the members of a zip container inflate to, all together, stopping past `cap`;
/// nothing is kept. A file that is not a zip counts 0 (its parser reports it). A member over
/// [`MAX_MEMBER_BYTES`] counts as past the cap.
pub fn inflated_bytes(bytes: &[u8], cap: u64) -> u64 {
    let Ok(mut zip) = ZipArchive::new(Cursor::new(bytes)) else { return 0 };
    let mut total = 0u64;
    for i in 0..zip.len().min(MAX_MEMBERS) {
        let Ok(mut member) = zip.by_index(i) else { continue };
        let left = cap.saturating_sub(total).min(MAX_MEMBER_BYTES) + 1;
        let n = std::io::copy(&mut (&mut member).take(left), &mut std::io::sink()).unwrap_or(0);
        if n > MAX_MEMBER_BYTES {
            return cap.saturating_add(1);
        }
        total += n;
        if total > cap {
            return total;
        }
    }
    total
}

/// Parses an XML part: no DTD, at most [`MAX_XML_NODES`] nodes. `what` names the part in errors.
pub fn xml<'x>(text: &'x str, what: &str) -> Result<roxmltree::Document<'x>, SkipReason> {
    let text = without_plain_doctype(text);
    let options = roxmltree::ParsingOptions { allow_dtd: false, nodes_limit: MAX_XML_NODES, ..Default::default() };
    roxmltree::Document::parse_with_options(text, options).map_err(|e| match e {
        roxmltree::Error::NodesLimitReached => {
            SkipReason::OverLimit { what: format!("{what} has more than {MAX_XML_NODES} XML nodes") }
        }
        roxmltree::Error::DtdDetected => {
            SkipReason::corrupt(format!("{what} declares a DTD (refused: entity expansion)"))
        }
        e => SkipReason::corrupt(format!("{what}: {e}")),
    })
}

/// `text` without a document type declaration that has no internal subset (`<!DOCTYPE html>`
/// of XHTML: it declares no entity, but roxmltree refuses every DTD). One with an internal
/// subset (`[...]`, where entities are declared) is left for roxmltree to refuse.
fn without_plain_doctype(text: &str) -> &str {
    let Some(at) = text.find("<!DOCTYPE") else { return text };
    let Some(len) = text[at..].find('>') else { return text };
    if text[at..at + len].contains('[') || text[..at].contains("<!--") {
        return text;
    }
    // Only a prolog (XML declaration, whitespace) may come before it; keep the root after.
    if !text[..at].trim_start().is_empty() && !text[..at].trim_start().starts_with("<?xml") {
        return text;
    }
    &text[at + len + 1..]
}

/// The text of every descendant text node of `node`, in document order (iterative, any depth).
pub fn all_text(node: roxmltree::Node<'_, '_>) -> String {
    node.descendants().filter(|n| n.is_text()).filter_map(|n| n.text()).collect()
}

/// A relationship target resolved against the folder of the part that names it: `../media/a.png`
/// from `word/document.xml` is `media/a.png`; an absolute target (`/ppt/slides/slide1.xml`) drops
/// its slash. Percent-escapes are left as they are.
pub fn resolve(part: &str, target: &str) -> String {
    if let Some(absolute) = target.strip_prefix('/') {
        return absolute.to_string();
    }
    let mut path: Vec<&str> = part.split('/').collect();
    path.pop();
    for piece in target.split('/') {
        match piece {
            "" | "." => {}
            ".." => {
                path.pop();
            }
            p => path.push(p),
        }
    }
    path.join("/")
}

/// The relationships of `part` (`word/_rels/document.xml.rels` for `word/document.xml`): id →
/// (type, resolved target). Absent relationships give an empty list.
pub fn relationships(pkg: &mut Package<'_>, part: &str) -> Result<Vec<(String, String, String)>, SkipReason> {
    let (dir, file) = part.rsplit_once('/').unwrap_or(("", part));
    let rels = if dir.is_empty() { format!("_rels/{file}.rels") } else { format!("{dir}/_rels/{file}.rels") };
    let Some(text) = pkg.text(&rels)? else { return Ok(Vec::new()) };
    let doc = xml(&text, &rels)?;
    Ok(doc
        .descendants()
        .filter(|n| n.has_tag_name("Relationship") || n.tag_name().name() == "Relationship")
        .filter(|n| n.attribute("TargetMode") != Some("External"))
        .filter_map(|n| {
            let id = n.attribute("Id")?;
            let kind = n.attribute("Type").unwrap_or("");
            let target = n.attribute("Target")?;
            Some((id.to_string(), kind.to_string(), resolve(part, target)))
        })
        .collect())
}

/// The part a relationship of `kind` (matched by the end of its type URI, e.g.
/// `/officeDocument`) points to from the package root, else `fallback`.
pub fn main_part(pkg: &mut Package<'_>, kind: &str, fallback: &str) -> Result<String, SkipReason> {
    let rels = relationships(pkg, "")?;
    Ok(rels.into_iter().find(|(_, t, _)| t.ends_with(kind)).map(|(_, _, target)| target).unwrap_or_else(|| fallback.into()))
}

/// Dublin Core `title` and `creator` of an Office core-properties or OpenDocument meta part.
pub fn title_and_author(doc: &roxmltree::Document<'_>) -> (Option<String>, Option<String>) {
    let find = |name: &str| {
        doc.descendants()
            .find(|n| n.is_element() && n.tag_name().name() == name)
            .map(|n| super::one_line(&all_text(n)))
            .filter(|s| !s.is_empty())
    };
    (find("title"), find("creator").or_else(|| find("initial-creator")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn zip_of(members: &[(&str, &[u8])]) -> Vec<u8> {
        let mut out = Cursor::new(Vec::new());
        let mut w = zip::ZipWriter::new(&mut out);
        for (name, data) in members {
            w.start_file(*name, zip::write::SimpleFileOptions::default()).unwrap();
            w.write_all(data).unwrap();
        }
        w.finish().unwrap();
        out.into_inner()
    }

    #[test]
    fn members_read_and_absent_ones_are_none() {
        let bytes = zip_of(&[("a/b.xml", b"\xef\xbb\xbf<x/>"), ("c.txt", b"hi")]);
        let mut pkg = Package::open(&bytes, "Word").unwrap();
        assert_eq!(pkg.text("a/b.xml").unwrap().as_deref(), Some("<x/>"));
        assert_eq!(pkg.text("missing").unwrap(), None);
        assert!(matches!(pkg.required("missing"), Err(SkipReason::Corrupt { .. })));
    }

    #[test]
    fn a_zip_bomb_is_counted_past_the_cap() {
        let zeros = vec![0u8; 8 << 20];
        let bytes = zip_of(&[("big", &zeros), ("big2", &zeros)]);
        assert!(bytes.len() < 200_000, "deflate squeezes zeros");
        assert!(inflated_bytes(&bytes, 10 << 20) > 10 << 20);
        assert_eq!(inflated_bytes(&bytes, 64 << 20), 16 << 20);
        assert_eq!(inflated_bytes(b"not a zip", 10), 0);
    }

    #[test]
    fn ole_files_are_encrypted_or_legacy() {
        let mut legacy = OLE_MAGIC.to_vec();
        legacy.extend_from_slice(&[0; 512]);
        assert_eq!(Package::open(&legacy, "Word").err(), Some(SkipReason::Legacy { format: "Word" }));
        let mut encrypted = legacy.clone();
        encrypted.extend("EncryptedPackage".encode_utf16().flat_map(u16::to_le_bytes));
        assert_eq!(Package::open(&encrypted, "Word").err(), Some(SkipReason::Encrypted));
        assert!(matches!(Package::open(b"PK\x03\x04junk", "Word"), Err(SkipReason::Corrupt { .. })));
    }

    #[test]
    fn xml_refuses_dtds_and_entity_bombs() {
        let laughs = r#"<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol"><!ENTITY lol2 "&lol;&lol;&lol;">]><a>&lol2;</a>"#;
        assert!(matches!(xml(laughs, "part"), Err(SkipReason::Corrupt { detail }) if detail.contains("DTD")));
        assert!(xml("<a><b>x</b></a>", "part").is_ok());
        let xhtml = "<?xml version=\"1.0\"?>\n<!DOCTYPE html>\n<html><body>x</body></html>";
        assert_eq!(xml(xhtml, "nav").unwrap().root_element().tag_name().name(), "html");
    }

    #[test]
    fn targets_resolve_against_the_naming_part() {
        assert_eq!(resolve("word/document.xml", "media/a.png"), "word/media/a.png");
        assert_eq!(resolve("ppt/slides/slide1.xml", "../notesSlides/n1.xml"), "ppt/notesSlides/n1.xml");
        assert_eq!(resolve("ppt/presentation.xml", "/ppt/slides/slide2.xml"), "ppt/slides/slide2.xml");
        assert_eq!(resolve("", "word/document.xml"), "word/document.xml");
    }
}
