//! The contract every index backend keeps, as one test suite: run against the local files in the
//! unit tests and against the shared servers in the integration tests, so that the store's commit
//! protocol can rely on the same behaviour from each.
//!
//! What it checks: a new index reports `Missing` (vectors) or generation 0 (lexical); a commit
//! is visible at exactly its generation; upserts replace, removals remove, an empty writer
//! replaces everything on commit; a writer dropped before its commit leaves the committed
//! generation where it was; searches rank as cosine and BM25 do; one tenant never sees
//! another's entries; dropping a tenant leaves nothing behind.

use crate::error::Error;
use crate::store::backend::{Committed, LexicalBackend, VectorBackend};
use crate::store::catalog::TenantRow;
use crate::types::{ChunkId, DocId};

/// A tenant row as the catalog would hand it to a backend.
pub fn tenant(id: i64, name: &str, model: &str, dims: usize) -> TenantRow {
    TenantRow { id, name: name.into(), model: model.into(), dims, generation: 0 }
}

fn unit(v: &[f32]) -> Vec<f32> {
    let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    v.iter().map(|x| x / n).collect()
}

fn close(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-4)
}

/// The vector contract, on tenants named `contract-a` and `contract-b` (dropped at the end).
pub fn vectors(backend: &dyn VectorBackend) {
    let (model, dims) = ("contract-model", 3);
    let a = tenant(1, "contract-a", model, dims);
    let b = tenant(2, "contract-b", model, dims);
    for t in [&a, &b] {
        backend.drop_tenant(t).unwrap();
    }
    assert_eq!(backend.committed(&a, model, dims).unwrap(), Committed::Missing, "a new index is missing");

    let (x, y, xy) = (unit(&[1.0, 0.0, 0.0]), unit(&[0.0, 1.0, 0.0]), unit(&[1.0, 1.0, 0.0]));
    let mut w = backend.writer(&a, model, dims, true).unwrap();
    w.upsert(&[(ChunkId(1), &x), (ChunkId(2), &y), (ChunkId(3), &xy)]).unwrap();
    assert_eq!(w.len().unwrap(), 3);
    w.commit(1).unwrap();
    drop(w);
    assert_eq!(backend.committed(&a, model, dims).unwrap(), Committed::At(1));
    assert!(backend.reader_at(&a, model, dims, 2).unwrap().is_none(), "no reader at a generation not committed");
    let r = backend.reader_at(&a, model, dims, 1).unwrap().expect("a reader at the committed generation");
    assert_eq!((r.len(), r.meta().generation, r.meta().dims), (3, 1, dims));
    let hits = r.search(&x, 2).unwrap();
    assert_eq!(hits.iter().map(|h| h.0).collect::<Vec<_>>(), [ChunkId(1), ChunkId(3)], "{hits:?}");
    assert!((hits[0].1 - 1.0).abs() < 1e-4 && (hits[1].1 - std::f32::consts::FRAC_1_SQRT_2).abs() < 1e-3, "cosine similarity: {hits:?}");
    let got = r.vectors(&[ChunkId(2), ChunkId(99)]).unwrap();
    assert!(close(got[0].as_deref().unwrap(), &y) && got[1].is_none(), "{got:?}");
    assert!(matches!(r.search(&[1.0, 0.0], 1), Err(Error::IndexMismatch { .. })), "a query of another width is refused");
    assert!(r.search(&x, 0).unwrap().is_empty());
    drop(r);

    // Another tenant's identical vector is never a hit of this one.
    let mut w = backend.writer(&b, model, dims, true).unwrap();
    w.upsert(&[(ChunkId(50), &x)]).unwrap();
    w.commit(7).unwrap();
    drop(w);
    assert_eq!(backend.committed(&b, model, dims).unwrap(), Committed::At(7));
    assert_eq!(backend.committed(&a, model, dims).unwrap(), Committed::At(1), "tenants keep their own generation");
    let hits = backend.reader(&a, model, dims).unwrap().search(&x, 10).unwrap();
    assert!(hits.iter().all(|h| h.0 != ChunkId(50)) && hits.len() == 3, "{hits:?}");

    // Changes on top of the committed contents: removal, replacement, addition.
    let mut w = backend.writer(&a, model, dims, false).unwrap();
    w.remove(&[ChunkId(1), ChunkId(404)]).unwrap();
    w.upsert(&[(ChunkId(2), &x), (ChunkId(4), &y)]).unwrap();
    w.commit(2).unwrap();
    drop(w);
    let r = backend.reader(&a, model, dims).unwrap();
    assert_eq!((r.len(), r.meta().generation), (3, 2));
    let hits = r.search(&x, 3).unwrap();
    assert_eq!(hits[0].0, ChunkId(2), "a replaced vector is found by its new value: {hits:?}");
    assert!(hits.iter().all(|h| h.0 != ChunkId(1)), "a removed vector is gone: {hits:?}");
    assert!(r.vectors(&[ChunkId(1)]).unwrap()[0].is_none());
    drop(r);

    // A writer that never commits leaves the committed generation where it was.
    let mut w = backend.writer(&a, model, dims, false).unwrap();
    w.upsert(&[(ChunkId(5), &y)]).unwrap();
    drop(w);
    assert_eq!(backend.committed(&a, model, dims).unwrap(), Committed::At(2));

    // An empty writer replaces everything on commit (a rebuild).
    let mut w = backend.writer(&a, model, dims, true).unwrap();
    w.upsert(&[(ChunkId(7), &xy)]).unwrap();
    w.commit(3).unwrap();
    drop(w);
    let r = backend.reader_at(&a, model, dims, 3).unwrap().expect("rebuilt at 3");
    assert_eq!(r.len(), 1);
    assert_eq!(r.search(&x, 5).unwrap().iter().map(|h| h.0).collect::<Vec<_>>(), [ChunkId(7)]);
    drop(r);

    // An index of another width is not this model's index.
    assert!(matches!(backend.committed(&a, model, 4).unwrap(), Committed::Damaged(_)));

    for t in [&a, &b] {
        backend.drop_tenant(t).unwrap();
        assert_eq!(backend.committed(t, model, dims).unwrap(), Committed::Missing, "a dropped tenant leaves nothing");
    }
}

