//! `ragbox bench`: throughput and latency measurements, one file per subject. Each prints a
//! readable summary on stdout, or one line of JSON with `--json`; progress goes to stderr.
//!
//! Shared here: the subcommand enum, its dispatch, and what the benches have in common: a seeded
//! generator for synthetic data, percentiles and resident memory.

mod access;
mod answer;
mod backends;
mod embed;
mod llm;
mod rerank;
mod nodes;
mod serve;
mod vectors;

use clap::Subcommand;

use ragbox_cli::GlobalArgs;

/// Benchmarks.
#[derive(Debug, Subcommand)]
pub enum BenchCmd {
    /// Embedding throughput over a BEIR corpus.
    Embed(embed::EmbedArgs),
    /// Vector index at scale: build, save, exact vs HNSW speed and recall, cold vs warm mmap.
    Vectors(vectors::VectorsArgs),
    /// Cross-encoder rerank latency at the ms-marco-MiniLM-L-6-v2 shape (random weights).
    Rerank(rerank::RerankArgs),
    /// An answer from question to end, the evidence-first reader beside the generating one:
    /// answer p50/p90, the decision step, the first text.
    Answer(answer::AnswerArgs),
    /// The local LLM: prompt processing and generation tokens/s (llama-bench's two figures).
        Llm(llm::LlmArgs),
    /// The HTTP server under loopback load: search p50/p99 and req/s at N clients, during an
    /// ingest, and asking with the queue full; RSS at start and end.
    Serve(serve::ServeBenchArgs),
    /// Retrieval with a permission filter against without, at scale: the vector and BM25 searches
    /// of a tenant whose chunks belong to ten groups, asked by one group.
    Access(access::AccessArgs),
    /// The index backends side by side: local files against the shared servers, same tenant.
    Backends(backends::BackendsArgs),
    /// Several `ragbox serve` nodes over one shared backend under loopback load: the same
    /// clients on one node, then spread across all, p50/p99 and errors side by side.
    Nodes(nodes::NodesArgs),
}

/// Runs one benchmark.
pub fn run(g: &GlobalArgs, cmd: BenchCmd) -> anyhow::Result<()> {
    match cmd {
        BenchCmd::Embed(args) => embed::run(g, args),
        BenchCmd::Vectors(args) => vectors::run(g, args),
        BenchCmd::Rerank(args) => rerank::run(g, args),
        BenchCmd::Answer(args) => answer::run(g, args),
                BenchCmd::Llm(args) => llm::run(g, args),
        BenchCmd::Serve(args) => serve::run(g, args),
        BenchCmd::Access(args) => access::run(g, args),
        BenchCmd::Backends(args) => backends::run(g, args),
        BenchCmd::Nodes(args) => nodes::run(g, args),
    }
}

/// splitmix64: a tiny seedable generator, plenty for synthetic benchmark data (no `rand` here).
struct SeededRng(fastrand::Rng);

impl SeededRng {
    fn new(seed: u64) -> SeededRng {
        SeededRng(fastrand::Rng::with_seed(seed))
    }

    /// A generator for item `i` of stream `stream`: independent of every other item, so items can
    /// be generated in any order, in chunks or in parallel, and come out the same.
    fn for_item(seed: u64, stream: u64, i: u64) -> SeededRng {
        let base = fastrand::Rng::with_seed(seed ^ stream.rotate_left(40)).u64(..);
        SeededRng::new(base ^ i.wrapping_mul(0xD6E8_FEB8_6659_FD93))
    }

    /// Uniform in [0, 1).
    fn uniform(&mut self) -> f64 {
        self.0.f64()
    }

    /// Fills `out` with standard normal values (Box-Muller, both outputs used).
    fn fill_normal(&mut self, out: &mut [f32]) {
        for pair in out.chunks_mut(2) {
            let r = (-2.0 * (1.0 - self.uniform()).ln()).sqrt();
            let (s, c) = (std::f64::consts::TAU * self.uniform()).sin_cos();
            pair[0] = (r * c) as f32;
            if let Some(x) = pair.get_mut(1) {
                *x = (r * s) as f32;
            }
        }
    }
}

/// Sorts durations (seconds) ascending, for [`percentile`].
fn sorted(mut values: Vec<f64>) -> Vec<f64> {
    values.sort_by(f64::total_cmp);
    values
}

/// A memory figure of this process in MiB from `/proc/self/status` (`VmRSS`: now, `VmHWM`: peak);
/// `None` off Linux.
fn status_mb(field: &str) -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.strip_prefix(field).is_some_and(|rest| rest.starts_with(':')))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ragbox_eval::metrics::percentile;

    #[test]
    fn percentile_by_nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 50.0), 50.0);
        assert_eq!(percentile(&v, 95.0), 95.0);
        assert_eq!(percentile(&v, 99.0), 99.0);
        assert_eq!(percentile(&v, 100.0), 100.0);
        assert_eq!(percentile(&v, 0.0), 1.0);
        assert_eq!(percentile(&[3.0], 99.0), 3.0);
        assert_eq!(percentile(&sorted(vec![0.3, 0.1, 0.2]), 50.0), 0.2);
        assert_eq!(percentile(&[], 50.0), 0.0);
    }

    #[test]
    fn seeded_items_are_reproducible_and_normal() {
        let draw = |i| {
            let mut v = vec![0f32; 5];
            SeededRng::for_item(7, 0, i).fill_normal(&mut v);
            v
        };
        assert_eq!(draw(3), draw(3));
        assert_ne!(draw(3), draw(4));
        let mut big = vec![0f32; 100_001];
        SeededRng::new(1).fill_normal(&mut big);
        let mean = big.iter().map(|&x| f64::from(x)).sum::<f64>() / big.len() as f64;
        let var = big.iter().map(|&x| (f64::from(x) - mean).powi(2)).sum::<f64>() / big.len() as f64;
        assert!(mean.abs() < 0.02 && (var - 1.0).abs() < 0.02, "mean {mean}, variance {var}");
    }

    #[test]
    fn status_reads_resident_memory() {
        if cfg!(target_os = "linux") {
            assert!(status_mb("VmRSS").is_some_and(|mb| mb > 0.0));
            assert!(status_mb("VmHWM").is_some_and(|mb| mb > 0.0));
        }
    }
}
