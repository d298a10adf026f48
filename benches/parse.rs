//! Criterion bench of the parsers and the default chunker on real files: the PDF fixture (Debian's
//! LPPL, 8 pages), the sample corpus's largest policy, and any PDF named by `RAGBOX_PDF`.
//!
//! `cargo bench --profile dev --bench parse [-- --quick]`

use std::path::{Path, PathBuf};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};

use ragbox_core::chunk::{chunker, ChunkOptions, ChunkerKind, WordCounter};

fn inputs() -> Vec<PathBuf> {
    let root = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."));
    let mut files = vec![
        root.join("tests/fixtures/source/lppl.pdf"),
        root.join("tests/data/corpus/policies/travel-and-expenses.md"),
        root.join("tests/data/corpus/intranet/it-service-desk.html"),
    ];
    files.extend(std::env::var_os("RAGBOX_PDF").map(PathBuf::from));
    files
}

fn bench_parse(c: &mut Criterion) {
    let structural = chunker(ChunkerKind::Structural, ChunkOptions::default()).expect("structural needs no embedder");
    for path in inputs() {
        let bytes = std::fs::read(&path).expect("bench input exists");
        let name = path.file_name().expect("file name").to_string_lossy().into_owned();
        let mut group = c.benchmark_group(format!("parse/{name}"));
        group.throughput(Throughput::Bytes(bytes.len() as u64));
        group.sample_size(10);
        group.bench_function("parse", |b| b.iter(|| ragbox_core::source::parse(&path, &bytes, u64::MAX).expect("parses")));
        let doc = ragbox_core::source::parse(&path, &bytes, u64::MAX).expect("parses");
        group.bench_function("chunk", |b| b.iter(|| structural.chunk(&doc, &WordCounter)));
        group.finish();
    }
}

criterion_group!(benches, bench_parse);
criterion_main!(benches);
