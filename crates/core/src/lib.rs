//! ragbox-core: the pipeline of ragbox, a local-first, fully offline retrieval-augmented
//! answering appliance. Everything below the service: parsing, chunking, the models, the store,
//! ingest, retrieval, answers, conversation, and the composition root that assembles them.
//!
//! # Architecture
//!
//! The workspace's crates are the floors (docs/ARCHITECTURE.md); inside this crate, modules
//! depend in one direction:
//!
//! ```text
//! types, words <- error <- config
//! access (who may read which documents: rules, audiences, the filter the indexes use)
//! model (manifest, models folder, checksums, device, tokenizer, batching)
//!   <- embed (Embedder: BERT / nomic-bert on candle)
//!   <- rerank (Reranker: BERT cross-encoder on candle)
//! source, chunk, store <- ingest (write path)
//! embed, rerank, store <- retrieve (read path: hybrid search, fusion, rerank, refusal floor)
//!   <- answer (prompt, focus, evidence, citations, support)
//! generate, words <- conversation (follow-ups, session memory, the standalone question)
//! app (composition root: the only place that names concrete backends)
//! ```
//!
//! Above this crate: `ragbox-service` (what a request does; the only crate the faces may use),
//! `ragbox-server` and `ragbox-cli` (the HTTP and command-line faces), and the `ragbox` binary
//! with the measuring tools. `scripts/check/layers.sh` checks the module edges here; cargo
//! checks the crates'. Models load only from the models folder, verified against the sha256
//! pins of the manifest compiled into the binary; nothing at run time opens a network
//! connection except `models pull`, which a person asks for.

#![warn(missing_docs)]

pub mod access;
pub mod allowlist;
pub mod annotation;
pub mod answer;
pub mod app;
pub mod chunk;
pub mod config;
pub mod conversation;
pub mod embed;
pub mod error;
pub mod generate;
pub mod ingest;
pub mod model;
pub mod rerank;
pub mod retrieve;
pub mod source;
pub mod store;
pub mod types;
pub mod words;

#[cfg(any(test, feature = "testing"))]
pub mod testing;

pub use error::{Error, Fault, Result};
