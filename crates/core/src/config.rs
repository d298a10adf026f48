//! Configuration: `config/default.toml` < `--config FILE` < `RAGBOX_*` environment < flags.
//!
//! [`RawConfig`] is what the files say (unknown keys are refused, and each choice, such as
//! `ingest.chunker`, is read into its enum there, so a misspelt one is refused at load);
//! [`Config`] is the same settings validated, with paths resolved. `app` turns it into the typed
//! options the library's constructors take; the service reads it through `App` (and hands the
//! faces the read-only [`Config`] for `doctor` and the server's limits); the measuring tools
//! read it directly, since they vary its settings.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::answer::focus::FocusBy;
use crate::answer::prompt::AnswerPrompt;
use crate::answer::support::SupportMethod;
use crate::chunk::ChunkerKind;
use crate::error::{Error, Result};
pub use crate::model::DeviceChoice;
use crate::model::{Manifest, Precision};
use crate::retrieve::RetrieveOptions;
use crate::store::Quantization;
use crate::types::ModelRole;

/// The shipped defaults.
pub const DEFAULT_TOML: &str = include_str!("../../../config/default.toml");

/// `[embed]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EmbedSection {
    /// Model name.
    pub model: String,
    /// Most texts per batch.
    pub batch_size: usize,
    /// Most padded tokens per batch.
    pub max_batch_tokens: usize,
    /// Precision of every encoder's dense layers (the embedder's and the cross-encoder's).
    #[serde(default)]
    pub precision: Precision,
}

/// `[rerank]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RerankSection {
    /// Model name.
    pub model: String,
    /// Most pairs per batch.
    pub batch_size: usize,
}

/// `[ingest]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IngestSection {
    /// The chunker.
    pub chunker: ChunkerKind,
    /// Target child size in tokens.
    pub child_tokens: usize,
    /// Hard child budget in tokens.
    pub max_child_tokens: usize,
    /// Parent budget in tokens.
    pub parent_tokens: usize,
    /// Child overlap in tokens.
    pub overlap_tokens: usize,
    /// Largest file ingested.
    pub max_file_bytes: u64,
    /// Seconds one file's parse may take before it is skipped.
    pub parse_timeout_s: u64,
    /// Pending chunks that trigger a commit.
    pub commit_chunks: usize,
    /// Follow symbolic links out of the folder being ingested (what they point to gets the
    /// readers of the link's folder). Off: such links are reported and not read.
    #[serde(default)]
    pub follow_links: bool,
}

/// `[store]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoreSection {
    /// Where the indexes live: `local` (the data folder) or `shared` (the servers of
    /// `[store.shared]`).
    #[serde(default)]
    pub backend: StoreBackend,
    /// How vectors are stored: `f32`, `f16` or `i8` (local vectors).
    pub quantization: Quantization,
    /// Exact vector search below this many vectors (local vectors).
    pub exact_below: usize,
    /// `[store.shared]`: the servers of the shared backend.
    #[serde(default)]
    pub shared: Option<SharedSection>,
}

/// `store.backend`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StoreBackend {
    /// usearch and tantivy files in the data folder.
    #[default]
    Local,
    /// Vectors on Milvus, BM25 on PostgreSQL.
    Shared,
}

/// `[store.shared]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SharedSection {
    /// PostgreSQL URL, `postgresql://user@host:port/db`.
    pub postgres: String,
    /// A file holding the PostgreSQL password, when the URL does not.
    #[serde(default)]
    pub postgres_password_file: Option<PathBuf>,
    /// Milvus URL, `http://host:19530`.
    pub milvus: String,
    /// The Milvus user (with `milvus_password_file`), when the server checks users.
    #[serde(default)]
    pub milvus_user: Option<String>,
    /// A file holding the Milvus user's password.
    #[serde(default)]
    pub milvus_password_file: Option<PathBuf>,
    /// The prefix of the Milvus collections this deployment owns.
    #[serde(default = "default_collection_prefix")]
    pub collection_prefix: String,
    /// The Milvus database of this deployment (its user's grants are confined to it); Milvus's
    /// `default` when not given.
    #[serde(default)]
    pub milvus_database: Option<String>,
}

impl StoreSection {
    /// The local vector index's settings.
    pub fn vector_options(&self) -> crate::store::VectorOptions {
        crate::store::VectorOptions { quantization: self.quantization, exact_below: self.exact_below, ..Default::default() }
    }

    /// The index backends `backend` names, connected: the data folder's files, or the shared
    /// servers of `[store.shared]`.
    pub fn backends(&self, backend: StoreBackend, data_dir: &std::path::Path) -> Result<crate::store::Backends> {
        match backend {
            StoreBackend::Local => Ok(crate::store::Backends::local(&crate::store::Layout::new(data_dir), self.vector_options())),
            StoreBackend::Shared => {
                let shared = self.shared.as_ref().ok_or_else(|| {
                    Error::Config("the shared backend needs a [store.shared] section with the postgres and milvus URLs (docs/SERVING.md, \"Several nodes\")".into())
                })?;
                crate::store::Backends::shared(&shared.options()?)
            }
        }
    }
}

fn default_collection_prefix() -> String {
    "ragbox".into()
}

impl SharedSection {
    /// The servers and credentials, the password files read.
    pub fn options(&self) -> Result<crate::store::shared::SharedOptions> {
        let read = |key: &str, path: &PathBuf| {
            std::fs::read_to_string(path)
                .map(|s| s.trim_end_matches(['\n', '\r']).to_string())
                .map_err(|e| Error::Config(format!("store.shared.{key} = {path:?} cannot be read ({e})")))
        };
        let postgres_password = self.postgres_password_file.as_ref().map(|p| read("postgres_password_file", p)).transpose()?;
        let milvus_credentials = match (&self.milvus_user, &self.milvus_password_file) {
            (Some(user), Some(file)) => Some((user.clone(), read("milvus_password_file", file)?)),
            (None, None) => None,
            _ => return Err(Error::Config("store.shared: set milvus_user and milvus_password_file together".into())),
        };
        Ok(crate::store::shared::SharedOptions {
            postgres: self.postgres.clone(),
            postgres_password,
            milvus: self.milvus.clone(),
            milvus_credentials,
            collection_prefix: self.collection_prefix.clone(),
            milvus_database: self.milvus_database.clone(),
        })
    }
}

