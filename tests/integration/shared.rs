//! The shared backend against the real servers (PostgreSQL 15, Milvus 2.3.5 standalone;
//! [`crate::shared_servers`]): the index contract and the store's commit protocol that the local
//! files keep, run unchanged on Milvus and PostgreSQL; BM25 in PostgreSQL ranking as tantivy does;
//! a row planted with the wrong tenant never served; and a server stopped mid-commit failing with
//! its name, nothing half-written served, the job finished once it is back.

use std::sync::Arc;

use ragbox_core::error::Error;
use ragbox_core::store::contract;
use ragbox_core::store::lexical::LexicalIndex;
use ragbox_core::store::shared::{MilvusVectors, Postgres, PostgresLexical};
use ragbox_core::store::{Backends, Store};

use crate::shared_servers::{shared, MilvusServer, PgServer};

/// Milvus, for a test that leaves it running.
fn milvus() -> (std::sync::RwLockReadGuard<'static, ()>, &'static str) {
    let servers = shared();
    (servers.gate.read().unwrap_or_else(|p| p.into_inner()), &servers.milvus_url)
}

/// The shared backend on the common servers, catalog included, under `name` (its own database
/// and collection prefix).
fn backends(name: &str) -> (std::sync::RwLockReadGuard<'static, ()>, Backends) {
    let (gate, milvus) = milvus();
    let pg = Arc::new(Postgres::connect(&shared().pg.database(name)).unwrap());
    let backends = Backends {
        vectors: Box::new(MilvusVectors::connect(milvus, None, name).unwrap()),
        lexical: Box::new(PostgresLexical::open(pg.clone()).unwrap()),
        catalog: Some(pg),
    };
    (gate, backends)
}

#[test]
fn milvus_keeps_the_vector_contract() {
    contract::vectors(backends("contract_vectors").1.vectors.as_ref());
}

#[test]
fn postgres_bm25_keeps_the_lexical_contract() {
    contract::lexical(backends("contract_lexical").1.lexical.as_ref());
}

#[test]
fn the_commit_protocol_holds_over_the_shared_servers() {
    let dir = tempfile::tempdir().unwrap();
    let (_gate, backends) = backends("contract_store");
    contract::store(&Store::open_with(dir.path(), backends).unwrap());
}

/// The paragraphs of the sample corpus's text files, as chunk texts.
fn corpus_paragraphs() -> Vec<String> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/corpus");
    let mut files: Vec<_> = crate::common::files_under(&root).into_iter().filter(|p| p.extension().is_some_and(|e| e == "md" || e == "txt")).collect();
    files.sort();
    files
        .iter()
        .flat_map(|p| std::fs::read_to_string(p).unwrap_or_default().split("\n\n").map(str::trim).filter(|s| s.len() > 40).map(String::from).collect::<Vec<_>>())
        .collect()
}


#[test]
fn bm25_in_postgres_ranks_as_tantivy_does() {
    use ragbox_core::types::{ChunkId, DocId};
    let texts = corpus_paragraphs();
    assert!(texts.len() > 100, "{} paragraphs", texts.len());
    let local = LexicalIndex::in_memory();
    let mut w = local.writer().unwrap();
    let (_gate, backends) = backends("bm25_parity");
    let backend = backends.lexical;
    let t = contract::tenant(1, "parity", "m", 8);
    let mut remote = backend.writer(&t, false).unwrap();
    for (i, text) in texts.iter().enumerate() {
        w.add(ChunkId(i as u64 + 1), DocId(i as u64 / 4 + 1), text).unwrap();
        remote.add(ChunkId(i as u64 + 1), DocId(i as u64 / 4 + 1), text).unwrap();
    }
    w.commit(1).unwrap();
    remote.commit(1).unwrap();
    let (local, remote) = (local.searcher().unwrap(), backend.reader(&t).unwrap());
    assert_eq!(local.len(), remote.len());
    let queries = [
        "expense claim deadline",
        "password length",
        "who approves travel",
        "remote work equipment",
        "incident reporting within hours",
        "data retention period for invoices",
        "annual leave carry over",
        "laptop encryption",
        "visitor badge",
        "the on-call rota",
    ];
    let mut same_top = 0;
    for q in queries {
        let (a, b) = (local.search(q, 10).unwrap(), remote.search(q, 10).unwrap());
        let ids = |h: &[(ChunkId, f32)]| h.iter().map(|x| x.0).collect::<std::collections::BTreeSet<_>>();
        let overlap = ids(&a).intersection(&ids(&b)).count();
        assert!(overlap >= a.len().min(b.len()).saturating_sub(2), "{q}: tantivy {a:?} postgres {b:?}");
        if let (Some(x), Some(y)) = (a.first(), b.first()) {
            // tantivy stores lengths as one byte (approximately); the scores agree to a few percent.
            assert!((x.1 - y.1).abs() <= 0.06 * x.1.max(y.1), "{q}: top scores {} and {}", x.1, y.1);
            same_top += usize::from(x.0 == y.0);
        }
    }
    assert!(same_top >= 8, "the same best chunk for {same_top} of 10 queries");
}

