//! The shared backend, for several ragbox nodes over one set of documents: vectors on a Milvus
//! server ([`MilvusVectors`]); the catalog (`Catalog::on_postgres`), the tenants' write locks and
//! BM25 ([`PostgresLexical`]) on a PostgreSQL server ([`Postgres`]). Chosen by
//! `store.backend = "shared"`; nothing here connects anywhere unless it is.

pub mod bm25;
pub mod milvus;
pub mod postgres;

use std::sync::Arc;

pub use bm25::PostgresLexical;
pub use milvus::MilvusVectors;
pub use postgres::Postgres;

use crate::error::Result;
use crate::store::backend::Backends;

/// Where the shared servers are and how to sign in to them.
#[derive(Debug, Clone)]
pub struct SharedOptions {
    /// The PostgreSQL URL (`postgresql://user@host:port/db`), password included or not.
    pub postgres: String,
    /// The PostgreSQL password, when it is not in the URL.
    pub postgres_password: Option<String>,
    /// The Milvus URL (`http://host:19530`).
    pub milvus: String,
    /// The Milvus user and password, when the server checks them.
    pub milvus_credentials: Option<(String, String)>,
    /// The prefix of every Milvus collection this deployment owns.
    pub collection_prefix: String,
    /// The Milvus database the collections are in (`None`: Milvus's `default`).
    pub milvus_database: Option<String>,
}

impl SharedOptions {
    fn postgres_url(&self) -> String {
        match &self.postgres_password {
            Some(p) => with_password(&self.postgres, p),
            None => self.postgres.clone(),
        }
    }

    /// Whether each server answers, and its version, for `doctor`: one line per server, and
    /// whether row-level security binds the PostgreSQL role (a superuser, or a role with
    /// BYPASSRLS, passes every policy).
    pub fn probe(&self) -> Vec<String> {
        let pg = Postgres::connect(&self.postgres_url()).and_then(|pg| {
            let (version, user, bypass): (String, String, bool) = pg.with("asking its version", |c| {
                c.query_one("SELECT current_setting('server_version'), current_user::text, rolsuper OR rolbypassrls FROM pg_roles WHERE rolname = current_user", &[])
                    .map(|r| (r.get(0), r.get(1), r.get(2)))
            })?;
            let wall = if bypass {
                format!("role {user} is a superuser or has BYPASSRLS, so the per-tenant row-level security does not bind it: use a role without them")
            } else {
                format!("role {user}, row-level security per tenant in force")
            };
            Ok(format!("catalog and BM25 on {}: reachable, PostgreSQL {version}; {wall}", pg.server()))
        });
        let credentials = self.milvus_credentials.as_ref().map(|(u, p)| (u.as_str(), p.as_str()));
        let milvus = MilvusVectors::connect_in(&self.milvus, credentials, self.milvus_database.as_deref(), &self.collection_prefix)
            .and_then(|m| Ok(format!(
                "vectors on Milvus at {}: reachable, {} (database {}, collections {}_*)",
                self.milvus,
                m.server_version()?,
                self.milvus_database.as_deref().unwrap_or("default"),
                self.collection_prefix
            )));
        vec![
            milvus.unwrap_or_else(|e| format!("vectors on Milvus at {}: NOT reachable: {e}", self.milvus)),
            pg.unwrap_or_else(|e| format!("catalog and BM25 on PostgreSQL: NOT reachable: {e}")),
        ]
    }
}

impl Backends {
    /// Connects to both shared servers.
    pub fn shared(options: &SharedOptions) -> Result<Backends> {
        let pg = Arc::new(Postgres::connect(&options.postgres_url())?);
        let credentials = options.milvus_credentials.as_ref().map(|(u, p)| (u.as_str(), p.as_str()));
        Ok(Backends {
            vectors: Box::new(MilvusVectors::connect_in(&options.milvus, credentials, options.milvus_database.as_deref(), &options.collection_prefix)?),
            lexical: Box::new(PostgresLexical::open(pg.clone())?),
            catalog: Some(pg),
        })
    }
}

/// `url` with `password` added, in libpq's key/value form (which the URL form parses into too).
fn with_password(url: &str, password: &str) -> String {
    let quoted = password.replace('\\', "\\\\").replace('\'', "\\'");
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        // The URL form takes no extra keys; rewrite the userinfo instead.
        let (scheme, rest) = url.split_once("://").expect("checked above");
        let (userinfo, host) = rest.split_once('@').unwrap_or(("", rest));
        let user = userinfo.split(':').next().unwrap_or("");
        let encoded: String = password.bytes().map(|b| if b.is_ascii_alphanumeric() { (b as char).to_string() } else { format!("%{b:02X}") }).collect();
        return if user.is_empty() { format!("{scheme}://:{encoded}@{host}") } else { format!("{scheme}://{user}:{encoded}@{host}") };
    }
    format!("{url} password='{quoted}'")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_password_from_a_file_joins_either_url_form() {
        assert_eq!(with_password("postgresql://ragbox@db:5432/r", "p@ss w"), "postgresql://ragbox:p%40ss%20w@db:5432/r");
        assert_eq!(with_password("host=db user=ragbox", "it's"), "host=db user=ragbox password='it\\'s'");
    }
}
