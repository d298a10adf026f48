//! BM25 on the shared PostgreSQL server: the same terms as the local tantivy index (its English
//! analyser, [`analyze`]) kept as postings in tables, scored in SQL with tantivy's formula
//! (k1 = 1.2, b = 0.75, idf = ln(1 + (N - n + 0.5) / (n + 0.5))), so a tenant ranks alike on
//! either backend.
//!
//! ```text
//! lexical_state    (tenant, generation, chunks, total_len)   one row per tenant: the commit point
//! lexical_chunks   (tenant, chunk, doc, len)                 one row per chunk
//! lexical_postings (tenant, term, chunk, tf)                 one row per distinct term of a chunk
//! ```
//!
//! lexical_terms    (tenant, term, df)                         each term's document frequency
//!
//! A search does not score every posting of its terms (a common word's list runs to tens of
//! thousands): it takes each term's [`CANDIDATES_PER_TERM`] postings of highest weight (the
//! term-frequency factor, stored with the posting at its commit's average length, and indexed)
//! as candidates, and scores those exactly: tantivy's skipping of postings that cannot reach the
//! top, done with an index.
//!
//! A writer gathers its changes in memory and applies them in one transaction with the new
//! generation, so a commit is all or nothing; a searcher reads the latest commit at each query.
//! Every statement names its tenant.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use crate::error::Result;
use crate::store::backend::{Committed, LexicalBackend, LexicalWrite};
use crate::store::catalog::TenantRow;
use crate::access::ChunkFilter;
use crate::store::lexical::{analyze, LexicalHit, LexicalSearch};
use crate::store::vector::widened;
use crate::store::shared::postgres::Postgres;
use crate::types::{ChunkId, DocId};

/// Candidates each query term contributes, at least (ten times the `k` asked for, when more).
const CANDIDATES_PER_TERM: usize = 1_000;
/// Postings per insert statement.
const POSTINGS_PER_STATEMENT: usize = 20_000;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS lexical_state (
    tenant text PRIMARY KEY,
    generation bigint NOT NULL,
    chunks bigint NOT NULL,
    total_len bigint NOT NULL
);
CREATE TABLE IF NOT EXISTS lexical_chunks (
    tenant text NOT NULL,
    chunk bigint NOT NULL,
    doc bigint NOT NULL,
    len integer NOT NULL,
    PRIMARY KEY (tenant, chunk)
);
CREATE INDEX IF NOT EXISTS lexical_chunks_doc ON lexical_chunks (tenant, doc);
CREATE TABLE IF NOT EXISTS lexical_postings (
    tenant text NOT NULL,
    term text NOT NULL,
    chunk bigint NOT NULL,
    tf integer NOT NULL,
    w real NOT NULL,
    PRIMARY KEY (tenant, term, chunk)
);
CREATE INDEX IF NOT EXISTS lexical_postings_chunk ON lexical_postings (tenant, chunk);
CREATE INDEX IF NOT EXISTS lexical_postings_impact ON lexical_postings (tenant, term, w DESC, chunk);
CREATE TABLE IF NOT EXISTS lexical_terms (
    tenant text NOT NULL,
    term text NOT NULL,
    df bigint NOT NULL,
    PRIMARY KEY (tenant, term)
);
CREATE TABLE IF NOT EXISTS ragbox_owner (
    singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    catalog_id text NOT NULL
);
";

/// The BM25 score of the best chunks for the query's terms ($2), best first: each term's $4
/// postings of highest weight are the candidates, scored exactly over all the query's terms.
const SEARCH: &str = "
WITH st AS (
    SELECT chunks::float8 AS n, greatest(total_len, 1)::float8 / greatest(chunks, 1) AS avgdl
    FROM lexical_state WHERE tenant = $1
), q AS (
    SELECT DISTINCT unnest($2::text[]) AS term
), df AS (
    SELECT t.term, t.df::float8 AS n FROM lexical_terms t JOIN q ON q.term = t.term WHERE t.tenant = $1
), cand AS (
    SELECT DISTINCT c.chunk FROM q CROSS JOIN LATERAL (
        SELECT p.chunk FROM lexical_postings p WHERE p.tenant = $1 AND p.term = q.term ORDER BY p.w DESC LIMIT $4
    ) c
)
SELECT cand.chunk, s.score::float4
FROM cand
CROSS JOIN st
JOIN lexical_chunks c ON c.tenant = $1 AND c.chunk = cand.chunk
CROSS JOIN LATERAL (
    SELECT sum(ln(1 + (st.n - df.n + 0.5) / (df.n + 0.5)) * p.tf * 2.2 / (p.tf + 1.2 * (0.25 + 0.75 * c.len / st.avgdl))) AS score
    FROM df JOIN lexical_postings p ON p.tenant = $1 AND p.term = df.term AND p.chunk = cand.chunk
) s
ORDER BY s.score DESC, cand.chunk
LIMIT $3
";

