//! Limits per person and per key (`[[quotas]]`): questions per rolling minute (search, ask,
//! chat, the OpenAI-compatible route) and uploads per rolling day. A caller's limit is the most
//! generous among the entries for its groups and `*`; one no entry sets is no limit. The command
//! line and the start-up link have none. Over the limit: 429 with Retry-After, and an audit row
//! (`quota_exceeded`).

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use ragbox_service::config::QuotaRule;
use ragbox_service::{Audience, Caller};

/// What is counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Counted {
    /// A question or a search.
    Question,
    /// An uploaded file.
    Upload,
}

impl Counted {
    fn window(self) -> Duration {
        match self {
            Counted::Question => Duration::from_secs(60),
            Counted::Upload => Duration::from_secs(24 * 60 * 60),
        }
    }

    /// How the limit reads in a message.
    pub fn per(self) -> &'static str {
        match self {
            Counted::Question => "questions per minute",
            Counted::Upload => "uploads per day",
        }
    }
}

/// The rolling windows of every caller that has a limit.
pub struct Quotas {
    rules: Vec<QuotaRule>,
    seen: Mutex<HashMap<(String, Counted), VecDeque<Instant>>>,
}

impl Quotas {
    /// Limits as `[[quotas]]` sets them.
    pub fn new(rules: Vec<QuotaRule>) -> Quotas {
        Quotas { rules, seen: Mutex::default() }
    }

    /// `caller`'s limit of `what`, if any.
    pub fn limit(&self, caller: &Caller, what: Counted) -> Option<u32> {
        caller.identity()?;
        let groups: &[String] = match &caller.audience {
            Audience::Groups(g) => g,
            Audience::Everyone => &[],
        };
        self.rules
            .iter()
            .filter(|r| r.group == "*" || groups.contains(&r.group))
            .filter_map(|r| match what {
                Counted::Question => r.questions_per_minute,
                Counted::Upload => r.uploads_per_day,
            })
            .max()
    }

    /// Counts one `what` for `caller`: `Ok(())` within its limit, else the seconds until it may
    /// try again (the refused attempt is not counted).
    pub fn take(&self, caller: &Caller, what: Counted) -> Result<(), u64> {
        self.take_at(caller, what, Instant::now())
    }

    fn take_at(&self, caller: &Caller, what: Counted, now: Instant) -> Result<(), u64> {
        let (Some(limit), Some(who)) = (self.limit(caller, what), caller.identity()) else { return Ok(()) };
        let window = what.window();
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        let times = seen.entry((who, what)).or_default();
        while times.front().is_some_and(|t| now.saturating_duration_since(*t) >= window) {
            times.pop_front();
        }
        if times.len() >= limit as usize {
            let oldest = times.front().copied().unwrap_or(now);
            return Err(window.saturating_sub(now.saturating_duration_since(oldest)).as_secs().max(1));
        }
        times.push_back(now);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ragbox_service::{KeyRole, Person};

    fn rule(group: &str, q: Option<u32>, u: Option<u32>) -> QuotaRule {
        QuotaRule { group: group.into(), questions_per_minute: q, uploads_per_day: u }
    }

    fn person(groups: &[&str]) -> Caller {
        let groups: Vec<String> = groups.iter().map(|g| g.to_string()).collect();
        Caller::person(Person { subject: "s".into(), issuer: "i".into() }, "p", &groups, "acme", KeyRole::Reader, None)
    }

    #[test]
    fn the_most_generous_group_decides_and_the_window_rolls() {
        let q = Quotas::new(vec![rule("*", Some(2), None), rule("hr", Some(3), Some(1))]);
        assert_eq!(q.limit(&person(&["legal"]), Counted::Question), Some(2));
        assert_eq!(q.limit(&person(&["hr", "legal"]), Counted::Question), Some(3));
        assert_eq!(q.limit(&person(&["legal"]), Counted::Upload), None, "no entry sets it: no limit");
        assert_eq!(q.limit(&Caller::local(), Counted::Question), None, "the command line has none");
        let who = person(&["legal"]);
        let t0 = Instant::now();
        assert!(q.take_at(&who, Counted::Question, t0).is_ok());
        assert!(q.take_at(&who, Counted::Question, t0 + Duration::from_secs(10)).is_ok());
        let wait = q.take_at(&who, Counted::Question, t0 + Duration::from_secs(20)).unwrap_err();
        assert_eq!(wait, 40, "until the oldest counted question is a minute old");
        assert!(q.take_at(&who, Counted::Question, t0 + Duration::from_secs(61)).is_ok(), "the window rolled");
    }
}
