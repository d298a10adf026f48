//! `ragbox mcp`: the Model Context Protocol over stdin and stdout, for an assistant or editor
//! that starts ragbox itself (its tools: `search`, `ask`, `list_documents`, `get_passage`).
//! It acts as the local user (every tenant, every document), or, with `RAGBOX_KEY` set, as that
//! key: its tenant, its role and its groups, as over HTTP. Logs go to stderr; stdout carries
//! only the protocol.

use clap::Args;

use ragbox_service::Caller;

use super::GlobalArgs;

/// Arguments of `mcp`.
#[derive(Debug, Args)]
pub struct McpArgs {}

/// `ragbox mcp`: serves until the client closes stdin.
pub fn run(g: &GlobalArgs, _args: McpArgs) -> anyhow::Result<u8> {
    let service = std::sync::Arc::new(g.service()?);
    let caller = match std::env::var("RAGBOX_KEY").ok().filter(|k| !k.trim().is_empty()) {
        Some(key) => match service.authenticate(key.trim())? {
            Some(row) => Caller::from_key(&row, None),
            None => anyhow::bail!("RAGBOX_KEY is not a valid key (unknown or revoked); `ragbox keys list` shows them"),
        },
        None => Caller::local(),
    };
    super::serve::runtime()?.block_on(ragbox_server::mcp::serve_stdio(service, caller))?;
    Ok(0)
}
