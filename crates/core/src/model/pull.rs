//! `models pull NAME`: download a model from a Hugging Face hub endpoint into the models folder.
//!
//! The only code path besides the Claude backend that opens a network connection, and it runs only
//! when a person asks for it. Files land in the hub cache layout (hf-hub writes blobs, snapshots
//! and refs); each is verified against the manifest, and a file that fails is deleted again.

use std::path::PathBuf;

use hf_hub::api::sync::ApiBuilder;
use hf_hub::{Repo, RepoType};

use crate::error::{Error, Result};
use crate::model::manifest::ModelSpec;
use crate::model::store::{verify_file, ModelStore};

/// The public hub, used when neither `--endpoint` nor `HF_ENDPOINT` names another.
pub const DEFAULT_ENDPOINT: &str = "https://huggingface.co";

/// Downloads every file of `spec` that is not already present and verified; returns the paths.
pub fn pull_model(store: &ModelStore, spec: &ModelSpec, endpoint: &str, progress: bool) -> Result<Vec<PathBuf>> {
    let api = ApiBuilder::new()
        .with_cache_dir(store.dir().to_path_buf())
        .with_endpoint(endpoint.trim_end_matches('/').to_string())
        .with_token(None)
        .with_progress(progress)
        .build()
        .map_err(|e| Error::Download { what: endpoint.to_string(), source: Box::new(e) })?;
    let mut paths = Vec::new();
    for file in &spec.files {
        if let Ok(p) = store.verified_file(spec, &file.name) {
            paths.push(p);
            continue;
        }
        let repo = spec.repo_of(file);
        let what = format!("{repo}/{}", file.name);
        let path = api
            .repo(Repo::new(repo.to_string(), RepoType::Model))
            .download(&file.name)
            .map_err(|e| Error::Download { what, source: Box::new(e) })?;
        let blob = std::fs::canonicalize(&path).unwrap_or_else(|_| path.clone());
        // hf-hub leaves an empty `<blob>.lock` beside each blob it wrote.
        let mut lock = blob.clone().into_os_string();
        lock.push(".lock");
        let _ = std::fs::remove_file(lock);
        if let Err(e) = verify_file(spec, file, &path) {
            // The snapshot entry is a link to the blob: remove both so nothing unverified remains.
            let _ = std::fs::remove_file(&blob);
            let _ = std::fs::remove_file(&path);
            return Err(e);
        }
        paths.push(path);
    }
    Ok(paths)
}