/// `[retrieve]`: the read path's settings ([`RetrieveOptions`], every key but its per-query
/// `floor`) and the refusal floors, by the model whose score they apply to (a reranker, or the
/// embedder when no reranker runs); [`RetrieveSection::floor_for`] picks one.
#[derive(Debug, Clone)]
pub struct RetrieveSection {
    /// The settings, read from the keys of `[retrieve]`.
    pub options: RetrieveOptions,
    /// `[retrieve.floors]`.
    pub floors: std::collections::BTreeMap<String, f32>,
}

impl RetrieveSection {
    /// The refusal floor for retrieval whose hits are scored by `reranker` when one runs, else
    /// by the cosine of `index_model` (an index identity: floors are per model, whatever the
    /// precision of its vectors). The one rule for every caller.
    pub fn floor_for(&self, reranker: Option<&str>, index_model: &str) -> Result<Option<f32>> {
        let scorer = match reranker {
            Some(r) => r,
            None => Precision::split_identity(index_model)?.0,
        };
        Ok(self.floors.get(scorer).copied())
    }
}

impl<'de> Deserialize<'de> for RetrieveSection {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let mut table = toml::Table::deserialize(d)?;
        let floors = match table.remove("floors") {
            Some(f) => f.try_into().map_err(serde::de::Error::custom)?,
            None => Default::default(),
        };
        let options = toml::Value::Table(table).try_into().map_err(serde::de::Error::custom)?;
        Ok(RetrieveSection { options, floors })
    }
}

/// `[generate]`: the LLM that writes answers, contextual annotations and rewrites.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GenerateSection {
    /// `local` (a GGUF from the models folder; the default), `openai` (an OpenAI-compatible
    /// inference server on a host of `allow_hosts`) or `claude` (remote; needs the `claude`
    /// feature, and text leaves the machine).
    pub backend: GenerateBackend,
    /// The local model (a `generate` model of the manifest).
    pub model: String,
    /// Most tokens in an answer.
    pub max_tokens: usize,
    /// 0: greedy decoding.
    pub temperature: f64,
    /// Sequences the local model decodes together.
    pub max_num_seqs: usize,
    /// Prompt prefixes whose KV cache the local model keeps.
    pub prefix_cache: usize,
    /// Dequantise the local model's weights to f32 at load (off: quantised AVX2 kernels decode faster).
    pub dequantize: bool,
    /// The Claude model, when `backend = "claude"`.
    pub claude_model: String,
    /// The environment variable holding the Anthropic API key.
    pub claude_api_key_env: String,
    /// The Anthropic API base.
    pub claude_base_url: String,
    /// The inference server's API base, when `backend = "openai"` (`http://HOST:PORT/v1`).
    pub openai_base_url: String,
    /// The model name the inference server expects.
    pub openai_model: String,
    /// The environment variable holding the server's key, if it wants one.
    pub openai_api_key_env: String,
    /// A file holding the server's key (first line), if it wants one.
    pub openai_api_key_file: String,
    /// Giving up on connecting to the server.
    pub openai_connect_timeout_ms: u64,
    /// Giving up on one reply.
    pub openai_timeout_ms: u64,
    /// Hosts prompts may be sent to: names, IP addresses, CIDR networks. Empty: none.
    pub allow_hosts: Vec<String>,
    /// `none`, or `local`: the local model answers while the inference server is unreachable.
    pub fallback: GenerateFallback,
}

/// `generate.backend`: where prompts go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GenerateBackend {
    /// A GGUF from the models folder, in this process.
    Local,
    /// An OpenAI-compatible inference server on a host of `generate.allow_hosts`.
    OpenAi,
    /// Anthropic's API (the `claude` feature); text leaves the machine.
    Claude,
}

/// `generate.fallback`: who answers while the inference server cannot be reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GenerateFallback {
    /// Nobody: the request fails, saying so.
    None,
    /// The local model (`generate.model`).
    Local,
}

/// Reads a setting's word through its type's `FromStr`, so that a misspelt word is refused at
/// load with the choices that parser names.
fn parsed<'de, D, T>(d: D) -> std::result::Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: std::str::FromStr<Err = Error>,
{
    let word = String::deserialize(d)?;
    word.parse().map_err(|e| {
        serde::de::Error::custom(match e {
            Error::Invalid(m) => m,
            e => e.to_string(),
        })
    })
}

/// `[answer]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AnswerSection {
    /// Passages given to the generator.
    pub passages: usize,
    /// Most characters of one passage in the prompt.
    pub passage_chars: usize,
    /// How sentences are checked against their citations: `grounded` (figures, names and
    /// negations found in the cited passage; the default), `similarity` (embedding cosine), `llm`
    /// (the generator's yes/no logits) or `off`. A reply none of whose sentences passes, with no
    /// passage sentence to quote, is withheld.
    #[serde(deserialize_with = "parsed")]
    pub support: SupportMethod,
    /// Below this a sentence is flagged unsupported (in the chosen method's score).
    pub support_floor: f32,
    /// Prior turns a follow-up may be rewritten with.
    pub memory_turns: usize,
    /// The answer prompt's layout: labelled, tagged, system-context or direct (docs/EVAL.md).
    #[serde(deserialize_with = "parsed")]
    pub prompt: AnswerPrompt,
    /// Sentences of the passages the generator reads, those closest to the question; 0: whole
    /// passages (docs/EVAL.md).
    pub focus: usize,
    /// What scores those sentences against the question: `reranker` (the cross-encoder when the
    /// tenant's retrieval has one, else the embedder) or `embedder`.
    #[serde(deserialize_with = "parsed")]
    pub focus_by: FocusBy,
    /// Who writes the answer when the tenant has the cross-encoder: `evidence` (its sentences,
    /// verbatim, after the answerability decision) or `generate` (the generator, the evidence
    /// standing in for a reply that is no answer).
    #[serde(deserialize_with = "parsed")]
    pub reader: crate::answer::evidence::Reader,
}

