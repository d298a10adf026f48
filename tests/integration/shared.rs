//! The shared backend against the real servers (PostgreSQL 15, Milvus 2.3.5 standalone;
//! [`crate::shared_servers`]): the index contract and the store's commit protocol that the local
//! files keep, run unchanged on Milvus and PostgreSQL; BM25 in PostgreSQL ranking as tantivy does;
//! a row planted with the wrong tenant never served; the catalog's contract on PostgreSQL and its
//! row-level security; a data folder migrated there and back; and a server stopped mid-commit
//! failing with its name, nothing half-written served, the job finished once it is back.

use std::sync::Arc;

use ragbox_core::error::Error;
use ragbox_core::store::contract;
use ragbox_core::store::lexical::LexicalIndex;
use ragbox_core::store::shared::{MilvusVectors, Postgres, PostgresLexical};
use ragbox_core::store::{Backends, Catalog, Store};

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
    drop(store);

    // The catalog on the PostgreSQL that stops: the commit fails naming it and nothing is
    // written; the writer's tenant lock went with the server, so the next run takes it and
    // finishes.
    let url = pg.database("faults_catalog");
    let open_all = |url: &str, milvus: &MilvusServer| {
        let pg = Arc::new(Postgres::connect(url).unwrap());
        let backends = Backends {
            vectors: Box::new(MilvusVectors::connect(&milvus.url(), None, "faults_catalog").unwrap()),
            lexical: Box::new(PostgresLexical::open(pg.clone()).unwrap()),
            catalog: Some(pg),
        };
        Store::open_with(dir.path(), backends).unwrap()
    };
    let store = open_all(&url, &milvus);
    let t = store.tenant_for_model("acme", "fake", 8).unwrap();
    let mut w = store.writer(&t).unwrap();
    pg.kill();
    let e = w.commit(&contract::batch(&[("/d.txt", &["delta four"])])).err().expect("the commit fails");
    drop(w);
    assert!(matches!(&e, Error::SharedServer { server, what, .. } if server.starts_with("PostgreSQL at 127.0.0.1") && what.contains("catalog")), "{e}");
    pg.restart();
    let t = store.catalog().require_tenant("acme").unwrap();
    assert_eq!(t.generation, 0, "nothing of the failed commit was written");
    store.writer(&t).unwrap().commit(&contract::batch(&[("/d.txt", &["delta four"])])).unwrap();
    let t = store.catalog().require_tenant("acme").unwrap();
    let c = store.check_consistency(&t).unwrap();
    assert!(c.consistent && c.catalog_children == 1, "{c:?}");
}

#[test]
fn the_catalog_contract_holds_on_postgres() {
    let url = shared().pg.database("contract_catalog");
    contract::catalog(&Catalog::on_postgres(Arc::new(Postgres::connect(&url).unwrap())).unwrap());
}

#[test]
fn the_retention_contract_holds_on_postgres_and_nothing_deleted_stays_in_its_table_files() {
    let server = &shared().pg;
    let url = server.database("contract_retention");
    let cat = Catalog::on_postgres(Arc::new(Postgres::connect(&url).unwrap())).unwrap();
    // Every table file under base/, after a checkpoint has written what the buffers held (the
    // write-ahead log in pg_wal is not searched: PostgreSQL recycles its segments).
    let raw = || {
        let admin = Postgres::connect(&server.url("postgres")).unwrap();
        admin.with("checkpoint", |c| c.simple_query("CHECKPOINT").map(|_| ())).unwrap();
        fn read_all(dir: &std::path::Path, bytes: &mut Vec<u8>) {
            for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
                match entry.file_type() {
                    Ok(t) if t.is_dir() => read_all(&entry.path(), bytes),
                    Ok(t) if t.is_file() => bytes.extend(std::fs::read(entry.path()).unwrap_or_default()),
                    _ => {}
                }
            }
        }
        let mut bytes = Vec::new();
        read_all(&server.data_dir().join("base"), &mut bytes);
        bytes
    };
    contract::retention(&cat, &raw);
}

