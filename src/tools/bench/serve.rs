//! `ragbox bench serve`: a bounded loopback load test of the HTTP server, in-process on a free
//! port, with a temporary admin key (revoked at the end). Three phases, each stopping by itself:
//! `--clients` concurrent clients searching for `--seconds`; the same while an ingest job runs
//! (`--ingest DIR` into tenant `bench-ingest` of the data folder: point `--data-dir` at a
//! scratch copy); after that ingest finishes, `--askers` clients asking with a queue of one
//! waiting place, so the surplus gets the intended 503s. Reports requests/s, p50/p99 latency,
//! errors by status, and resident memory (server and clients: one process) after warm-up (the
//! LLM loaded, then a few seconds at full concurrency) and at the end. `--scale 1,2,4,8`
//! instead measures how far one box goes: answers per minute and first-token latency as the
//! askers grow, on the configured generator (the local model or an inference server).
//!
//! Its HTTP client (ureq) can only reach the server this command started: the server binds
//! `127.0.0.1:0`, [`Loopback::new`] refuses any address but a loopback one, and every agent it
//! builds resolves every host name to that address and reads no proxy from the environment.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Args;
use serde::Serialize;

use ragbox_eval::metrics::percentile;
use ragbox_service::{Caller, KeyRole, Service};

use super::{sorted, status_mb};
use ragbox_cli::{print_json, GlobalArgs};

/// Arguments of `bench serve`.
#[derive(Debug, Args)]
pub struct ServeBenchArgs {
    /// Tenant to search (it must exist: `ragbox ingest tests/data/corpus` makes `default`).
    #[arg(long, default_value = ragbox_service::DEFAULT_TENANT)]
    pub tenant: String,
    /// Concurrent searching clients.
    #[arg(long, default_value_t = 16)]
    pub clients: usize,
    /// Seconds per search phase.
    #[arg(long, default_value_t = 60)]
    pub seconds: u64,
    /// A folder to ingest (into tenant `bench-ingest`) during the second phase; without it the
    /// second phase is skipped.
    #[arg(long)]
    pub ingest: Option<PathBuf>,
    /// Concurrent asking clients in the last phase (0 skips it).
    #[arg(long, default_value_t = 4)]
    pub askers: usize,
    /// Seconds of the asking phase.
    #[arg(long, default_value_t = 30)]
    pub ask_seconds: u64,
    /// Seconds to wait, after the ingest phase, for the ingest to finish before the asking
    /// phase starts (it then runs on a quiet store).
    #[arg(long, default_value_t = 600)]
    pub ingest_wait: u64,
    /// How far one box goes instead: for each number of askers (`1,2,4,8`), that many clients
    /// ask for `--ask-seconds` with a queue that holds them all, on whatever `generate.backend`
    /// the configuration names (the local model, or an inference server with
    /// `server.generate_concurrency` set to its slots): answers per minute and first-token
    /// p50/p99 as the askers grow. The search phases are skipped.
    #[arg(long, value_delimiter = ',', value_name = "N,N,...")]
    pub scale: Vec<usize>,
}

/// One level of `--scale`.
#[derive(Debug, Serialize)]
struct ScaleLevel {
    askers: usize,
    seconds: f64,
    answers: usize,
    /// Requests that ended otherwise, by status (598: a stream without an answer).
    errors: std::collections::BTreeMap<u16, usize>,
    answers_per_minute: f64,
    first_token_p50_ms: f64,
    first_token_p99_ms: f64,
    answer_p50_ms: f64,
    answer_p99_ms: f64,
}

/// One phase's figures.
#[derive(Debug, Serialize)]
pub(super) struct Phase {
    pub(super) name: String,
    clients: usize,
    seconds: f64,
    requests: usize,
    ok: usize,
    /// Status codes other than 200, with counts.
    pub(super) errors: std::collections::BTreeMap<u16, usize>,
    pub(super) requests_per_second: f64,
    pub(super) p50_ms: f64,
    pub(super) p99_ms: f64,
    pub(super) max_ms: f64,
    /// Resident memory when the phase ended.
    rss_after_mb: Option<f64>,
}

#[derive(Debug, Serialize)]
struct Report {
    tenant: String,
    /// Resident memory after the single-client warm-up (and the LLM load), before the
    /// concurrent warm-up.
    rss_cold_mb: Option<f64>,
    rss_start_mb: Option<f64>,
    rss_end_mb: Option<f64>,
    rss_growth_percent: Option<f64>,
    phases: Vec<Phase>,
    ingest: Option<serde_json::Value>,
}

