//! The measuring tools: `bench`, `eval`, `trace`, `embed`, `parse` and `models`. They drive the
//! pipeline's parts directly (the app, the store, the models) and may import any module of
//! `ragbox-core`; every other command is a face in `ragbox-cli`, which depends on the service
//! alone.

pub mod bench;
pub mod embed;
pub mod eval;
pub mod models;
pub mod parse;
pub mod trace;

use ragbox_core::app::App;

use ragbox_cli::GlobalArgs;

/// The application (models and settings) the tools drive, from the global flags' configuration.
pub fn app(g: &GlobalArgs) -> anyhow::Result<App> {
    Ok(App::new(g.config()?)?)
}