#[test]
fn row_level_security_keeps_a_tenant_to_its_own_rows_even_without_a_filter() {
    use ragbox_core::store::sql::{Scope, Value};
    let url = shared().pg.database("walls");
    let cat = Catalog::on_postgres(Arc::new(Postgres::connect(&url).unwrap())).unwrap();
    let (a, b) = (cat.create_tenant("alpha", "fake", 8).unwrap(), cat.create_tenant("beta", "fake", 8).unwrap());
    cat.commit(&a, &contract::batch(&[("/a.txt", &["alpha one", "alpha two"])])).unwrap();
    cat.commit(&b, &contract::batch(&[("/b.txt", &["beta one"])])).unwrap();
    let count = |scope: Scope, table: &str| -> i64 {
        cat.database().read(scope, |sql| sql.query_one(&format!("SELECT COUNT(*) FROM {table}"), &[])?.int(0)).unwrap()
    };
    // A query with no tenant filter at all sees only the tenant its transaction names.
    assert_eq!((count(Scope::Tenant(a.id), "chunks"), count(Scope::Tenant(b.id), "chunks"), count(Scope::All, "chunks")), (2, 1, 3));
    assert_eq!((count(Scope::Tenant(a.id), "documents"), count(Scope::Tenant(b.id), "documents")), (1, 1));
    // Nor can it write a row of another tenant, or move one over.
    let doc_b = cat.documents(b.id).unwrap()[0].id.0 as i64;
    let planted = cat.database().write(Scope::Tenant(a.id), |sql| {
        sql.execute(
            "INSERT INTO chunks (doc_id, tenant_id, ordinal, role, section_path, start, \"end\", line_first, line_last, tokens, context)
             VALUES (?1, ?2, 9, 'child', '[]', 0, 1, 1, 1, 1, '')",
            &[Value::Int(doc_b), Value::Int(b.id)],
        )
    });
    assert!(planted.is_err(), "a row of beta written under alpha is refused");
    let moved = cat.database().write(Scope::Tenant(a.id), |sql| sql.execute("UPDATE chunks SET tenant_id = ?1", &[Value::Int(b.id)]));
    assert!(moved.is_err(), "alpha's rows cannot be handed to beta");
    let touched = cat.database().write(Scope::Tenant(a.id), |sql| sql.execute("UPDATE chunks SET context = 'seen'", &[])).unwrap();
    assert_eq!(touched, 2, "an update without a filter reaches alpha's rows only");
    // And a transaction that names no tenant sees nothing.
    let pg = Postgres::connect(&url).unwrap();
    let bare: i64 = pg.with("counting", |c| c.query_one("SELECT COUNT(*) FROM chunks", &[]).map(|r| r.get(0))).unwrap();
    assert_eq!(bare, 0, "without ragbox.tenant the policies let nothing through");
}

#[test]
fn a_data_folder_migrates_to_the_shared_servers_and_back_without_re_embedding() {
    use ragbox_core::store::migrate::migrate;
    use ragbox_core::store::{EventRecord, KeyRole, Layout, VectorOptions};
    let (_gate, _) = milvus();
    let dir = tempfile::tempdir().unwrap();
    let local = || Backends::local(&Layout::new(dir.path()), VectorOptions::default());
    let (secret, head) = {
        let store = Store::open(dir.path(), VectorOptions::default()).unwrap();
        let t = store.tenant_for_model("acme", "fake", 8).unwrap();
        store.writer(&t).unwrap().commit(&contract::batch(&[("/a.txt", &["alpha one", "beta two"]), ("/b.txt", &["gamma three"])])).unwrap();
        let (_, secret) = store.catalog().keys().create("alice", Some("acme"), KeyRole::Reader).unwrap();
        store.catalog().audit().append(&EventRecord { action: "search", tenant: "acme", question: "alpha", ..EventRecord::default() }).unwrap();
        (secret, store.catalog().audit().verify().unwrap().head)
    };
    let url = shared().pg.database("migrated");
    let remote = || {
        let pg = Arc::new(Postgres::connect(&url).unwrap());
        Backends {
            vectors: Box::new(MilvusVectors::connect(&shared().milvus_url, None, "migrated").unwrap()),
            lexical: Box::new(PostgresLexical::open(pg.clone()).unwrap()),
            catalog: Some(pg),
        }
    };
    let report = migrate(dir.path(), local(), remote()).unwrap();
    let copy = report.catalog.as_ref().expect("the catalog was copied");
    assert!(copy.rows.iter().any(|(t, n)| t == "embeddings" && *n == 3), "{copy:?}");
    assert!(report.tenants[0].consistency.consistent, "{report:?}");

    // On the shared servers: the same documents, keys and audit chain; new work lands there.
    let store = Store::open_with(dir.path(), remote()).unwrap();
    let t = store.catalog().require_tenant("acme").unwrap();
    assert_eq!(store.catalog().counts(t.id).unwrap().0, 2);
    assert!(store.catalog().keys().authenticate(&secret).unwrap().is_some());
    assert_eq!(store.catalog().audit().verify().unwrap().head, head, "the audit chain moved whole");
    store.writer(&t).unwrap().commit(&contract::batch(&[("/c.txt", &["delta four"])])).unwrap();
    let (_, newer) = store.catalog().keys().create("bob", Some("acme"), KeyRole::Writer).unwrap();
    drop(store);

    // Back to the data folder: the old catalog file is moved aside, the current one copied.
    let back = migrate(dir.path(), remote(), local()).unwrap();
    assert!(back.catalog.as_ref().unwrap().replaced.is_some(), "{back:?}");
    let store = Store::open(dir.path(), VectorOptions::default()).unwrap();
    let t = store.catalog().require_tenant("acme").unwrap();
    assert_eq!(store.catalog().counts(t.id).unwrap().0, 3);
    assert!(store.catalog().keys().authenticate(&newer).unwrap().is_some());
    assert!(store.check_consistency(&t).unwrap().consistent);
    let hits = store.reader(&t).unwrap().lexical.search("delta", 1).unwrap();
    assert_eq!(store.catalog().chunks(t.id, &[hits[0].0]).unwrap()[0].text, "delta four");
    // A third catalog pointed at the same database is refused.
    let other = tempfile::tempdir().unwrap();
    Store::open(other.path(), VectorOptions::default()).unwrap().tenant_for_model("x", "fake", 8).unwrap();
    let e = migrate(other.path(), Backends::local(&Layout::new(other.path()), VectorOptions::default()), remote()).unwrap_err();
    assert!(e.to_string().contains("already holds another catalog"), "{e}");
}

