//! `ragbox doctor`: build features, device, every model present and verified, versions.

use super::{print_json, GlobalArgs};

/// `ragbox doctor`: the build, the device, the kernels and every model with its checksum.
pub fn run(g: &GlobalArgs) -> anyhow::Result<()> {
    let report = ragbox_service::Service::diagnose(g.config()?)?;
    if g.json {
        return print_json(&report);
    }
    println!("ragbox {} (candle {})", report.version, report.candle);
    println!("features:   {}", report.features.join(", "));
    println!("device:     {}", report.device);
    let cpu = &report.cpu;
    match cpu.refusal() {
        None => println!("cpu:        build baseline {} ({}): this CPU has it", cpu.target, cpu.required.join(", ")),
        Some(msg) => println!("cpu:        {msg}"),
    }
    println!("llm:        {}", report.llm_kernels);
    println!("encoders:   {}", report.encoder_kernels);
    if let Some(f) = &report.config_file {
        println!("config:     {}", f.display());
    }
    println!("data dir:   {}", report.data_dir.display());
    println!("models dir: {}", report.models_dir.display());
    println!("embedder:   {}", report.embed_model);
    println!("reranker:   {}: {}", report.rerank_model, report.rerank_status);
    println!("ocr:        {}", report.ocr_status);
    println!("generator:  {}", report.generator);
    for line in &report.store {
        println!("store:      {line}");
    }
    for line in &report.sources {
        println!("source:     {line}");
    }
    for line in &report.permission_files {
        println!("warning:    {line} (`[access] files = false` decides readers by the configuration's rules alone)");
    }
    let sv = &report.server;
    println!(
        "server:     listen {} · queue {} (generating {} at once) · body {} B, question {} chars, upload {} B · timeouts {} ms / answer {} ms / body {} ms · CORS {}",
        sv.listen,
        sv.queue,
        sv.generate_concurrency,
        sv.max_body_bytes,
        sv.max_question_chars,
        sv.max_upload_bytes,
        sv.request_timeout_ms,
        sv.generate_timeout_ms,
        sv.body_timeout_ms,
        if sv.cors_origins.is_empty() { "off".to_string() } else { sv.cors_origins.join(", ") }
    );
    println!("tenants:");
    if report.tenants.is_empty() {
        println!("  none yet: `ragbox ingest PATH` creates one");
    }
    for t in &report.tenants {
        let r = &t.tenant;
        match (&t.consistency, &t.error) {
            (Some(c), _) => println!(
                "  {:<16} {} ({} dims), generation {}: {} chunks; vector index gen {}, lexical gen {}: {}",
                r.name,
                r.model,
                r.dims,
                r.generation,
                c.catalog_children,
                c.vector_generation.map_or("missing".into(), |g| g.to_string()),
                c.lexical_generation.map_or("missing".into(), |g| g.to_string()),
                if c.consistent { "consistent" } else { "behind or damaged: the next open rebuilds it from the catalog" }
            ),
            (None, e) => println!("  {:<16} cannot check: {}", r.name, e.as_deref().unwrap_or("")),
        }
    }
    println!("models:");
    for m in &report.models {
        println!("  {:<30} {:<9} {}", m.name, m.role, m.summary());
        for f in m.files.iter().filter(|f| f.state != "ok") {
            println!("    {} {}{}", f.name, f.state, f.detail.as_deref().map(|d| format!(": {d}")).unwrap_or_default());
        }
        if let Some(fix) = &m.fix {
            println!("    fix: `{fix}`");
        }
    }
    Ok(())
}
