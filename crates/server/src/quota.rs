//! Limits per person and per key (`[[quotas]]`): questions per rolling minute (search, ask,
//! chat, the OpenAI-compatible route) and uploads per rolling day. A caller's limit is the most
//! generous among the entries for its groups and `*`; one no entry sets is no limit. The command
//! line and the start-up link have none. Over the limit: 429 with Retry-After, and an audit row
//! (`quota_exceeded`). The requests are counted in the catalog (`Service::take_quota`), so
//! several nodes over one shared catalog give a person their quota once.

use std::time::Duration;

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
    /// The rolling window the limit is over.
    pub fn window(self) -> Duration {
        match self {
            Counted::Question => Duration::from_secs(60),
            Counted::Upload => Duration::from_secs(24 * 60 * 60),
        }
    }

    /// Its name in the catalog's counters.
    pub fn name(self) -> &'static str {
        match self {
            Counted::Question => "question",
            Counted::Upload => "upload",
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

/// The limits of `[[quotas]]`.
pub struct Quotas {
    rules: Vec<QuotaRule>,
}

impl Quotas {
    /// Limits as `[[quotas]]` sets them.
    pub fn new(rules: Vec<QuotaRule>) -> Quotas {
        Quotas { rules }
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

    /// `caller`'s limit of `what` and the identity it is counted under; `None`: no limit.
    pub fn applies(&self, caller: &Caller, what: Counted) -> Option<(u32, String)> {
        Some((self.limit(caller, what)?, caller.identity()?))
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
    fn the_most_generous_group_decides() {
        let q = Quotas::new(vec![rule("*", Some(2), None), rule("hr", Some(3), Some(1))]);
        assert_eq!(q.limit(&person(&["legal"]), Counted::Question), Some(2));
        assert_eq!(q.limit(&person(&["hr", "legal"]), Counted::Question), Some(3));
        assert_eq!(q.limit(&person(&["legal"]), Counted::Upload), None, "no entry sets it: no limit");
        assert_eq!(q.limit(&Caller::local(), Counted::Question), None, "the command line has none");
        let (limit, who) = q.applies(&person(&["legal"]), Counted::Question).unwrap();
        assert_eq!((limit, who.as_str()), (2, "person:i|s"), "counted under the person's identity (the window: store::quota)");
        assert!(q.applies(&Caller::local(), Counted::Question).is_none());
    }
}