/// Lexical indexes on the shared PostgreSQL server.
pub struct PostgresLexical {
    pg: Arc<Postgres>,
}

impl PostgresLexical {
    /// The lexical indexes on `pg`, creating their tables if they are not there.
    pub fn open(pg: Arc<Postgres>) -> Result<PostgresLexical> {
        pg.with("creating the lexical tables", |c| c.batch_execute(SCHEMA))?;
        Ok(PostgresLexical { pg })
    }

    fn state(&self, tenant: &str) -> Result<Option<(u64, usize)>> {
        let row = self.pg.with("reading the lexical index's generation", |c| {
            c.query_opt("SELECT generation, chunks FROM lexical_state WHERE tenant = $1", &[&tenant])
        })?;
        Ok(row.map(|r| (r.get::<_, i64>(0) as u64, r.get::<_, i64>(1) as usize)))
    }
}

impl LexicalBackend for PostgresLexical {
    fn describe(&self) -> String {
        self.pg.server().to_string()
    }

    fn committed(&self, tenant: &TenantRow) -> Result<Committed> {
        Ok(Committed::At(self.state(&tenant.name)?.map_or(0, |(g, _)| g)))
    }

    fn reader_at(&self, tenant: &TenantRow, generation: u64) -> Result<Option<Box<dyn LexicalSearch>>> {
        let (at, chunks) = self.state(&tenant.name)?.unwrap_or((0, 0));
        Ok((at == generation).then(|| Box::new(PostgresSearcher { pg: self.pg.clone(), tenant: tenant.name.clone(), chunks }) as Box<dyn LexicalSearch>))
    }

    fn reader(&self, tenant: &TenantRow) -> Result<Box<dyn LexicalSearch>> {
        let chunks = self.state(&tenant.name)?.map_or(0, |(_, n)| n);
        Ok(Box::new(PostgresSearcher { pg: self.pg.clone(), tenant: tenant.name.clone(), chunks }))
    }

    fn writer(&self, tenant: &TenantRow, _reset: bool) -> Result<Box<dyn LexicalWrite>> {
        Ok(Box::new(PostgresWriter { pg: self.pg.clone(), tenant: tenant.name.clone(), ops: Vec::new() }))
    }

    fn chunk_ids(&self, tenant: &TenantRow) -> Result<Vec<ChunkId>> {
        let rows = self.pg.with("listing the lexical index's chunks", |c| {
            c.query("SELECT chunk FROM lexical_chunks WHERE tenant = $1 ORDER BY chunk", &[&tenant.name])
        })?;
        Ok(rows.iter().map(|r| ChunkId(r.get::<_, i64>(0) as u64)).collect())
    }

    fn claim(&self, catalog_id: &str) -> Result<()> {
        let owner: String = self.pg.with("recording the catalog these indexes belong to", |c| {
            c.execute("INSERT INTO ragbox_owner (catalog_id) VALUES ($1) ON CONFLICT DO NOTHING", &[&catalog_id])?;
            c.query_one("SELECT catalog_id FROM ragbox_owner", &[]).map(|r| r.get(0))
        })?;
        if owner != catalog_id {
            return Err(crate::error::Error::Config(format!(
                "the shared indexes in {} belong to another data folder's catalog ({owner}, this one is {catalog_id}); give each deployment its own PostgreSQL database and store.shared.collection_prefix",
                self.pg.server()
            )));
        }
        Ok(())
    }

    fn drop_tenant(&self, tenant: &TenantRow) -> Result<()> {
        self.pg.with("dropping a tenant's lexical index", |c| {
            let mut tx = c.transaction()?;
            for table in ["lexical_postings", "lexical_terms", "lexical_chunks", "lexical_state"] {
                tx.execute(&format!("DELETE FROM {table} WHERE tenant = $1"), &[&tenant.name])?;
            }
            tx.commit()
        })
    }
}

/// One change a writer will apply on commit.
enum Op {
    Add { chunk: ChunkId, doc: DocId, text: String },
    RemoveDocument(DocId),
    Clear,
}

/// Changes gathered for one transaction.
struct PostgresWriter {
    pg: Arc<Postgres>,
    tenant: String,
    ops: Vec<Op>,
}