/// The lexical contract, on tenants named `contract-a` and `contract-b` (dropped at the end).
pub fn lexical(backend: &dyn LexicalBackend) {
    let a = tenant(1, "contract-a", "m", 3);
    let b = tenant(2, "contract-b", "m", 3);
    for t in [&a, &b] {
        backend.drop_tenant(t).unwrap();
    }
    assert_eq!(backend.committed(&a).unwrap(), Committed::At(0), "a new index is at generation 0");

    let mut w = backend.writer(&a, false).unwrap();
    w.add(ChunkId(1), DocId(1), "Travel policy\n\nEmployees book economy flights.").unwrap();
    w.add(ChunkId(2), DocId(2), "Security policy\n\nPasswords have at least 14 characters.").unwrap();
    w.add(ChunkId(3), DocId(2), "Security policy\n\nPasswords expire after 90 days; passwords are never shared.").unwrap();
    w.commit(1).unwrap();
    assert_eq!(backend.committed(&a).unwrap(), Committed::At(1));
    assert!(backend.reader_at(&a, 2).unwrap().is_none());
    let r = backend.reader_at(&a, 1).unwrap().expect("a searcher at the committed generation");
    assert_eq!(r.len(), 3);
    assert_eq!(r.search("flight booking", 5).unwrap()[0].0, ChunkId(1), "stemming: flight ~ flights");
    let hits = r.search("passwords", 5).unwrap();
    assert_eq!(hits.iter().map(|h| h.0).collect::<Vec<_>>(), [ChunkId(3), ChunkId(2)], "BM25 favours the higher term frequency: {hits:?}");
    assert!(hits[0].1 > hits[1].1 && hits[1].1 > 0.0);
    assert_eq!(r.search("password: \"14 (characters", 5).unwrap()[0].0, ChunkId(2), "odd syntax is tolerated");
    assert!(r.search("   ", 5).unwrap().is_empty());
    assert!(r.search("passwords", 0).unwrap().is_empty());
    assert!(r.search("zebra", 5).unwrap().is_empty());
    drop(r);

    // Another tenant's text is never a hit of this one.
    let mut w = backend.writer(&b, false).unwrap();
    w.add(ChunkId(50), DocId(50), "Flights to the board meeting are booked in business class.").unwrap();
    w.commit(9).unwrap();
    assert_eq!(backend.committed(&a).unwrap(), Committed::At(1));
    let hits = backend.reader(&a).unwrap().search("flights business", 10).unwrap();
    assert_eq!(hits.iter().map(|h| h.0).collect::<Vec<_>>(), [ChunkId(1)], "{hits:?}");

    // Removing a document removes all its chunks.
    let mut w = backend.writer(&a, false).unwrap();
    w.remove_document(DocId(2)).unwrap();
    w.commit(2).unwrap();
    let r = backend.reader(&a).unwrap();
    assert!(r.search("passwords", 5).unwrap().is_empty());
    assert_eq!(r.len(), 1);
    drop(r);

    // A writer that never commits changes nothing.
    let mut w = backend.writer(&a, false).unwrap();
    w.add(ChunkId(8), DocId(8), "Zebra crossings near the office.").unwrap();
    drop(w);
    assert_eq!(backend.committed(&a).unwrap(), Committed::At(2));
    assert!(backend.reader(&a).unwrap().search("zebra", 5).unwrap().is_empty());

    // Clearing replaces everything on commit (a rebuild).
    let mut w = backend.writer(&a, true).unwrap();
    w.clear().unwrap();
    w.add(ChunkId(9), DocId(9), "Expense claims are filed within 30 days.").unwrap();
    w.commit(3).unwrap();
    let r = backend.reader_at(&a, 3).unwrap().expect("rebuilt at 3");
    assert!(r.search("flights", 5).unwrap().is_empty());
    assert_eq!(r.search("expense", 5).unwrap()[0].0, ChunkId(9));
    drop(r);
    assert_eq!(backend.chunk_ids(&a).unwrap(), [ChunkId(9)]);

    for t in [&a, &b] {
        backend.drop_tenant(t).unwrap();
        assert_eq!(backend.committed(t).unwrap(), Committed::At(0), "a dropped tenant leaves nothing");
        assert!(backend.chunk_ids(t).unwrap().is_empty());
    }
}

