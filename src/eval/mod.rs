//! Retrieval evaluation on BEIR-format data: metrics, data loading, plots; the runner lives here too.

pub mod answers;
pub mod beir;
pub mod conversations;
pub mod metrics;
pub mod plot;
pub mod qa;
pub mod run;
pub mod support;
