//! ragbox-server: `ragbox serve`, the HTTP face of the service layer (axum on tokio).
//!
//! Holds routing, authentication, limits, the generation queue, metrics and shutdown; every
//! request's work is a [`Service`] call on a blocking thread. Depends on `ragbox-service` alone
//! (its settings come through its `config`): no store or model internals can be reached.
//!
//! - Every `/v1` route needs `Authorization: Bearer <key>`; failed attempts are counted per
//!   client address and refused with 429 past `server.auth_failures_per_minute`.
//! - A tenant outside the key's scope answers 404 exactly like one that does not exist.
//! - Answers wait in a bounded queue ([`queue::Queue`]); when it is full: 503 + Retry-After.
//!   A client that goes away cancels its generation (the token stream's receiver is dropped,
//!   the generator sees [`ragbox_service::TokenSink::cancelled`]).
//! - Bodies, questions and uploads are limited (413 with the limit); every error is
//!   `{"error": {"code", "message"}}`.
//! - SIGTERM/SIGINT: stop accepting, give in-flight requests `server.shutdown_grace_ms`, then
//!   cancel the generations still running and exit.

#![warn(missing_docs)]

mod api;
mod auth;
mod error;
mod metrics;
pub mod mcp;
mod openai;
pub(crate) mod queue;
mod quota;
mod session;
pub mod sso;
mod web;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::DefaultBodyLimit;
use axum::routing::{delete, get, post};
use axum::Router;

use ragbox_service::config::ServerSection;
use ragbox_service::Service;

pub use error::ApiError;

/// What every handler shares.
pub struct AppState {
    /// The service layer.
    pub service: Arc<Service>,
    /// `[server]` settings.
    pub config: ServerSection,
    /// The generation queue.
    pub queue: queue::Queue,
    /// Counters and histograms for `/metrics`.
    pub metrics: metrics::Metrics,
    /// Failed authentications per client address.
    pub auth_failures: auth::FailureLimiter,
    /// Set when shutdown's grace period is over: running generations stop.
    pub stopping: AtomicBool,
    /// The web page's sessions and its one-time sign-in link.
    pub web: session::WebSessions,
    /// Sign-in with the organisation's identity (`[sso]`).
    pub sso: sso::Sso,
    /// Limits per person and key (`[[quotas]]`).
    pub quotas: quota::Quotas,
}

/// Shared state handle.
pub type State = Arc<AppState>;

impl AppState {
    /// Counts one `what` against `caller`'s quota; over it, the audited 429 with Retry-After.
    pub async fn charge(self: &Arc<Self>, caller: &ragbox_service::Caller, tenant: &str, what: quota::Counted) -> Result<(), ApiError> {
        let Some((limit, who_id)) = self.quotas.applies(caller, what) else { return Ok(()) };
        let service = self.service.clone();
        let taken = tokio::task::spawn_blocking(move || service.take_quota(&who_id, what.name(), limit, what.window())).await;
        let wait = match taken {
            Ok(Ok(Ok(()))) => return Ok(()),
            Ok(Ok(Err(wait))) => wait,
            Ok(Err(e)) => return Err(ApiError::from(e)),
            Err(join) => return Err(ApiError::internal(format!("counting the request failed: {join}"))),
        };
        let (service, who, tenant_name) = (self.service.clone(), caller.clone(), tenant.to_string());
        let recorded = tokio::task::spawn_blocking(move || service.record_quota_exceeded(&who, &tenant_name, what.per(), limit)).await;
        if let Ok(Err(e)) | Err(e) = recorded.map_err(|e| ragbox_service::Error::Bug(e.to_string())) {
            tracing::error!("cannot write the audit row of a refused request: {e}");
        }
        Err(ApiError {
            retry_after: Some(wait),
            ..ApiError::new(
                axum::http::StatusCode::TOO_MANY_REQUESTS,
                "quota_exceeded",
                format!("you have reached your limit of {limit} {}; try again in {wait} s", what.per()),
            )
        })
    }

    /// Runs a service call on a blocking thread within the request timeout.
    pub async fn blocking<T: Send + 'static>(
        self: &Arc<Self>,
        f: impl FnOnce(&Arc<Service>) -> ragbox_service::Result<T> + Send + 'static,
    ) -> Result<T, ApiError> {
        let service = self.service.clone();
        let timeout = Duration::from_millis(self.config.request_timeout_ms);
        let task = tokio::task::spawn_blocking(move || f(&service));
        match tokio::time::timeout(timeout, task).await {
            Ok(Ok(result)) => result.map_err(ApiError::from),
            Ok(Err(join)) => Err(ApiError::internal(format!("the request's worker failed: {join}"))),
            Err(_) => Err(ApiError::timeout(self.config.request_timeout_ms)),
        }
    }
}

