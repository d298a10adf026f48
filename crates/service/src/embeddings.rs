//! Embeddings for other tools inside the air gap: the vectors of texts made by a tenant's own
//! embedder (the one its index was built with, at its precision) or by an embedder of the
//! manifest named outright, behind the same keys and audit log as every other request. The
//! server's `POST /v1/embeddings` speaks the OpenAI shape over it.
//!
//! A text is embedded as a passage (a document to index) unless the caller says it is a query:
//! models with instructions (nomic's `search_query:` / `search_document:`) give different vectors
//! for the two. The audit event records the model, how many texts and tokens, never the texts.

use serde::Serialize;

use super::{Caller, Service};
use ragbox_core::error::{Error, Result};
use ragbox_core::store::KeyRole;
use ragbox_core::types::TextKind;

/// Most texts in one request: a larger batch is the client's to split.
pub const MAX_EMBED_INPUTS: usize = 256;

/// Which embedder makes the vectors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EmbedWith<'a> {
    /// The tenant's own: the model and precision its index was built with, so the vectors can be
    /// compared with the tenant's.
    Tenant(&'a str),
    /// An embedding model of the manifest, by name (`all-minilm-l6-v2`, `name@int8`).
    Model(&'a str),
}

/// The vectors of a request.
#[derive(Debug, Clone, Serialize)]
pub struct Embedded {
    /// The model that made them, as indexes name it (`all-minilm-l6-v2@int8`).
    pub model: String,
    /// One L2-normalised vector per text, in order.
    pub vectors: Vec<Vec<f32>>,
    /// Tokens the model read (special tokens included).
    pub tokens: usize,
    /// Texts cut to the model's window.
    pub truncated: usize,
}

impl Service {
    /// Embeds `texts` as `kind` with the embedder `with` names (any key role; a tenant out of the
    /// key's scope reads as unknown). At most [`MAX_EMBED_INPUTS`] texts, none empty.
    pub fn embed(&self, caller: &Caller, with: EmbedWith<'_>, texts: &[&str], kind: TextKind) -> Result<Embedded> {
        caller.require(KeyRole::Reader, "embedding texts")?;
        if texts.is_empty() {
            return Err(Error::Invalid("`input` is empty; send a string or a list of strings".into()));
        }
        if texts.len() > MAX_EMBED_INPUTS {
            return Err(Error::Invalid(format!(
                "`input` has {} texts; send at most {MAX_EMBED_INPUTS} per request",
                texts.len()
            )));
        }
        if let Some(i) = texts.iter().position(|t| t.trim().is_empty()) {
            return Err(Error::Invalid(format!("`input` text {i} is empty; every text needs some words")));
        }
        let (tenant, embedder) = match with {
            EmbedWith::Tenant(name) => {
                let row = self.tenant(caller, name)?;
                (row.name.clone(), self.app.index_embedder(&row.model)?)
            }
            EmbedWith::Model(name) => (caller.tenant.clone().unwrap_or_default(), self.app.embedder(Some(name))?),
        };
        let embeddings = self.audit_outcome(
            caller,
            &tenant,
            "embed",
            embedder.embed(texts, kind),
            |e| {
                serde_json::json!({ "model": embedder.model_id(), "inputs": texts.len(), "tokens": e.iter().map(|v| v.tokens).sum::<usize>(),
                                    "kind": format!("{kind:?}").to_lowercase() })
            },
            serde_json::json!({ "model": embedder.model_id(), "inputs": texts.len() }),
        )?;
        Ok(Embedded {
            model: embedder.model_id().to_string(),
            tokens: embeddings.iter().map(|e| e.tokens).sum(),
            truncated: embeddings.iter().filter(|e| e.truncated_from.is_some()).count(),
            vectors: embeddings.into_iter().map(|e| e.vector).collect(),
        })
    }
}
