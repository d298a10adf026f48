//! The local generator: a quantised GGUF model run by mistralrs, from a file in the models
//! folder. No hub call: the model id given to mistralrs is an existing directory, the token
//! source is `None`, and the chat template and tokenizer come from the GGUF itself.

use std::sync::{Arc, Mutex};

use mistralrs::core::{
    AutoDeviceMapParams, DefaultSchedulerMethod, DeviceMapSetting, GGUFLoaderBuilder, GGUFSpecificConfig,
    MistralRsBuilder, ModelDType, SchedulerConfig,
};
use mistralrs::{Model, RequestBuilder, Response, TextMessageRole, TokenSource};

use super::{GenerateRequest, Generation, Generator, LocalOptions, Message, Role, Streaming, TokenSink};
use crate::error::{Error, Result};

/// A GGUF chat model on mistralrs.
pub struct GgufGenerator {
    name: String,
    model: Arc<Model>,
    /// Token ids that spell "yes" and "no" as a first answer token.
    yes: Vec<u32>,
    no: Vec<u32>,
}

fn llm_error(what: &str, e: impl std::fmt::Display) -> Error {
    Error::Generate(format!("{what}: {e:#}"))
}

/// The GGUF architectures mistralrs 0.8's GGUF loader builds a model for.
const ARCHITECTURES: &[&str] = &["llama", "mistral3", "phi2", "phi3", "starcoder2", "qwen2", "qwen3", "qwen3moe"];

/// Reads the file's `general.architecture` and refuses one mistralrs cannot run, before the
/// load, so the error names the file and the fix instead of a loader's internal message.
pub fn check_architecture(file: &std::path::Path) -> Result<String> {
    let mut reader = std::fs::File::open(file)
        .map(std::io::BufReader::new)
        .map_err(|e| Error::Invalid(format!("{}: {e}", file.display())))?;
    let architecture = crate::model::gguf::read_architecture(&mut reader)
        .map_err(|e| Error::Invalid(format!("{}: not a readable GGUF file ({e}); fetch it again with scripts/setup/fetch-models.sh", file.display())))?
        .map(|s| s.to_ascii_lowercase())
        .ok_or_else(|| Error::Invalid(format!("{}: the GGUF file names no general.architecture", file.display())))?;
    if !ARCHITECTURES.contains(&architecture.as_str()) {
        return Err(Error::Invalid(format!(
            "{}: GGUF architecture `{architecture}` is not a chat model ragbox can run (supported: {}); \
             set generate.model to one of the LLMs `ragbox models list` shows",
            file.display(),
            ARCHITECTURES.join(", ")
        )));
    }
    Ok(architecture)
}

fn role(r: Role) -> TextMessageRole {
    match r {
        Role::System => TextMessageRole::System,
        Role::User => TextMessageRole::User,
        Role::Assistant => TextMessageRole::Assistant,
    }
}

fn builder(messages: &[Message]) -> RequestBuilder {
    messages.iter().fold(RequestBuilder::new(), |b, m| b.add_message(role(m.role), &m.content))
}

impl GgufGenerator {
    /// Loads the model. Must run inside the generation runtime ([`super::runtime`]): mistralrs
    /// spawns its engine onto the current one.
    pub async fn load(options: &LocalOptions) -> Result<GgufGenerator> {
        let dir = options.file.parent().ok_or_else(|| Error::Invalid(format!("{} has no folder", options.file.display())))?;
        let file = options.file.file_name().and_then(|f| f.to_str()).ok_or_else(|| {
            Error::Invalid(format!("{}: the GGUF file name must be UTF-8", options.file.display()))
        })?;
        if !dir.is_dir() {
            // mistralrs treats a model id that is not an existing folder as a hub repository.
            return Err(Error::Invalid(format!("{} is not a folder; refusing to let the model id reach the hub", dir.display())));
        }
        check_architecture(&options.file)?;
        super::kernels::install();
        if options.dequantize {
            // Read by candle's QMatMul when each weight is loaded (per thread, on first use), so
            // it must be set before the load starts; it affects only quantised weights.
            std::env::set_var("CANDLE_DEQUANTIZE_ALL", "1");
        }
        // mistralrs's GgufModelBuilder fixes the activation dtype to "auto", which on a CPU picks
        // BF16 (slow CPU matmuls and attention); this is its build path with f32 instead.
        let loader = GGUFLoaderBuilder::new(
            None,
            None,
            dir.to_string_lossy().into_owned(),
            vec![file.to_string()],
            GGUFSpecificConfig { topology: None },
            false,
            None,
        )
        .build();
        let device = if options.force_cpu {
            candle_core::Device::Cpu
        } else {
            mistralrs::best_device(false).map_err(|e| llm_error("choosing a device", e))?
        };
        let pipeline = loader
            .load_model_from_hf(
                None,
                TokenSource::None,
                &ModelDType::F32,
                &device,
                true,
                DeviceMapSetting::Auto(AutoDeviceMapParams::default_text()),
                None,
                None,
            )
            .map_err(|e| llm_error(&format!("loading {}", options.file.display()), e))?;
        let seqs = std::num::NonZeroUsize::new(options.max_num_seqs.max(1)).expect("at least 1");
        let runner = MistralRsBuilder::new(
            pipeline,
            SchedulerConfig::DefaultScheduler { method: DefaultSchedulerMethod::Fixed(seqs) },
            false,
            None,
        )
        .with_no_prefix_cache(options.prefix_cache == 0)
        .with_prefix_cache_n(options.prefix_cache.max(1))
        .build()
        .await;
        let model = Model::new(runner);
        let model = Arc::new(model);
        let first_tokens = |words: &'static [&'static str]| {
            let model = model.clone();
            async move {
                let mut ids = Vec::new();
                for w in words {
                    let t = model
                        .tokenize(either::Either::Right(w.to_string()), None, false, false, None)
                        .await
                        .map_err(|e| llm_error("tokenizing", e))?;
                    if let Some(&id) = t.first() {
                        if t.len() == 1 && !ids.contains(&id) {
                            ids.push(id);
                        }
                    }
                }
                Ok::<_, Error>(ids)
            }
        };
        let yes = first_tokens(&["yes", "Yes", " yes", " Yes", "YES"]).await?;
        let no = first_tokens(&["no", "No", " no", " No", "NO"]).await?;
        if yes.is_empty() || no.is_empty() {
            return Err(Error::Generate(format!("{}: no single token spells yes/no", options.name)));
        }
        Ok(GgufGenerator { name: options.name.clone(), model, yes, no })
    }

    /// Log-odds of "yes" over "no" as the next token. A logits processor reads the next-token
    /// logits while one token is sampled: an ordinary request, where mistralrs's raw logits
    /// responses refuse to run in a batch larger than one.
    async fn log_odds(&self, messages: &[Message]) -> Result<f32> {
        let slot: Arc<Mutex<Option<f32>>> = Arc::default();
        let (yes, no, out) = (self.yes.clone(), self.no.clone(), slot.clone());
        let read = move |logits: &candle_core::Tensor, _context: &[u32]| -> candle_core::Result<candle_core::Tensor> {
            let v: Vec<f32> = logits.to_dtype(candle_core::DType::F32)?.flatten_all()?.to_vec1()?;
            let lse = |ids: &[u32]| {
                let xs: Vec<f32> = ids.iter().filter_map(|&i| v.get(i as usize).copied()).collect();
                let m = xs.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                m + xs.iter().map(|x| (x - m).exp()).sum::<f32>().ln()
            };
            out.lock().unwrap_or_else(|e| e.into_inner()).get_or_insert(lse(&yes) - lse(&no));
            Ok(logits.clone())
        };
        let request = builder(messages).add_logits_processor(Arc::new(read)).set_sampler_max_len(1).set_deterministic_sampler();
        self.model.send_chat_request(request).await.map_err(|e| llm_error("scoring", e))?;
        let score = slot.lock().unwrap_or_else(|e| e.into_inner()).take();
        score.ok_or_else(|| Error::Generate("the model returned no logits".into()))
    }
}

