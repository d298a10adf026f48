//! The Model Context Protocol face: the same service calls as the HTTP API, as MCP tools, for
//! assistants and editors (rmcp, the protocol's official Rust SDK). Over stdio (`ragbox mcp`,
//! started by the assistant: the local user, or the key in `RAGBOX_KEY`) and over the
//! streamable-HTTP transport at `/mcp` on `ragbox serve`, behind the same keys, sign-in,
//! tenant scoping and document permissions as every route (the caller is authenticated before
//! rmcp sees the request, and each tool call asks the service as that caller).
//!
//! Tools: `search` (ranked passages with document, section, page, lines and text), `ask` (the
//! answer with its outcome, citations and sources), `list_documents`, `get_passage` (by id,
//! tenant- and permission-checked). Resources: each indexed document the caller may read, in
//! every tenant it reaches, as `ragbox://TENANT/documents/ID` (the template of the same name
//! reads any such id): its text as the parsers read it, with its path and title; reading one is
//! audited as `read_document`, and one of another tenant or group reads as not found.
//! A tool's own failure (an unknown tenant, a passage it may not
//! read) is a tool result with `isError` and the service's message; a malformed request is a
//! JSON-RPC error from rmcp, and the server stays up. Searches, answers and passage reads are
//! audited by the service as over HTTP. Over HTTP an `ask` waits in the server's generation
//! queue like any answer (a full queue is a tool error saying so).

use std::sync::Arc;

use rmcp::model::{
    CacheScope, CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation, ListResourceTemplatesResult,
    ListResourcesResult, ListToolsResult, PaginatedRequestParams, ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult,
    Resource, ResourceContents, ResourceTemplate, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use serde_json::{json, Map, Value};

use ragbox_service::{AskOptions, Caller, Discard, DocumentStatus, Error, SearchOptions, Service, DEFAULT_TENANT};

/// Resources listed per `resources/list` page.
const RESOURCES_PER_PAGE: usize = 500;

/// The MCP server of one process.
#[derive(Clone)]
pub struct Mcp {
    service: Arc<Service>,
    /// The caller of every request (stdio); `None`: each HTTP request's authenticated caller.
    caller: Option<Caller>,
    /// The server's generation queue (HTTP; stdio serves one client).
    queue: Option<crate::queue::Queue>,
}

impl Mcp {
    /// Serves `caller` (the stdio transport: one client, one identity).
    pub fn for_caller(service: Arc<Service>, caller: Caller) -> Mcp {
        Mcp { service, caller: Some(caller), queue: None }
    }

    /// Serves whoever each HTTP request authenticated as (`/mcp`).
    pub(crate) fn over_http(service: Arc<Service>, queue: crate::queue::Queue) -> Mcp {
        Mcp { service, caller: None, queue: Some(queue) }
    }

    fn caller(&self, context: &RequestContext<RoleServer>) -> Result<Caller, McpError> {
        if let Some(c) = &self.caller {
            return Ok(c.clone());
        }
        context
            .extensions
            .get::<axum::http::request::Parts>()
            .and_then(|p| p.extensions.get::<Caller>())
            .cloned()
            .ok_or_else(|| McpError::internal_error("the request reached the MCP server without a caller", None))
    }
}

/// The JSON schema of a tool's arguments: `required` names first, then optional ones.
fn schema(properties: Value, required: &[&str]) -> Arc<Map<String, Value>> {
    let v = json!({ "type": "object", "properties": properties, "required": required, "additionalProperties": false });
    Arc::new(v.as_object().cloned().unwrap_or_default())
}

fn tools() -> Vec<Tool> {
    let tenant = json!({ "type": "string", "description": "the tenant (default: the key's own, else `default`)" });
    vec![
        Tool::new(
            "search",
            "Ranked passages of the tenant's documents for a query: document, section, page, lines, the passage's text and its score.",
            schema(json!({ "query": { "type": "string" }, "tenant": tenant, "k": { "type": "integer", "minimum": 1, "maximum": 100 } }), &["query"]),
        ),
        Tool::new(
            "ask",
            "An answer from the tenant's documents alone, each claim cited to a passage, or a plain refusal when no document gives it; with its outcome, evidence and sources.",
            schema(json!({ "question": { "type": "string" }, "tenant": tenant }), &["question"]),
        ),
        Tool::new("list_documents", "The tenant's documents the caller may read: id, path, title, status, chunks.", schema(json!({ "tenant": tenant }), &[])),
        Tool::new(
            "get_passage",
            "One passage by its id (as `search` and `ask` give them): its text, document, section and span.",
            schema(json!({ "id": { "type": "integer", "minimum": 0 }, "tenant": tenant }), &["id"]),
        ),
    ]
}

/// A tool's argument, or a protocol error naming it.
fn arg<'a>(args: &'a Map<String, Value>, name: &str) -> Result<&'a Value, McpError> {
    args.get(name).ok_or_else(|| McpError::invalid_params(format!("`{name}` is required"), None))
}