/// The router over `state`.
pub fn router(state: State) -> Router {
    let upload_limit = state.config.max_upload_bytes.saturating_add(64 * 1024);
    let v1 = Router::new()
        .route("/tenants", get(api::tenants))
        .route("/tenants/{tenant}/search", post(api::search))
        .route("/tenants/{tenant}/ask", post(api::ask))
        .route("/tenants/{tenant}/chat/sessions", post(api::create_session).get(api::list_sessions))
        .route("/tenants/{tenant}/chat/sessions/{session}", get(api::read_session))
        .route("/tenants/{tenant}/chat/sessions/{session}/messages", post(api::chat_message))
        .route("/tenants/{tenant}/feedback", post(api::feedback))
        .route(
            "/tenants/{tenant}/documents",
            get(api::list_documents).post(api::upload).layer(DefaultBodyLimit::max(upload_limit)),
        )
        .route("/tenants/{tenant}/documents/{doc}", delete(api::remove_document))
        .route("/tenants/{tenant}/documents/{doc}/text", get(api::document_text))
        .route("/tenants/{tenant}/documents/{doc}/reingest", post(api::reingest))
        .route("/tenants/{tenant}/jobs/{job}", get(api::job))
        .route("/tenants/{tenant}/export", get(api::my_export))
        .route("/admin/audit", get(api::audit))
        .route("/admin/audit/verify", get(api::audit_verify))
        .route("/admin/export", get(api::admin_export))
        .route("/admin/doctor", get(api::doctor))
        .route("/admin/sources", get(api::sources))
        .route("/admin/sources/{name}/sync", post(api::sync_source))
        .route("/admin/keys", get(api::list_keys).post(api::create_key))
        .route("/admin/keys/{key}", delete(api::revoke_key))
        .route("/models", get(openai::models))
        .route("/chat/completions", post(openai::chat_completions))
        .route("/embeddings", post(openai::embeddings))
        .fallback(api::not_found);
    let mut app = Router::new()
        .route("/", get(web::index))
        .route("/assets/{name}", get(web::asset))
        .route("/signin", get(web::sign_in_link))
        .route("/web/session", get(web::whoami).post(web::sign_in).delete(web::sign_out))
        .route("/web/sso", get(web::sso_options))
        .route("/auth/oidc/start", get(web::oidc_start))
        .route("/auth/oidc/callback", get(web::oidc_callback))
        .route("/healthz", get(api::healthz))
        .route("/readyz", get(api::readyz))
        .route("/metrics", get(api::metrics))
        .nest("/v1", v1)
        .merge(mcp_routes(&state))
        .fallback(api::not_found)
        .layer(DefaultBodyLimit::max(state.config.max_body_bytes))
        .layer(axum::middleware::from_fn_with_state(state.clone(), metrics::track))
        // 5xx responses at debug level: the intended 503s of a full queue are not errors, and the
        // failures that are (a runtime fault, a bug) are logged where they happen (error.rs).
        .layer(tower_http::trace::TraceLayer::new_for_http().on_failure(tower_http::trace::DefaultOnFailure::new().level(tracing::Level::DEBUG)));
    if !state.config.cors_origins.is_empty() {
        let origins: Vec<axum::http::HeaderValue> = state.config.cors_origins.iter().filter_map(|o| o.parse().ok()).collect();
        app = app.layer(
            tower_http::cors::CorsLayer::new()
                .allow_origin(origins)
                .allow_methods([axum::http::Method::GET, axum::http::Method::POST, axum::http::Method::DELETE])
                .allow_headers([axum::http::header::AUTHORIZATION, axum::http::header::CONTENT_TYPE]),
        );
    }
    app.with_state(state)
}

/// `/mcp`: the MCP streamable-HTTP transport, each request authenticated as every `/v1` route is
/// (the caller rides in the request's extensions to the tool calls). The transport's own Host
/// check (a guard for unauthenticated local servers) is off: every request needs a key or a
/// session here, and a session's writes need this server's Origin.
fn mcp_routes(state: &State) -> Router<State> {
    use rmcp::transport::streamable_http_server::{session::local::LocalSessionManager, StreamableHttpServerConfig, StreamableHttpService};
    let (service, queue) = (state.service.clone(), state.queue.clone());
    let mcp = StreamableHttpService::new(
        move || Ok(mcp::Mcp::over_http(service.clone(), queue.clone())),
        Arc::new(LocalSessionManager::default()),
        StreamableHttpServerConfig::default().disable_allowed_hosts().with_max_request_body_bytes(state.config.max_body_bytes),
    );
    Router::new().nest_service("/mcp", mcp).layer(axum::middleware::from_fn_with_state(state.clone(), mcp_auth))
}

