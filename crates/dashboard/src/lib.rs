//! The fleet's web dashboard, as the hub serves it at `/dashboard/`: an
//! HTML page, ES modules and a stylesheet, embedded in the binary (no
//! build step, nothing fetched from elsewhere). The pages hold no data:
//! the browser reads the hub's own API with the bearer token its user
//! signs in with, so every view is what that user may see under RBAC and
//! every request is audited under their name. No cookies are set, so no
//! request can be forged from another site; the Content-Security-Policy
//! allows scripts, styles and connections to this origin only, and the
//! modules write text nodes only (never HTML), so a name or message
//! holding markup shows as text.

#![forbid(unsafe_code)]

/// Where the hub serves the dashboard.
pub const PREFIX: &str = "/dashboard/";

/// One file of the dashboard.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Asset {
    pub content_type: &'static str,
    pub body: &'static [u8],
}

/// What every answer of the dashboard carries: the Content-Security-Policy
/// (this origin only, no inline script or style, no framing), no MIME
/// sniffing, no referrer, and never cached stale after an upgrade.
pub const HEADERS: &[(&str, &str)] = &[
    (
        "content-security-policy",
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    ),
    ("x-content-type-options", "nosniff"),
    ("referrer-policy", "no-referrer"),
    ("x-frame-options", "DENY"),
    ("cache-control", "no-cache"),
];

const FILES: &[(&str, &str, &[u8])] = &[
    (
        "index.html",
        "text/html; charset=utf-8",
        include_bytes!("../assets/index.html"),
    ),
    (
        "app.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../assets/app.js"),
    ),
    (
        "api.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../assets/api.js"),
    ),
    (
        "ui.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../assets/ui.js"),
    ),
    (
        "fleet.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../assets/fleet.js"),
    ),
    (
        "workloads.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../assets/workloads.js"),
    ),
    (
        "member.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../assets/member.js"),
    ),
    (
        "more.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../assets/more.js"),
    ),
    (
        "style.css",
        "text/css; charset=utf-8",
        include_bytes!("../assets/style.css"),
    ),
];

/// The file at `path` (a request's path, `/dashboard/...`); the page for
/// the dashboard's root. `None` for anything else.
pub fn asset(path: &str) -> Option<Asset> {
    let name = path.strip_prefix(PREFIX)?;
    let name = if name.is_empty() { "index.html" } else { name };
    FILES
        .iter()
        .find(|(n, _, _)| *n == name)
        .map(|(_, content_type, body)| Asset { content_type, body })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_and_its_modules_are_served_and_nothing_else() {
        let page = asset("/dashboard/").expect("the page");
        assert!(page.content_type.starts_with("text/html"));
        assert_eq!(asset("/dashboard/index.html"), Some(page));
        for module in [
            "app.js",
            "api.js",
            "ui.js",
            "fleet.js",
            "workloads.js",
            "member.js",
            "more.js",
        ] {
            let a = asset(&format!("/dashboard/{module}")).expect(module);
            assert!(a.content_type.starts_with("text/javascript"));
        }
        assert!(asset("/dashboard/../etc/passwd").is_none());
        assert!(asset("/dashboard/nope.js").is_none());
        assert!(asset("/api/v1/pods").is_none());
    }

    #[test]
    fn nothing_runs_inline_or_writes_markup() {
        let csp = HEADERS
            .iter()
            .find(|(h, _)| *h == "content-security-policy")
            .map(|(_, v)| *v)
            .unwrap_or_default();
        assert!(!csp.contains("unsafe"), "{csp}");
        let page = std::str::from_utf8(asset("/dashboard/").map(|a| a.body).unwrap_or_default())
            .unwrap_or_default();
        assert!(!page.contains("<script>"), "no inline script");
        assert!(!page.contains("style="), "no inline style");
        for (name, _, body) in FILES {
            let text = std::str::from_utf8(body).unwrap_or_default();
            for sink in [
                "innerHTML",
                "outerHTML",
                "insertAdjacentHTML",
                "document.write",
                "eval(",
            ] {
                assert!(!text.contains(sink), "{name} uses {sink}");
            }
        }
    }
}
