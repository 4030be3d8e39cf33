//! How Karmada names the objects the pipeline creates.

/// FNV-1a, 32 bits: Karmada's hash for Work names and tie-breaks.
pub fn fnv32a(data: &[u8]) -> u32 {
    let mut hash: u32 = 0x811c_9dc5;
    for b in data {
        hash ^= u32::from(*b);
        hash = hash.wrapping_mul(0x0100_0193);
    }
    hash
}

/// apimachinery's `rand.SafeEncodeString`: digits mapped onto letters and
/// digits that cannot spell words.
fn safe_encode(s: &str) -> String {
    const ALPHANUMS: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    s.bytes()
        .map(|b| char::from(ALPHANUMS[usize::from(b) % ALPHANUMS.len()]))
        .collect()
}

/// `<name>-<kind>`, as Karmada names a ResourceBinding.
pub fn binding_name(kind: &str, name: &str) -> String {
    format!("{name}-{}", kind.to_ascii_lowercase())
}

/// `<name>-<hash>`: a Work's name in its execution namespace, unique per
/// template (kind, namespace, name).
pub fn work_name(kind: &str, namespace: &str, name: &str) -> String {
    let hash = fnv32a(format!("{kind}-{namespace}-{name}").as_bytes());
    let prefix: String = name.chars().take(200).collect();
    format!("{prefix}-{}", safe_encode(&hash.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv_matches_the_reference_vectors() {
        assert_eq!(fnv32a(b""), 0x811c9dc5);
        assert_eq!(fnv32a(b"a"), 0xe40c292c);
        assert_eq!(fnv32a(b"foobar"), 0xbf9cf968);
    }

    #[test]
    fn work_names_differ_by_kind_and_namespace() {
        let a = work_name("Deployment", "default", "nginx");
        let b = work_name("Service", "default", "nginx");
        let c = work_name("Deployment", "other", "nginx");
        assert!(a.starts_with("nginx-"));
        assert_ne!(a, b);
        assert_ne!(a, c);
        assert_eq!(a, work_name("Deployment", "default", "nginx"));
        assert_eq!(binding_name("Deployment", "nginx"), "nginx-deployment");
    }
}
