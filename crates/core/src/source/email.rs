//! E-mail: one message (`.eml`) or a mailbox of many (`.mbox`), parsed with mail-parser.
//!
//! The normalised text is generated, message after message: a header block
//! (`From: ...\nTo: ...\nDate: ...\nSubject: ...`) emitted as a Heading whose title is the subject
//! (level 1 for a single message, level 2 per message in a mailbox), then the body. Bodies are the
//! text parts (HTML-only bodies are converted to text by mail-parser); quoted replies (`>` lines,
//! with an `On ... wrote:` attribution line before them, or everything from an Outlook
//! `-----Original Message-----` line on) become Quote blocks, and the rest is analysed like plain
//! text (paragraphs, lists). Text attachments (`text/plain`, markdown, HTML, other `text/*`) follow
//! under a heading `Attachment: name`; attached messages are rendered like messages.
//!
//! The raw bytes need not be UTF-8 (parts carry their own charsets), so only the binary check
//! applies before parsing. A message with none of From, To, Subject, Date or Message-ID is
//! `Corrupt`, as is a mailbox holding no message. Title: the (first) subject, else the file stem.
//! Metadata: `from`, `to`, `date` (RFC 3339), `subject` for a message; `subject` of the first
//! message and `messages` (the count) for a mailbox.

use std::collections::BTreeMap;
use std::io::Cursor;
use std::path::Path;

use mail_parser::{Address, Message, MessageParser, MimeHeaders};

use super::{finish, html, markdown, normalise, text, title_from_path, InputKind, Parser, SkipReason, TextBuilder};
use crate::types::{BlockKind, ParsedDocument};

/// The e-mail parser (`.eml` and `.mbox`).
#[derive(Debug, Clone, Copy, Default)]
pub struct EmailParser;

impl Parser for EmailParser {
    fn name(&self) -> &'static str {
        "email"
    }

    fn input(&self) -> InputKind {
        InputKind::TextBytes
    }

    fn parse(&self, path: &Path, bytes: &[u8]) -> Result<ParsedDocument, SkipReason> {
        let is_mbox = path.extension().is_some_and(|e| e.eq_ignore_ascii_case("mbox"));
        let bytes = bytes.strip_prefix(b"\xef\xbb\xbf").unwrap_or(bytes);
        let parser = MessageParser::default();
        let mut out = TextBuilder::default();
        let mut metadata = BTreeMap::new();
        let title = if is_mbox || bytes.starts_with(b"From ") {
            let raws: Vec<Vec<u8>> = mail_parser::mailbox::mbox::MessageIterator::new(Cursor::new(bytes))
                .filter_map(Result::ok)
                .map(|m| m.unwrap_contents())
                .collect();
            let messages: Vec<Message<'_>> =
                raws.iter().filter_map(|raw| parser.parse(raw.as_slice())).filter(has_headers).collect();
            if messages.is_empty() {
                return Err(SkipReason::corrupt(
                    "no e-mail message found (an mbox starts each one with a `From ` line)",
                ));
            }
            let level = if is_mbox { 2 } else { 1 };
            for message in &messages {
                render(&mut out, message, level);
            }
            let first = subject(&messages[0]);
            if is_mbox {
                metadata.insert("messages".to_string(), messages.len().to_string());
                if let Some(s) = &first {
                    metadata.insert("subject".to_string(), s.clone());
                }
            } else {
                message_metadata(&messages[0], &mut metadata);
            }
            first
        } else {
            let message =
                parser.parse(bytes).filter(has_headers).ok_or_else(|| SkipReason::corrupt("no e-mail headers"))?;
            render(&mut out, &message, 1);
            message_metadata(&message, &mut metadata);
            subject(&message)
        };
        let title = title.unwrap_or_else(|| title_from_path(path));
        Ok(finish(self.name(), title, out.text, out.blocks, metadata))
    }
}

/// Whether a parsed message has any of the headers a real message has.
fn has_headers(message: &Message<'_>) -> bool {
    message.from().is_some()
        || message.to().is_some()
        || message.subject().is_some()
        || message.date().is_some()
        || message.message_id().is_some()
}

fn subject(message: &Message<'_>) -> Option<String> {
    message.subject().map(super::one_line).filter(|s| !s.is_empty())
}

