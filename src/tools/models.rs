//! `ragbox models list | verify | path NAME | import DIR | pull NAME`.

use std::path::PathBuf;

use clap::Subcommand;

use ragbox_core::model::import::import_models;
use ragbox_core::model::pull::{pull_model, DEFAULT_ENDPOINT};
use ragbox_core::model::ModelSpec;

use super::app;
use ragbox_cli::{print_json, GlobalArgs};

/// Model management.
#[derive(Debug, Subcommand)]
pub enum ModelsCmd {
    /// Every model the manifest knows, and whether it is ready.
    List,
    /// Verify every file of every model present (sha256); exit non-zero when one fails.
    Verify,
    /// Print the verified path of a model's main file (the GGUF of an LLM), for other tools.
    Path {
        /// Manifest name of the model.
        name: String,
    },
    /// Copy models carried into an air gap from DIR into the models folder, verifying each file.
    Import {
        /// Folder holding the files (flat, a folder per model, or a hub cache).
        dir: PathBuf,
        /// Only this model (default: every model found in DIR).
        #[arg(long)]
        model: Option<String>,
    },
    /// Download a model from the Hugging Face hub (the only command that uses the network).
    Pull {
        /// Manifest name of the model.
        name: String,
        /// Hub endpoint (default: $HF_ENDPOINT, else the public hub).
        #[arg(long, env = "HF_ENDPOINT")]
        endpoint: Option<String>,
    },
}

pub fn run(g: &GlobalArgs, cmd: ModelsCmd) -> anyhow::Result<()> {
    let app = app(g)?;
    let store = &app.models;
    let manifest = store.manifest();
    match cmd {
        ModelsCmd::List | ModelsCmd::Verify => {
            let verify = matches!(cmd, ModelsCmd::Verify);
            let statuses: Vec<_> = manifest.models.iter().map(|m| store.status(m, ragbox_core::model::store::Check::Full)).collect();
            if g.json {
                print_json(&statuses)?;
            } else {
                for s in &statuses {
                    println!("{:<30} {:<9} {}", s.name, s.role, s.summary());
                    for f in s.files.iter().filter(|f| f.state == "corrupt") {
                        println!("  {}: {}", f.name, f.detail.as_deref().unwrap_or(""));
                    }
                }
            }
            let corrupt: Vec<&str> = statuses
                .iter()
                .filter(|s| s.summary() == "CORRUPT")
                .map(|s| s.name.as_str())
                .collect();
            if verify && !corrupt.is_empty() {
                anyhow::bail!(ragbox_core::Error::ModelFormat {
                    model: corrupt.join(", "),
                    reason: "failed verification; re-fetch or re-import it".into()
                });
            }
            Ok(())
        }
        ModelsCmd::Path { name } => {
            let spec = manifest.get(&name)?;
            let file = spec.file_ending(".gguf").or_else(|| spec.file_ending(".safetensors")).or(spec.files.first());
            let file = file.ok_or_else(|| ragbox_core::Error::Invalid(format!("model `{name}` lists no files")))?;
            println!("{}", store.verified_file(spec, &file.name)?.display());
            Ok(())
        }
        ModelsCmd::Import { dir, model } => {
            let specs: Vec<&ModelSpec> = match &model {
                Some(name) => vec![manifest.get(name)?],
                None => manifest.models.iter().collect(),
            };
            let report = import_models(store, &dir, &specs)?;
            if model.is_some() {
                if let Some(missing) = report.iter().find(|r| r.state == "not found") {
                    anyhow::bail!(ragbox_core::Error::Invalid(format!(
                        "{} of model `{}` is not in {}; carry in the whole model folder",
                        missing.file,
                        missing.model,
                        dir.display()
                    )));
                }
            }
            if g.json {
                return print_json(&report);
            }
            for r in report.iter().filter(|r| r.state != "not found" || model.is_some()) {
                println!("{:<30} {:<32} {}", r.model, r.file, r.state);
            }
            if report.iter().all(|r| r.state == "not found") {
                anyhow::bail!(ragbox_core::Error::Invalid(format!("no model files of the manifest found in {}", dir.display())));
            }
            Ok(())
        }
        ModelsCmd::Pull { name, endpoint } => {
            let spec = manifest.get(&name)?;
            let endpoint = endpoint.unwrap_or_else(|| DEFAULT_ENDPOINT.to_string());
            if !g.quiet {
                eprintln!("pulling {name} from {endpoint} (network access, as asked)");
            }
            let paths = pull_model(store, spec, &endpoint, !g.quiet && !g.json)?;
            if g.json {
                return print_json(&paths);
            }
            for p in paths {
                println!("{}", p.display());
            }
            Ok(())
        }
    }
}
