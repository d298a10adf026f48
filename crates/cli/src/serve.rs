//! `ragbox serve [--listen ADDR]`: the HTTP API over the service layer, until SIGTERM/SIGINT.
//! Loopback by default; the start-up line says so, or says plainly that another address is
//! reachable from the network.

use std::net::SocketAddr;
use std::io::Write;
use std::sync::Arc;

use clap::Args;

use ragbox_service::Service;

use super::GlobalArgs;

/// Arguments of `serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Address to listen on (default: `server.listen`, 127.0.0.1:7070). Port 0 picks a free
    /// port; the start-up line names it.
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<String>,
}

/// The line a person (or a test) reads to know where the server is.
pub fn startup_line(bound: SocketAddr) -> String {
    if ragbox_server::is_loopback(&bound) {
        format!("ragbox serve: listening on http://{bound} (loopback only)")
    } else {
        format!(
            "ragbox serve: listening on http://{bound}: NOT loopback, reachable from the network \
             (every request still needs a key; put TLS in front for anything beyond a trusted network)"
        )
    }
}

/// A multi-threaded runtime for the server (the LLM engine keeps its own).
pub fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread().worker_threads(2).thread_name("ragbox-http").enable_all().build()?)
}

/// `ragbox serve`: the HTTP API and the web page until SIGTERM or SIGINT.
pub fn run(g: &GlobalArgs, args: ServeArgs) -> anyhow::Result<u8> {
    let config = g.config()?;
    let listen = args.listen.clone().unwrap_or_else(|| config.server.listen.clone());
    let addr: SocketAddr = listen.parse().map_err(|e| anyhow::anyhow!("--listen {listen:?}: {e}; use an address such as 127.0.0.1:7070"))?;
    let server_config = config.server.clone();
    let service = Arc::new(Service::open(config)?);
    eprintln!("ragbox serve: {}", service.generator_status());
    service.warm_up()?;
    let resumed = service.resume_uploads()?;
    if !resumed.is_empty() {
        eprintln!("ragbox serve: checking {} tenants' uploads (ingesting any that a stop interrupted)", resumed.len());
    }
    if service.start_source_schedule()?.is_some() {
        let names: Vec<String> = service.config().sources.iter().map(|s| format!("{} every {}", s.name, s.interval)).collect();
        eprintln!("ragbox serve: syncing sources one at a time: {}", names.join(", "));
    }
    if service.start_retention_schedule()?.is_some() {
        eprintln!("ragbox serve: deleting conversations past their retention period now and daily ([retention])");
    }
    if server_config.preload_generator {
        let model = service.warm_up_generator()?;
        eprintln!("ragbox serve: {model} loaded");
    }
    let rt = runtime()?;
    rt.block_on(ragbox_server::serve(
        service,
        server_config,
        addr,
        |bound, signin| {
            println!("{}", startup_line(bound));
            println!("ragbox serve: open {signin} to use the web page (signs in as the local admin; works once)");
            let _ = std::io::stdout().flush();
        },
        ragbox_server::shutdown_signal(),
    ))?;
    Ok(0)
}
