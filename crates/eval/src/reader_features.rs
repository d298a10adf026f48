//! `ragbox eval --reader-features FILE --out DIR`: the reader's training material as the product
//! sees it. Each example (a question and the passage it was written over) is cut into the units
//! the answer step reads, each unit put in its context by [`reader_text`], and the cross-encoder's
//! last-layer state and logit of every (question, unit) pair written out, with a label saying whether
//! the unit is the example's evidence. `scripts/train/reader.py` trains the reader on them, so
//! the text it learns from is the text it reads when answering.
//!
//! Input, JSON lines: `id`, `question`, `context` (the section's name or the page title), `text`
//! (the passage, markdown), `evidence` (the sentences or list items that state the answer,
//! verbatim; empty for a question the passage does not answer). Output in DIR: `units.jsonl`
//! (`id`, `unit`, `label`, `text`, `tokens`, and `probability` where the shipped reader reads from
//! the same layer: one line per unit) and `states.f32` (for each unit, in
//! the same order, the last layer's [CLS] state, its mean token state, then the logit:
//! little-endian f32). With a tap (`--reader-layers K`: the states entering the top K layers, which
//! the reader trains its own copies of), also `tapped.f16`: each unit's `tokens` token states
//! there, `[tokens, hidden]`, little-endian f16, and `tap.json` (the first of those layers, the
//! body's depth).

use std::io::{BufRead, BufWriter, Write};
use std::path::Path;

use anyhow::{anyhow, Context};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use ragbox_core::answer::evidence::reader_text;
use ragbox_core::answer::segment::{units, Unit};
use ragbox_core::rerank::Reranker;

/// One training example.
#[derive(Debug, Deserialize)]
pub struct Example {
    /// Unique id.
    pub id: String,
    /// The question.
    pub question: String,
    /// The passage's section name or page title.
    #[serde(default)]
    pub context: String,
    /// The passage.
    pub text: String,
    /// The units that state the answer, verbatim.
    #[serde(default)]
    pub evidence: Vec<String>,
}

/// One unit written out.
#[derive(Debug, Serialize)]
struct UnitRow<'a> {
    id: &'a str,
    unit: usize,
    label: u8,
    text: &'a str,
    tokens: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    probability: Option<f32>,
}

/// What a run wrote.
#[derive(Debug, Default, Serialize)]
pub struct Written {
    /// Examples read.
    pub examples: usize,
    /// Units written.
    pub units: usize,
    /// Units labelled as evidence.
    pub positives: usize,
    /// Examples with evidence none of whose units matched it (left out).
    pub unmatched: usize,
    /// Width of each state.
    pub width: usize,
}

/// Lower case, letters and digits only, one space between words: a quote and a unit compare
/// equal whatever markdown marks or spacing they carry.
fn plain(text: &str) -> String {
    let mapped: String = text.chars().map(|c| if c.is_alphanumeric() { c.to_ascii_lowercase() } else { ' ' }).collect();
    mapped.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Whether `unit` is (part of) one of the `evidence` quotes: either holds the other, words
/// compared without marks.
pub fn is_evidence(unit: &Unit, evidence: &[String]) -> bool {
    let u = plain(&unit.text);
    !u.is_empty() && evidence.iter().map(|e| plain(e)).any(|e| !e.is_empty() && (u.contains(&e) || (u.len() >= 12 && e.contains(&u))))
}

/// Reads `input`, writes `out/units.jsonl`, `out/states.f32` and, with `tap`, `out/tapped.f16`.
pub fn write(reranker: &dyn Reranker, input: &Path, out: &Path, tap: Option<usize>) -> anyhow::Result<Written> {
    let file = std::fs::File::open(input).with_context(|| format!("{}", input.display()))?;
    let examples: Vec<Example> = std::io::BufReader::new(file)
        .lines()
        .enumerate()
        .filter(|(_, l)| l.as_ref().map_or(true, |l| !l.trim().is_empty()))
        .map(|(n, l)| serde_json::from_str(&l?).with_context(|| format!("{}:{}", input.display(), n + 1)))
        .collect::<anyhow::Result<_>>()?;
    std::fs::create_dir_all(out)?;
    let mut meta = BufWriter::new(std::fs::File::create(out.join("units.jsonl"))?);
    let mut states = BufWriter::new(std::fs::File::create(out.join("states.f32"))?);
    let mut tapped = tap.map(|_| std::fs::File::create(out.join("tapped.f16")).map(BufWriter::new)).transpose()?;
    let mut written = Written { examples: examples.len(), ..Written::default() };
    for chunk in examples.chunks(64) {
        let done: Vec<anyhow::Result<Option<(Vec<Unit>, Vec<String>, Vec<ragbox_core::rerank::Represented>)>>> = chunk
            .par_iter()
            .map(|e| {
                let us = units(&e.text);
                let texts: Vec<String> = (0..us.len()).map(|i| reader_text(&e.context, &us, i)).collect();
                if texts.is_empty() {
                    return Ok(None);
                }
                let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
                let rows = reranker.represent(&e.question, &refs, tap)?.ok_or_else(|| anyhow!("model `{}` gives no states", reranker.model_id()))?;
                Ok(Some((us, texts, rows)))
            })
            .collect();
        for (e, d) in chunk.iter().zip(done) {
            let Some((us, texts, rows)) = d? else { continue };
            let labels: Vec<u8> = us.iter().map(|u| is_evidence(u, &e.evidence) as u8).collect();
            if !e.evidence.is_empty() && !labels.contains(&1) {
                written.unmatched += 1;
                continue;
            }
            for (i, ((text, row), label)) in texts.iter().zip(&rows).zip(&labels).enumerate() {
                written.width = row.state.len();
                let tokens = row.tapped.len() / (row.state.len() / 2).max(1);
                serde_json::to_writer(&mut meta, &UnitRow { id: &e.id, unit: i, label: *label, text, tokens, probability: row.probability })?;
                meta.write_all(b"\n")?;
                for v in row.state.iter().chain([&row.logit]) {
                    states.write_all(&v.to_le_bytes())?;
                }
                if let Some(w) = &mut tapped {
                    for v in &row.tapped {
                        w.write_all(&half::f16::from_f32(*v).to_le_bytes())?;
                    }
                }
                written.units += 1;
                written.positives += *label as usize;
            }
        }
    }
    meta.flush()?;
    states.flush()?;
    if let (Some(w), Some(first)) = (&mut tapped, tap) {
        w.flush()?;
        let about = serde_json::json!({ "first_layer": first, "depth": reranker.depth(), "width": written.width / 2 });
        std::fs::write(out.join("tap.json"), serde_json::to_vec_pretty(&about)?)?;
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quote_matches_its_unit_whatever_its_marks() {
        let us = units("Then, before you open a PR:\n- Write **tests** for the change.\n- Ask a reviewer.\n\nThe build runs.");
        let evidence = vec!["Write **tests** for the change.".to_string()];
        let got: Vec<bool> = us.iter().map(|u| is_evidence(u, &evidence)).collect();
        assert_eq!(got, [false, true, false, false]);
        // A quote that spans two units marks both.
        let evidence = vec!["Ask a reviewer. The build runs.".to_string()];
        assert_eq!(us.iter().map(|u| is_evidence(u, &evidence)).collect::<Vec<_>>(), [false, false, true, true]);
    }
}