const QUERIES: &[&str] = &[
    "How many days after a trip do I have to submit my expense claim?",
    "travel insurance for contractors",
    "Who approves remote work equipment?",
    "password rotation policy",
    "How long are customer records retained?",
    "scanner contract renewal",
    "per diem meal allowance",
    "acceptable use of company laptops",
    "data protection officer contact",
    "home office internet reimbursement",
];

/// Seconds of unmeasured searching at full concurrency before the first RSS sample.
const WARM_UP_SECONDS: u64 = 10;

const ASKS: &[&str] = &[
    "How many days after a trip do I have to submit my expense claim?",
    "Who approves remote work equipment?",
];

/// `--scale`'s questions: answerable from the sample corpus (tests/data/corpus-questions.jsonl),
/// so every request reaches the generator.
const SCALE_ASKS: &[&str] = &[
    "How many days after a trip do I have to submit my expense claim?",
    "What is the maximum hotel cost per night in London?",
    "How long do we keep travel receipts?",
    "How soon do I have to report a suspected security incident?",
    "How many days a year am I allowed to work from another country?",
    "What is the recovery time objective of the Warehouse Management System?",
    "When is the fire drill at the Hamburg depot?",
    "What phone extension do I call for the IT service desk?",
];

/// `askers` clients asking for `seconds`, each timing its first token and its whole answer.
fn scale_level(server: &Loopback, askers: usize, seconds: u64) -> ScaleLevel {
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let started = Instant::now();
    let threads: Vec<_> = (0..askers)
        .map(|c| {
            let agent = server.agent(ureq::AgentBuilder::new().timeout(Duration::from_secs(900)));
            let (url, key) = (server.url("ask"), server.key.clone());
            std::thread::spawn(move || {
                let mut out = Vec::new();
                let mut i = 0;
                while Instant::now() < deadline {
                    let q = SCALE_ASKS[(c * 3 + i) % SCALE_ASKS.len()];
                    let t = Instant::now();
                    let sent = post_json(&agent, &url, &key, &serde_json::json!({ "question": q }));
                    out.push(match sent {
                        Ok(r) => {
                            let (mut first, mut answered) = (None, false);
                            for line in std::io::BufRead::lines(std::io::BufReader::new(r.into_reader())).map_while(Result::ok) {
                                if line.starts_with("event: token") && first.is_none() {
                                    first = Some(t.elapsed().as_secs_f64());
                                }
                                answered |= line.starts_with("event: answer");
                            }
                            let status = if answered { 200 } else { 598 };
                            (status, first.unwrap_or(0.0), t.elapsed().as_secs_f64())
                        }
                        Err(ureq::Error::Status(s, _)) => (s, 0.0, 0.0),
                        Err(_) => (599, 0.0, 0.0),
                    });
                    i += 1;
                }
                out
            })
        })
        .collect();
    let results: Vec<(u16, f64, f64)> = threads.into_iter().flat_map(|t| t.join().unwrap_or_default()).collect();
    let wall = started.elapsed().as_secs_f64();
    let ok: Vec<&(u16, f64, f64)> = results.iter().filter(|r| r.0 == 200).collect();
    let first = sorted(ok.iter().map(|r| r.1 * 1e3).collect());
    let whole = sorted(ok.iter().map(|r| r.2 * 1e3).collect());
    let mut errors = std::collections::BTreeMap::new();
    for r in results.iter().filter(|r| r.0 != 200) {
        *errors.entry(r.0).or_insert(0) += 1;
    }
    ScaleLevel {
        askers,
        seconds: wall,
        answers: ok.len(),
        errors,
        answers_per_minute: ok.len() as f64 / (wall / 60.0).max(1e-9),
        first_token_p50_ms: percentile(&first, 50.0),
        first_token_p99_ms: percentile(&first, 99.0),
        answer_p50_ms: percentile(&whole, 50.0),
        answer_p99_ms: percentile(&whole, 99.0),
    }
}

