//! Source code (Rust, Python, JavaScript/JSX, TypeScript/TSX, Go), split into syntax units with
//! tree-sitter.
//!
//! The normalised text is the source itself. Each top-level unit becomes a Code block with its
//! language and a symbol:
//! - Rust: functions (`name`), `struct Foo`, `enum Foo`, `union Foo`, `trait Foo`, `mod foo`,
//!   `type Foo`, `macro_rules! foo`, `impl Foo` / `impl Trait for Foo`;
//! - Python: functions (`name`), `class Foo` (decorators included);
//! - JavaScript/TypeScript: functions, `class Foo`, `interface Foo`, `type Foo`, `enum Foo`,
//!   `namespace Foo`, `const f = () => ...` (`f`), and the same behind `export`;
//! - Go: functions, methods (`Recv.Name`), `type Foo`.
//!
//! Comments and attributes directly above a unit (no blank line between) belong to it; inner
//! module docs (`//!`) do not. A unit longer than [`SPLIT_LINES`] lines that holds methods (a Rust
//! `impl` or `trait`, a class) is split: each method is a unit (`Foo::bar` in Rust, `Foo.bar`
//! elsewhere) and the pieces between them keep the container's symbol. What lies between
//! top-level units (imports, module docs, constants) becomes Code blocks without a symbol. Syntax
//! errors still give blocks: tree-sitter recovers, and what it cannot place lands between units.
//! Title: the file name.

use std::collections::BTreeMap;
use std::path::Path;

use tree_sitter::Node;

use super::{decode_utf8, finish, one_line, Parser, RawBlock, SkipReason};
use crate::types::{BlockKind, ParsedDocument, Span};

/// The source-code parser.
#[derive(Debug, Clone, Copy, Default)]
pub struct CodeParser;

/// A container unit longer than this many lines is split into its methods.
pub const SPLIT_LINES: usize = 60;

/// The languages read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lang {
    Rust,
    Python,
    JavaScript,
    TypeScript,
    Tsx,
    Go,
}

impl Lang {
    fn from_path(path: &Path) -> Option<Lang> {
        let ext = path.extension()?.to_str()?.to_ascii_lowercase();
        Some(match ext.as_str() {
            "rs" => Lang::Rust,
            "py" | "pyi" => Lang::Python,
            "js" | "jsx" | "mjs" | "cjs" => Lang::JavaScript,
            "ts" | "mts" | "cts" => Lang::TypeScript,
            "tsx" => Lang::Tsx,
            "go" => Lang::Go,
            _ => return None,
        })
    }

    fn name(self) -> &'static str {
        match self {
            Lang::Rust => "rust",
            Lang::Python => "python",
            Lang::JavaScript => "javascript",
            Lang::TypeScript | Lang::Tsx => "typescript",
            Lang::Go => "go",
        }
    }

    fn grammar(self) -> tree_sitter::Language {
        match self {
            Lang::Rust => tree_sitter_rust::LANGUAGE.into(),
            Lang::Python => tree_sitter_python::LANGUAGE.into(),
            Lang::JavaScript => tree_sitter_javascript::LANGUAGE.into(),
            Lang::TypeScript => tree_sitter_typescript::LANGUAGE_TYPESCRIPT.into(),
            Lang::Tsx => tree_sitter_typescript::LANGUAGE_TSX.into(),
            Lang::Go => tree_sitter_go::LANGUAGE.into(),
        }
    }

    /// The separator between a container and a member in symbols.
    fn member_sep(self) -> &'static str {
        match self {
            Lang::Rust => "::",
            _ => ".",
        }
    }
}

