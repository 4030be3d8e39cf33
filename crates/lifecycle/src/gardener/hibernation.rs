//! A Shoot's hibernation schedules (`spec.hibernation.schedules`: cron
//! `start` and `end` in a `location`), as Gardener's hibernation
//! controller reads them: when a start fires the Shoot is hibernated
//! (`spec.hibernation.enabled: true`), when an end fires it is woken; the
//! last trigger is recorded in `status.lastHibernationTriggerTime`, so a
//! trigger acts once and a change made by hand in between stands.

use flotilla_core::schedule::Schedule;
use jiff::Timestamp;
use serde_json::Value;

/// What the schedules say: whether a trigger fired since the last one
/// acted on (hibernate: true, wake: false), and when the next fires.
#[derive(Debug, Default, PartialEq)]
pub struct Decision {
    pub enabled: Option<bool>,
    pub next: Option<Timestamp>,
}

/// Why a schedule cannot be read: the field and the cause.
pub type Invalid = (String, String);

/// One schedule's start and end, where given.
pub type Window = (Option<Schedule>, Option<Schedule>);

fn schedules(shoot: &Value) -> Vec<&Value> {
    shoot["spec"]["hibernation"]["schedules"]
        .as_array()
        .map(|l| l.iter().collect())
        .unwrap_or_default()
}

/// Each schedule's start and end, parsed in its location (UTC when
/// none), with `(field, cause)` for those that cannot be.
pub fn parse(shoot: &Value) -> Result<Vec<Window>, Vec<Invalid>> {
    let mut parsed = Vec::new();
    let mut invalid = Vec::new();
    for (i, s) in schedules(shoot).into_iter().enumerate() {
        let location = s["location"].as_str().unwrap_or("UTC");
        let mut one = |which: &str| {
            let expression = s[which].as_str()?;
            match Schedule::parse(expression, Some(location)) {
                Ok(schedule) => Some(schedule),
                Err(error) => {
                    let field = match error {
                        flotilla_core::schedule::ScheduleError::Zone(_) => "location",
                        _ => which,
                    };
                    invalid.push((
                        format!("spec.hibernation.schedules[{i}].{field}"),
                        format!(
                            "Invalid value: {:?}: {error}",
                            s[field].as_str().unwrap_or_default()
                        ),
                    ));
                    None
                }
            }
        };
        let start = one("start");
        let end = one("end");
        if s["start"].is_null() && s["end"].is_null() {
            invalid.push((
                format!("spec.hibernation.schedules[{i}]"),
                "Required value: either start or end has to be provided".into(),
            ));
        }
        parsed.push((start, end));
    }
    if invalid.is_empty() {
        Ok(parsed)
    } else {
        Err(invalid)
    }
}

/// What the schedules of `shoot` say at `now`, triggers after `since`
/// (the last one acted on, or the Shoot's creation) counting.
pub fn decide(shoot: &Value, since: Timestamp, now: Timestamp) -> Decision {
    let Ok(parsed) = parse(shoot) else {
        return Decision::default();
    };
    let mut latest: Option<(Timestamp, bool)> = None;
    let mut next: Option<Timestamp> = None;
    for (start, end) in &parsed {
        for (schedule, hibernate) in [(start, true), (end, false)] {
            let Some(schedule) = schedule else {
                continue;
            };
            if let Some(at) = schedule.latest_at_or_before(now)
                && at > since
                && latest.is_none_or(|(l, _)| at > l)
            {
                latest = Some((at, hibernate));
            }
            if let Some(at) = schedule.next_after(now) {
                next = Some(next.map_or(at, |n| n.min(at)));
            }
        }
    }
    Decision {
        enabled: latest.map(|(_, hibernate)| hibernate),
        next,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn shoot(schedules: Value) -> Value {
        json!({"spec": {"hibernation": {"schedules": schedules}}})
    }

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn the_latest_trigger_since_the_last_decides() {
        // Weekdays 20:00 to 08:00, Berlin time (UTC+1 in December).
        let s = shoot(
            json!([{"start": "00 20 * * 1,2,3,4,5", "end": "00 08 * * 1,2,3,4,5", "location": "Europe/Berlin"}]),
        );
        // Monday 2026-12-07 21:00 Berlin: the start at 20:00 fired.
        let d = decide(&s, at("2026-12-07T12:00:00Z"), at("2026-12-07T20:00:00Z"));
        assert_eq!(d.enabled, Some(true));
        assert_eq!(d.next, Some(at("2026-12-08T07:00:00Z")));
        // Acted on at 20:00: nothing new until the end fires.
        let d = decide(&s, at("2026-12-07T19:00:00Z"), at("2026-12-08T06:59:00Z"));
        assert_eq!(d.enabled, None);
        let d = decide(&s, at("2026-12-07T19:00:00Z"), at("2026-12-08T07:00:30Z"));
        assert_eq!(d.enabled, Some(false));
    }

    #[test]
    fn schedules_that_cannot_be_read_are_named() {
        let s = shoot(
            json!([{"start": "every evening"}, {"end": "0 8 * * *", "location": "Mars/Olympus"}, {}]),
        );
        let invalid = parse(&s).unwrap_err();
        let fields: Vec<&str> = invalid.iter().map(|(f, _)| f.as_str()).collect();
        assert_eq!(
            fields,
            [
                "spec.hibernation.schedules[0].start",
                "spec.hibernation.schedules[1].location",
                "spec.hibernation.schedules[2]"
            ]
        );
        assert_eq!(
            decide(&s, at("2026-01-01T00:00:00Z"), at("2026-12-01T00:00:00Z")),
            Decision::default()
        );
    }
}