/// Authenticates an MCP request (401/429 as for `/v1`) and hands its caller on.
async fn mcp_auth(axum::extract::State(state): axum::extract::State<State>, request: axum::extract::Request, next: axum::middleware::Next) -> axum::response::Response {
    use axum::extract::FromRequestParts;
    use axum::response::IntoResponse;
    let (mut parts, body) = request.into_parts();
    match auth::Authed::from_request_parts(&mut parts, &state).await {
        Ok(auth::Authed(caller)) => {
            parts.extensions.insert(caller);
            next.run(axum::extract::Request::from_parts(parts, body)).await
        }
        Err(e) => e.into_response(),
    }
}

/// The start-up sign-in link for a server bound to `bound` (an unspecified address such as
/// 0.0.0.0 is reached locally through loopback).
fn signin_link(bound: SocketAddr, token: &str) -> String {
    let host = if bound.ip().is_unspecified() { SocketAddr::from(([127, 0, 0, 1], bound.port())) } else { bound };
    format!("http://{host}/signin?token={token}")
}

/// Whether an address only reaches this machine.
pub fn is_loopback(addr: &SocketAddr) -> bool {
    addr.ip().is_loopback()
}

/// Serves until SIGTERM or SIGINT. `on_listening` gets the bound address (port 0 picks one)
/// and the web page's one-time sign-in link.
pub async fn serve(
    service: Arc<Service>,
    config: ServerSection,
    listen: SocketAddr,
    on_listening: impl FnOnce(SocketAddr, &str),
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind(listen).await?;
    let bound = listener.local_addr()?;
    let (web, signin_token) = session::WebSessions::new();
    let state = Arc::new(AppState {
        web,
        queue: queue::Queue::new(config.generate_concurrency, config.queue),
        metrics: metrics::Metrics::default(),
        auth_failures: auth::FailureLimiter::new(config.auth_failures_per_minute),
        stopping: AtomicBool::new(false),
        sso: sso::Sso::new(service.config().sso.clone()),
        quotas: quota::Quotas::new(service.config().quotas.clone()),
        service,
        config: config.clone(),
    });
    on_listening(bound, &signin_link(bound, &signin_token));
    let app = router(state.clone());
    // Each request head must arrive within server.body_timeout_ms (a client that opens a
    // connection and never finishes its head would otherwise hold it for ever); the same
    // timer closes a keep-alive connection left idle that long.
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(hyper_util::rt::TokioTimer::new()).header_read_timeout(Duration::from_millis(config.body_timeout_ms));
    let connections = hyper_util::server::graceful::GracefulShutdown::new();
    let mut stop = std::pin::pin!(stop);
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let (stream, remote) = match accepted {
                    Ok(a) => a,
                    Err(e) => {
                        // Out of file descriptors and the like: wait a moment, keep serving.
                        tracing::warn!("accepting a connection failed: {e}");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let app = app.clone();
                let service = hyper::service::service_fn(move |mut request: hyper::Request<hyper::body::Incoming>| {
                    request.extensions_mut().insert(axum::extract::ConnectInfo(remote));
                    tower_service::Service::call(&mut app.clone(), request)
                });
                let connection = connections.watch(http.serve_connection(hyper_util::rt::TokioIo::new(stream), service));
                tokio::spawn(async move {
                    if let Err(e) = connection.await {
                        tracing::debug!("connection from {remote}: {e}");
                    }
                });
            }
            _ = &mut stop => break,
        }
    }
    drop(listener);
    tracing::info!("shutting down: no new connections; {} ms for in-flight requests", config.shutdown_grace_ms);
    eprintln!("ragbox serve: stopping; in-flight requests get {} ms", config.shutdown_grace_ms);
    let mut drained = std::pin::pin!(connections.shutdown());
    if tokio::time::timeout(Duration::from_millis(config.shutdown_grace_ms), &mut drained).await.is_err() {
        // Cancel what still runs: generations stop at their next token and their streams end.
        state.stopping.store(true, Ordering::SeqCst);
        let _ = tokio::time::timeout(Duration::from_secs(5), &mut drained).await;
    }
    state.stopping.store(true, Ordering::SeqCst);
    eprintln!("ragbox serve: stopped");
    Ok(())
}

/// Resolves on SIGTERM or SIGINT.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {}
        _ = term => {}
    }
}