impl Parser for CodeParser {
    fn name(&self) -> &'static str {
        "code"
    }

    fn parse(&self, path: &Path, bytes: &[u8]) -> Result<ParsedDocument, SkipReason> {
        let lang = Lang::from_path(path).ok_or(SkipReason::Unsupported)?;
        let text = decode_utf8(bytes)?;
        let mut parser = tree_sitter::Parser::new();
        parser.set_language(&lang.grammar()).map_err(|e| SkipReason::corrupt(format!("tree-sitter grammar: {e}")))?;
        let tree = parser.parse(&text, None).ok_or_else(|| SkipReason::corrupt("tree-sitter gave no tree"))?;
        let cx = Cx { src: text.as_bytes(), lang };
        let root = tree.root_node();
        let children: Vec<Node<'_>> = (0..root.child_count()).filter_map(|i| root.child(i as u32)).collect();
        let units = cx.units(&children, |n| cx.top_symbol(n));
        let mut blocks = Vec::new();
        cx.emit(0, text.len(), &units, None, &mut blocks);
        let title =
            path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| super::title_from_path(path));
        let mut metadata = BTreeMap::new();
        metadata.insert("language".to_string(), lang.name().to_string());
        Ok(finish(self.name(), title, text, blocks, metadata))
    }
}

/// A syntax unit: its byte range (leading comments included), symbol and node.
struct Unit<'t> {
    start: usize,
    end: usize,
    symbol: String,
    node: Node<'t>,
}

struct Cx<'s> {
    src: &'s [u8],
    lang: Lang,
}

/// The last row a node covers (a node ending at column 0 ends on the row before).
fn last_row(node: Node<'_>) -> usize {
    let end = node.end_position();
    if end.column == 0 && end.row > node.start_position().row {
        end.row - 1
    } else {
        end.row
    }
}

impl<'s> Cx<'s> {
    fn text(&self, node: Node<'_>) -> &'s str {
        node.utf8_text(self.src).unwrap_or("")
    }

    fn field(&self, node: Node<'_>, name: &str) -> Option<String> {
        node.child_by_field_name(name).map(|n| one_line(self.text(n))).filter(|s| !s.is_empty())
    }

    /// Whether a node attaches to the unit after it: a comment that is not an inner doc comment,
    /// or a Rust outer attribute.
    fn attaches(&self, node: Node<'_>) -> bool {
        match node.kind() {
            "comment" | "line_comment" | "block_comment" => {
                let t = self.text(node);
                !(t.starts_with("//!") || t.starts_with("/*!"))
            }
            "attribute_item" => true,
            _ => false,
        }
    }

    /// The units among sibling nodes, each with the comments and attributes directly above it.
    fn units<'t>(&self, children: &[Node<'t>], symbol: impl Fn(Node<'t>) -> Option<String>) -> Vec<Unit<'t>> {
        let mut units: Vec<Unit<'t>> = Vec::new();
        // First node of the run of attachable nodes just before the current one.
        let mut lead: Option<Node<'t>> = None;
        let mut prev_row: Option<usize> = None;
        let mut prev_was_unit = false;
        for &child in children {
            let starts_fresh = prev_row.is_none_or(|r| child.start_position().row > r);
            // A comment on the line a unit ends on (`} // end`) belongs to that unit.
            if prev_was_unit && !starts_fresh && child.kind().contains("comment") {
                if let Some(unit) = units.last_mut() {
                    unit.end = child.end_byte();
                }
                prev_row = Some(last_row(child));
                continue;
            }
            if self.attaches(child) && starts_fresh {
                let contiguous = prev_row.is_some_and(|r| child.start_position().row <= r + 1);
                if lead.is_none() || !contiguous {
                    lead = Some(child);
                }
                prev_row = Some(last_row(child));
                prev_was_unit = false;
                continue;
            }
            if let Some(symbol) = symbol(child) {
                let attached = lead.filter(|_| prev_row.is_some_and(|r| child.start_position().row <= r + 1));
                let start = attached.map_or(child.start_byte(), |l| l.start_byte());
                units.push(Unit { start, end: child.end_byte(), symbol, node: child });
                prev_was_unit = true;
            } else {
                prev_was_unit = false;
            }
            lead = None;
            prev_row = Some(last_row(child));
        }
        units
    }

    /// Blocks for `start..end` holding `units`: the units, and the stretches between them with
    /// `gap_symbol`.
    fn emit(&self, start: usize, end: usize, units: &[Unit<'_>], gap_symbol: Option<&str>, out: &mut Vec<RawBlock>) {
        let code = |symbol: Option<String>| BlockKind::Code { language: Some(self.lang.name().to_string()), symbol };
        let mut pos = start;
        for unit in units {
            if unit.start > pos {
                out.push((code(gap_symbol.map(str::to_string)), Span::new(pos, unit.start), None));
            }
            let lines = unit.node.end_position().row - unit.node.start_position().row + 1;
            let split = (lines > SPLIT_LINES).then(|| self.members(unit)).flatten();
            match split {
                Some(members) if !members.is_empty() => {
                    self.emit(unit.start, unit.end, &members, Some(&unit.symbol), out)
                }
                _ => out.push((code(Some(unit.symbol.clone())), Span::new(unit.start, unit.end), None)),
            }
            pos = unit.end;
        }
        if end > pos {
            out.push((code(gap_symbol.map(str::to_string)), Span::new(pos, end), None));
        }
    }

    /// The methods of a container unit (impl, trait, class), when it is one.
    fn members<'t>(&self, unit: &Unit<'t>) -> Option<Vec<Unit<'t>>> {
        let node = self.definition(unit.node);
        let (owner, method_kinds): (String, &[&str]) = match (self.lang, node.kind()) {
            (Lang::Rust, "impl_item") => {
                let ty = self.field(node, "type")?;
                (ty.split('<').next().unwrap_or(&ty).trim().to_string(), &["function_item", "function_signature_item"])
            }
            (Lang::Rust, "trait_item") => (self.field(node, "name")?, &["function_item", "function_signature_item"]),
            (Lang::Python, "class_definition") => {
                (self.field(node, "name")?, &["function_definition", "decorated_definition"])
            }
            (
                Lang::JavaScript | Lang::TypeScript | Lang::Tsx,
                "class_declaration" | "abstract_class_declaration" | "class",
            ) => (self.field(node, "name")?, &["method_definition", "abstract_method_signature", "method_signature"]),
            _ => return None,
        };
        let body = node.child_by_field_name("body")?;
        let children: Vec<Node<'t>> = (0..body.child_count()).filter_map(|i| body.child(i as u32)).collect();
        let sep = self.lang.member_sep();
        Some(self.units(&children, |n| {
            let def = self.definition(n);
            method_kinds
                .contains(&n.kind())
                .then(|| self.field(def, "name"))
                .flatten()
                .map(|name| format!("{owner}{sep}{name}"))
        }))
    }

