//! Moving a data folder's indexes to another backend (`ragbox migrate --to shared|local`): each
//! tenant's vector and lexical indexes are built on the target from the catalog, vectors from the
//! embedding cache (nothing is re-embedded), under the tenant's write lock; the source is left as
//! it was, so switching `store.backend` back is safe until the target is trusted.

use std::path::Path;

use serde::Serialize;

use crate::error::Result;
use crate::store::{Backends, Consistency, Store};

/// What migrating one tenant did.
#[derive(Debug, Clone, Serialize)]
pub struct Migrated {
    /// The tenant.
    pub tenant: String,
    /// Its catalog generation.
    pub generation: u64,
    /// Why the target's vector index was built (None: it was already at this generation).
    pub vector: Option<String>,
    /// Why the target's lexical index was built.
    pub lexical: Option<String>,
    /// The target's indexes against the catalog, afterwards.
    pub consistency: Consistency,
    /// Seconds it took.
    pub seconds: f64,
}

/// Builds every tenant's indexes of the data folder `data_dir` on `target`.
pub fn migrate(data_dir: &Path, target: Backends) -> Result<Vec<Migrated>> {
    let store = Store::open_with(data_dir, target)?;
    let mut out = Vec::new();
    for tenant in store.catalog().tenants()? {
        let started = std::time::Instant::now();
        let writer = store.writer(&tenant)?;
        let repair = writer.repair().clone();
        let tenant = writer.tenant().clone();
        drop(writer);
        let consistency = store.check_consistency(&tenant)?;
        out.push(Migrated {
            tenant: tenant.name.clone(),
            generation: tenant.generation,
            vector: repair.vector,
            lexical: repair.lexical,
            consistency,
            seconds: started.elapsed().as_secs_f64(),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::contract::batch;
    use crate::store::{Layout, VectorOptions};

    #[test]
    fn a_data_folder_moves_to_fresh_indexes_without_re_embedding() {
        let (data, elsewhere) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let store = Store::open(data.path(), VectorOptions::default()).unwrap();
        let t = store.tenant_for_model("acme", "fake", 8).unwrap();
        store.writer(&t).unwrap().commit(&batch(&[("/a.txt", &["alpha one", "beta two"])])).unwrap();
        drop(store);
        // Another place for the indexes: the same kind, in another folder (the shared servers run
        // the same code in tests/integration/shared.rs).
        let target = Backends::local(&Layout::new(elsewhere.path()), VectorOptions::default());
        let report = migrate(data.path(), target).unwrap();
        assert_eq!(report.len(), 1);
        assert!(report[0].vector.is_some() && report[0].lexical.is_some(), "{report:?}");
        assert!(report[0].consistency.consistent, "{report:?}");
        let again = migrate(data.path(), Backends::local(&Layout::new(elsewhere.path()), VectorOptions::default())).unwrap();
        assert!(again[0].vector.is_none() && again[0].lexical.is_none(), "a second run finds the target current: {again:?}");
    }
}
