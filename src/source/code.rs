//! Stub.
use std::path::Path;
use super::{Parser, SkipReason};
use crate::types::ParsedDocument;
/// Stub.
#[derive(Debug, Clone, Copy, Default)]
pub struct CodeParser;
impl Parser for CodeParser {
    fn name(&self) -> &'static str { "code" }
    fn parse(&self, _path: &Path, _bytes: &[u8]) -> Result<ParsedDocument, SkipReason> { Err(SkipReason::Unsupported) }
}
