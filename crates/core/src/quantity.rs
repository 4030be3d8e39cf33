//! Kubernetes resource quantities ("500m", "2", "16Gi", "1e3") as numbers:
//! CPU in millicores, everything else in base units.

/// The value of a quantity in base units, or `None` if it does not parse.
pub fn parse(q: &str) -> Option<f64> {
    let q = q.trim();
    let split = q
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-'))
        .unwrap_or(q.len());
    let (number, suffix) = q.split_at(split);
    let number: f64 = number.parse().ok()?;
    let factor = match suffix {
        "" => 1.0,
        "n" => 1e-9,
        "u" => 1e-6,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "Ki" => 1024.0,
        "Mi" => 1024.0_f64.powi(2),
        "Gi" => 1024.0_f64.powi(3),
        "Ti" => 1024.0_f64.powi(4),
        "Pi" => 1024.0_f64.powi(5),
        "Ei" => 1024.0_f64.powi(6),
        s if s.starts_with(['e', 'E']) => 10f64.powi(s[1..].parse().ok()?),
        _ => return None,
    };
    Some(number * factor)
}

/// CPU in millicores, rounded up as the scheduler does.
pub fn millicores(q: &str) -> Option<i64> {
    // Through whole nanos first: "9m" parses to 0.009000000000000001,
    // which must not round up to 10m.
    parse(q).map(|v| ((v * 1e9).round() / 1e6).ceil() as i64)
}

/// A whole-unit quantity (bytes, pods), rounded up.
pub fn units(q: &str) -> Option<i64> {
    parse(q).map(|v| v.ceil() as i64)
}

/// Formats millicores the way the API prints them ("1500m", "2").
pub fn format_millicores(m: i64) -> String {
    if m % 1000 == 0 {
        (m / 1000).to_string()
    } else {
        format!("{m}m")
    }
}

/// Formats bytes in the largest binary unit that divides them ("16Gi").
pub fn format_bytes(b: i64) -> String {
    for (suffix, factor) in [
        ("Ti", 1i64 << 40),
        ("Gi", 1 << 30),
        ("Mi", 1 << 20),
        ("Ki", 1 << 10),
    ] {
        if b != 0 && b % factor == 0 {
            return format!("{}{suffix}", b / factor);
        }
    }
    b.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_upstream_forms() {
        assert_eq!(millicores("500m"), Some(500));
        assert_eq!(millicores("2"), Some(2000));
        assert_eq!(millicores("0.1"), Some(100));
        assert_eq!(units("16Gi"), Some(16 << 30));
        assert_eq!(units("1k"), Some(1000));
        assert_eq!(units("1e3"), Some(1000));
        assert_eq!(units("128974848"), Some(128_974_848));
        assert_eq!(parse("12Qi"), None);
        assert_eq!(parse(""), None);
    }

    #[test]
    fn formats_round_trip() {
        assert_eq!(format_millicores(1500), "1500m");
        assert_eq!(format_millicores(4000), "4");
        assert_eq!(format_bytes(16 << 30), "16Gi");
        assert_eq!(format_bytes(1536 << 20), "1536Mi");
    }
}