fn text(args: &Map<String, Value>, name: &str) -> Result<String, McpError> {
    arg(args, name)?.as_str().map(str::to_string).ok_or_else(|| McpError::invalid_params(format!("`{name}` must be a string"), None))
}

fn json_result(value: &impl serde::Serialize) -> Result<CallToolResponse, McpError> {
    let v = serde_json::to_value(value).map_err(|e| McpError::internal_error(e.to_string(), None))?;
    let mut result = CallToolResult::success(vec![ContentBlock::text(v.to_string())]);
    result.structured_content = Some(v);
    Ok(result.into())
}

/// The URI of document `id` of `tenant`.
fn document_uri(tenant: &str, id: u64) -> String {
    format!("ragbox://{tenant}/documents/{id}")
}

/// The tenant and document id a `ragbox://TENANT/documents/ID` URI names.
fn parse_document_uri(uri: &str) -> Option<(String, u64)> {
    let rest = uri.strip_prefix("ragbox://")?;
    let (tenant, id) = rest.split_once("/documents/")?;
    let id = id.parse().ok()?;
    (!tenant.is_empty() && !tenant.contains('/')).then(|| (tenant.to_string(), id))
}

/// A service failure as a protocol error: what the caller may not see reads as not found.
fn resource_error(e: Error) -> McpError {
    match e {
        Error::NotFound(_) | Error::UnknownTenant { .. } => McpError::resource_not_found(e.to_string(), None),
        other => McpError::internal_error(other.to_string(), None),
    }
}

/// Where a `resources/list` page starts: the cursor is the index of its first resource.
fn page_start(request: Option<PaginatedRequestParams>) -> Result<usize, McpError> {
    match request.and_then(|r| r.cursor) {
        None => Ok(0),
        Some(c) => c.parse().map_err(|_| McpError::invalid_params(format!("cursor `{c}` is not one this server gave"), None)),
    }
}