/// `Name <address>, ...`.
fn addresses(address: Option<&Address<'_>>) -> Option<String> {
    let list: Vec<String> = address?
        .iter()
        .map(|a| match (a.name(), a.address()) {
            (Some(name), Some(addr)) => format!("{name} <{addr}>"),
            (Some(name), None) => name.to_string(),
            (None, Some(addr)) => addr.to_string(),
            (None, None) => String::new(),
        })
        .filter(|s| !s.is_empty())
        .collect();
    (!list.is_empty()).then(|| super::one_line(&list.join(", ")))
}

fn message_metadata(message: &Message<'_>, metadata: &mut BTreeMap<String, String>) {
    if let Some(from) = addresses(message.from()) {
        metadata.insert("from".to_string(), from);
    }
    if let Some(to) = addresses(message.to()) {
        metadata.insert("to".to_string(), to);
    }
    if let Some(date) = message.date() {
        metadata.insert("date".to_string(), date.to_rfc3339());
    }
    if let Some(subject) = subject(message) {
        metadata.insert("subject".to_string(), subject);
    }
}

/// Appends one message: its header block as a heading, its bodies, its text attachments.
fn render(out: &mut TextBuilder, message: &Message<'_>, level: u8) {
    let subject = subject(message);
    let mut header = String::new();
    let fields = [
        ("From", addresses(message.from())),
        ("To", addresses(message.to())),
        ("Cc", addresses(message.cc())),
        ("Date", message.header_raw("Date").map(super::one_line)),
        ("Subject", subject.clone()),
    ];
    for (name, value) in fields {
        if let Some(value) = value.filter(|v| !v.is_empty()) {
            header.push_str(&format!("{name}: {value}\n"));
        }
    }
    let title = subject.unwrap_or_else(|| "(no subject)".to_string());
    out.block(BlockKind::Heading { level, title }, &header, None);
    for i in 0..message.text_body_count() {
        if let Some(body) = message.body_text(i) {
            body_blocks(out, &body);
        }
    }
    for part in message.attachments() {
        if let Some(nested) = part.message() {
            render(out, nested, (level + 1).min(6));
            continue;
        }
        let Some(content) = part.text_contents() else { continue };
        let ctype = part.content_type();
        if !part.is_text() && !ctype.is_some_and(|c| c.ctype().eq_ignore_ascii_case("text")) {
            continue;
        }
        let name = part.attachment_name().map(super::one_line).unwrap_or_else(|| "unnamed".to_string());
        let subtype = ctype.and_then(|c| c.subtype()).unwrap_or("plain").to_ascii_lowercase();
        let lower = name.to_ascii_lowercase();
        let title = format!("Attachment: {name}");
        out.block(BlockKind::Heading { level: (level + 1).min(6), title: title.clone() }, &title, None);
        let content = normalise(content);
        // A page nested too deep for the HTML parser is read as plain text.
        if (subtype == "html" || part.is_text_html()) && html::nesting_estimate(&content) <= html::MAX_NESTING {
            let page = html::extract(&content);
            let start = out.raw(&page.text);
            out.blocks.extend(
                page.blocks
                    .into_iter()
                    .map(|(k, s, p)| (k, crate::types::Span::new(s.start + start, s.end + start), p)),
            );
        } else if subtype == "markdown"
            || subtype == "x-markdown"
            || lower.ends_with(".md")
            || lower.ends_with(".markdown")
        {
            let start = out.raw(content.trim_end());
            let end = out.text.len();
            let md = markdown::blocks_in(&out.text[start..end], start);
            out.blocks.extend(md.blocks);
        } else {
            let start = out.raw(content.trim_end());
            let end = out.text.len();
            let blocks = text::blocks_in(&out.text, start, end, None, text::Style::Plain);
            out.blocks.extend(blocks);
        }
    }
}

/// How a body line reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LineKind {
    Blank,
    Quoted,
    Text,
}

