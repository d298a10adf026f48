//! `ragbox bench nodes`: `ragbox serve` nodes already running over one shared backend
//! (`scripts/bench/nodes.sh` starts the servers and two nodes), loaded from loopback: the same
//! clients first all on the first node, then spread round-robin across every node, each phase
//! stopping by itself. Reports requests/s, p50/p99 and errors per phase, side by side.
//!
//! Only loopback nodes are accepted (as in `bench serve`): the load never leaves the machine.

use std::sync::Arc;

use clap::Args;
use serde::Serialize;

use super::serve::{ask_call, phase, search_call, Loopback, Phase};
use ragbox_cli::{print_json, GlobalArgs};

/// Arguments of `bench nodes`.
#[derive(Debug, Args)]
pub struct NodesArgs {
    /// A node's loopback address (`127.0.0.1:PORT`); repeat for each node.
    #[arg(long = "node", required = true)]
    pub nodes: Vec<std::net::SocketAddr>,
    /// An API key every node accepts (they share the catalog, so one key serves all).
    #[arg(long, env = "RAGBOX_BENCH_KEY")]
    pub key: String,
    /// The tenant to load.
    #[arg(long, default_value = ragbox_service::DEFAULT_TENANT)]
    pub tenant: String,
    /// Concurrent clients.
    #[arg(long, default_value_t = 16)]
    pub clients: usize,
    /// Seconds per phase.
    #[arg(long, default_value_t = 60)]
    pub seconds: u64,
    /// What the clients do: `ask` (answers, read to the end of the stream) or `search`.
    #[arg(long, default_value = "ask")]
    pub route: String,
}

#[derive(Debug, Serialize)]
struct Report {
    route: String,
    nodes: Vec<String>,
    one_node: Phase,
    all_nodes: Phase,
}

/// `ragbox bench nodes`.
pub fn run(g: &GlobalArgs, args: NodesArgs) -> anyhow::Result<()> {
    let servers = args.nodes.iter().map(|a| Loopback::new(*a, args.key.clone(), args.tenant.clone())).collect::<anyhow::Result<Vec<_>>>()?;
    let calls: Vec<Arc<dyn Fn(usize, usize) -> u16 + Send + Sync>> = servers
        .iter()
        .map(|s| match args.route.as_str() {
            "ask" => Ok(ask_call(s)),
            "search" => Ok(search_call(s)),
            other => anyhow::bail!("--route {other}: use ask or search"),
        })
        .collect::<anyhow::Result<_>>()?;
    // Warm every node (models loaded, caches filled) before anything is timed.
    for call in &calls {
        let status = call(0, 0);
        anyhow::ensure!(status == 200, "a node answered the warm-up with status {status}");
    }
    let first = calls[0].clone();
    let one_node = phase("one node", args.clients, args.seconds, first);
    let spread = calls.clone();
    let all = Arc::new(move |c: usize, i: usize| spread[c % spread.len()](c, i));
    let all_nodes = phase("all nodes", args.clients, args.seconds, all);
    let report = Report { route: args.route.clone(), nodes: args.nodes.iter().map(|a| a.to_string()).collect(), one_node, all_nodes };
    if g.json {
        print_json(&report)?;
        return Ok(());
    }
    println!("{} clients, {} s per phase, route {}", args.clients, args.seconds, report.route);
    println!("{:<10} {:>6} {:>9} {:>10} {:>10} {:>10}  errors", "phase", "nodes", "req/s", "p50 ms", "p99 ms", "max ms");
    for (p, n) in [(&report.one_node, 1), (&report.all_nodes, report.nodes.len())] {
        println!(
            "{:<10} {:>6} {:>9.2} {:>10.1} {:>10.1} {:>10.1}  {:?}",
            p.name, n, p.requests_per_second, p.p50_ms, p.p99_ms, p.max_ms, p.errors
        );
    }
    Ok(())
}