/// `[server]`: `ragbox serve`.
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct ServerSection {
    /// Address to listen on; loopback unless someone chooses otherwise.
    pub listen: String,
    /// Generation requests that may wait for the LLM; beyond this the server answers 503.
    pub queue: usize,
    /// Generation requests run at once.
    pub generate_concurrency: usize,
    /// Largest JSON request body, in bytes.
    pub max_body_bytes: usize,
    /// Longest question or query, in characters.
    pub max_question_chars: usize,
    /// Largest upload, in bytes.
    pub max_upload_bytes: usize,
    /// Search, documents and admin requests: give up after this long.
    pub request_timeout_ms: u64,
    /// A request body (JSON or upload) must arrive within this long (slow clients: 408).
    pub body_timeout_ms: u64,
    /// An answer (queue wait included): cancel after this long.
    pub generate_timeout_ms: u64,
    /// On SIGTERM/SIGINT: how long in-flight requests get to finish before they are cancelled.
    pub shutdown_grace_ms: u64,
    /// Failed authentications per client address per minute before it is refused (429).
    pub auth_failures_per_minute: u32,
    /// Origins allowed by CORS; empty (the default) sends no CORS headers at all.
    pub cors_origins: Vec<String>,
    /// Load the LLM at start (else on the first answer).
    pub preload_generator: bool,
}

/// `[access]`: the rules that decide which groups may read a document (docs/ACCESS.md).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AccessSection {
    /// Path globs and their readers, first match wins; a `.ragbox-access` file in the folder
    /// applies where no rule matches.
    #[serde(default)]
    pub rules: Vec<crate::access::AccessRule>,
    /// Whether `.ragbox-access` files in the folders count. Whoever can write a folder can write
    /// its permissions file; off, the rules above alone decide (docs/ACCESS.md).
    #[serde(default = "yes")]
    pub files: bool,
}

fn yes() -> bool {
    true
}

impl Default for AccessSection {
    fn default() -> Self {
        AccessSection { rules: Vec::new(), files: true }
    }
}

/// `[retention]`: how long conversations are kept (docs/SECURITY.md, "What ragbox keeps"):
/// questions, answers, chat turns, sessions and feedback older than the tenant's days are
/// deleted by `ragbox retention run` (and by `serve`, daily), unless a legal hold keeps them.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetentionSection {
    /// Days every tenant keeps its conversations (0: none are kept past the next run; absent:
    /// kept until deleted by hand).
    #[serde(default)]
    pub days: Option<u32>,
    /// Days for named tenants, over `days`.
    #[serde(default)]
    pub tenants: std::collections::BTreeMap<String, u32>,
}

impl RetentionSection {
    /// The days `tenant` keeps its conversations; `None`: forever.
    pub fn days_for(&self, tenant: &str) -> Option<u32> {
        self.tenants.get(tenant).copied().or(self.days)
    }

    /// Whether any tenant has a retention period.
    pub fn any(&self) -> bool {
        self.days.is_some() || !self.tenants.is_empty()
    }
}

/// `[sso]`: people signing in with the organisation's identity (docs/ACCESS.md).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SsoSection {
    /// Which group signs in to which tenant with which role; a person in none is refused.
    #[serde(default)]
    pub groups: Vec<GroupGrant>,
    /// Sign-in against an LDAP directory.
    #[serde(default)]
    pub ldap: Option<LdapSection>,
    /// Sign-in with an OpenID Connect provider.
    #[serde(default)]
    pub oidc: Option<OidcSection>,
}

/// One `[[sso.groups]]` entry: members of `group` reach `tenant` as `role`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct GroupGrant {
    /// The group's name as the directory or the token's claim spells it; `*` is every person.
    pub group: String,
    /// The tenant its members reach.
    pub tenant: String,
    /// `reader`, `writer` or `admin`.
    #[serde(default = "default_role")]
    pub role: String,
}

fn default_role() -> String {
    "reader".into()
}

/// `[sso.ldap]`: bind as the person, read their groups (docs/ACCESS.md, "LDAP").
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LdapSection {
    /// `ldap://HOST:PORT` or `ldaps://HOST:PORT`.
    pub url: String,
    /// Upgrade an `ldap://` connection with StartTLS.
    #[serde(default)]
    pub starttls: bool,
    /// The service account that searches for the person's entry; anonymous when absent.
    #[serde(default)]
    pub bind_dn: Option<String>,
    /// A file holding the service account's password.
    #[serde(default)]
    pub bind_password_file: Option<PathBuf>,
    /// Where people's entries are.
    pub user_base: String,
    /// The filter that finds the person; `{user}` is the escaped user name.
    #[serde(default = "default_user_filter")]
    pub user_filter: String,
    /// Where groups are.
    pub group_base: String,
    /// The filter that finds the person's groups; `{dn}` and `{user}` are substituted, escaped.
    #[serde(default = "default_group_filter")]
    pub group_filter: String,
    /// The attribute of a group entry that names it.
    #[serde(default = "default_group_name")]
    pub group_name_attribute: String,
    /// How long a signed-in session lasts.
    #[serde(default = "default_session_hours")]
    pub session_hours: u64,
    /// Each step's time limit against the directory.
    #[serde(default = "default_sso_timeout")]
    pub timeout_ms: u64,
    /// Hosts the directory may be (as `generate.allow_hosts`): `url` must name one of them.
    pub allow_hosts: Vec<String>,
}

fn default_user_filter() -> String {
    "(uid={user})".into()
}
fn default_group_filter() -> String {
    "(&(objectClass=groupOfNames)(member={dn}))".into()
}
fn default_group_name() -> String {
    "cn".into()
}
fn default_session_hours() -> u64 {
    12
}
fn default_sso_timeout() -> u64 {
    5000
}