/// Runs `clients` threads, each calling `call` (returning a status) until `seconds` pass.
pub(super) fn phase(name: &str, clients: usize, seconds: u64, call: Arc<dyn Fn(usize, usize) -> u16 + Send + Sync>) -> Phase {
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let started = Instant::now();
    let threads: Vec<_> = (0..clients)
        .map(|c| {
            let call = call.clone();
            std::thread::spawn(move || {
                let mut out = Vec::new();
                let mut i = 0;
                while Instant::now() < deadline {
                    let t = Instant::now();
                    let status = call(c, i);
                    out.push((status, t.elapsed().as_secs_f64()));
                    i += 1;
                    if status == 503 {
                        std::thread::sleep(Duration::from_millis(500));
                    }
                }
                out
            })
        })
        .collect();
    let results: Vec<(u16, f64)> = threads.into_iter().flat_map(|t| t.join().unwrap_or_default()).collect();
    let wall = started.elapsed().as_secs_f64();
    let ok_latencies = sorted(results.iter().filter(|r| r.0 == 200).map(|r| r.1 * 1e3).collect());
    let mut errors = std::collections::BTreeMap::new();
    for (s, _) in results.iter().filter(|r| r.0 != 200) {
        *errors.entry(*s).or_insert(0) += 1;
    }
    Phase {
        name: name.into(),
        clients,
        seconds: wall,
        requests: results.len(),
        ok: ok_latencies.len(),
        errors,
        requests_per_second: ok_latencies.len() as f64 / wall.max(1e-9),
        p50_ms: percentile(&ok_latencies, 50.0),
        p99_ms: percentile(&ok_latencies, 99.0),
        max_ms: ok_latencies.last().copied().unwrap_or(0.0),
        rss_after_mb: status_mb("VmRSS"),
    }
}

/// The one server this command loads: its loopback address, and the key and tenant to use.
#[derive(Clone)]
pub(super) struct Loopback {
    addr: std::net::SocketAddr,
    key: String,
    tenant: String,
}

impl Loopback {
    pub(super) fn new(addr: std::net::SocketAddr, key: String, tenant: String) -> anyhow::Result<Loopback> {
        anyhow::ensure!(addr.ip().is_loopback(), "bench serve loads only its own loopback server, not {addr}");
        Ok(Loopback { addr, key, tenant })
    }

    /// An HTTP agent pinned to the server: whatever host a URL names, it connects to `addr`.
    fn agent(&self, builder: ureq::AgentBuilder) -> ureq::Agent {
        let addr = self.addr;
        builder.try_proxy_from_env(false).resolver(move |_: &str| Ok(vec![addr])).build()
    }

    fn url(&self, route: &str) -> String {
        format!("http://{}/v1/tenants/{}/{route}", self.addr, self.tenant)
    }
}

/// POSTs the JSON `body` to `url` with the bearer `key`.
fn post_json(agent: &ureq::Agent, url: &str, key: &str, body: &serde_json::Value) -> Result<ureq::Response, ureq::Error> {
    agent
        .post(url)
        .set("Authorization", &format!("Bearer {key}"))
        .set("Content-Type", "application/json")
        .send_string(&body.to_string())
}

/// A call of the load phases: client `c`'s `i`-th request POSTs `body(c, i)` to `route` with an
/// agent from `builder`, and gives what `status` makes of the response, an error's status (its
/// body read to the end), or 599 when no response came.
fn call(
    server: &Loopback,
    builder: ureq::AgentBuilder,
    route: &str,
    body: impl Fn(usize, usize) -> serde_json::Value + Send + Sync + 'static,
    status: impl Fn(ureq::Response) -> u16 + Send + Sync + 'static,
) -> Arc<dyn Fn(usize, usize) -> u16 + Send + Sync> {
    let agent = server.agent(builder);
    let (url, key) = (server.url(route), server.key.clone());
    Arc::new(move |c, i| match post_json(&agent, &url, &key, &body(c, i)) {
        Ok(r) => status(r),
        Err(ureq::Error::Status(s, r)) => {
            let _ = r.into_string();
            s
        }
        Err(_) => 599,
    })
}

pub(super) fn search_call(server: &Loopback) -> Arc<dyn Fn(usize, usize) -> u16 + Send + Sync> {
    let builder = ureq::AgentBuilder::new().max_idle_connections_per_host(64);
    let body = |c: usize, i: usize| serde_json::json!({ "query": QUERIES[(c + i) % QUERIES.len()], "k": 5 });
    call(server, builder, "search", body, |r| {
        let status = r.status();
        let _ = r.into_string();
        status
    })
}

pub(super) fn ask_call(server: &Loopback) -> Arc<dyn Fn(usize, usize) -> u16 + Send + Sync> {
    let builder = ureq::AgentBuilder::new().timeout(Duration::from_secs(600));
    let body = |c: usize, i: usize| serde_json::json!({ "question": ASKS[(c + i) % ASKS.len()] });
    call(server, builder, "ask", body, |r| {
        let status = r.status();
        // The event stream ends with the answer (or an error event).
        let text = r.into_string().unwrap_or_default();
        if text.contains("event: answer") {
            status
        } else {
            598
        }
    })
}