    /// The definition inside a wrapper (`export`, Python decorators), or the node itself.
    fn definition<'t>(&self, node: Node<'t>) -> Node<'t> {
        match node.kind() {
            "decorated_definition" => node.child_by_field_name("definition").unwrap_or(node),
            "export_statement" => node.child_by_field_name("declaration").unwrap_or(node),
            _ => node,
        }
    }

    /// The symbol of a top-level node that is a unit.
    fn top_symbol(&self, node: Node<'_>) -> Option<String> {
        let name = || self.field(node, "name");
        match (self.lang, node.kind()) {
            (Lang::Rust, "function_item") => name(),
            (Lang::Rust, "struct_item") => name().map(|n| format!("struct {n}")),
            (Lang::Rust, "enum_item") => name().map(|n| format!("enum {n}")),
            (Lang::Rust, "union_item") => name().map(|n| format!("union {n}")),
            (Lang::Rust, "trait_item") => name().map(|n| format!("trait {n}")),
            (Lang::Rust, "mod_item") => node.child_by_field_name("body").and(name()).map(|n| format!("mod {n}")),
            (Lang::Rust, "type_item") => name().map(|n| format!("type {n}")),
            (Lang::Rust, "macro_definition") => name().map(|n| format!("macro_rules! {n}")),
            (Lang::Rust, "impl_item") => {
                let ty = self.field(node, "type")?;
                Some(match self.field(node, "trait") {
                    Some(tr) => format!("impl {tr} for {ty}"),
                    None => format!("impl {ty}"),
                })
            }
            (Lang::Python, "function_definition") => name(),
            (Lang::Python, "class_definition") => name().map(|n| format!("class {n}")),
            (Lang::Python, "decorated_definition") => self.top_symbol(node.child_by_field_name("definition")?),
            (Lang::JavaScript | Lang::TypeScript | Lang::Tsx, kind) => self.js_symbol(node, kind),
            (Lang::Go, "function_declaration") => name(),
            (Lang::Go, "method_declaration") => {
                let recv = node
                    .child_by_field_name("receiver")
                    .and_then(|r| r.named_child(0))
                    .and_then(|p| p.child_by_field_name("type"))
                    .map(|t| self.text(t).trim_start_matches('*').split('[').next().unwrap_or("").trim().to_string());
                let n = name()?;
                Some(match recv.filter(|r| !r.is_empty()) {
                    Some(r) => format!("{r}.{n}"),
                    None => n,
                })
            }
            (Lang::Go, "type_declaration") => {
                let names: Vec<String> = (0..node.named_child_count())
                    .filter_map(|i| node.named_child(i as u32))
                    .filter_map(|spec| self.field(spec, "name"))
                    .collect();
                (!names.is_empty()).then(|| format!("type {}", names.join(", ")))
            }
            _ => None,
        }
    }

    fn js_symbol(&self, node: Node<'_>, kind: &str) -> Option<String> {
        let name = || self.field(node, "name");
        match kind {
            "function_declaration" | "generator_function_declaration" | "function_signature" => name(),
            "class_declaration" | "abstract_class_declaration" => name().map(|n| format!("class {n}")),
            "interface_declaration" => name().map(|n| format!("interface {n}")),
            "type_alias_declaration" => name().map(|n| format!("type {n}")),
            "enum_declaration" => name().map(|n| format!("enum {n}")),
            "internal_module" | "module" => name().map(|n| format!("namespace {n}")),
            "lexical_declaration" | "variable_declaration" => {
                (0..node.named_child_count()).filter_map(|i| node.named_child(i as u32)).find_map(|d| {
                    let value = d.child_by_field_name("value")?;
                    matches!(
                        value.kind(),
                        "arrow_function" | "function_expression" | "function" | "generator_function" | "class"
                    )
                    .then(|| self.field(d, "name"))
                    .flatten()
                })
            }
            "export_statement" => match node.child_by_field_name("declaration") {
                Some(decl) => self.js_symbol(decl, decl.kind()),
                None => {
                    let is_default =
                        (0..node.child_count()).filter_map(|i| node.child(i as u32)).any(|c| c.kind() == "default");
                    is_default.then(|| "export default".to_string())
                }
            },
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::testutil::check_document;

    fn parse(name: &str, src: &str) -> ParsedDocument {
        let doc = CodeParser.parse(Path::new(name), src.as_bytes()).unwrap();
        check_document(&doc);
        doc
    }

    /// (symbol, first line of the block) per block.
    fn units(doc: &ParsedDocument) -> Vec<(Option<&str>, &str)> {
        doc.blocks
            .iter()
            .map(|b| match &b.kind {
                BlockKind::Code { symbol, .. } => {
                    (symbol.as_deref(), doc.text[b.span.range()].lines().next().unwrap_or(""))
                }
                k => panic!("not code: {k:?}"),
            })
            .collect()
    }

    const RUST: &str = r#"//! Module docs.

use std::fmt;

const LIMIT: usize = 3;

/// A point.
#[derive(Debug)]
pub struct Point {
    x: i32,
}

impl Point {
    /// Makes one.
    pub fn new(x: i32) -> Self {
        Point { x }
    }
}

impl fmt::Display for Point {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.x)
    }
}