/// A unit vector of 8 dims standing in for an embedding of `text` (similar texts, similar
/// vectors, enough for ranking checks).
pub fn fake_vector(text: &str) -> Vec<f32> {
    let mut v = vec![0.01f32; 8];
    for (i, b) in text.bytes().enumerate() {
        v[(b as usize + i) % 8] += 1.0;
    }
    let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    v.iter().map(|x| x / n).collect()
}

/// A commit of plain-text documents (path, paragraphs), with their [`fake_vector`]s.
pub fn batch(docs: &[(&str, &[&str])]) -> crate::store::CommitBatch {
    let mut b = crate::store::CommitBatch::default();
    for (path, paras) in docs {
        let (w, texts) = crate::store::in_memory::doc_write(path, paras);
        for t in texts {
            b.embeddings.push((crate::types::text_hash(&t), fake_vector(&t)));
        }
        b.documents.push(w);
    }
    b
}

/// The store's commit protocol over whatever backends `store` was opened with: commits keep the
/// catalog and both indexes consistent, one writer per tenant, readers find what was committed,
/// and an index left behind the catalog (a crash between the two commits) is caught up from the
/// catalog, without re-embedding, by the next reader.
pub fn store(store: &crate::store::Store) {
    let t = store.tenant_for_model("acme", "fake", 8).unwrap();
    {
        let mut w = store.writer(&t).unwrap();
        assert!(store.writer(&t).is_err(), "a second writer is refused");
        w.commit(&batch(&[("/a.txt", &["alpha one", "beta two"]), ("/b.txt", &["gamma three"])])).unwrap();
        w.commit(&batch(&[("/a.txt", &["alpha changed"])])).unwrap();
    }
    let t = store.catalog().require_tenant("acme").unwrap();
    assert_eq!(t.generation, 2);
    let c = store.check_consistency(&t).unwrap();
    assert!(c.consistent, "{c:?}");
    assert_eq!(c.catalog_children, 2);

    let r = store.reader(&t).unwrap();
    assert!(!r.repair.any(), "{:?}", r.repair);
    let hits = r.lexical.search("gamma", 3).unwrap();
    let rows = store.catalog().chunks(t.id, &[hits[0].0]).unwrap();
    assert_eq!(rows[0].text, "gamma three");
    let dense = r.vector.search(&fake_vector("alpha changed"), 1).unwrap();
    assert_eq!(store.catalog().chunks(t.id, &[dense[0].0]).unwrap()[0].text, "alpha changed");
    assert!(r.lexical.search("alpha one", 5).unwrap().iter().all(|h| store.catalog().chunks(t.id, &[h.0]).unwrap()[0].text != "alpha one"));
    drop(r);

    // An index lagging the catalog (a crash between the catalog commit and the index writes).
    store.catalog().commit(&t, &batch(&[("/c.txt", &["delta four"])])).unwrap();
    let t = store.catalog().require_tenant("acme").unwrap();
    assert!(!store.check_consistency(&t).unwrap().consistent);
    let r = store.reader(&t).unwrap();
    assert!(r.repair.vector.is_some() && r.repair.lexical.is_some(), "{:?}", r.repair);
    assert_eq!(r.lexical.search("delta", 1).unwrap().len(), 1);
    assert_eq!(r.vector.len(), 3);
    drop(r);
    let c = store.check_consistency(&t).unwrap();
    assert!(c.consistent, "{c:?}");

    // A writer opened over a lagging index catches it up first, and commits on top.
    store.catalog().commit(&t, &batch(&[("/d.txt", &["epsilon five"])])).unwrap();
    let t = store.catalog().require_tenant("acme").unwrap();
    let mut w = store.writer(&t).unwrap();
    assert!(w.repair().any());
    w.commit(&batch(&[("/e.txt", &["zeta six"])])).unwrap();
    drop(w);
    let t = store.catalog().require_tenant("acme").unwrap();
    let c = store.check_consistency(&t).unwrap();
    assert!(c.consistent && c.catalog_children == 5, "{c:?}");

    let e = store.tenant_for_model("acme", "other", 8).unwrap_err().to_string();
    assert!(e.contains("ragbox reembed --tenant acme --model other"), "{e}");
}