/// `[sso.oidc]`: an OpenID Connect provider (docs/ACCESS.md, "OpenID Connect").
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OidcSection {
    /// The issuer URL; its `/.well-known/openid-configuration` is read from there.
    pub issuer: String,
    /// This application's client id at the provider.
    pub client_id: String,
    /// A file holding the client secret (a confidential client); none for a public client.
    #[serde(default)]
    pub client_secret_file: Option<PathBuf>,
    /// The callback the provider redirects to: `http(s)://HOST:PORT/auth/oidc/callback`.
    pub redirect_url: String,
    /// Scopes asked for besides `openid`.
    #[serde(default = "default_scopes")]
    pub scopes: Vec<String>,
    /// The claim listing the person's groups.
    #[serde(default = "default_groups_claim")]
    pub groups_claim: String,
    /// The claim naming the person for display.
    #[serde(default = "default_name_claim")]
    pub name_claim: String,
    /// The `aud` a bearer token for the API must carry; the client id when absent.
    #[serde(default)]
    pub audience: Option<String>,
    /// Hosts the discovery document, the keys and the token endpoint may be fetched from (as
    /// `generate.allow_hosts`): nothing else is contacted.
    pub allow_hosts: Vec<String>,
    /// How long a signed-in session lasts at most (the token's own expiry may end it sooner).
    #[serde(default = "default_session_hours")]
    pub session_hours: u64,
    /// Each request's time limit against the provider.
    #[serde(default = "default_sso_timeout")]
    pub timeout_ms: u64,
}

fn default_scopes() -> Vec<String> {
    vec!["profile".into(), "email".into()]
}
fn default_groups_claim() -> String {
    "groups".into()
}
fn default_name_claim() -> String {
    "preferred_username".into()
}

/// `[[quotas]]`: limits for the members of a group, or (`group = "*"`) for everyone. A person or
/// key in several groups gets the most generous limit among them; a limit no entry sets is none.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct QuotaRule {
    /// The group, or `*`.
    pub group: String,
    /// Questions (ask, chat, search, the OpenAI route) per rolling minute.
    #[serde(default)]
    pub questions_per_minute: Option<u32>,
    /// Uploads per rolling day.
    #[serde(default)]
    pub uploads_per_day: Option<u32>,
}

/// One `[[sources]]` entry: a mailbox or a file share that `ragbox sync` (and `ragbox serve`, every
/// `interval`) mirrors into `<data>/sources/<name>/` and ingests like a local folder
/// (docs/SOURCES.md).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct SourceConfig {
    /// Its name: letters, digits, `-` and `_`; the folder its mirror lives in.
    pub name: String,
    /// `imap` or `smb`.
    pub kind: SourceKind,
    /// The tenant its documents go to.
    #[serde(default = "default_tenant")]
    pub tenant: String,
    /// The server's host name or address.
    pub host: String,
    /// Its port; 993 (imap, implicit TLS), 143 (imap otherwise) or 445 (smb) when absent.
    #[serde(default)]
    pub port: Option<u16>,
    /// The account.
    pub user: String,
    /// A file holding the password (its first line).
    #[serde(default)]
    pub password_file: Option<PathBuf>,
    /// An environment variable holding the password.
    #[serde(default)]
    pub password_env: Option<String>,
    /// imap: `implicit` (imaps, the default), `starttls`, or `none` (loopback hosts only).
    #[serde(default)]
    pub tls: SourceTls,
    /// imap: a PEM file of the CA that signed the server's certificate, when it is not one the
    /// system trusts.
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
    /// imap: the folders to read (`INBOX`, `Policies/2026`).
    #[serde(default)]
    pub folders: Vec<String>,
    /// smb: the share's name.
    #[serde(default)]
    pub share: Option<String>,
    /// smb: the folder inside the share to read (the whole share when empty).
    #[serde(default)]
    pub path: String,
    /// smb: the account's domain (workgroup), when the server wants one.
    #[serde(default)]
    pub domain: Option<String>,
    /// Time between syncs under `ragbox serve`: `30s`, `15m`, `2h`; `off`: only `ragbox sync`
    /// (and the admin view's "sync now") runs it.
    #[serde(default = "default_interval")]
    pub interval: String,
    /// The groups that may read its documents (an `[[access.rules]]` entry for its mirror, ahead
    /// of the configured rules); open when empty.
    #[serde(default)]
    pub groups: Vec<String>,
    /// Each network step's time limit.
    #[serde(default = "default_source_timeout")]
    pub timeout_ms: u64,
}

/// The kinds of `[[sources]]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SourceKind {
    /// An IMAP mailbox.
    Imap,
    /// An SMB/CIFS file share.
    Smb,
}

/// How an IMAP source's connection is protected.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SourceTls {
    /// TLS from the first byte (imaps).
    #[default]
    Implicit,
    /// A plain connection upgraded with STARTTLS before logging in.
    Starttls,
    /// No TLS: the password crosses in clear, so only a loopback host is accepted.
    None,
}

fn default_tenant() -> String {
    crate::store::DEFAULT_TENANT.into()
}
fn default_interval() -> String {
    "15m".into()
}
fn default_source_timeout() -> u64 {
    15_000
}

impl SourceConfig {
    /// The time between syncs under `ragbox serve`, `None` when `off`.
    pub fn every(&self) -> Result<Option<std::time::Duration>> {
        let text = self.interval.trim();
        if text == "off" {
            return Ok(None);
        }
        let bad = || Error::Config(format!("source `{}`: interval = `{}`: write 30s, 15m, 2h or off", self.name, self.interval));
        let split = text.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
        let n: u64 = text[..split].parse().map_err(|_| bad())?;
        let secs = match &text[split..] {
            "s" => n,
            "m" => n * 60,
            "h" => n * 3600,
            _ => return Err(bad()),
        };
        if secs == 0 {
            return Err(bad());
        }
        Ok(Some(std::time::Duration::from_secs(secs)))
    }