impl LexicalWrite for PostgresWriter {
    fn add(&mut self, chunk: ChunkId, doc: DocId, text: &str) -> Result<()> {
        self.ops.push(Op::Add { chunk, doc, text: text.to_string() });
        Ok(())
    }

    fn remove_document(&mut self, doc: DocId) -> Result<()> {
        self.ops.push(Op::RemoveDocument(doc));
        Ok(())
    }

    fn clear(&mut self) -> Result<()> {
        self.ops.clear();
        self.ops.push(Op::Clear);
        Ok(())
    }

    fn commit(self: Box<Self>, generation: u64) -> Result<()> {
        let PostgresWriter { pg, tenant, ops } = *self;
        let tenant = tenant.as_str();
        pg.with("committing the lexical index", |c| {
            let mut tx = c.transaction()?;
            // The state row is the commit point and, locked, the one writer per tenant.
            tx.execute("INSERT INTO lexical_state VALUES ($1, 0, 0, 0) ON CONFLICT (tenant) DO NOTHING", &[&tenant])?;
            let state = tx.query_one("SELECT chunks, total_len FROM lexical_state WHERE tenant = $1 FOR UPDATE", &[&tenant])?;
            let (chunks, total_len): (i64, i64) = (state.get(0), state.get(1));
            let mut index = Indexing { avgdl: (chunks > 0).then(|| total_len as f64 / chunks as f64), touched: HashSet::new(), cleared: false };
            let mut adds: Vec<(ChunkId, DocId, &str)> = Vec::new();
            for op in &ops {
                match op {
                    Op::Add { chunk, doc, text } => {
                        adds.push((*chunk, *doc, text));
                        continue;
                    }
                    Op::RemoveDocument(doc) => {
                        insert(&mut tx, tenant, &std::mem::take(&mut adds), &mut index)?;
                        let doc = doc.0 as i64;
                        let gone = tx.query(
                            "DELETE FROM lexical_postings WHERE tenant = $1 AND chunk IN (SELECT chunk FROM lexical_chunks WHERE tenant = $1 AND doc = $2) RETURNING term",
                            &[&tenant, &doc],
                        )?;
                        index.touched.extend(gone.iter().map(|r| r.get::<_, String>(0)));
                        tx.execute("DELETE FROM lexical_chunks WHERE tenant = $1 AND doc = $2", &[&tenant, &doc])?;
                    }
                    Op::Clear => {
                        adds.clear();
                        index.cleared = true;
                        tx.execute("DELETE FROM lexical_postings WHERE tenant = $1", &[&tenant])?;
                        tx.execute("DELETE FROM lexical_chunks WHERE tenant = $1", &[&tenant])?;
                    }
                }
            }
            insert(&mut tx, tenant, &adds, &mut index)?;
            // Document frequencies of every term whose postings changed (all of them after a clear).
            if index.cleared {
                tx.execute("DELETE FROM lexical_terms WHERE tenant = $1", &[&tenant])?;
                tx.execute(
                    "INSERT INTO lexical_terms SELECT $1::text, term, count(*) FROM lexical_postings WHERE tenant = $1 GROUP BY term",
                    &[&tenant],
                )?;
            } else if !index.touched.is_empty() {
                let terms: Vec<&String> = index.touched.iter().collect();
                tx.execute("DELETE FROM lexical_terms WHERE tenant = $1 AND term = ANY($2)", &[&tenant, &terms])?;
                tx.execute(
                    "INSERT INTO lexical_terms SELECT $1::text, term, count(*) FROM lexical_postings WHERE tenant = $1 AND term = ANY($2) GROUP BY term",
                    &[&tenant, &terms],
                )?;
            }
            tx.execute(
                "UPDATE lexical_state SET generation = $2,
                     chunks = (SELECT count(*) FROM lexical_chunks WHERE tenant = $1),
                     total_len = (SELECT coalesce(sum(len), 0) FROM lexical_chunks WHERE tenant = $1)
                 WHERE tenant = $1",
                &[&tenant, &(generation as i64)],
            )?;
            tx.commit()
        })
    }
}

/// What a commit keeps track of while it writes postings.
struct Indexing {
    /// The tenant's average chunk length before this commit (`None`: no chunks yet).
    avgdl: Option<f64>,
    /// Terms whose postings changed.
    touched: HashSet<String>,
    /// Whether the commit cleared the index.
    cleared: bool,
}

