//! The one error shape of the API: `{"error": {"code", "message"}}` with a fitting status, and
//! how library errors and axum's rejections map onto it. Bad input is always a 4xx.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;

use ragbox_service::Fault;

/// An error response.
#[derive(Debug)]
pub struct ApiError {
    /// HTTP status.
    pub status: StatusCode,
    /// A stable, machine-readable code.
    pub code: &'static str,
    /// What went wrong and what to do, for a person.
    pub message: String,
    /// Seconds, for 429 and 503.
    pub retry_after: Option<u64>,
}

impl ApiError {
    /// Any status and code.
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError { status, code, message: message.into(), retry_after: None }
    }

    /// 400.
    pub fn invalid(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, "invalid_request", message)
    }

    /// 404, the same for "does not exist" and "not yours".
    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, "not_found", message)
    }

    /// 413 naming the limit.
    pub fn too_large(what: &str, limit: impl std::fmt::Display) -> ApiError {
        ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "too_large", format!("{what} is over the limit of {limit}"))
    }

    /// 503 + Retry-After.
    pub fn busy(message: impl Into<String>, retry_after: u64) -> ApiError {
        ApiError { retry_after: Some(retry_after), ..ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "busy", message) }
    }

    /// 504.
    pub fn timeout(ms: u64) -> ApiError {
        ApiError::new(StatusCode::GATEWAY_TIMEOUT, "timeout", format!("the request took longer than server.request_timeout_ms = {ms}"))
    }

    /// 408: the body did not arrive in time.
    pub fn slow_body(ms: u64) -> ApiError {
        ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            "body_timeout",
            format!("the request body did not arrive within server.body_timeout_ms = {ms}"),
        )
    }

    /// 500.
    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", message)
    }

    /// The JSON body.
    pub fn body(&self) -> serde_json::Value {
        serde_json::json!({ "error": { "code": self.code, "message": self.message } })
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.status, Json(self.body())).into_response();
        if let Some(secs) = self.retry_after {
            response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        if self.status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}

impl From<ragbox_service::Error> for ApiError {
    fn from(e: ragbox_service::Error) -> ApiError {
        use ragbox_service::Error as E;
        match &e {
            // Never the list of tenants: a name out of scope reads like one that does not exist.
            E::UnknownTenant { name, .. } => ApiError::not_found(format!("no tenant `{name}`")),
            E::NotFound(m) => ApiError::not_found(m.clone()),
            E::Denied(m) => ApiError::new(StatusCode::FORBIDDEN, "forbidden", m.clone()),
            E::ModelMissing { .. } => ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "model_missing", e.to_string()),
            E::Unreachable { .. } => ApiError { retry_after: Some(30), ..ApiError::new(StatusCode::BAD_GATEWAY, "upstream_unreachable", e.to_string()) },
            _ => match e.fault() {
                Fault::User => ApiError::invalid(e.to_string()),
                Fault::Runtime => {
                    tracing::error!("request failed: {e:#}");
                    ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "runtime", e.to_string())
                }
                Fault::Bug => {
                    tracing::error!("bug: {e:#}");
                    ApiError::internal(e.to_string())
                }
            },
        }
    }
}

/// A body rejection from axum (JSON, multipart, path, query) as an API error; never a 5xx for
/// something the client sent.
pub fn rejection(status: StatusCode, text: String, limit: usize) -> ApiError {
    match status {
        StatusCode::PAYLOAD_TOO_LARGE => ApiError::too_large("the request body", format!("{limit} bytes")),
        StatusCode::UNSUPPORTED_MEDIA_TYPE => ApiError::new(status, "unsupported_media_type", text),
        StatusCode::UNPROCESSABLE_ENTITY => ApiError::new(status, "invalid_field", text),
        s if s.is_client_error() => ApiError::new(s, "invalid_request", text),
        _ => ApiError::invalid(text),
    }
}