#[async_trait::async_trait]
impl Generator for GgufGenerator {
    fn model_id(&self) -> &str {
        &self.name
    }

    async fn generate(&self, request: &GenerateRequest, sink: &mut (dyn TokenSink + Send)) -> Result<Generation> {
        let mut streaming = Streaming::new();
        let mut b = builder(&request.messages).set_sampler_max_len(request.max_tokens.max(1));
        if request.temperature > 0.0 {
            b = b.set_sampler_temperature(request.temperature);
        }
        if !request.stop.is_empty() {
            b = b.set_sampler_stop_toks(mistralrs::StopTokens::Seqs(request.stop.clone()));
        }
        let mut stream = self.model.stream_chat_request(b).await.map_err(|e| llm_error("generating", e))?;
        let mut out = Generation { written_by: self.destination(), ..Generation::default() };
        while let Some(response) = stream.next().await {
            match response {
                Response::Chunk(chunk) => {
                    if let Some(usage) = &chunk.usage {
                        out.prompt_tokens = usage.prompt_tokens;
                        out.completion_tokens = usage.completion_tokens;
                    }
                    let mut finished = false;
                    let mut stopped = false;
                    for choice in &chunk.choices {
                        if let Some(text) = &choice.delta.content {
                            stopped = streaming.push(&mut out, text, &request.stop, sink);
                        }
                        finished |= choice.finish_reason.is_some();
                    }
                    if finished && chunk.usage.is_some() {
                        break;
                    }
                    if stopped {
                        // The reply is over: dropping the stream cancels the rest of it.
                        break;
                    }
                    if sink.cancelled() {
                        // Dropping the stream makes mistralrs's next send fail, which cancels
                        // the sequence and frees its slot.
                        break;
                    }
                }
                Response::Done(done) => {
                    out.prompt_tokens = done.usage.prompt_tokens;
                    out.completion_tokens = done.usage.completion_tokens;
                    break;
                }
                Response::InternalError(e) | Response::ValidationError(e) => return Err(llm_error("generating", e)),
                Response::ModelError(e, _) => return Err(llm_error("generating", e)),
                _ => {}
            }
        }
        streaming.finish(&mut out, &request.stop);
        let (prompt_tokens, completion_tokens) = (out.prompt_tokens, out.completion_tokens);
        tracing::debug!(prompt_tokens, completion_tokens, first_token_ms = out.first_token_ms, total_ms = out.total_ms, "generated");
        Ok(out)
    }

    async fn yes_no(&self, conversations: &[Vec<Message>]) -> Result<Vec<f32>> {
        // One after another. mistralrs 0.8.1 batches prompts of equal length, and on SciFact's
        // support pairs a batch next to prefix-cache hits panicked its engine (KV cache "shape
        // mismatch on dim 2"); on two CPU cores a batch saves little over one prompt at a time
        // (prefill already keeps both busy), and a shared query prefix is still served from the
        // prefix cache.
        let mut out = Vec::with_capacity(conversations.len());
        for messages in conversations {
            out.push(self.log_odds(messages).await?);
        }
        Ok(out)
    }
}