/// The catalog's contract over whichever database `cat` is in (a new, empty one): commits
/// replace and remove documents and bump the generation; chunks resolve only for their own
/// tenant; the embedding cache is per model; keys authenticate until revoked; sessions, turns,
/// answers and feedback round-trip and a session of another tenant is refused; the audit chain
/// verifies, filters, and refuses changes; two writers of two tenants at once both land.
pub fn catalog(cat: &crate::store::Catalog) {
    use crate::store::{AnswerRecord, EventFilter, EventRecord, KeyRole, Rating};
    use crate::types::text_hash;

    let a = cat.create_tenant("contract-a", "fake", 8).unwrap();
    let b = cat.create_tenant("contract-b", "fake", 8).unwrap();
    assert_eq!(cat.create_tenant("contract-a", "fake", 8).unwrap(), a, "creating a tenant twice gives the same one");
    assert_eq!(cat.tenants().unwrap().iter().map(|t| t.name.as_str()).collect::<Vec<_>>(), ["contract-a", "contract-b"]);
    assert!(matches!(cat.require_tenant("nobody"), Err(Error::UnknownTenant { .. })));

    let c1 = cat.commit(&a, &batch(&[("/x/one.txt", &["héllo world", "second part"])])).unwrap();
    assert_eq!((c1.generation, c1.added.len()), (1, 2));
    let rows = cat.chunks(a.id, &[c1.added[1].id, c1.added[0].id]).unwrap();
    assert_eq!(rows.iter().map(|r| r.text.as_str()).collect::<Vec<_>>(), ["second part", "héllo world"], "input order, byte spans");
    assert!(cat.chunks(b.id, &[c1.added[0].id]).unwrap().is_empty(), "another tenant's chunk is not resolved");
    let entries = cat.index_entries(a.id).unwrap();
    assert_eq!(entries.len(), 2);
    assert_eq!(entries[0].hash, text_hash(&entries[0].text));
    assert_eq!(cat.vectors("fake", &[entries[0].hash]).unwrap()[0].as_deref(), Some(&fake_vector(&entries[0].text)[..]));
    assert!(cat.vectors("other", &[entries[0].hash]).unwrap()[0].is_none(), "the cache is per model");

    let c2 = cat.commit(&a, &batch(&[("/x/one.txt", &["changed"])])).unwrap();
    assert_eq!(c2.generation, 2);
    let mut removed = c2.removed.clone();
    removed.sort();
    assert_eq!(removed, vec![c1.added[0].id, c1.added[1].id], "replacing a document removes its old chunks");
    assert!(c2.added[0].id > c1.added[1].id, "ids are never reused");
    let docs = cat.documents(a.id).unwrap();
    assert_eq!((docs.len(), docs[0].chunks), (1, 1));
    assert!(cat.documents(b.id).unwrap().is_empty());
    let c3 = cat.commit(&a, &crate::store::CommitBatch { removed: vec![docs[0].id], ..Default::default() }).unwrap();
    assert_eq!(c3.removed, vec![c2.added[0].id]);
    assert_eq!(cat.counts(a.id).unwrap(), (0, 0, 0, 0));
    assert_eq!(cat.require_tenant("contract-a").unwrap().generation, 3);
    cat.set_tenant_model(a.id, "fake-2", 4).unwrap();
    assert_eq!(cat.require_tenant("contract-a").unwrap().model, "fake-2");
    let cid = cat.id().unwrap();
    assert_eq!(cat.id().unwrap(), cid, "the catalog's id is made once");

    let (k, secret) = cat.keys().create("alice", Some("contract-a"), KeyRole::Reader).unwrap();
    assert_eq!(cat.keys().authenticate(&secret).unwrap().map(|r| r.id), Some(k.id));
    assert!(cat.keys().authenticate("rbx_00").unwrap().is_none());
    assert!(cat.keys().revoke(k.id).unwrap().revoked_ms.is_some());
    assert!(cat.keys().authenticate(&secret).unwrap().is_none(), "a revoked key is refused");
    assert!(cat.keys().revoke(k.id + 1000).is_err());

    let session = cat.sessions().create(a.id).unwrap();
    assert_eq!(cat.sessions().tenant_of(session).unwrap(), Some(a.id));
    let timings = serde_json::json!({ "total_ms": 1.5 });
    let record = |tenant: i64, session: Option<i64>| AnswerRecord {
        tenant,
        session,
        question: "Who approves travel?",
        standalone: "Who approves travel?",
        chunk_ids: &[ChunkId(7)],
        model: "m",
        refused: false,
        outcome: "answered",
        answer: "Line managers [1].",
        evidence: &serde_json::Value::Null,
        timings: &timings,
        asker: "",
    };
    let answer = cat.answers().record(&record(a.id, Some(session))).unwrap();
    assert!(cat.answers().record(&record(b.id, Some(session))).is_err(), "a session of another tenant is refused");
    cat.sessions().add_turn(session, "Who approves travel?", "Who approves travel?", "Line managers [1].", Some(answer)).unwrap();
    assert!(cat.sessions().add_turn(session + 1000, "q", "q", "a", None).is_err());
    assert_eq!(cat.sessions().recent_turns(session, 5).unwrap()[0].answer_id, Some(answer));
    assert_eq!(cat.sessions().list(a.id, 10).unwrap(), vec![(session, cat.sessions().list(a.id, 10).unwrap()[0].1, 1)]);
    assert!(cat.sessions().list(b.id, 10).unwrap().is_empty());
    cat.answers().add_feedback(answer, Rating::Down, Some("it is in the handbook")).unwrap();
    assert!(cat.answers().add_feedback(answer + 1000, Rating::Up, None).is_err());
    let got = cat.answers().get(answer).unwrap().unwrap();
    assert_eq!((got.tenant.as_str(), got.chunk_ids.as_slice(), got.refused, got.timings["total_ms"].as_f64()), ("contract-a", &[ChunkId(7)][..], false, Some(1.5)));
    assert_eq!(got.feedback.len(), 1);
    assert_eq!(cat.answers().list(a.id, 5).unwrap().len(), 1);
    assert!(cat.answers().list(b.id, 5).unwrap().is_empty());

    for i in 0..3 {
        let q = format!("question {i}");
        let tenant = if i == 2 { "contract-b" } else { "contract-a" };
        cat.audit().append(&EventRecord { action: "ask", tenant, question: &q, chunk_ids: &[ChunkId(i)], ..EventRecord::default() }).unwrap();
    }
    let chain = cat.audit().verify().unwrap();
    assert_eq!((chain.rows, chain.broken.is_none()), (3, true), "{chain:?}");
    assert_eq!(cat.audit().list(&EventFilter { tenant: Some("contract-a".into()), ..Default::default() }).unwrap().len(), 2);
    assert_eq!(cat.audit().list(&EventFilter { limit: 1, ..Default::default() }).unwrap()[0].question, "question 2");
    use crate::store::sql::Scope;
    assert!(cat.database().write(Scope::All, |sql| sql.execute("UPDATE events SET question = 'x'", &[])).is_err(), "the audit log is append-only");
    assert!(cat.database().write(Scope::All, |sql| sql.execute("DELETE FROM events", &[])).is_err(), "the audit log is append-only");

    // Two writers of two tenants at once: each commit waits for the other, none fails.
    std::thread::scope(|s| {
        for t in [&a, &b] {
            s.spawn(move || {
                for i in 0..15 {
                    let path = format!("/{}/{i}.txt", t.name);
                    cat.commit(t, &batch(&[(path.as_str(), &["shared words here", "and more"])])).unwrap();
                }
            });
        }
    });
    assert_eq!(cat.counts(a.id).unwrap().0, 15);
    assert_eq!(cat.counts(b.id).unwrap().0, 15);
}

