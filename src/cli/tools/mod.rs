//! The measuring tools: `bench`, `eval`, `trace`, `embed`, `parse` and `models`. They drive the
//! pipeline's parts directly (the app, the store, the models) and may import any layer of the
//! library; every other command is a face that goes through `ragbox::service`
//! (`scripts/check-layers.sh` checks both).

pub mod bench;
pub mod embed;
pub mod eval;
pub mod models;
pub mod parse;
pub mod trace;

use ragbox::app::App;

use super::GlobalArgs;

/// The application (models and settings) the tools drive, from the global flags' configuration.
pub fn app(g: &GlobalArgs) -> anyhow::Result<App> {
    Ok(App::new(g.config()?)?)
}
