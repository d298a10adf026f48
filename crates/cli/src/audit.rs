//! `ragbox audit [--tenant T] [--person P] [--since WHEN] [--json]` lists the hash-chained audit log;
//! `ragbox audit verify` walks the chain and names the first row that does not fit (exit code 6).

use clap::{Args, Subcommand};

use ragbox_service::{Caller, EventFilter};

use super::{print_json, GlobalArgs};

/// Exit code of `audit verify` when the chain is broken.
pub const EXIT_BROKEN_CHAIN: u8 = 6;

/// Arguments of `audit`.
#[derive(Debug, Args)]
pub struct AuditArgs {
    /// `verify`: check the chain instead of listing rows.
    #[command(subcommand)]
    pub cmd: Option<AuditCmd>,
    /// Only this tenant's rows.
    #[arg(long)]
    pub tenant: Option<String>,
    /// Only the rows of this person (their user name or subject) or key (its name).
    #[arg(long)]
    pub person: Option<String>,
    /// Only rows from this time on: seconds since the epoch, an RFC 3339 date (2026-11-25 or
    /// 2026-11-25T07:00:00Z), or an age such as 30m, 12h, 7d.
    #[arg(long)]
    pub since: Option<String>,
    /// At most this many rows (the newest); 0 for all.
    #[arg(long, default_value_t = 0)]
    pub limit: usize,
}

/// `audit` subcommands.
#[derive(Debug, Subcommand)]
pub enum AuditCmd {
    /// Prove the chain unbroken, or name the first broken row.
    Verify,
}

fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}

/// Days since 1970-01-01 of a civil date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146097 + doe - 719468
}

/// `--since` in ms since the epoch.
pub(crate) fn parse_since(s: &str) -> anyhow::Result<i64> {
    let s = s.trim();
    if let Ok(secs) = s.parse::<i64>() {
        return Ok(secs * 1000);
    }
    if let Some(unit) = s.chars().last().filter(|c| "smhd".contains(*c)) {
        if let Ok(n) = s[..s.len() - 1].parse::<i64>() {
            let secs = match unit {
                's' => n,
                'm' => n * 60,
                'h' => n * 3600,
                _ => n * 86400,
            };
            return Ok(now_ms() - secs * 1000);
        }
    }
    let (date, time) = s.split_once(['T', ' ']).unwrap_or((s, "00:00:00"));
    let parts: Vec<i64> = date.split('-').filter_map(|p| p.parse().ok()).collect();
    let time = time.trim_end_matches('Z');
    let hms: Vec<i64> = time.split(':').filter_map(|p| p.split('.').next()?.parse().ok()).collect();
    match (parts.as_slice(), hms.as_slice()) {
        ([y, m, d], [h, mi, rest @ ..]) if (1..=12).contains(m) && (1..=31).contains(d) => {
            let sec = rest.first().copied().unwrap_or(0);
            Ok(((days_from_civil(*y, *m, *d) * 86400) + h * 3600 + mi * 60 + sec) * 1000)
        }
        _ => anyhow::bail!("--since {s:?}: give seconds since the epoch, a date such as 2026-11-25 or 2026-11-25T07:00:00Z, or an age such as 12h"),
    }
}

/// A time in ms since the epoch as `YYYY-MM-DDTHH:MM:SSZ`.
pub(crate) fn utc(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let (days, rem) = (secs.div_euclid(86400), secs.rem_euclid(86400));
    let z = days + 719468;
    let era = if z >= 0 { z } else { z - 146096 } / 146097;
    let doe = z - era * 146097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z", rem / 3600, rem % 3600 / 60, rem % 60)
}

/// `ragbox audit`: the audit rows, or `verify` the hash chain (exit code 6 when it is broken).
pub fn run(g: &GlobalArgs, args: AuditArgs) -> anyhow::Result<u8> {
    let service = g.service()?;
    let caller = Caller::local();
    if let Some(AuditCmd::Verify) = args.cmd {
        let report = service.verify_audit(&caller)?;
        if g.json {
            print_json(&report)?;
        } else if let Some(b) = &report.broken {
            println!("audit chain BROKEN at row {}: {} ({} rows checked)", b.id, b.reason, report.rows);
        } else {
            let blanked = if report.redacted > 0 { format!(" ({} blanked by retention runs)", report.redacted) } else { String::new() };
            println!("audit chain intact: {} rows{blanked}, head {}", report.rows, report.head);
        }
        return Ok(if report.broken.is_some() { EXIT_BROKEN_CHAIN } else { 0 });
    }
    let since_ms = args.since.as_deref().map(parse_since).transpose()?;
    let filter = EventFilter { tenant: args.tenant.clone(), since_ms, person: args.person.clone(), limit: args.limit };
    let rows = service.audit_events(&caller, &filter)?;
    if g.json {
        for r in &rows {
            print_json(r)?;
        }
        return Ok(0);
    }
    for r in &rows {
        let who = match (r.detail["who"]["person"].as_str(), r.key_id) {
            _ if r.key_name.is_empty() => "-".to_string(),
            (Some(person), _) => format!("{person}@sso"),
            (None, id) => format!("{}#{}", r.key_name, id.map_or("cli".into(), |k| k.to_string())),
        };
        let groups = match r.detail["granted_by"].as_array() {
            Some(g) if !g.is_empty() => format!(" via {}", g.iter().filter_map(|v| v.as_str()).collect::<Vec<_>>().join(",")),
            _ => String::new(),
        };
        let what = match (r.redacted_ms, r.question.is_empty()) {
            (Some(ms), _) => format!(" (blanked by the retention run of {})", utc(ms)),
            (None, true) => String::new(),
            (None, false) => format!(" {:?}", r.question),
        };
        let chunks = if r.chunk_ids.is_empty() { String::new() } else { format!(" chunks {}", r.chunk_ids.iter().map(|c| c.0.to_string()).collect::<Vec<_>>().join(",")) };
        let model = if r.model.is_empty() { String::new() } else { format!(" model {}", r.model) };
        println!("{:>6} {} {:<16} {:<12} {:<14} {}{what}{chunks}{model}{groups}", r.id, utc(r.time_ms), who, if r.tenant.is_empty() { "-" } else { &r.tenant }, r.action, r.outcome);
    }
    if rows.is_empty() {
        println!("no audit rows match");
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn since_and_utc_round_trip() {
        assert_eq!(parse_since("1700000000").unwrap(), 1_700_000_000_000);
        assert_eq!(parse_since("2026-11-25").unwrap(), days_from_civil(2026, 11, 25) * 86_400_000);
        assert_eq!(utc(parse_since("2026-11-25T07:08:09Z").unwrap()), "2026-11-25T07:08:09Z");
        assert_eq!(utc(0), "1970-01-01T00:00:00Z");
        assert!(parse_since("12h").unwrap() < now_ms());
        assert!(parse_since("yesterday").is_err());
    }
}