    /// The port connected to.
    pub fn port(&self) -> u16 {
        self.port.unwrap_or(match (self.kind, self.tls) {
            (SourceKind::Smb, _) => 445,
            (SourceKind::Imap, SourceTls::Implicit) => 993,
            (SourceKind::Imap, _) => 143,
        })
    }

    /// Where it is, for messages and the documents' origin (`imap://host:993/`, `smb://host:445/share/path`).
    pub fn location(&self) -> String {
        match self.kind {
            SourceKind::Imap => format!("imap://{}@{}:{}", self.user, self.host, self.port()),
            SourceKind::Smb => {
                let path = self.path.trim_matches(['/', '\\']);
                let share = self.share.as_deref().unwrap_or("");
                if path.is_empty() {
                    format!("smb://{}:{}/{share}", self.host, self.port())
                } else {
                    format!("smb://{}:{}/{share}/{path}", self.host, self.port())
                }
            }
        }
    }

    /// The password, read from its file or variable now.
    pub fn password(&self, env: &dyn Fn(&str) -> Option<String>) -> Result<String> {
        match (&self.password_file, &self.password_env) {
            (Some(file), None) => {
                let text = std::fs::read_to_string(file).map_err(|e| {
                    Error::Config(format!("source `{}`: password_file {}: {e}", self.name, file.display()))
                })?;
                Ok(text.lines().next().unwrap_or("").to_string())
            }
            (None, Some(var)) => env(var).ok_or_else(|| {
                Error::Config(format!("source `{}`: the environment variable {var} (password_env) is not set", self.name))
            }),
            _ => Err(Error::Config(format!("source `{}`: set exactly one of password_file and password_env", self.name))),
        }
    }

    fn validate(&self) -> Result<()> {
        let fail = |what: String| Err(Error::Config(format!("sources: `{}`: {what}", self.name)));
        let name_ok = !self.name.is_empty() && self.name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
        if !name_ok {
            return fail("name it with letters, digits, - and _".into());
        }
        if self.host.trim().is_empty() || self.user.trim().is_empty() {
            return fail("set host and user".into());
        }
        if self.password_file.is_some() == self.password_env.is_some() {
            return fail("set exactly one of password_file and password_env".into());
        }
        match self.kind {
            SourceKind::Imap => {
                if self.folders.is_empty() {
                    return fail("an imap source needs folders = [\"INBOX\", ...]".into());
                }
                if self.share.is_some() || !self.path.is_empty() || self.domain.is_some() {
                    return fail("share, path and domain are for smb sources".into());
                }
                let loopback = self.host == "localhost" || self.host.parse::<std::net::IpAddr>().is_ok_and(|a| a.is_loopback());
                if self.tls == SourceTls::None && !loopback {
                    return fail(format!("tls = \"none\" would send the password to {} in clear; use implicit or starttls", self.host));
                }
            }
            SourceKind::Smb => {
                if self.share.as_deref().is_none_or(|s| s.trim().is_empty()) {
                    return fail("an smb source needs share = \"NAME\"".into());
                }
                if !self.folders.is_empty() || self.ca_file.is_some() || self.tls != SourceTls::Implicit {
                    return fail("folders, tls and ca_file are for imap sources (SMB 3 signs and encrypts by itself)".into());
                }
            }
        }
        if self.timeout_ms == 0 {
            return fail("timeout_ms must be above 0".into());
        }
        self.every()?;
        Ok(())
    }
}

/// The configuration as written: [`Config`] with its folders as the strings the files hold
/// (empty for the default), before they are resolved and the values checked.
pub type RawConfig = Config<String>;

/// Values from the command line, the strongest layer.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    /// `--config FILE`.
    pub config_file: Option<PathBuf>,
    /// `--data-dir`.
    pub data_dir: Option<PathBuf>,
    /// `--models-dir`.
    pub models_dir: Option<PathBuf>,
    /// `--device`.
    pub device: Option<DeviceChoice>,
}

/// The configuration: as written while `P` is `String` ([`RawConfig`]; unknown keys refused), then
/// validated, with its folders resolved to absolute paths (the default `P`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config<P = PathBuf> {
    /// Data folder.
    pub data_dir: P,
    /// Models folder.
    pub models_dir: P,
    /// Device.
    pub device: DeviceChoice,
    /// Embedding settings.
    pub embed: EmbedSection,
    /// Reranking settings.
    pub rerank: RerankSection,
    /// Ingest settings.
    pub ingest: IngestSection,
    /// Index settings.
    pub store: StoreSection,
    /// Retrieval settings.
    pub retrieve: RetrieveSection,
    /// Generation settings.
    pub generate: GenerateSection,
    /// Answer settings.
    pub answer: AnswerSection,
    /// HTTP server settings (`listen` checked).
    pub server: ServerSection,
    /// Document permissions.
    #[serde(default)]
    pub access: AccessSection,
    /// Sign-in with the organisation's identity.
    #[serde(default)]
    pub sso: SsoSection,
    /// Limits per group.
    #[serde(default)]
    pub quotas: Vec<QuotaRule>,
    /// How long conversations are kept.
    #[serde(default)]
    pub retention: RetentionSection,
    /// Mailboxes and file shares kept in sync.
    #[serde(default)]
    pub sources: Vec<SourceConfig>,
    /// The file read, if any (not a key of the file).
    #[serde(skip)]
    pub config_file: Option<PathBuf>,
}

fn merge(base: &mut toml::Value, top: toml::Value) {
    match (base, top) {
        (toml::Value::Table(b), toml::Value::Table(t)) => {
            for (k, v) in t {
                match b.get_mut(&k) {
                    Some(slot) => merge(slot, v),
                    None => {
                        b.insert(k, v);
                    }
                }
            }
        }
        (slot, v) => *slot = v,
    }
}