/// Inserts chunks and their postings (a chunk already present is replaced).
fn insert(
    tx: &mut r2d2_postgres::postgres::Transaction<'_>,
    tenant: &str,
    adds: &[(ChunkId, DocId, &str)],
    index: &mut Indexing,
) -> std::result::Result<(), r2d2_postgres::postgres::Error> {
    // A chunk added twice in one commit keeps its last text.
    let mut seen = HashSet::new();
    let mut adds: Vec<&(ChunkId, DocId, &str)> = adds.iter().rev().filter(|a| seen.insert(a.0)).collect();
    adds.reverse();
    if adds.is_empty() {
        return Ok(());
    }
    let chunks: Vec<i64> = adds.iter().map(|a| a.0 .0 as i64).collect();
    let replaced = tx.query("DELETE FROM lexical_postings WHERE tenant = $1 AND chunk = ANY($2) RETURNING term", &[&tenant, &chunks])?;
    index.touched.extend(replaced.iter().map(|r| r.get::<_, String>(0)));
    let analysed: Vec<Vec<String>> = adds.iter().map(|(_, _, text)| analyze(text)).collect();
    // The weights order candidates only (scores are computed at query time): the average length
    // before this commit, or this batch's own for a tenant's first.
    let avgdl = index.avgdl.unwrap_or_else(|| analysed.iter().map(Vec::len).sum::<usize>() as f64 / analysed.len() as f64).max(1.0);
    let (mut docs, mut lens) = (Vec::with_capacity(adds.len()), Vec::with_capacity(adds.len()));
    let (mut terms, mut term_chunks, mut tfs, mut weights): (Vec<String>, Vec<i64>, Vec<i32>, Vec<f32>) = Default::default();
    for ((chunk, doc, _), tokens) in adds.iter().zip(analysed) {
        docs.push(doc.0 as i64);
        let len = tokens.len();
        lens.push(len as i32);
        let mut tf: HashMap<String, i32> = HashMap::new();
        for t in tokens {
            *tf.entry(t).or_default() += 1;
        }
        for (term, n) in tf {
            let n_f = n as f64;
            weights.push((n_f * 2.2 / (n_f + 1.2 * (0.25 + 0.75 * len as f64 / avgdl))) as f32);
            index.touched.insert(term.clone());
            terms.push(term);
            term_chunks.push(chunk.0 as i64);
            tfs.push(n);
        }
    }
    tx.execute(
        "INSERT INTO lexical_chunks (tenant, chunk, doc, len) SELECT $1::text, * FROM unnest($2::int8[], $3::int8[], $4::int4[])
         ON CONFLICT (tenant, chunk) DO UPDATE SET doc = excluded.doc, len = excluded.len",
        &[&tenant, &chunks, &docs, &lens],
    )?;
    for start in (0..terms.len()).step_by(POSTINGS_PER_STATEMENT) {
        let end = (start + POSTINGS_PER_STATEMENT).min(terms.len());
        tx.execute(
            "INSERT INTO lexical_postings (tenant, term, chunk, tf, w) SELECT $1::text, * FROM unnest($2::text[], $3::int8[], $4::int4[], $5::float4[])",
            &[&tenant, &&terms[start..end], &&term_chunks[start..end], &&tfs[start..end], &&weights[start..end]],
        )?;
    }
    Ok(())
}

/// BM25 over one tenant's postings.
struct PostgresSearcher {
    pg: Arc<Postgres>,
    tenant: String,
    chunks: usize,
}

impl LexicalSearch for PostgresSearcher {
    /// Filtered, the query is asked again for more hits until `k` pass ([`widened`]).
    fn search_filtered(&self, query: &str, k: usize, filter: Option<&ChunkFilter>) -> Result<Vec<LexicalHit>> {
        let mut terms = analyze(query);
        terms.sort();
        terms.dedup();
        if k == 0 || terms.is_empty() {
            return Ok(Vec::new());
        }
        let top = |n: usize| -> Result<Vec<LexicalHit>> {
            let per_term = CANDIDATES_PER_TERM.max(n * 10) as i64;
            let rows = self.pg.with("searching the lexical index", |c| c.query(SEARCH, &[&self.tenant, &terms, &(n as i64), &per_term]))?;
            Ok(rows.iter().map(|r| (ChunkId(r.get::<_, i64>(0) as u64), r.get::<_, f32>(1))).collect())
        };
        match filter {
            None => top(k),
            Some(f) => widened(k, self.chunks, f, |h: &LexicalHit| h.0 .0, top),
        }
    }

    fn len(&self) -> usize {
        self.chunks
    }
}