/// Appends a body: quoted stretches as Quote blocks, the rest analysed as plain text.
fn body_blocks(out: &mut TextBuilder, body: &str) {
    let body = normalise(body);
    let body = body.trim_end();
    let body = body.trim_start_matches(['\n', ' ', '\t']);
    if body.is_empty() {
        return;
    }
    let base = out.raw(body);
    // (start, end) of each line, absolute.
    let mut lines = Vec::new();
    let mut pos = base;
    for s in body.split('\n') {
        lines.push((pos, pos + s.len()));
        pos += s.len() + 1;
    }
    let text = &out.text;
    let line = |i: usize| &text[lines[i].0..lines[i].1];
    let mut kinds: Vec<LineKind> = (0..lines.len())
        .map(|i| {
            let l = line(i).trim_start();
            if l.is_empty() {
                LineKind::Blank
            } else if l.starts_with('>') {
                LineKind::Quoted
            } else {
                LineKind::Text
            }
        })
        .collect();
    // Outlook-style replies: everything from the separator on is quoted.
    if let Some(sep) = (0..lines.len()).find(|&i| is_original_separator(line(i))) {
        for k in kinds.iter_mut().skip(sep) {
            if *k == LineKind::Text {
                *k = LineKind::Quoted;
            }
        }
    }
    // Attribution lines (`On ... wrote:`, possibly wrapped over two lines) before a quote.
    for i in 0..lines.len() {
        if kinds[i] != LineKind::Text || !line(i).trim_end().ends_with("wrote:") {
            continue;
        }
        let next = (i + 1..lines.len()).find(|&j| kinds[j] != LineKind::Blank);
        if next.is_some_and(|j| kinds[j] == LineKind::Quoted) {
            kinds[i] = LineKind::Quoted;
            if i > 0 && kinds[i - 1] == LineKind::Text && line(i - 1).trim_start().starts_with("On ") {
                kinds[i - 1] = LineKind::Quoted;
            }
        }
    }
    let mut blocks = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        if kinds[i] == LineKind::Blank {
            i += 1;
            continue;
        }
        let quoted = kinds[i] == LineKind::Quoted;
        // A run of same-kind lines; blank lines inside a quote run stay in it when the quote
        // resumes after them.
        let mut j = i;
        let mut last = i;
        while j < lines.len() {
            match kinds[j] {
                LineKind::Blank => {}
                k if (k == LineKind::Quoted) == quoted => last = j,
                _ => break,
            }
            j += 1;
        }
        let (start, end) = (lines[i].0, lines[last].1);
        if quoted {
            blocks.push((BlockKind::Quote, crate::types::Span::new(start, end), None));
        } else {
            blocks.extend(text::blocks_in(text, start, end, None, text::Style::Plain));
        }
        i = last + 1;
    }
    out.blocks.extend(blocks);
}