fn env_layer(env: &dyn Fn(&str) -> Option<String>) -> toml::Value {
    let mut t = toml::Table::new();
    let mut embed = toml::Table::new();
    // RAGBOX_DATA_DIR and RAGBOX_MODELS_DIR are read in `Config::validate`: a path from the
    // environment resolves against the working directory, as a flag's does.
    for (var, key) in [("RAGBOX_DEVICE", "device")] {
        if let Some(v) = env(var).filter(|v| !v.is_empty()) {
            t.insert(key.into(), toml::Value::String(v));
        }
    }
    for (var, key) in [("RAGBOX_EMBED_MODEL", "model"), ("RAGBOX_EMBED_PRECISION", "precision")] {
        if let Some(v) = env(var).filter(|v| !v.is_empty()) {
            embed.insert(key.into(), toml::Value::String(v));
        }
    }
    if !embed.is_empty() {
        t.insert("embed".into(), toml::Value::Table(embed));
    }
    toml::Value::Table(t)
}

fn absolute(p: &Path) -> PathBuf {
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        std::env::current_dir().map(|d| d.join(p)).unwrap_or_else(|_| p.to_path_buf())
    }
}

/// The default models folder: `./models`, else the nearest `models/manifest.toml` above the binary.
fn default_models_dir() -> PathBuf {
    let here = PathBuf::from("models");
    if here.is_dir() {
        return absolute(&here);
    }
    if let Ok(exe) = std::env::current_exe() {
        for dir in exe.ancestors().skip(1) {
            if dir.join("models").join("manifest.toml").is_file() {
                return dir.join("models");
            }
        }
    }
    absolute(&here)
}

fn default_data_dir(env: &dyn Fn(&str) -> Option<String>) -> PathBuf {
    if let Some(x) = env("XDG_DATA_HOME").filter(|v| !v.is_empty()) {
        return PathBuf::from(x).join("ragbox");
    }
    match env("HOME") {
        Some(h) => PathBuf::from(h).join(".local/share/ragbox"),
        None => absolute(Path::new(".ragbox")),
    }
}

impl Config {
    /// Loads the configuration from every layer, reading the process environment.
    pub fn load(overrides: &Overrides) -> Result<Config> {
        Config::load_with_env(overrides, &|k| std::env::var(k).ok())
    }

    /// Loads the configuration with an explicit environment (for tests).
    pub fn load_with_env(overrides: &Overrides, env: &dyn Fn(&str) -> Option<String>) -> Result<Config> {
        let mut value: toml::Value = toml::from_str(DEFAULT_TOML).expect("shipped defaults parse (tested)");
        let mut file_dir = None;
        if let Some(path) = &overrides.config_file {
            let text = std::fs::read_to_string(path).map_err(|e| {
                Error::Config(format!("cannot read config file {path:?}: {e}; check the --config path"))
            })?;
            let file: toml::Value =
                toml::from_str(&text).map_err(|e| Error::Config(format!("{path:?}: {e}")))?;
            merge(&mut value, file);
            file_dir = path.parent().map(absolute);
        }
        merge(&mut value, env_layer(env));
        let raw: RawConfig = value.try_into().map_err(|e: toml::de::Error| {
            // With no source text to point into, toml names the key after the message
            // ("MESSAGE\nin `KEY`\n"): put it first, on one line.
            let text = e.to_string();
            let text = match text.trim_end().rsplit_once("\nin `") {
                Some((message, key)) => format!("{}: {message}", key.trim_end_matches('`')),
                None => text.trim_end().to_string(),
            };
            Error::Config(format!("{text}; see config/default.toml for the keys"))
        })?;
        Config::validate(raw, overrides, file_dir, env)
    }

