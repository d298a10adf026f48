//! PowerPoint presentations (`.pptx`, `.pptm`, `.ppsx`): slides in the presentation's order,
//! read with roxmltree through [`package`](super::package).
//!
//! Each slide is a section titled by its title placeholder (else `Slide N`) and its blocks carry
//! the slide number as their page. Text shapes in the order of the shape tree: placeholder bodies
//! as lists (nested by bullet level, numbered where the bullets are), text boxes as paragraphs;
//! tables as tables (the first row the header); grouped shapes read in place. The slide's speaker
//! notes are a `Speaker notes` sub-section.
//!
//! Title: the core properties' `dc:title`, else the first slide's title, else the file stem.
//! Metadata: `slides`, `author`.

use std::collections::BTreeMap;
use std::path::Path;

use roxmltree::Node;

use super::compose::{Composer, Item};
use super::docx::{attr, child, is};
use super::package::{self, Package, MAX_DEPTH};
use super::{finish, one_line, title_from_path, InputKind, Parser, SkipReason};
use crate::types::ParsedDocument;

/// The PowerPoint parser.
#[derive(Debug, Clone, Copy, Default)]
pub struct PptxParser;

impl Parser for PptxParser {
    fn name(&self) -> &'static str {
        "pptx"
    }

    fn input(&self) -> InputKind {
        InputKind::Binary
    }

    fn parse(&self, path: &Path, bytes: &[u8]) -> Result<ParsedDocument, SkipReason> {
        let mut pkg = Package::open(bytes, "PowerPoint")?;
        let main = package::main_part(&mut pkg, "/officeDocument", "ppt/presentation.xml")?;
        let presentation = pkg.required(&main)?;
        let presentation = package::xml(&presentation, &main)?;
        let rels = package::relationships(&mut pkg, &main)?;
        let slide_parts: Vec<String> = presentation
            .descendants()
            .filter(|n| is(*n, "sldId"))
            .filter_map(rel_id)
            .filter_map(|id| rels.iter().find(|(rid, _, _)| rid == id).map(|(_, _, target)| target.clone()))
            .collect();
        let mut composer = Composer::default();
        let mut first_title = None;
        for (i, part) in slide_parts.iter().enumerate() {
            let number = i + 1;
            composer.page = Some(u32::try_from(number).unwrap_or(u32::MAX));
            let Some(text) = pkg.text(part)? else { continue };
            let slide = package::xml(&text, part)?;
            let mut shapes = Shapes::default();
            if let Some(tree) = slide.descendants().find(|n| is(*n, "spTree")) {
                shapes.walk(tree, 0);
            }
            let title = shapes.title.clone().filter(|t| !t.is_empty());
            if first_title.is_none() {
                first_title = title.clone();
            }
            composer.push(Item::Heading(1, title.unwrap_or_else(|| format!("Slide {number}"))));
            composer.extend(shapes.items);
            let notes_part = package::relationships(&mut pkg, part)?
                .into_iter()
                .find(|(_, kind, _)| kind.ends_with("/notesSlide"))
                .map(|(_, _, target)| target);
            if let Some(notes_part) = notes_part {
                if let Some(text) = pkg.text(&notes_part)? {
                    let notes = package::xml(&text, &notes_part)?;
                    let paragraphs: Vec<String> = notes
                        .descendants()
                        .filter(|n| is(*n, "sp") && placeholder(*n).as_deref() == Some("body"))
                        .flat_map(|sp| sp.descendants().filter(|p| is(*p, "p")).map(paragraph_text).collect::<Vec<_>>())
                        .filter(|t| !t.trim().is_empty())
                        .collect();
                    if !paragraphs.is_empty() {
                        composer.push(Item::Heading(2, "Speaker notes".to_string()));
                        composer.extend(paragraphs.into_iter().map(Item::Paragraph));
                    }
                }
            }
        }
        let out = composer.finish();
        let (core_title, author) = match pkg.text("docProps/core.xml")? {
            Some(text) => package::title_and_author(&package::xml(&text, "docProps/core.xml")?),
            None => (None, None),
        };
        let mut metadata = BTreeMap::new();
        metadata.insert("slides".to_string(), slide_parts.len().to_string());
        if let Some(author) = author {
            metadata.insert("author".to_string(), author);
        }
        let title = core_title.or(first_title).unwrap_or_else(|| title_from_path(path));
        Ok(finish(self.name(), title, out.text, out.blocks, metadata))
    }
}

/// The relationship id of a `p:sldId` (`r:id`; the plain `id` is a number).
fn rel_id<'a>(n: Node<'a, '_>) -> Option<&'a str> {
    n.attributes().find(|a| a.name() == "id" && a.namespace().is_some()).map(|a| a.value())
}

/// The placeholder type of a shape (`title`, `ctrTitle`, `body`, ...; `body` when a placeholder
/// names no type), or `None` when the shape is not a placeholder.
fn placeholder(sp: Node<'_, '_>) -> Option<String> {
    let ph = child(sp, "nvSpPr").and_then(|n| child(n, "nvPr")).and_then(|n| child(n, "ph"))?;
    Some(attr(ph, "type").unwrap_or("body").to_string())
}

/// A DrawingML paragraph's text: runs and fields, line breaks kept.
fn paragraph_text(p: Node<'_, '_>) -> String {
    let mut out = String::new();
    for n in p.descendants().filter(Node::is_element) {
        match n.tag_name().name() {
            "t" => out.push_str(n.text().unwrap_or("")),
            "br" => out.push('\n'),
            _ => {}
        }
    }
    out
}

/// What a slide's shape tree holds.
#[derive(Debug, Default)]
struct Shapes {
    title: Option<String>,
    items: Vec<Item>,
}

