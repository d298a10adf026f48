//! `ragbox feedback ANSWER_ID up|down [--comment TEXT]`: stores a rating of an answer for the
//! feedback loop. The answer id is printed after every answer and is `answer_id` in `--json`.

use clap::Args;

use ragbox_service::{Caller, Rating};

use super::{print_json, GlobalArgs};

/// Arguments of `feedback`.
#[derive(Debug, Args)]
pub struct FeedbackArgs {
    /// The answer's id (printed after it; `answer_id` in `--json`).
    pub answer_id: i64,
    /// `up` or `down`.
    pub rating: Rating,
    /// Why, in a few words.
    #[arg(long)]
    pub comment: Option<String>,
}

/// `ragbox feedback`: an answer rated up or down.
pub fn run(g: &GlobalArgs, args: FeedbackArgs) -> anyhow::Result<u8> {
    let service = g.service()?;
    let id = service.feedback(&Caller::local(), None, args.answer_id, args.rating, args.comment.as_deref())?;
    if g.json {
        print_json(&serde_json::json!({ "feedback_id": id, "answer_id": args.answer_id, "rating": args.rating.to_string() }))?;
    } else {
        println!("recorded {} for answer {} (feedback {id})", args.rating, args.answer_id);
    }
    Ok(0)
}
