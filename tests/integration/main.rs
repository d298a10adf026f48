//! ragbox's integration tests: one binary, driving the library and the CLI over real model files,
//! real fixtures and a real loopback HTTP server. Needs `models/` filled by
//! `scripts/setup/fetch-models.sh` (the normal test command runs it first); a missing model fails with a
//! message naming that command.

mod cli;
mod common;
mod golden;
mod ingest;
mod kernels;
mod models;
mod retrieve;
mod server;
mod serve_faults;
mod web;
mod access;
mod mcp;
mod sso;
mod answer;
mod backup;
mod faults;
mod inference_server;
mod shared;
mod shared_servers;
mod nodes;
mod sources;
mod retention;
#[path = "../support/servers.rs"]
mod servers;
