//! Criterion bench of the embedders on the real models (run `scripts/setup/fetch-models.sh` first):
//! throughput in texts per second over seeded pseudo-sentences of realistic length.
//!
//! `cargo bench --bench embed --features testing`

use criterion::{criterion_group, criterion_main, Criterion, Throughput};

use ragbox_core::embed::{load_embedder, EmbedOptions};
use ragbox_core::model::ModelStore;
use ragbox_core::testing::{SeededRng, TINY_WORDS};
use ragbox_core::types::TextKind;

fn texts(n: usize, words: usize, seed: u64) -> Vec<String> {
    let mut rng = SeededRng::new(seed);
    (0..n)
        .map(|_| {
            let len = words / 2 + ((rng.next_f32(1.0).abs() * words as f32) as usize);
            (0..len)
                .map(|_| TINY_WORDS[((rng.next_f32(1.0).abs() * TINY_WORDS.len() as f32) as usize).min(TINY_WORDS.len() - 1)])
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect()
}

fn bench_embedders(c: &mut Criterion) {
    let dir = std::env::var_os("RAGBOX_MODELS_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")).join("models"));
    let store = ModelStore::new(dir);
    for (name, n, words) in [("all-minilm-l6-v2", 64, 150), ("nomic-embed-text-v1.5", 16, 150)] {
        let spec = store.manifest().get(name).expect("known model");
        let embedder = load_embedder(&store, spec, &EmbedOptions::default())
            .unwrap_or_else(|e| panic!("{e} (run scripts/setup/fetch-models.sh)"));
        let data = texts(n, words, 42);
        let refs: Vec<&str> = data.iter().map(String::as_str).collect();
        let mut group = c.benchmark_group("embed");
        group.sample_size(10);
        group.throughput(Throughput::Elements(n as u64));
        group.bench_function(name, |b| b.iter(|| embedder.embed(&refs, TextKind::Passage).unwrap()));
        group.finish();
    }
}

criterion_group!(benches, bench_embedders);
criterion_main!(benches);
