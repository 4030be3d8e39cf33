//! Cron schedules as a CronJob reads them (and Karmada's CronFederatedHPA
//! rules): the five fields (minute, hour, day of month, month, day of
//! week; numbers, names, ranges, steps and lists) or one of `@yearly`,
//! `@annually`, `@monthly`, `@weekly`, `@daily`, `@midnight`, `@hourly`,
//! evaluated in a time zone. That is what upstream's parser
//! (robfig/cron's standard one) reads; croner, which evaluates it, would
//! read Quartz's extensions too, so the fields are checked first.

use croner::Cron;
use croner::parser::{CronParser, Seconds};
use k8s_openapi::jiff::Timestamp;
use k8s_openapi::jiff::tz::TimeZone;

#[derive(Debug)]
pub struct Schedule {
    cron: Cron,
    zone: TimeZone,
}

#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum ScheduleError {
    #[error("invalid cron format")]
    Format,
    #[error("unknown time zone {0}")]
    Zone(String),
}

impl Schedule {
    /// `expression` in `zone` (an IANA name; this process's zone when
    /// `None`).
    pub fn parse(expression: &str, zone: Option<&str>) -> Result<Schedule, ScheduleError> {
        let expression = expression.trim();
        let expanded = match expression {
            "@yearly" | "@annually" => "0 0 1 1 *",
            "@monthly" => "0 0 1 * *",
            "@weekly" => "0 0 * * 0",
            "@daily" | "@midnight" => "0 0 * * *",
            "@hourly" => "0 * * * *",
            other if other.split_whitespace().count() == 5 && standard(other) => other,
            _ => return Err(ScheduleError::Format),
        };
        let cron = CronParser::builder()
            .seconds(Seconds::Disallowed)
            .build()
            .parse(expanded)
            .map_err(|_| ScheduleError::Format)?;
        let zone = match zone {
            None => TimeZone::system(),
            // Go's time.LoadLocation: "" and "UTC" are UTC, "Local" ours.
            Some("") | Some("UTC") => TimeZone::UTC,
            Some("Local") => TimeZone::system(),
            Some(name) => TimeZone::get(name).map_err(|_| ScheduleError::Zone(name.to_string()))?,
        };
        Ok(Schedule { cron, zone })
    }

    /// The last time at or before `at` the schedule fired.
    pub fn latest_at_or_before(&self, at: Timestamp) -> Option<Timestamp> {
        let start = at.to_zoned(self.zone.clone());
        self.cron
            .find_previous_occurrence(&start, true)
            .ok()
            .map(|z| z.timestamp())
    }

    /// `t` in RFC 3339 with the schedule's zone's offset, as Go's
    /// `t.In(zone).Format(time.RFC3339)` writes it (`Z` for no offset).
    pub fn rfc3339_in_zone(&self, t: Timestamp) -> String {
        let t = Timestamp::from_second(t.as_second()).unwrap_or(t);
        let offset = self.zone.to_offset(t);
        if offset.seconds() == 0 {
            t.to_string()
        } else {
            t.display_with_offset(offset).to_string()
        }
    }

    /// The first time after `after` (strictly) the schedule fires.
    pub fn next_after(&self, after: Timestamp) -> Option<Timestamp> {
        let start = after.to_zoned(self.zone.clone());
        self.cron
            .find_next_occurrence(&start, false)
            .ok()
            .map(|z| z.timestamp())
    }
}

/// Whether the five fields use only a CronJob's syntax: numbers, `*`,
/// `?`, ranges, steps, lists, and month and weekday names where they
/// belong. croner also reads Quartz's `L`, `W`, `#` and a leading `+`;
/// Karmada's scheduler does not run them, so neither is admitted here.
fn standard(expression: &str) -> bool {
    const MONTHS: [&str; 12] = [
        "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC",
    ];
    const DAYS: [&str; 7] = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];
    expression.split_whitespace().enumerate().all(|(i, field)| {
        field.split([',', '-', '/']).all(|token| match token {
            "*" | "?" => true,
            t if !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()) => true,
            t => {
                let names: &[&str] = match i {
                    3 => &MONTHS,
                    4 => &DAYS,
                    _ => &[],
                };
                names.iter().any(|n| n.eq_ignore_ascii_case(t))
            }
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn five_fields_and_descriptors_in_their_zone() {
        let every = Schedule::parse("*/1 * * * *", Some("UTC")).unwrap();
        assert_eq!(
            every.next_after(at("2026-12-01T19:30:00Z")),
            Some(at("2026-12-01T19:31:00Z"))
        );
        let daily = Schedule::parse("@daily", Some("Asia/Shanghai")).unwrap();
        // Midnight in Shanghai is 16:00 UTC.
        assert_eq!(
            daily.next_after(at("2026-12-01T10:00:00Z")),
            Some(at("2026-12-01T16:00:00Z"))
        );
        assert_eq!(
            daily.latest_at_or_before(at("2026-12-01T10:00:00Z")),
            Some(at("2026-11-30T16:00:00Z"))
        );
        assert_eq!(
            daily.rfc3339_in_zone(at("2026-11-30T16:00:00Z")),
            "2026-12-01T00:00:00+08:00"
        );
        assert_eq!(
            every.rfc3339_in_zone(at("2026-12-01T19:31:00Z")),
            "2026-12-01T19:31:00Z"
        );
        let weekdays = Schedule::parse("30 9 * * MON-FRI", Some("UTC")).unwrap();
        // 2026-12-05 is a Saturday.
        assert_eq!(
            weekdays.next_after(at("2026-12-04T10:00:00Z")),
            Some(at("2026-12-07T09:30:00Z"))
        );
    }

    #[test]
    fn what_karmada_refuses_is_refused() {
        for bad in [
            "* * * * * *",
            "@every 5m",
            "TZ=UTC * * * * *",
            "61 * * * *",
            "",
            "nonsense",
        ] {
            assert_eq!(
                Schedule::parse(bad, Some("UTC")).err(),
                Some(ScheduleError::Format),
                "{bad}"
            );
        }
        assert_eq!(
            Schedule::parse("* * * * *", Some("Mars/Olympus")).err(),
            Some(ScheduleError::Zone("Mars/Olympus".into()))
        );
    }
}