fn is_original_separator(line: &str) -> bool {
    let t = line.trim();
    t.starts_with("-----") && t.to_ascii_lowercase().contains("original message")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::testutil::check_document;

    fn parse(name: &str, s: &[u8]) -> ParsedDocument {
        let doc = EmailParser.parse(Path::new(name), s).unwrap();
        check_document(&doc);
        doc
    }

    fn blocks(doc: &ParsedDocument) -> Vec<(BlockKind, &str)> {
        doc.blocks.iter().map(|b| (b.kind.clone(), &doc.text[b.span.range()])).collect()
    }

    const REPLY: &str = "From: Alice Smith <alice@example.com>\r\n\
To: Bob <bob@example.com>, carol@example.com\r\n\
Date: Tue, 5 Mar 2024 10:15:00 +0100\r\n\
Subject: Re: Travel =?UTF-8?Q?polic=C3=A9?=\r\n\
Message-ID: <1@example.com>\r\n\
MIME-Version: 1.0\r\n\
Content-Type: multipart/mixed; boundary=\"XX\"\r\n\
\r\n\
--XX\r\n\
Content-Type: text/plain; charset=iso-8859-1\r\n\
Content-Transfer-Encoding: quoted-printable\r\n\
\r\n\
Hi Bob,\r\n\
\r\n\
The per diem is 40 =80 a day.\r\n\
Hotels up to 150.\r\n\
\r\n\
On Mon, 4 Mar 2024 at 09:00, Bob <bob@example.com> wrote:\r\n\
> What is the per diem?\r\n\
>\r\n\
> Thanks\r\n\
\r\n\
Alice\r\n\
--XX\r\n\
Content-Type: text/markdown; name=\"rules.md\"\r\n\
Content-Disposition: attachment; filename=\"rules.md\"\r\n\
\r\n\
# Rules\r\n\
\r\n\
- book early\r\n\
- keep receipts\r\n\
--XX\r\n\
Content-Type: application/octet-stream; name=\"scan.bin\"\r\n\
Content-Disposition: attachment; filename=\"scan.bin\"\r\n\
Content-Transfer-Encoding: base64\r\n\
\r\n\
AAECAwQ=\r\n\
--XX--\r\n";

    #[test]
    fn message_with_quote_and_attachment() {
        let doc = parse("/mail/reply.eml", REPLY.as_bytes());
        assert_eq!(doc.title, "Re: Travel policé");
        assert_eq!(doc.metadata["from"], "Alice Smith <alice@example.com>");
        assert_eq!(doc.metadata["to"], "Bob <bob@example.com>, carol@example.com");
        assert_eq!(doc.metadata["subject"], "Re: Travel policé");
        assert!(doc.metadata["date"].starts_with("2024-03-05T10:15:00"), "{:?}", doc.metadata["date"]);
        let h = |level: u8, title: &str| BlockKind::Heading { level, title: title.to_string() };
        assert_eq!(
            blocks(&doc),
            vec![
                (
                    h(1, "Re: Travel policé"),
                    "From: Alice Smith <alice@example.com>\nTo: Bob <bob@example.com>, carol@example.com\n\
                     Date: Tue, 5 Mar 2024 10:15:00 +0100\nSubject: Re: Travel policé"
                ),
                (BlockKind::Paragraph, "Hi Bob,"),
                (BlockKind::Paragraph, "The per diem is 40 € a day.\nHotels up to 150."),
                (
                    BlockKind::Quote,
                    "On Mon, 4 Mar 2024 at 09:00, Bob <bob@example.com> wrote:\n> What is the per diem?\n>\n> Thanks"
                ),
                (BlockKind::Paragraph, "Alice"),
                (h(2, "Attachment: rules.md"), "Attachment: rules.md"),
                (h(1, "Rules"), "# Rules"),
                (BlockKind::List, "- book early\n- keep receipts"),
            ]
        );
        assert!(!doc.text.contains("AAEC"));
    }

    #[test]
    fn html_only_body_is_converted() {
        let eml = b"From: a@example.com\nSubject: Notice\nContent-Type: text/html\n\n<html><body><p>Office <b>closed</b> on Friday.</p><p>Second para.</p></body></html>\n";
        let doc = parse("n.eml", eml);
        assert_eq!(doc.title, "Notice");
        assert!(doc.text.contains("Office closed on Friday."), "{:?}", doc.text);
        assert!(!doc.text.contains("<p>"));
        assert!(doc.blocks.len() >= 2);
    }

    #[test]
    fn mbox_messages_are_level_two_sections() {
        let mbox = b"From alice@example.com Mon Mar  4 09:00:00 2024\n\
From: alice@example.com\nSubject: First topic\nDate: Mon, 4 Mar 2024 09:00:00 +0000\n\nBody one.\n\n\
From bob@example.com Mon Mar  4 10:00:00 2024\n\
From: bob@example.com\nSubject: Second topic\n\nBody two.\n>From the archive, escaped.\n";
        let doc = parse("/mail/list.mbox", mbox);
        assert_eq!(doc.title, "First topic");
        assert_eq!(doc.metadata["messages"], "2");
        assert_eq!(doc.metadata["subject"], "First topic");
        let heads: Vec<_> = doc
            .blocks
            .iter()
            .filter_map(|b| match &b.kind {
                BlockKind::Heading { level, title } => Some((*level, title.as_str())),
                _ => None,
            })
            .collect();
        assert_eq!(heads, vec![(2, "First topic"), (2, "Second topic")]);
        assert!(doc.text.contains("Body one."));
        assert!(doc.text.contains("From the archive, escaped."));
    }

    #[test]
    fn outlook_style_reply_is_quoted() {
        let eml = b"From: a@example.com\nSubject: Re: x\n\nYes.\n\n-----Original Message-----\nFrom: b@example.com\nCan we?\n";
        let doc = parse("r.eml", eml);
        let got = blocks(&doc);
        assert_eq!(got[1], (BlockKind::Paragraph, "Yes."));
        assert_eq!(got[2], (BlockKind::Quote, "-----Original Message-----\nFrom: b@example.com\nCan we?"));
    }

    #[test]
    fn garbage_is_corrupt() {
        let corrupt =
            |name: &str, b: &[u8]| matches!(EmailParser.parse(Path::new(name), b), Err(SkipReason::Corrupt { .. }));
        assert!(corrupt("x.eml", b"just some words, no headers at all\nand more\n"));
        assert!(corrupt("x.eml", b"\xff\xfe\x01garbage"));
        assert!(corrupt("x.mbox", b"Subject: not an mbox\n\nbody\n"));
        assert_eq!(crate::source::parse(Path::new("x.eml"), b"\x00\x01\x02\x03", 1 << 20), Err(SkipReason::Binary));
    }
}