pub fn run(g: &GlobalArgs, args: ServeBenchArgs) -> anyhow::Result<()> {
    let mut config = g.config()?;
    if args.scale.is_empty() {
        // One generation at a time and one waiting place: the asking phase fills the queue.
        config.server.queue = 1;
        config.server.generate_concurrency = 1;
    } else {
        // Every asker waits its turn: the scale measures throughput, not refusals.
        config.server.queue = args.scale.iter().copied().max().unwrap_or(1);
    }
    config.server.auth_failures_per_minute = 1000;
    let server_config = config.server.clone();
    let service = Arc::new(Service::open(config)?);
    let generator = format!("{} · generate_concurrency {}", service.generator_status(), server_config.generate_concurrency);
    let caller = Caller::local();
    service.tenant(&caller, &args.tenant)?;
    service.warm_up()?;
    let (key, secret) = service.create_key(&caller, "bench-serve", None, KeyRole::Admin, &[])?;
    let rt = ragbox_cli::serve::runtime()?;
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let (addr_tx, addr_rx) = std::sync::mpsc::channel();
    let server = {
        let service = service.clone();
        rt.spawn(async move {
            ragbox_server::serve(
                service,
                server_config,
                "127.0.0.1:0".parse().expect("a literal address"),
                move |bound, _| {
                    let _ = addr_tx.send(bound);
                },
                async move {
                    let _ = stop_rx.await;
                },
            )
            .await
        })
    };
    let bound = addr_rx.recv_timeout(Duration::from_secs(30))?;
    let target = Loopback::new(bound, secret.clone(), args.tenant.clone())?;
    eprintln!("bench serve: server on http://{bound}; warming up");
    // Warm-up: a few searches so the first measured one does not pay for lazy loads, and the
    // LLM loaded now when there is an asking phase (its weights are not growth).
    let warm = search_call(&target);
    for i in 0..5 {
        warm(0, i);
    }
    if args.askers > 0 {
        service.warm_up_generator()?;
    }
    if !args.scale.is_empty() {
        service.warm_up_generator()?;
        // One unmeasured answer: the first pays for lazy loads (and the server's own warm-up).
        scale_level(&target, 1, 1);
        let mut levels = Vec::new();
        for &askers in &args.scale {
            eprintln!("bench serve: {askers} askers for {} s ({generator})", args.ask_seconds);
            levels.push(scale_level(&target, askers, args.ask_seconds));
        }
        let _ = stop_tx.send(());
        let _ = rt.block_on(server);
        service.revoke_key(&caller, key.id)?;
        if g.json {
            return print_json(&serde_json::json!({ "generator": generator, "levels": levels }));
        }
        println!("bench serve --scale · {generator}");
        println!("{:>7} {:>8} {:>12} {:>15} {:>15} {:>12} {:>12}  errors", "askers", "answers", "answers/min", "first token p50", "first token p99", "answer p50", "answer p99");
        for l in &levels {
            let errors = if l.errors.is_empty() { "none".to_string() } else { l.errors.iter().map(|(s, n)| format!("{s}×{n}")).collect::<Vec<_>>().join(" ") };
            println!(
                "{:>7} {:>8} {:>12.1} {:>13.0}ms {:>13.0}ms {:>10.0}ms {:>10.0}ms  {errors}",
                l.askers, l.answers, l.answers_per_minute, l.first_token_p50_ms, l.first_token_p99_ms, l.answer_p50_ms, l.answer_p99_ms
            );
        }
        return Ok(());
    }
    // Then a few seconds at full concurrency, unmeasured: the first burst of concurrent searches
    // grows memory once (threads, each one's working tensors, allocator arenas; +230 MiB at 16
    // clients, flat afterwards), which is not growth over the run.
    let rss_cold = status_mb("VmRSS");
    eprintln!("bench serve: {} clients warming up for {} s", args.clients, WARM_UP_SECONDS);
    phase("warm-up", args.clients, WARM_UP_SECONDS, search_call(&target));
    let rss_start = status_mb("VmRSS");
    let mut phases = Vec::new();
    eprintln!("bench serve: {} clients searching for {} s", args.clients, args.seconds);
    phases.push(phase("search", args.clients, args.seconds, search_call(&target)));
    let mut ingest = None;
    if let Some(dir) = &args.ingest {
        let job = service.ingest_folder(&caller, "bench-ingest", dir)?;
        eprintln!("bench serve: {} clients searching for {} s while job {} ingests {}", args.clients, args.seconds, job.id, dir.display());
        let started = Instant::now();
        phases.push(phase("search during ingest", args.clients, args.seconds, search_call(&target)));
        let at_end = service.job(&caller, "bench-ingest", job.id)?;
        // The asking phase starts on a quiet store: wait (bounded) for the job to finish.
        let deadline = Instant::now() + Duration::from_secs(args.ingest_wait);
        let mut last = at_end.clone();
        while matches!(last.state, ragbox_service::JobState::Queued | ragbox_service::JobState::Running) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(250));
            last = service.job(&caller, "bench-ingest", job.id)?;
        }
        ingest = Some(serde_json::json!({
            "job": job.id,
            "at_phase_end": { "state": at_end.state, "visited": at_end.visited, "files": at_end.files, "chunks": at_end.chunks },
            "state": last.state,
            "files": last.files,
            "chunks": last.chunks,
            "seconds": started.elapsed().as_secs_f64(),
            "error": last.error,
        }));
    }
    if args.askers > 0 {
        eprintln!("bench serve: {} clients asking for {} s (1 generating, 1 waiting; the rest get 503)", args.askers, args.ask_seconds);
        phases.push(phase("ask, queue full", args.askers, args.ask_seconds, ask_call(&target)));
    }
    let rss_end = status_mb("VmRSS");
    let _ = stop_tx.send(());
    let _ = rt.block_on(server);
    service.revoke_key(&caller, key.id)?;
    let report = Report {
        tenant: args.tenant.clone(),
        rss_cold_mb: rss_cold,
        rss_start_mb: rss_start,
        rss_end_mb: rss_end,
        rss_growth_percent: rss_start.zip(rss_end).map(|(a, b)| (b - a) / a * 100.0),
        phases,
        ingest,
    };
    if g.json {
        return print_json(&report);
    }
    println!("bench serve · tenant {} · loopback http://{}", report.tenant, target.addr);
    println!(
        "{:<22} {:>7} {:>8} {:>8} {:>9} {:>8} {:>8} {:>8} {:>8}  errors",
        "phase", "clients", "requests", "ok", "req/s", "p50 ms", "p99 ms", "max ms", "rss MiB"
    );
    for p in &report.phases {
        let errors = if p.errors.is_empty() { "none".to_string() } else { p.errors.iter().map(|(s, n)| format!("{s}×{n}")).collect::<Vec<_>>().join(" ") };
        println!(
            "{:<22} {:>7} {:>8} {:>8} {:>9.1} {:>8.1} {:>8.1} {:>8.1} {:>8}  {errors}",
            p.name,
            p.clients,
            p.requests,
            p.ok,
            p.requests_per_second,
            p.p50_ms,
            p.p99_ms,
            p.max_ms,
            p.rss_after_mb.map_or("?".into(), |m| format!("{m:.0}"))
        );
    }
    if let Some(i) = &report.ingest {
        println!("ingest during phase 2: {i}");
    }
    println!(
        "rss: {} MiB before the concurrent warm-up, {} MiB at start, {} MiB at end ({} over the run)",
        rss_cold.map_or("?".into(), |m| format!("{m:.0}")),
        rss_start.map_or("?".into(), |m| format!("{m:.0}")),
        rss_end.map_or("?".into(), |m| format!("{m:.0}")),
        report.rss_growth_percent.map_or("?".into(), |p| format!("{p:+.1}%"))
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_loopback_server_is_loaded_and_every_host_name_leads_to_it() {
        let Err(refused) = Loopback::new("192.0.2.1:80".parse().unwrap(), "k".into(), "t".into()) else {
            panic!("a non-loopback address was accepted");
        };
        assert!(refused.to_string().contains("only its own loopback server"), "{refused}");
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let server = Loopback::new(listener.local_addr().unwrap(), "k".into(), "t".into()).unwrap();
        let answer = std::thread::spawn(move || {
            use std::io::{Read, Write};
            let (mut conn, _) = listener.accept().unwrap();
            let mut head = [0u8; 1024];
            let n = conn.read(&mut head).unwrap();
            conn.write_all(b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n").unwrap();
            String::from_utf8_lossy(&head[..n]).into_owned()
        });
        // A host name that resolves nowhere: the pinned resolver sends it to the server anyway.
        let agent = server.agent(ureq::AgentBuilder::new());
        let response = agent.get("http://ragbox-nowhere.invalid/v1/healthz").call().unwrap();
        assert_eq!(response.status(), 204);
        assert!(answer.join().unwrap().starts_with("GET /v1/healthz"));
        assert_eq!(server.url("search"), format!("http://{}/v1/tenants/t/search", server.addr));
    }
}
