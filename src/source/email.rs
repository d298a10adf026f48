//! Stub.
use std::path::Path;
use super::{Parser, SkipReason};
use crate::types::ParsedDocument;
/// Stub.
#[derive(Debug, Clone, Copy, Default)]
pub struct EmailParser;
impl Parser for EmailParser {
    fn name(&self) -> &'static str { "email" }
    fn parse(&self, _path: &Path, _bytes: &[u8]) -> Result<ParsedDocument, SkipReason> { Err(SkipReason::Unsupported) }
}
