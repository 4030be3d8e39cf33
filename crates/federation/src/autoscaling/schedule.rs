//! A CronFederatedHPA rule's schedule: the five fields of a Kubernetes
//! CronJob (minute, hour, day of month, month, day of week; names,
//! ranges, steps and lists) or one of `@yearly`, `@annually`, `@monthly`,
//! `@weekly`, `@daily`, `@hourly`, evaluated in the rule's time zone.
//! That is what Karmada both admits and runs (its webhook's parser admits
//! more, which its scheduler then refuses). croner evaluates it.

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
            "@daily" => "0 0 * * *",
            "@hourly" => "0 * * * *",
            other if other.split_whitespace().count() == 5 => other,
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

    /// The first time after `after` (strictly) the schedule fires.
    pub fn next_after(&self, after: Timestamp) -> Option<Timestamp> {
        let start = after.to_zoned(self.zone.clone());
        self.cron
            .find_next_occurrence(&start, false)
            .ok()
            .map(|z| z.timestamp())
    }
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