impl Shapes {
    fn walk(&mut self, tree: Node<'_, '_>, depth: usize) {
        for shape in tree.children().filter(Node::is_element) {
            match shape.tag_name().name() {
                "sp" => self.shape(shape),
                "grpSp" if depth < MAX_DEPTH => self.walk(shape, depth + 1),
                "graphicFrame" => {
                    if let Some(table) = shape.descendants().find(|n| is(*n, "tbl")) {
                        let rows: Vec<Vec<String>> = table
                            .children()
                            .filter(|r| is(*r, "tr"))
                            .map(|tr| {
                                tr.children()
                                    .filter(|c| is(*c, "tc"))
                                    .map(|tc| {
                                        let ps: Vec<String> = tc.descendants().filter(|p| is(*p, "p")).map(paragraph_text).collect();
                                        one_line(&ps.join(" "))
                                    })
                                    .collect()
                            })
                            .collect();
                        let header = usize::from(rows.len() > 1);
                        self.items.push(Item::Table(rows, header));
                    }
                }
                _ => {}
            }
        }
    }

    fn shape(&mut self, sp: Node<'_, '_>) {
        let Some(body) = child(sp, "txBody") else { return };
        let kind = placeholder(sp);
        let paragraphs: Vec<Node<'_, '_>> = body.children().filter(|p| is(*p, "p")).collect();
        if matches!(kind.as_deref(), Some("title" | "ctrTitle")) {
            let text: Vec<String> = paragraphs.iter().map(|p| paragraph_text(*p)).collect();
            let text = one_line(&text.join(" "));
            if self.title.is_none() {
                self.title = Some(text);
            } else {
                self.items.push(Item::Paragraph(text));
            }
            return;
        }
        let bulleted_by_default = matches!(kind.as_deref(), Some("body" | "obj"));
        for p in paragraphs {
            let text = paragraph_text(p);
            if text.trim().is_empty() {
                continue;
            }
            let props = child(p, "pPr");
            let level = props.and_then(|pr| attr(pr, "lvl")).and_then(|l| l.parse::<usize>().ok()).unwrap_or(0);
            let numbered = props.and_then(|pr| child(pr, "buAutoNum")).is_some();
            let bullet = props.and_then(|pr| child(pr, "buChar")).is_some();
            let none = props.and_then(|pr| child(pr, "buNone")).is_some();
            if numbered || bullet || (bulleted_by_default && !none) {
                self.items.push(Item::ListEntry(level, numbered, text));
            } else {
                self.items.push(Item::Paragraph(text));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::testutil::{blocks_of, check_document, fixture};

    #[test]
    fn shapes_give_a_title_lists_and_paragraphs() {
        let xml = r#"<p:sld xmlns:p="p" xmlns:a="a"><p:cSld><p:spTree>
            <p:sp><p:nvSpPr><p:nvPr><p:ph type="title"/></p:nvPr></p:nvSpPr><p:txBody><a:p><a:r><a:t>Hotel caps</a:t></a:r></a:p></p:txBody></p:sp>
            <p:sp><p:nvSpPr><p:nvPr><p:ph idx="1"/></p:nvPr></p:nvSpPr><p:txBody>
              <a:p><a:r><a:t>London</a:t></a:r></a:p><a:p><a:pPr lvl="1"/><a:r><a:t>GBP 210</a:t></a:r></a:p></p:txBody></p:sp>
            <p:sp><p:nvSpPr><p:nvPr/></p:nvSpPr><p:txBody><a:p><a:r><a:t>Footer text</a:t></a:r></a:p></p:txBody></p:sp>
        </p:spTree></p:cSld></p:sld>"#;
        let doc = roxmltree::Document::parse(xml).unwrap();
        let mut shapes = Shapes::default();
        shapes.walk(doc.descendants().find(|n| is(*n, "spTree")).unwrap(), 0);
        assert_eq!(shapes.title.as_deref(), Some("Hotel caps"));
        assert_eq!(
            shapes.items,
            vec![
                Item::ListEntry(0, false, "London".into()),
                Item::ListEntry(1, false, "GBP 210".into()),
                Item::Paragraph("Footer text".into())
            ]
        );
    }

    #[test]
    fn pandoc_pptx_slides_tables_and_notes() {
        let doc = PptxParser.parse(Path::new("s.pptx"), &fixture("office/slides.pptx")).unwrap();
        check_document(&doc);
        let b = blocks_of(&doc);
        let titles: Vec<&str> = b.iter().filter_map(|(k, _)| match k { crate::types::BlockKind::Heading { level: 1, title } => Some(title.as_str()), _ => None }).collect();
        assert_eq!(titles, vec!["Depot volumes", "Late deliveries by depot", "Next steps"]);
        assert!(b.iter().any(|(_, t)| t.contains("- Rotterdam handled 41,250 parcels in the week starting 6 May 2024.")), "{b:?}");
        assert!(b.iter().any(|(k, t)| *k == crate::types::BlockKind::Table && t.starts_with("Depot | Late parcels | Share\nRotterdam | 812 | 2.0%")), "{b:?}");
        assert!(doc.text.contains("Speaker notes\n\nRotterdam had its busiest April so far."), "{}", doc.text);
        assert!(doc.text.contains("A Saturday morning shift starts at the Antwerp depot on 1 June 2024."));
        assert_eq!(doc.metadata["slides"], "3");
        assert_eq!(doc.blocks.last().unwrap().page, Some(3));
        assert_eq!(
            PptxParser.parse(Path::new("l.pptx"), &fixture("office/legacy.ppt")).err(),
            Some(SkipReason::Legacy { format: "PowerPoint" })
        );
    }
}
