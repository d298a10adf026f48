//! `/metrics` in the Prometheus text format: requests and latency by route and status, queue
//! depth, generation speed, failed authentications, ingest progress and each source's syncs. Kept by hand (a few
//! counters behind a mutex) rather than with a metrics crate.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;
use std::time::Instant;

use axum::extract::{MatchedPath, Request, State as Extract};
use axum::middleware::Next;
use axum::response::Response;

use ragbox_service::SourceStatus;

use super::State;

/// Latency bucket bounds, seconds.
const BUCKETS: [f64; 12] = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0];

#[derive(Default)]
struct Histogram {
    count: u64,
    sum: f64,
    buckets: [u64; BUCKETS.len()],
}

#[derive(Default)]
struct Inner {
    requests: BTreeMap<(String, String, u16), Histogram>,
    auth_failures: BTreeMap<&'static str, u64>,
    tokens: u64,
    generations: BTreeMap<&'static str, u64>,
    tokens_per_second: f64,
}

/// The server's counters.
#[derive(Default)]
pub struct Metrics {
    inner: Mutex<Inner>,
}

impl Metrics {
    fn with<T>(&self, f: impl FnOnce(&mut Inner) -> T) -> T {
        f(&mut self.inner.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// One request done.
    pub fn request(&self, method: &str, route: &str, status: u16, seconds: f64) {
        self.with(|m| {
            let h = m.requests.entry((method.to_string(), route.to_string(), status)).or_default();
            h.count += 1;
            h.sum += seconds;
            for (i, b) in BUCKETS.iter().enumerate() {
                if seconds <= *b {
                    h.buckets[i] += 1;
                }
            }
        })
    }

    /// One failed authentication.
    pub fn auth_failure(&self, reason: &'static str) {
        self.with(|m| *m.auth_failures.entry(reason).or_default() += 1)
    }

    /// One generation finished (`outcome`: ok, refused, cancelled, error, rejected).
    pub fn generation(&self, outcome: &'static str, tokens: usize, tokens_per_second: f64) {
        self.with(|m| {
            *m.generations.entry(outcome).or_default() += 1;
            m.tokens += tokens as u64;
            if tokens_per_second > 0.0 {
                m.tokens_per_second = tokens_per_second;
            }
        })
    }

    /// The text exposition.
    pub fn render(&self, queue: (usize, usize), ingest: (usize, usize, usize), sources: &[SourceStatus]) -> String {
        let mut out = String::new();
        self.with(|m| {
            let _ = writeln!(out, "# HELP ragbox_http_requests_total HTTP requests by route and status.");
            let _ = writeln!(out, "# TYPE ragbox_http_requests_total counter");
            for ((method, route, status), h) in &m.requests {
                let _ = writeln!(out, "ragbox_http_requests_total{{method=\"{method}\",route=\"{route}\",status=\"{status}\"}} {}", h.count);
            }
            let _ = writeln!(out, "# HELP ragbox_http_request_duration_seconds Time to the response head, by route and status.");
            let _ = writeln!(out, "# TYPE ragbox_http_request_duration_seconds histogram");
            for ((method, route, status), h) in &m.requests {
                let labels = format!("method=\"{method}\",route=\"{route}\",status=\"{status}\"");
                for (i, b) in BUCKETS.iter().enumerate() {
                    let _ = writeln!(out, "ragbox_http_request_duration_seconds_bucket{{{labels},le=\"{b}\"}} {}", h.buckets[i]);
                }
                let _ = writeln!(out, "ragbox_http_request_duration_seconds_bucket{{{labels},le=\"+Inf\"}} {}", h.count);
                let _ = writeln!(out, "ragbox_http_request_duration_seconds_sum{{{labels}}} {}", h.sum);
                let _ = writeln!(out, "ragbox_http_request_duration_seconds_count{{{labels}}} {}", h.count);
            }
            let _ = writeln!(out, "# HELP ragbox_auth_failures_total Failed authentications by reason.");
            let _ = writeln!(out, "# TYPE ragbox_auth_failures_total counter");
            for (reason, n) in &m.auth_failures {
                let _ = writeln!(out, "ragbox_auth_failures_total{{reason=\"{reason}\"}} {n}");
            }
            let _ = writeln!(out, "# HELP ragbox_generations_total Answers by outcome.");
            let _ = writeln!(out, "# TYPE ragbox_generations_total counter");
            for (outcome, n) in &m.generations {
                let _ = writeln!(out, "ragbox_generations_total{{outcome=\"{outcome}\"}} {n}");
            }
            let _ = writeln!(out, "# HELP ragbox_llm_tokens_total Tokens generated.");
            let _ = writeln!(out, "# TYPE ragbox_llm_tokens_total counter");
            let _ = writeln!(out, "ragbox_llm_tokens_total {}", m.tokens);
            let _ = writeln!(out, "# HELP ragbox_llm_tokens_per_second Decoding speed of the last answer.");
            let _ = writeln!(out, "# TYPE ragbox_llm_tokens_per_second gauge");
            let _ = writeln!(out, "ragbox_llm_tokens_per_second {}", m.tokens_per_second);
        });
        let _ = writeln!(out, "# HELP ragbox_queue_waiting Answers waiting for the LLM.");
        let _ = writeln!(out, "# TYPE ragbox_queue_waiting gauge");
        let _ = writeln!(out, "ragbox_queue_waiting {}", queue.0);
        let _ = writeln!(out, "# HELP ragbox_queue_generating Answers generating now.");
        let _ = writeln!(out, "# TYPE ragbox_queue_generating gauge");
        let _ = writeln!(out, "ragbox_queue_generating {}", queue.1);
        let _ = writeln!(out, "# HELP ragbox_ingest_jobs_active Ingest jobs queued or running.");
        let _ = writeln!(out, "# TYPE ragbox_ingest_jobs_active gauge");
        let _ = writeln!(out, "ragbox_ingest_jobs_active {}", ingest.0);
        let _ = writeln!(out, "# HELP ragbox_ingest_files_visited Files looked at by active ingest jobs, of ragbox_ingest_files_found.");
        let _ = writeln!(out, "# TYPE ragbox_ingest_files_visited gauge");
        let _ = writeln!(out, "ragbox_ingest_files_visited {}", ingest.1);
        let _ = writeln!(out, "# TYPE ragbox_ingest_files_found gauge");
        let _ = writeln!(out, "ragbox_ingest_files_found {}", ingest.2);
        render_sources(&mut out, sources);
        out
    }
}

/// The `[[sources]]` gauges, one series per source.
fn render_sources(out: &mut String, sources: &[SourceStatus]) {
    if sources.is_empty() {
        return;
    }
    type Gauge = fn(&SourceStatus) -> f64;
    let gauges: [(&str, &str, &str, Gauge); 6] = [
        ("ragbox_source_up", "gauge", "1 when the source's last sync finished, 0 when it failed or never ran.", |s| {
            f64::from(u8::from(s.last.as_ref().is_some_and(|r| r.ok)))
        }),
        ("ragbox_source_syncing", "gauge", "1 while the source syncs in this process.", |s| f64::from(u8::from(s.running.is_some()))),
        ("ragbox_source_last_success_timestamp_seconds", "gauge", "When the source last synced to the end (0: never).", |s| {
            s.last.as_ref().and_then(|r| r.last_success_ms).map_or(0.0, |ms| ms as f64 / 1000.0)
        }),
        ("ragbox_source_failures_total", "counter", "Syncs of the source that failed.", |s| s.last.as_ref().map_or(0.0, |r| r.failures_total as f64)),
        ("ragbox_source_items", "gauge", "Items (messages, files) the source listed at its last sync.", |s| {
            s.last.as_ref().map_or(0.0, |r| r.sync.listed as f64)
        }),
        ("ragbox_source_last_fetched", "gauge", "Items fetched by the source's last sync.", |s| s.last.as_ref().map_or(0.0, |r| r.sync.fetched as f64)),
    ];
    for (name, kind, help, value) in gauges {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} {kind}");
        for s in sources {
            let _ = writeln!(out, "{name}{{source=\"{}\"}} {}", s.config.name, value(s));
        }
    }
}

/// Middleware: times every request and counts it by matched route and status.
pub async fn track(Extract(state): Extract<State>, request: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = request.method().to_string();
    let route = request.extensions().get::<MatchedPath>().map_or_else(|| "unmatched".to_string(), |p| p.as_str().to_string());
    let response = next.run(request).await;
    state.metrics.request(&method, &route, response.status().as_u16(), started.elapsed().as_secs_f64());
    response
}