#[test]
fn a_deployments_milvus_user_reaches_its_own_database_only() {
    // A Milvus that checks users, for this test alone (a network namespace holds one Milvus).
    let servers = shared();
    let _gate = servers.gate.write().unwrap_or_else(|p| p.into_inner());
    let mut common = servers.milvus.lock().unwrap_or_else(|p| p.into_inner());
    common.kill();
    let result = std::panic::catch_unwind(|| {
        let secured = MilvusServer::start(true);
        let url = secured.url();
        let root = MilvusVectors::connect(&url, Some(("root", "Milvus")), "probe").unwrap();
        root.provision("team_a", "team_a", "team-a-secret").unwrap();
        root.provision("team_b", "team_b", "team-b-secret").unwrap();

        // Signed in as its own user, in its own database, a deployment keeps the whole contract.
        let a = MilvusVectors::connect_in(&url, Some(("team_a", "team-a-secret")), Some("team_a"), "ragbox").unwrap();
        contract::vectors(&a);

        // Its collections are in its own database: the other team's deployment, under the same
        // prefix, neither sees them nor is seen.
        use ragbox_core::store::VectorBackend;
        let b = MilvusVectors::connect_in(&url, Some(("team_b", "team-b-secret")), Some("team_b"), "ragbox").unwrap();
        let t = contract::tenant(1, "acme", "m", 3);
        let mut w = a.writer(&t, "m", 3, true).unwrap();
        w.upsert(&[(ragbox_core::types::ChunkId(1), &[1.0, 0.0, 0.0][..])]).unwrap();
        w.commit(1).unwrap();
        assert_eq!(b.committed(&t, "m", 3).unwrap(), ragbox_core::store::Committed::Missing, "team_b has no index of team_a's");
        assert_eq!(a.committed(&t, "m", 3).unwrap(), ragbox_core::store::Committed::At(1));
        let mut w = b.writer(&t, "m", 3, true).unwrap();
        w.upsert(&[(ragbox_core::types::ChunkId(2), &[0.0, 1.0, 0.0][..])]).unwrap();
        w.commit(1).unwrap();
        // Naming the other team's database outright reaches nothing in it.
        let intruder = MilvusVectors::connect_in(&url, Some(("team_a", "team-a-secret")), Some("team_b"), "ragbox");
        let seen = intruder.and_then(|m| Ok((m.committed(&t, "m", 3)?, m.reader(&t, "m", 3)?.search(&[0.0, 1.0, 0.0], 5)?)));
        match seen {
            Err(e) => assert!(matches!(&e, Error::SharedServer { server, .. } if server.starts_with("Milvus at")), "{e}"),
            Ok((committed, hits)) => panic!("team_a read team_b's index: {committed:?} {hits:?}"),
        }
        a.drop_tenant(&t).unwrap();

        // Without credentials, or with wrong ones, nothing at all.
        let anonymous = MilvusVectors::connect(&url, None, "anonymous").and_then(|m| {
            let mut w = m.writer(&t, "m", 3, true)?;
            w.upsert(&[(ragbox_core::types::ChunkId(1), &[1.0, 0.0, 0.0][..])])?;
            w.commit(1)
        });
        let e = anonymous.expect_err("no credentials, no index");
        assert!(e.to_string().contains("Milvus at"), "{e}");
        assert!(MilvusVectors::connect_in(&url, Some(("team_a", "wrong")), Some("team_a"), "ragbox").is_err());
    });
    common.restart();
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}