#[test]
fn a_row_planted_with_another_tenant_is_never_served() {
    use ragbox_core::store::VectorBackend;
    use ragbox_core::types::ChunkId;
    let (_gate, milvus) = milvus();
    let vectors = MilvusVectors::connect(milvus, None, "planted").unwrap();
    let (a, b) = (contract::tenant(1, "alpha", "m", 8), contract::tenant(2, "beta", "m", 8));
    let probe = contract::fake_vector("the board minutes");
    for t in [&a, &b] {
        vectors.drop_tenant(t).unwrap();
        let mut w = vectors.writer(t, "m", 8, true).unwrap();
        w.upsert(&[(ChunkId(t.id as u64 * 100), &contract::fake_vector("something else entirely"))]).unwrap();
        w.commit(1).unwrap();
    }
    // A row of tenant beta written into alpha's collection: the closest vector there is.
    vectors.plant(&a, "m", "beta", ChunkId(4242), &probe).unwrap();
    let hits = vectors.reader(&a, "m", 8).unwrap().search(&probe, 10).unwrap();
    assert!(!hits.is_empty() && hits.iter().all(|h| h.0 != ChunkId(4242)), "{hits:?}");
    let hits = vectors.reader(&b, "m", 8).unwrap().search(&probe, 10).unwrap();
    assert!(hits.iter().all(|h| h.0 != ChunkId(4242)), "{hits:?}");
    for t in [&a, &b] {
        vectors.drop_tenant(t).unwrap();
    }
}

#[test]
fn a_server_stopped_mid_commit_fails_by_name_and_the_next_run_finishes() {
    // A PostgreSQL of its own, and the one Milvus held for this test alone.
    let mut pg = PgServer::start();
    let servers = shared();
    let _gate = servers.gate.write().unwrap_or_else(|p| p.into_inner());
    let mut milvus = servers.milvus.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let open = |pg: &PgServer, milvus: &MilvusServer| {
        let lexical = PostgresLexical::open(Arc::new(Postgres::connect(&pg.url("postgres")).unwrap())).unwrap();
        let backends = Backends { vectors: Box::new(MilvusVectors::connect(&milvus.url(), None, "faults").unwrap()), lexical: Box::new(lexical), catalog: None };
        Store::open_with(dir.path(), backends).unwrap()
    };
    let store = open(&pg, &milvus);
    let t = store.tenant_for_model("acme", "fake", 8).unwrap();
    store.writer(&t).unwrap().commit(&contract::batch(&[("/a.txt", &["alpha one"])])).unwrap();

    // PostgreSQL stops between the writer's opening and its commit: the commit fails naming it;
    // the catalog and the vectors moved on, the lexical index did not.
    let t = store.catalog().require_tenant("acme").unwrap();
    let mut w = store.writer(&t).unwrap();
    pg.kill();
    let e = w.commit(&contract::batch(&[("/b.txt", &["beta two"])])).err().expect("the commit fails");
    drop(w);
    assert!(matches!(&e, Error::SharedServer { server, .. } if server.starts_with("PostgreSQL at 127.0.0.1")), "{e}");
    assert!(e.to_string().contains("running the command again once it is back finishes the job"), "{e}");
    let t = store.catalog().require_tenant("acme").unwrap();
    pg.restart();
    let r = store.reader(&t).unwrap();
    assert!(r.repair.lexical.is_some(), "the lagging lexical index is caught up: {:?}", r.repair);
    assert_eq!(r.lexical.search("beta", 5).unwrap().len(), 1);
    drop(r);
    assert!(store.check_consistency(&t).unwrap().consistent);

    // Milvus stops mid-way: the same, for vectors.
    let mut w = store.writer(&t).unwrap();
    milvus.kill();
    let e = w.commit(&contract::batch(&[("/c.txt", &["gamma three"])])).err().expect("the commit fails");
    drop(w);
    assert!(matches!(&e, Error::SharedServer { server, .. } if server.starts_with("Milvus at http://127.0.0.1")), "{e}");
    milvus.restart();
    drop(store);
    let store = open(&pg, &milvus);
    let t = store.catalog().require_tenant("acme").unwrap();
    let r = store.reader(&t).unwrap();
    assert_eq!(r.vector.len(), 3, "every committed chunk is back in the vector index");
    drop(r);
    let c = store.check_consistency(&t).unwrap();
    assert!(c.consistent, "{c:?}");
}
