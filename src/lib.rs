//! ragbox: a local-first, fully offline retrieval-augmented answering appliance.
//!
//! # Architecture
//!
//! One crate; modules play the part crates play elsewhere, and depend in one direction:
//!
//! ```text
//! types <- error <- config
//! model (manifest, models folder, checksums, device, tokenizer, batching)
//!   <- embed (Embedder: BERT / nomic-bert on candle)
//!   <- rerank (Reranker: BERT cross-encoder on candle)
//! source, chunk, store <- ingest (write path)
//! embed, rerank, store <- retrieve (read path: hybrid search, fusion, rerank, refusal floor)
//!   <- eval (BEIR metrics, configurations side by side)
//! app (composition root: the only place that names concrete backends)
//!   <- service (what a request does: search, ask, chat, documents, keys, audit; both faces call it)
//!   <- cli (one file per subcommand), server (HTTP routes; in the binary)
//! ```
//!
//! Nothing imports `app` or `cli`; `scripts/check-layers.sh` enforces the edges. Models load only
//! from the models folder, verified against the sha256 pins of the manifest compiled into the
//! binary; nothing at run time opens a network connection except `models pull`, which a person
//! asks for.

#![warn(missing_docs)]

pub mod allowlist;
pub mod annotate;
pub mod answer;
pub mod app;
pub mod chunk;
pub mod config;
pub mod embed;
pub mod error;
pub mod eval;
pub mod fuzz;
pub mod generate;
pub mod ingest;
pub mod model;
pub mod rerank;
pub mod retrieve;
pub mod service;
pub mod source;
pub mod store;
pub mod types;

#[cfg(any(test, feature = "testing"))]
pub mod testing;

pub use error::{Error, Fault, Result};