    fn validate(raw: RawConfig, o: &Overrides, file_dir: Option<PathBuf>, env: &dyn Fn(&str) -> Option<String>) -> Result<Config> {
        let relative_to_file = |s: &str| {
            let p = PathBuf::from(s);
            match (&file_dir, p.is_relative()) {
                (Some(d), true) => d.join(p),
                _ => absolute(&p),
            }
        };
        // A flag, else the environment (both against the working directory), else the file
        // (against the file's folder), else the default.
        let given = |flag: &Option<PathBuf>, var: &str| flag.clone().or_else(|| env(var).filter(|v| !v.is_empty()).map(PathBuf::from));
        let data_dir = match given(&o.data_dir, "RAGBOX_DATA_DIR") {
            Some(p) => absolute(&p),
            None if raw.data_dir.is_empty() => default_data_dir(env),
            None => relative_to_file(&raw.data_dir),
        };
        let models_dir = match given(&o.models_dir, "RAGBOX_MODELS_DIR") {
            Some(p) => absolute(&p),
            None if raw.models_dir.is_empty() => default_models_dir(),
            None => relative_to_file(&raw.models_dir),
        };
        let manifest = Manifest::builtin();
        let embed_spec = manifest.get(&raw.embed.model)?;
        if embed_spec.role != ModelRole::Embed {
            return Err(Error::Config(format!("embed.model = `{}` is a {} model, not an embedder", raw.embed.model, embed_spec.role)));
        }
        let rerank_spec = manifest.get(&raw.rerank.model)?;
        if rerank_spec.role != ModelRole::Rerank && rerank_spec.role != ModelRole::Generate {
            return Err(Error::Config(format!(
                "rerank.model = `{}` is a {} model; use a cross-encoder or a generate model (scored by its yes/no logits)",
                raw.rerank.model, rerank_spec.role
            )));
        }
        if raw.embed.batch_size == 0 || raw.embed.max_batch_tokens == 0 || raw.rerank.batch_size == 0 {
            return Err(Error::Config("batch sizes must be at least 1".into()));
        }
        let r = &raw.retrieve.options;
        if r.dense_candidates + r.lexical_candidates == 0 || r.top_k == 0 || r.rrf_k <= 0.0 {
            return Err(Error::Config(
                "retrieve: at least one candidate list above 0, top_k at least 1, rrf_k above 0".into(),
            ));
        }
        if !(0.0..=1.0).contains(&r.rerank_weight) || !(0.0..=1.0).contains(&r.statement_bm25_share) || r.dense_weight < 0.0 || r.lexical_weight < 0.0 {
            return Err(Error::Config("retrieve: rerank_weight and statement_bm25_share between 0 and 1, weights not negative".into()));
        }
        if raw.ingest.child_tokens == 0 || raw.ingest.max_child_tokens < raw.ingest.child_tokens || raw.ingest.commit_chunks == 0 {
            return Err(Error::Config(
                "ingest: child_tokens must be at least 1, max_child_tokens at least child_tokens, commit_chunks at least 1".into(),
            ));
        }
        let g = &raw.generate;
        let allow = crate::allowlist::HostAllowlist::parse(&g.allow_hosts)?;
        if g.backend == GenerateBackend::OpenAi {
            if g.openai_base_url.is_empty() || g.openai_model.is_empty() {
                return Err(Error::Config(
                    "generate.backend = \"openai\" needs generate.openai_base_url (http://HOST:PORT/v1) and generate.openai_model (the name the server expects)".into(),
                ));
            }
            allow.check(&g.openai_base_url)?;
        }
        let generate_spec = manifest.get(&g.model)?;
        if generate_spec.role != ModelRole::Generate {
            return Err(Error::Config(format!("generate.model = `{}` is a {} model, not a generator", g.model, generate_spec.role)));
        }
        if g.max_tokens == 0 || g.max_num_seqs == 0 || raw.answer.passages == 0 || raw.answer.passage_chars == 0 {
            return Err(Error::Config("generate.max_tokens, generate.max_num_seqs, answer.passages and answer.passage_chars must be at least 1".into()));
        }
        let sv = &raw.server;
        if sv.listen.parse::<std::net::SocketAddr>().is_err() {
            return Err(Error::Config(format!("server.listen = `{}`: use an address and port such as 127.0.0.1:7070", sv.listen)));
        }
        if sv.generate_concurrency == 0 || sv.max_body_bytes == 0 || sv.max_question_chars == 0 || sv.max_upload_bytes == 0 {
            return Err(Error::Config("server: generate_concurrency, max_body_bytes, max_question_chars and max_upload_bytes must be at least 1".into()));
        }
        if sv.request_timeout_ms == 0 || sv.generate_timeout_ms == 0 || sv.body_timeout_ms == 0 {
            return Err(Error::Config("server: timeouts must be above 0 ms".into()));
        }
        crate::access::Rules::new(&raw.access.rules, raw.access.files)?;
        for grant in &raw.sso.groups {
            if !["reader", "writer", "admin"].contains(&grant.role.as_str()) || grant.group.trim().is_empty() || grant.tenant.trim().is_empty() {
                return Err(Error::Config(format!(
                    "sso.groups: `{}` → `{}` as `{}`: name a group, a tenant, and a role of reader, writer or admin",
                    grant.group, grant.tenant, grant.role
                )));
            }
        }
        if let Some(oidc) = &raw.sso.oidc {
            let allow = crate::allowlist::HostAllowlist::parse(&oidc.allow_hosts)?;
            allow.check_for(&oidc.issuer, "sso.oidc.allow_hosts", "sign-in fetches the provider's keys and exchanges codes there")?;
        }
        if let Some(ldap) = &raw.sso.ldap {
            let allow = crate::allowlist::HostAllowlist::parse(&ldap.allow_hosts)?;
            allow.check_for(&ldap.url, "sso.ldap.allow_hosts", "people's passwords are sent to it")?;
        }
        for tenant in raw.retention.tenants.keys() {
            crate::store::check_tenant_name(tenant).map_err(|e| Error::Config(format!("retention.tenants: {e}")))?;
        }
        let mut names = std::collections::HashSet::new();
        for source in &raw.sources {
            source.validate()?;
            if !names.insert(source.name.as_str()) {
                return Err(Error::Config(format!("sources: two sources are named `{}`", source.name)));
            }
        }
        let prefix_ok = |p: &str| p.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_') && p.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        match (&raw.store.backend, &raw.store.shared) {
            (StoreBackend::Shared, None) => {
                return Err(Error::Config(
                    "store.backend = \"shared\" needs a [store.shared] section with the postgres and milvus URLs (docs/SERVING.md, \"Several nodes\")".into(),
                ))
            }
            (_, Some(shared)) if !prefix_ok(&shared.collection_prefix) => {
                return Err(Error::Config(format!(
                    "store.shared.collection_prefix = `{}`: use letters, digits and _ , starting with a letter",
                    shared.collection_prefix
                )))
            }
            _ => {}
        }
        Ok(Config {
            data_dir,
            models_dir,
            device: o.device.unwrap_or(raw.device),
            embed: raw.embed,
            rerank: raw.rerank,
            ingest: raw.ingest,
            store: raw.store,
            retrieve: raw.retrieve,
            generate: raw.generate,
            answer: raw.answer,
            server: raw.server,
            access: raw.access,
            sso: raw.sso,
            quotas: raw.quotas,
            retention: raw.retention,
            sources: raw.sources,
            config_file: o.config_file.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_env(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn defaults_load() {
        let c = Config::load_with_env(&Overrides::default(), &no_env).unwrap();
        assert_eq!(c.embed.model, "all-minilm-l6-v2");
        assert_eq!(c.device, DeviceChoice::Cpu);
        assert_eq!((c.generate.backend, c.generate.fallback), (GenerateBackend::Local, GenerateFallback::None));
        assert_eq!((c.ingest.chunker, c.store.quantization), (ChunkerKind::Structural, Quantization::F32));
        assert_eq!((c.answer.prompt, c.answer.focus_by), (AnswerPrompt::Direct, FocusBy::Reranker));
    }

    #[test]
    fn layers_apply_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("c.toml");
        std::fs::write(&file, "data_dir = \"d\"\n[embed]\nmodel = \"nomic-embed-text-v1.5\"\n").unwrap();
        let o = Overrides { config_file: Some(file), ..Default::default() };
        let c = Config::load_with_env(&o, &no_env).unwrap();
        assert_eq!(c.data_dir, dir.path().join("d"), "relative paths resolve against the file");
        assert_eq!(c.embed.model, "nomic-embed-text-v1.5");
        assert_eq!(c.embed.batch_size, 8, "unset keys keep their defaults");
        let env = |k: &str| (k == "RAGBOX_EMBED_MODEL").then(|| "all-minilm-l6-v2".to_string());
        assert_eq!(Config::load_with_env(&o, &env).unwrap().embed.model, "all-minilm-l6-v2");
        let o = Overrides { data_dir: Some("/x".into()), ..o };
        assert_eq!(Config::load_with_env(&o, &env).unwrap().data_dir, PathBuf::from("/x"));
    }

    /// A sign-in server off its allowlist: the configuration does not load, naming the setting.
    #[test]
    fn sources_are_checked_before_anything_connects() {
        let dir = tempfile::tempdir().unwrap();
        let load = |toml: &str| {
            let path = dir.path().join("s.toml");
            std::fs::write(&path, toml).unwrap();
            Config::load_with_env(&Overrides { config_file: Some(path), ..Overrides::default() }, &no_env)
        };
        let imap = |extra: &str| format!("[[sources]]\nname = \"mail\"\nkind = \"imap\"\nhost = \"mail.example.org\"\nuser = \"a\"\npassword_env = \"P\"\nfolders = [\"INBOX\"]\n{extra}");
        let c = load(&imap("")).unwrap();
        let s = &c.sources[0];
        assert_eq!((s.port(), s.tls, s.every().unwrap()), (993, SourceTls::Implicit, Some(std::time::Duration::from_secs(900))));
        assert_eq!(s.location(), "imap://a@mail.example.org:993");
        for (extra, says) in [
            ("tls = \"none\"\n", "in clear"),
            ("interval = \"soon\"\n", "30s, 15m, 2h or off"),
            ("share = \"docs\"\n", "for smb sources"),
            ("password_file = \"/p\"\n", "exactly one of password_file and password_env"),
        ] {
            let err = load(&imap(extra)).unwrap_err().to_string();
            assert!(err.contains(says) && err.contains("`mail`"), "{extra}: {err}");
        }
        let twice = format!("{}{}", imap(""), imap(""));
        assert!(load(&twice).unwrap_err().to_string().contains("two sources are named `mail`"));
        let smb = "[[sources]]\nname = \"share\"\nkind = \"smb\"\nhost = \"files\"\nuser = \"r\"\npassword_env = \"P\"\nshare = \"docs\"\npath = \"/a/b/\"\ninterval = \"off\"\n";
        let c = load(smb).unwrap();
        assert_eq!((c.sources[0].location(), c.sources[0].every().unwrap()), ("smb://files:445/docs/a/b".to_string(), None));
        assert_eq!(c.sources[0].password(&|_| Some("pw".into())).unwrap(), "pw");
    }

    #[test]
    fn sign_in_hosts_must_be_allowlisted() {
        let dir = tempfile::tempdir().unwrap();
        let load = |toml: &str| {
            let path = dir.path().join("c.toml");
            std::fs::write(&path, toml).unwrap();
            Config::load_with_env(&Overrides { config_file: Some(path), ..Overrides::default() }, &no_env)
        };
        let ldap = |allow: &str| format!("[sso.ldap]\nurl = \"ldaps://ldap.example.org\"\nuser_base = \"u\"\ngroup_base = \"g\"\nallow_hosts = [{allow}]\n");
        let err = load(&ldap("")).unwrap_err().to_string();
        assert!(err.contains("ldap.example.org") && err.contains("sso.ldap.allow_hosts"), "{err}");
        assert!(load(&ldap("\"ldap.example.org\"")).is_ok());
        let oidc = |allow: &str| format!("[sso.oidc]\nissuer = \"https://sso.example.org/r\"\nclient_id = \"c\"\nredirect_url = \"https://r/auth/oidc/callback\"\nallow_hosts = [{allow}]\n");
        let err = load(&oidc("\"10.0.0.0/8\"")).unwrap_err().to_string();
        assert!(err.contains("sso.example.org") && err.contains("sso.oidc.allow_hosts"), "{err}");
        assert!(load(&oidc("\"sso.example.org\"")).is_ok());
    }

    #[test]
    fn unknown_keys_and_models_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("c.toml");
        std::fs::write(&file, "[embed]\nmodle = \"x\"\n").unwrap();
        let o = Overrides { config_file: Some(file.clone()), ..Default::default() };
        assert!(Config::load_with_env(&o, &no_env).unwrap_err().to_string().contains("modle"));
        std::fs::write(&file, "[embed]\nmodel = \"qwen2.5-coder-0.5b-instruct\"\n").unwrap();
        assert!(Config::load_with_env(&o, &no_env).unwrap_err().to_string().contains("not an embedder"));
        // A misspelt choice is refused at load, naming its key and the choices.
        for (toml, key) in [
            ("[answer]\nfocus_by = \"bm25\"\n", "answer.focus_by: unknown focus scorer `bm25`; use reranker or embedder"),
            ("[answer]\nprompt = \"friendly\"\n", "answer.prompt"),
            ("[answer]\nsupport = \"vibes\"\n", "answer.support"),
            ("[ingest]\nchunker = \"lines\"\n", "ingest.chunker"),
            ("[store]\nquantization = \"f64\"\n", "store.quantization: unknown variant `f64`, expected one of `f32`, `f16`, `i8`"),
            ("[generate]\nbackend = \"gpt\"\n", "generate.backend: unknown variant `gpt`, expected one of `local`, `openai`, `claude`"),
            ("[generate]\nfallback = \"remote\"\n", "generate.fallback: unknown variant `remote`, expected `none` or `local`"),
        ] {
            std::fs::write(&file, toml).unwrap();
            let err = Config::load_with_env(&o, &no_env).unwrap_err().to_string();
            assert!(err.contains(key), "{err}");
        }
    }
}
