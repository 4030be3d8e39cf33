//! Go's duration strings, as Kubernetes objects write them (`300s`,
//! `5m`, `1h30m`, `1.5h`), and the whole seconds v1beta2 writes instead.

use std::time::Duration;

use serde_json::Value;

/// A duration written as seconds (a number) or as Go writes it.
pub fn parse(v: &Value) -> Option<Duration> {
    match v {
        Value::Number(n) => n.as_u64().map(Duration::from_secs),
        Value::String(s) => parse_go(s),
        _ => None,
    }
}

/// Go's `time.ParseDuration` for the units objects use (h, m, s, ms).
pub fn parse_go(s: &str) -> Option<Duration> {
    let mut total = 0.0f64;
    let mut number = String::new();
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c.is_ascii_digit() || c == '.' {
            number.push(c);
            continue;
        }
        let mut unit = c.to_string();
        if c == 'm' && chars.peek() == Some(&'s') {
            unit.push('s');
            chars.next();
        }
        let n: f64 = number.parse().ok()?;
        number.clear();
        total += n * match unit.as_str() {
            "h" => 3600.0,
            "m" => 60.0,
            "s" => 1.0,
            "ms" => 0.001,
            _ => return None,
        };
    }
    if !number.is_empty() {
        return None;
    }
    // Too long a duration is no duration (rather than a panic).
    Duration::try_from_secs_f64(total).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations_and_seconds() {
        assert_eq!(parse_go("1h30m"), Some(Duration::from_secs(5400)));
        assert_eq!(parse_go("1.5h"), Some(Duration::from_secs(5400)));
        assert_eq!(parse_go("300ms"), Some(Duration::from_millis(300)));
        assert_eq!(parse(&serde_json::json!(42)), Some(Duration::from_secs(42)));
        assert_eq!(parse_go("5 minutes"), None);
        assert_eq!(parse_go("10"), None);
        assert_eq!(parse_go("99999999999999999999999999h"), None);
    }
}