// A loose comment.

fn main() {} // trailing
"#;

    #[test]
    fn rust_units_with_attached_docs() {
        let doc = parse("src/point.rs", RUST);
        assert_eq!(doc.title, "point.rs");
        assert_eq!(doc.metadata["language"], "rust");
        let got = units(&doc);
        assert_eq!(got[0], (None, "//! Module docs."));
        assert_eq!(
            &doc.text[doc.blocks[0].span.range()],
            "//! Module docs.\n\nuse std::fmt;\n\nconst LIMIT: usize = 3;"
        );
        assert_eq!(got[1], (Some("struct Point"), "/// A point."));
        assert_eq!(got[2], (Some("impl Point"), "impl Point {"));
        assert_eq!(got[3], (Some("impl fmt::Display for Point"), "impl fmt::Display for Point {"));
        assert_eq!(got[4], (None, "// A loose comment."));
        assert_eq!(got[5], (Some("main"), "fn main() {} // trailing"));
        assert_eq!(got.len(), 6);
        let BlockKind::Code { language, .. } = &doc.blocks[1].kind else { panic!() };
        assert_eq!(language.as_deref(), Some("rust"));
    }

    #[test]
    fn a_long_impl_is_split_into_methods() {
        let mut src = String::from("struct Big;\n\nimpl Big {\n    const N: u8 = 1;\n\n");
        for i in 0..12 {
            src.push_str(&format!(
                "    /// Method {i}.\n    pub fn m{i}(&self) -> u8 {{\n        let a = {i};\n        a + 1\n    }}\n\n"
            ));
        }
        src.push_str("}\n");
        let doc = parse("big.rs", &src);
        let got = units(&doc);
        assert_eq!(got[0], (Some("struct Big"), "struct Big;"));
        assert_eq!(got[1], (Some("impl Big"), "impl Big {"));
        assert_eq!(got[2], (Some("Big::m0"), "/// Method 0."));
        assert_eq!(got[13], (Some("Big::m11"), "/// Method 11."));
        assert_eq!(got[14], (Some("impl Big"), "}"));
        assert_eq!(got.len(), 15);
    }

    #[test]
    fn python_classes_and_functions() {
        let src = "\"\"\"Docs.\"\"\"\nimport os\n\n\n# Helper.\n@cache\ndef helper(x):\n    return x\n\n\nclass Store:\n    def get(self):\n        pass\n";
        let doc = parse("store.py", src);
        assert_eq!(
            units(&doc),
            vec![(None, "\"\"\"Docs.\"\"\""), (Some("helper"), "# Helper."), (Some("class Store"), "class Store:")]
        );
    }

    #[test]
    fn javascript_and_typescript_units() {
        let js = "import x from 'x';\n\nexport function load(a) {\n  return a;\n}\n\nconst add = (a, b) => a + b;\n\nclass Cart {\n  total() { return 0; }\n}\n\nexport default Cart;\n";
        let doc = parse("cart.jsx", js);
        assert_eq!(
            units(&doc),
            vec![
                (None, "import x from 'x';"),
                (Some("load"), "export function load(a) {"),
                (Some("add"), "const add = (a, b) => a + b;"),
                (Some("class Cart"), "class Cart {"),
                (Some("export default"), "export default Cart;"),
            ]
        );
        let ts = "export interface User {\n  id: number;\n}\n\ntype Id = number;\n\nexport enum Role { Admin, User }\n\nexport class Repo<T> {\n  find(id: Id): T | null { return null; }\n}\n";
        let doc = parse("repo.ts", ts);
        assert_eq!(
            units(&doc).iter().map(|u| u.0).collect::<Vec<_>>(),
            vec![Some("interface User"), Some("type Id"), Some("enum Role"), Some("class Repo")]
        );
        let tsx = "export const App = () => <div>Hi</div>;\n";
        assert_eq!(units(&parse("app.tsx", tsx)), vec![(Some("App"), "export const App = () => <div>Hi</div>;")]);
    }

    #[test]
    fn go_functions_methods_and_types() {
        let src = "package store\n\nimport \"fmt\"\n\n// Item is a thing.\ntype Item struct {\n\tName string\n}\n\nfunc (i *Item) String() string {\n\treturn fmt.Sprint(i.Name)\n}\n\nfunc New() Item { return Item{} }\n";
        let doc = parse("store.go", src);
        assert_eq!(
            units(&doc),
            vec![
                (None, "package store"),
                (Some("type Item"), "// Item is a thing."),
                (Some("Item.String"), "func (i *Item) String() string {"),
                (Some("New"), "func New() Item { return Item{} }"),
            ]
        );
    }

    #[test]
    fn syntax_errors_still_give_blocks() {
        let src = "fn good() {}\n\nfn broken( {\n    let x = ;\n\nstruct After { a: u8 }\n";
        let doc = parse("bad.rs", src);
        assert!(!doc.blocks.is_empty());
        assert!(units(&doc).iter().any(|u| u.0 == Some("good")));
    }
}