/// The retention contract over whichever database `cat` is in (a new, empty one): a run deletes
/// a tenant's answers, turns, feedback and emptied sessions older than the cutoff and blanks
/// their audit rows, keeping the chain verifiable; a person's hold keeps their rows and a
/// tenant's hold keeps all; a dry run changes nothing; another tenant's rows are untouched;
/// exports select by person and time. After each run, `raw()` (the database files' bytes, read
/// after [`crate::store::Retention::reclaim`]) holds no text of the deleted rows.
pub fn retention(cat: &crate::store::Catalog, raw: &dyn Fn() -> Vec<u8>) {
    use crate::store::export::{export, ExportFilter};
    use crate::store::now_ms;
    use crate::store::{AnswerRecord, EventRecord, KeyRole, Rating};

    let t = cat.create_tenant("keep-a", "fake", 8).unwrap();
    let other = cat.create_tenant("keep-b", "fake", 8).unwrap();
    let commit = cat.commit(&t, &batch(&[("/policies/travel.txt", &["Travel is approved by line managers."])])).unwrap();
    let cited = [commit.added[0].id];
    let (bob_key, _) = cat.keys().create("bob-bot", Some("keep-a"), KeyRole::Reader).unwrap();
    let alice = "person:https://idp.example|alice";
    let bob = format!("key:{}", bob_key.id);
    let timings = serde_json::json!({ "total_ms": 1.0 });
    let contains = |bytes: &[u8], text: &str| bytes.windows(text.len()).any(|w| w == text.as_bytes());
    let mut answers = Vec::new();
    for (who, question) in [(alice, "ALICE-KEPT zander settlement?"), (bob.as_str(), "BOB-GONE salary bands?")] {
        let session = cat.sessions().create(t.id).unwrap();
        cat.set_session_owner(t.id, session, who).unwrap();
        let answer = cat
            .answers()
            .record(&AnswerRecord {
                tenant: t.id,
                session: Some(session),
                question,
                standalone: question,
                chunk_ids: &cited,
                model: "",
                refused: false,
                outcome: "answered",
                answer: "Line managers approve it [1].",
                evidence: &serde_json::Value::Null,
                timings: &timings,
                asker: who,
            })
            .unwrap();
        cat.sessions().add_turn(session, question, question, "Line managers approve it [1].", Some(answer)).unwrap();
        let comment = format!("{question} feedback");
        cat.answers().add_feedback(answer, Rating::Down, Some(&comment)).unwrap();
        let detail = match who.strip_prefix("key:") {
            Some(_) => serde_json::json!({ "who": { "key": "bob-bot" } }),
            None => serde_json::json!({ "who": { "person": "Alice", "subject": "alice", "issuer": "https://idp.example" } }),
        };
        let key_id = who.strip_prefix("key:").map(|id| id.parse().unwrap());
        let key_name = if key_id.is_some() { "bob-bot" } else { "Alice" };
        cat.audit().append(&EventRecord { key_id, key_name, tenant: "keep-a", action: "chat", question, chunk_ids: &cited, detail: &detail, ..EventRecord::default() }).unwrap();
        answers.push((session, answer));
    }
    let kept_elsewhere = cat
        .answers()
        .record(&AnswerRecord { tenant: other.id, session: None, question: "OTHER-TENANT stays", standalone: "OTHER-TENANT stays", chunk_ids: &[], model: "", refused: true, outcome: "no_good_source", answer: "-", evidence: &serde_json::Value::Null, timings: &timings, asker: "" })
        .unwrap();
    cat.audit().append(&EventRecord { tenant: "keep-b", action: "ask", question: "OTHER-TENANT stays", ..EventRecord::default() }).unwrap();
    cat.audit().append(&EventRecord { tenant: "keep-a", action: "upload", question: "", ..EventRecord::default() }).unwrap();

    // Exports: everyone's, one person's (by subject, or a key by its name), none since later.
    let lines = |filter: ExportFilter| {
        let mut out = Vec::new();
        let counts = export(cat, &t, &filter, &mut |v| {
            out.push(v.clone());
            Ok(())
        })
        .unwrap();
        (counts, out)
    };
    let (all, records) = lines(ExportFilter::default());
    assert_eq!((all.sessions, all.turns, all.answers, all.feedback), (2, 2, 2, 2));
    assert_eq!(records[0]["type"], "export");
    let (mine, records) = lines(ExportFilter { person: vec!["alice".into()], since_ms: None });
    assert_eq!((mine.sessions, mine.answers), (1, 1));
    let answer = records.iter().find(|r| r["type"] == "answer").unwrap();
    assert_eq!(answer["question"], "ALICE-KEPT zander settlement?");
    assert_eq!(answer["sources"][0]["path"], "/policies/travel.txt");
    assert_eq!(answer["feedback"][0]["comment"], "ALICE-KEPT zander settlement? feedback");
    let (bobs, _) = lines(ExportFilter { person: cat.retention().person_names("bob-bot").unwrap(), since_ms: None });
    assert_eq!((bobs.sessions, bobs.answers), (1, 1), "a key is named by its name");
    let (later, _) = lines(ExportFilter { since_ms: Some(now_ms() + 60_000), ..ExportFilter::default() });
    assert_eq!((later.sessions, later.answers), (0, 0));

    // A hold on alice; a month on, a dry run says what goes and changes nothing.
    let hold = cat.retention().place_hold("keep-a", Some("alice"), "the Zander matter").unwrap();
    assert!(cat.retention().place_hold("nowhere", None, "x").is_err(), "an unknown tenant is refused");
    assert!(cat.retention().place_hold("keep-a", None, " ").is_err(), "a hold needs a reason");
    let month_on = now_ms() + 31 * 24 * 3600 * 1000;
    let by = (None, "cli");
    let dry = cat.retention().run(crate::store::retention::Tenant { id: t.id, name: &t.name }, 30, month_on, true, by).unwrap();
    assert_eq!((dry.answers, dry.turns, dry.feedback, dry.sessions, dry.events_blanked), (1, 1, 1, 1, 1), "{dry:?}");
    assert_eq!((dry.kept_for_holds, dry.held_people.as_slice(), dry.event_id), (3, &["alice".to_string()][..], None));
    assert_eq!(cat.answers().list(t.id, 10).unwrap().len(), 2, "a dry run deletes nothing");
    assert_eq!(cat.retention().run(crate::store::retention::Tenant { id: t.id, name: &t.name }, 30, now_ms(), false, by).unwrap().rows(), 0, "nothing is older than 30 days today");

    let run = cat.retention().run(crate::store::retention::Tenant { id: t.id, name: &t.name }, 30, month_on, false, by).unwrap();
    assert_eq!((run.answers, run.turns, run.feedback, run.sessions, run.events_blanked), (dry.answers, dry.turns, dry.feedback, dry.sessions, dry.events_blanked));
    assert!(run.event_id.is_some());
    let (bob_session, bob_answer) = answers[1];
    assert!(cat.answers().get(bob_answer).unwrap().is_none());
    assert_eq!(cat.sessions().tenant_of(bob_session).unwrap(), None, "the emptied session is gone");
    assert!(cat.answers().get(answers[0].1).unwrap().is_some_and(|a| a.feedback.len() == 1), "the held person's answer and feedback stay");
    assert_eq!(cat.sessions().recent_turns(answers[0].0, 5).unwrap().len(), 1);
    assert!(cat.answers().get(kept_elsewhere).unwrap().is_some(), "another tenant's rows stay");
    let chain = cat.audit().verify().unwrap();
    assert!(chain.broken.is_none() && chain.redacted == 1, "{chain:?}");
    let events = cat.audit().list(&crate::store::EventFilter::default()).unwrap();
    let blanked: Vec<_> = events.iter().filter(|e| e.redacted_ms.is_some()).collect();
    assert_eq!(blanked.len(), 1);
    assert!(blanked[0].question.is_empty() && blanked[0].detail == serde_json::json!({}) && blanked[0].chunk_ids.is_empty());
    let record = events.last().unwrap();
    assert_eq!((record.action.as_str(), record.tenant.as_str()), ("retention", "keep-a"));
    assert_eq!(record.detail["redacted"], serde_json::json!([[blanked[0].id, blanked[0].id]]));
    assert!(cat.retention().reclaim_pending().unwrap(), "until the space is reclaimed, the next run is told to");
    cat.retention().reclaim().unwrap();
    assert!(!cat.retention().reclaim_pending().unwrap());
    let bytes = raw();
    assert!(!contains(&bytes, "BOB-GONE"), "the deleted rows' text is in no database file");
    assert!(contains(&bytes, "ALICE-KEPT") && contains(&bytes, "OTHER-TENANT"), "the kept rows are read where the files were searched");

    // The chain's triggers allow the blanking only: any other change is refused.
    use crate::store::sql::Scope;
    let id = blanked[0].id;
    let edit = |q: &str| cat.database().write(Scope::All, |sql| sql.execute(q, &[]));
    assert!(edit(&format!("UPDATE events SET hash = 'x' WHERE id = {id}")).is_err());
    assert!(edit(&format!("UPDATE events SET question = 'back' WHERE id = {id}")).is_err());
    assert!(edit("UPDATE events SET question = 'x' WHERE redacted_ms IS NULL").is_err());
    // A row blanked by hand (the triggers allow the shape) is named: no retention run lists it.
    let upload = events.iter().find(|e| e.action == "upload").unwrap().id;
    edit(&format!("UPDATE events SET question = '', chunk_ids = '[]', detail = '{{}}', redacted_ms = 1 WHERE id = {upload}")).unwrap();
    let bad = cat.audit().verify().unwrap();
    assert_eq!(bad.broken.as_ref().map(|b| b.id), Some(upload), "{bad:?}");

    // A tenant's hold keeps everything; released, the next run deletes what the holds kept.
    let whole = cat.retention().place_hold("keep-a", None, "litigation").unwrap();
    let held = cat.retention().run(crate::store::retention::Tenant { id: t.id, name: &t.name }, 30, month_on, false, by).unwrap();
    assert!(held.tenant_held && held.rows() == 0, "{held:?}");
    assert!(cat.retention().release_hold(whole.id).unwrap().released_ms.is_some());
    assert!(cat.retention().release_hold(whole.id).is_err(), "a hold is released once");
    cat.retention().release_hold(hold.id).unwrap();
    assert_eq!(cat.retention().holds(Some("keep-a")).unwrap().iter().filter(|h| h.active()).count(), 0);
    let last = cat.retention().run(crate::store::retention::Tenant { id: t.id, name: &t.name }, 30, month_on, false, by).unwrap();
    assert_eq!((last.answers, last.turns, last.feedback, last.sessions, last.events_blanked), (1, 1, 1, 1, 1), "{last:?}");
    assert!(cat.answers().list(t.id, 10).unwrap().is_empty());
    cat.retention().reclaim().unwrap();
    let bytes = raw();
    assert!(!contains(&bytes, "ALICE-KEPT") && !contains(&bytes, "BOB-GONE"));
    assert!(contains(&bytes, "OTHER-TENANT"));
}
