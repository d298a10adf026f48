//! Support-flag evaluation (`ragbox eval --support FILE`): labelled answer sentences with the
//! passages they cite (`tests/data/eval/support-{dev,test}.jsonl`): true sentences the model
//! wrote on questions it answered right, and false ones made from them by swapping a figure, a
//! name or a negation (`scripts/eval/make-support-set.py`). Every method flags them against the
//! configured floor; the report gives, per method, the share of true sentences flagged (false
//! alarms), the share of false ones flagged per kind of swap, and the time per sentence.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use ragbox_core::answer::support::{Claim, SupportChecker};
use ragbox_core::error::{Error, Result};
use ragbox_core::generate::block_on;

/// One labelled sentence.
#[derive(Debug, Clone, Deserialize)]
pub struct Labelled {
    /// The question it answers.
    pub question: String,
    /// The sentence, without citation markers.
    pub sentence: String,
    /// The texts of the passages it cites.
    pub passages: Vec<String>,
    /// Whether the passages support it.
    pub supported: bool,
    /// `true` for a sentence the model wrote, else the swap that falsified it: `figure`, `name`,
    /// `negation`.
    pub kind: String,
}

/// One method's figures.
#[derive(Debug, Clone, Serialize)]
pub struct MethodReport {
    /// The method.
    pub method: String,
    /// Sentences it judged.
    pub sentences: usize,
    /// True sentences flagged / true sentences.
    pub true_flagged: [usize; 2],
    /// False sentences flagged / false sentences, per kind of swap.
    pub false_flagged: BTreeMap<String, [usize; 2]>,
    /// Milliseconds per sentence.
    pub ms_per_sentence: f64,
    /// The reasons given for flagged true sentences (false alarms), for inspection.
    pub false_alarms: Vec<(String, String)>,
}

impl MethodReport {
    /// Share of false sentences flagged, all kinds together.
    pub fn caught(&self) -> f64 {
        let (f, n) = self.false_flagged.values().fold((0, 0), |(f, n), [a, b]| (f + a, n + b));
        if n == 0 { 0.0 } else { f as f64 / n as f64 }
    }
    /// Share of true sentences flagged.
    pub fn false_alarm_rate(&self) -> f64 {
        if self.true_flagged[1] == 0 { 0.0 } else { self.true_flagged[0] as f64 / self.true_flagged[1] as f64 }
    }
}

/// Reads the labelled sentences.
pub fn load(path: &Path) -> Result<Vec<Labelled>> {
    let text = std::fs::read_to_string(path).map_err(Error::path(path))?;
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| serde_json::from_str(l).map_err(|e| Error::Invalid(format!("{}:{}: not a labelled sentence: {e}", path.display(), i + 1))))
        .collect()
}

/// Judges `set` with `checker` against `floor`.
pub fn run(set: &[Labelled], checker: &SupportChecker, floor: f32) -> Result<MethodReport> {
    let started = std::time::Instant::now();
    let mut report = MethodReport {
        method: serde_json::to_value(checker.method()).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default(),
        sentences: set.len(),
        true_flagged: [0, 0],
        false_flagged: BTreeMap::new(),
        ms_per_sentence: 0.0,
        false_alarms: Vec::new(),
    };
    for l in set {
        let claim = Claim { text: l.sentence.clone(), passages: l.passages.iter().map(String::as_str).collect() };
        let verdict = block_on(checker.verdicts(&l.question, std::slice::from_ref(&claim), floor))?.remove(0);
        let flagged = !verdict.supported;
        if l.supported {
            report.true_flagged[0] += usize::from(flagged);
            report.true_flagged[1] += 1;
            if flagged {
                report.false_alarms.push((l.sentence.clone(), verdict.reason.unwrap_or_default()));
            }
        } else {
            let e = report.false_flagged.entry(l.kind.clone()).or_insert([0, 0]);
            e[0] += usize::from(flagged);
            e[1] += 1;
        }
    }
    report.ms_per_sentence = started.elapsed().as_secs_f64() * 1e3 / set.len().max(1) as f64;
    Ok(report)
}

/// The markdown table of several methods' reports.
pub fn markdown(reports: &[MethodReport], floor: f32) -> String {
    let mut out = format!(
        "| method (floor {floor:.2}) | sentences | correct sentences flagged | falsified flagged | figure swaps | name swaps | negation swaps | ms / sentence |\n|---|---|---|---|---|---|---|---|\n"
    );
    for r in reports {
        let kind = |k: &str| r.false_flagged.get(k).map_or("–".to_string(), |[f, n]| format!("{f}/{n}"));
        out.push_str(&format!(
            "| {} | {} | {:.1}% ({}/{}) | {:.1}% | {} | {} | {} | {:.1} |\n",
            r.method,
            r.sentences,
            r.false_alarm_rate() * 100.0,
            r.true_flagged[0],
            r.true_flagged[1],
            r.caught() * 100.0,
            kind("figure"),
            kind("name"),
            kind("negation"),
            r.ms_per_sentence
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use ragbox_core::testing::HashEmbedder;
    use std::sync::Arc;

    #[test]
    fn grounded_flags_a_swapped_figure_and_passes_the_true_sentence() {
        let passage = "| City | Per diem | Hotel cap |\n| London | GBP 65 | GBP 210 |".to_string();
        let l = |sentence: &str, supported: bool, kind: &str| Labelled {
            question: "What is the hotel cap in London?".into(),
            sentence: sentence.into(),
            passages: vec![passage.clone()],
            supported,
            kind: kind.into(),
        };
        let set = vec![
            l("The hotel cap in London is GBP 210.", true, "true"),
            l("The hotel cap in London is GBP 250.", false, "figure"),
            l("The hotel cap in Paris is GBP 210.", false, "name"),
            l("The hotel cap in London is not GBP 210.", false, "negation"),
        ];
        let checker = SupportChecker::Grounded(Arc::new(HashEmbedder::default()));
        let r = run(&set, &checker, 0.65).unwrap();
        assert_eq!(r.true_flagged, [0, 1], "{:?}", r.false_alarms);
        assert_eq!(r.false_flagged["figure"], [1, 1]);
        assert_eq!(r.false_flagged["name"], [1, 1]);
        assert_eq!(r.false_flagged["negation"], [1, 1]);
        assert!(markdown(&[r], 0.65).contains("| grounded | 4 | 0.0% (0/1) | 100.0% |"));
    }
}