impl ServerHandler for Mcp {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().enable_resources().build())
            .with_server_info(Implementation::new("ragbox", env!("CARGO_PKG_VERSION")))
            .with_instructions("Answers from the organisation's documents only, cited; `search` for passages, `ask` for an answer.")
    }

    async fn list_tools(&self, _request: Option<PaginatedRequestParams>, _context: RequestContext<RoleServer>) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(tools()))
    }

    async fn list_resources(&self, request: Option<PaginatedRequestParams>, context: RequestContext<RoleServer>) -> Result<ListResourcesResult, McpError> {
        let caller = self.caller(&context)?;
        let start = page_start(request)?;
        let service = self.service.clone();
        let all = tokio::task::spawn_blocking(move || -> ragbox_service::Result<Vec<Resource>> {
            let mut all = Vec::new();
            for t in service.tenants(&caller)? {
                let (tenant, docs) = service.documents(&caller, &t.name)?;
                for d in docs.into_iter().filter(|d| d.status == DocumentStatus::Indexed) {
                    let name = d.path.file_name().map_or_else(|| d.path.to_string_lossy(), |n| n.to_string_lossy()).into_owned();
                    let mut r = Resource::new(document_uri(&tenant.name, d.id.0), name)
                        .with_description(format!("{} (tenant {}, {} passages)", d.path.display(), tenant.name, d.chunks))
                        .with_mime_type("text/plain");
                    if let Some(title) = d.title {
                        r = r.with_title(title);
                    }
                    all.push(r);
                }
            }
            Ok(all)
        })
        .await
        .map_err(|join| McpError::internal_error(format!("the listing's worker failed: {join}"), None))?
        .map_err(resource_error)?;
        let end = (start + RESOURCES_PER_PAGE).min(all.len());
        let page = all.get(start..end).map(<[Resource]>::to_vec).unwrap_or_default();
        let mut result = ListResourcesResult::with_all_items(page).with_cache_scope(CacheScope::Private);
        result.next_cursor = (end < all.len()).then(|| end.to_string());
        Ok(result)
    }

    async fn list_resource_templates(&self, _request: Option<PaginatedRequestParams>, _context: RequestContext<RoleServer>) -> Result<ListResourceTemplatesResult, McpError> {
        let template = ResourceTemplate::new("ragbox://{tenant}/documents/{id}", "document")
            .with_description("A document's text by tenant and id (as `list_documents` and `search` give them)")
            .with_mime_type("text/plain");
        Ok(ListResourceTemplatesResult::with_all_items(vec![template]))
    }

    async fn read_resource(&self, request: ReadResourceRequestParams, context: RequestContext<RoleServer>) -> Result<ReadResourceResponse, McpError> {
        let caller = self.caller(&context)?;
        let uri = request.uri;
        let Some((tenant, id)) = parse_document_uri(&uri) else {
            return Err(McpError::invalid_params(format!("`{uri}` is not a document; resources are ragbox://TENANT/documents/ID"), None));
        };
        let service = self.service.clone();
        let doc = tokio::task::spawn_blocking(move || service.document_text(&caller, &tenant, id))
            .await
            .map_err(|join| McpError::internal_error(format!("the reading's worker failed: {join}"), None))?
            .map_err(resource_error)?;
        let meta = json!({ "path": doc.document.path, "title": doc.document.title, "changed_since_ingest": doc.changed });
        let contents = ResourceContents::text(doc.text, uri).with_meta(rmcp::model::MetaObject(meta.as_object().cloned().unwrap_or_default()));
        Ok(ReadResourceResult::new(vec![contents]).with_cache_scope(CacheScope::Private).into())
    }

    async fn call_tool(&self, request: CallToolRequestParams, context: RequestContext<RoleServer>) -> Result<CallToolResponse, McpError> {
        let caller = self.caller(&context)?;
        let args = request.arguments.unwrap_or_default();
        let tenant = match args.get("tenant") {
            Some(Value::String(t)) => t.clone(),
            Some(_) => return Err(McpError::invalid_params("`tenant` must be a string", None)),
            None => caller.tenant.clone().unwrap_or_else(|| DEFAULT_TENANT.to_string()),
        };
        let service = self.service.clone();
        let name = request.name.to_string();
        let outcome = match name.as_str() {
            "search" => {
                let query = text(&args, "query")?;
                let k = match args.get("k") {
                    None => None,
                    Some(v) => Some(v.as_u64().filter(|k| (1..=100).contains(k)).ok_or_else(|| McpError::invalid_params("`k` must be 1 to 100", None))? as usize),
                };
                tokio::task::spawn_blocking(move || {
                    service.search(&caller, &tenant, &query, &SearchOptions { k, ..SearchOptions::default() }).map(|found| {
                        let hits: Vec<Value> = found
                            .retrieval
                            .hits
                            .iter()
                            .map(|h| {
                                let c = h.section.as_ref().unwrap_or(&h.chunk);
                                json!({
                                    "rank": h.rank, "passage": h.chunk.id, "document": c.doc, "path": c.path, "title": c.title,
                                    "section": c.section_path, "page": c.page, "lines": c.lines, "span": c.span, "score": h.score, "text": c.text,
                                })
                            })
                            .collect();
                        json!({ "tenant": found.retrieval.tenant, "refused": found.retrieval.refused, "hits": hits })
                    })
                })
                .await
            }
            "ask" => {
                let question = text(&args, "question")?;
                let ticket = match &self.queue {
                    Some(q) => match q.admit() {
                        Some(t) => Some((t, q.slot().await)),
                        None => {
                            let message = "the answer queue is full; try again shortly";
                            return Ok(CallToolResult::error(vec![ContentBlock::text(message)]).into());
                        }
                    },
                    None => None,
                };
                tokio::task::spawn_blocking(move || {
                    let _ticket = ticket;
                    service.ask(&caller, &tenant, &question, &AskOptions::default(), &mut Discard).map(|asked| json!({ "answer": asked.answer }))
                })
                .await
            }
            "list_documents" => {
                tokio::task::spawn_blocking(move || service.documents(&caller, &tenant).map(|(t, docs)| json!({ "tenant": t.name, "documents": docs }))).await
            }
            "get_passage" => {
                let id = arg(&args, "id")?.as_u64().ok_or_else(|| McpError::invalid_params("`id` must be a whole number", None))?;
                tokio::task::spawn_blocking(move || service.passage(&caller, &tenant, id).map(|p| json!({ "passage": p }))).await
            }
            other => return Err(McpError::invalid_params(format!("no tool `{other}`; list_tools names them"), None)),
        };
        match outcome {
            Ok(Ok(value)) => json_result(&value),
            // The service's refusal, as the API words it: a tool error the assistant can read.
            Ok(Err(e)) => Ok(CallToolResult::error(vec![ContentBlock::text(e.to_string())]).into()),
            Err(join) => Err(McpError::internal_error(format!("the tool's worker failed: {join}"), None)),
        }
    }
}

/// Serves MCP over stdin and stdout until the client closes them.
pub async fn serve_stdio(service: Arc<Service>, caller: Caller) -> std::io::Result<()> {
    use rmcp::ServiceExt;
    let running = Mcp::for_caller(service, caller).serve(rmcp::transport::stdio()).await.map_err(std::io::Error::other)?;
    running.waiting().await.map_err(std::io::Error::other)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_document_uri_names_its_tenant_and_id_and_nothing_else_parses() {
        assert_eq!(parse_document_uri(&document_uri("globex", 42)), Some(("globex".to_string(), 42)));
        for bad in ["ragbox://globex/documents/", "ragbox://globex/documents/4x", "ragbox:///documents/1", "ragbox://a/b/documents/1", "file:///documents/1", "ragbox://globex/passages/1"] {
            assert_eq!(parse_document_uri(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_cursor_is_a_position_this_server_gave() {
        assert_eq!(page_start(None).unwrap(), 0);
        let at = |c: &str| page_start(Some(PaginatedRequestParams::default().with_cursor(Some(c.to_string()))));
        assert_eq!(at("500").unwrap(), 500);
        assert!(at("next").is_err());
    }
}
