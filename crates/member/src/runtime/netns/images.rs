//! What the netns runtime imitates of well-known images, since it pulls
//! none: the port a stand-in serves when the container declares none
//! (nginx listens on 80, not the stand-in's 8080), the page it answers at
//! `/` (nginx's welcome page, httpd's "It works!", which documentation
//! and clients' own tests look for), and the names an image gives its
//! programs that the host spells otherwise (`python` in the python
//! images is the host's `python3`). Images not named here get the plain
//! stand-in.

use std::str::FromStr;

/// A page a stand-in answers at `/` in place of its JSON identity (which
/// it then carries in an HTML comment, so callers still learn who
/// answered).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Page {
    Nginx,
    Httpd,
}

impl Page {
    /// The page, with `identity` (the stand-in's JSON) in a comment.
    pub fn render(self, identity: &str) -> String {
        let identity = identity.replace("--", "- -");
        match self {
            Page::Nginx => format!(
                "<!DOCTYPE html>\n<html>\n<head>\n<title>Welcome to nginx!</title>\n</head>\n\
                 <body>\n<h1>Welcome to nginx!</h1>\n\
                 <p>If you see this page, the nginx web server is successfully installed and\n\
                 working. Further configuration is required.</p>\n\
                 <p><em>Thank you for using nginx.</em></p>\n\
                 <!-- served by Flotilla's stand-in for the image: {identity} -->\n\
                 </body>\n</html>\n"
            ),
            Page::Httpd => format!(
                "<html><body><h1>It works!</h1>\n\
                 <!-- served by Flotilla's stand-in for the image: {identity} -->\n\
                 </body></html>\n"
            ),
        }
    }
}

impl FromStr for Page {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "nginx" => Ok(Page::Nginx),
            "httpd" => Ok(Page::Httpd),
            other => Err(format!("no page named {other:?} (nginx, httpd)")),
        }
    }
}

impl std::fmt::Display for Page {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Page::Nginx => "nginx",
            Page::Httpd => "httpd",
        })
    }
}

/// What the runtime imitates of one image.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Profile {
    /// The port its server listens on when the container declares none.
    pub default_port: u16,
    /// The page it answers at `/`.
    pub page: Option<Page>,
    /// Programs it has under another name on the host: (in the image, on
    /// the host).
    pub renamed: &'static [(&'static str, &'static str)],
}

const PLAIN: Profile = Profile {
    default_port: 8080,
    page: None,
    renamed: &[],
};

/// The profile of `image` (`nginx`, `nginx:1.27`,
/// `docker.io/library/nginx@sha256:...`, `nginxinc/nginx-unprivileged`).
pub fn profile(image: &str) -> Profile {
    match repository(image) {
        "library/nginx" | "nginx/nginx" => Profile {
            default_port: 80,
            page: Some(Page::Nginx),
            ..PLAIN
        },
        // Built to run without root: 8080.
        "nginxinc/nginx-unprivileged" | "bitnami/nginx" => Profile {
            page: Some(Page::Nginx),
            ..PLAIN
        },
        "library/httpd" => Profile {
            default_port: 80,
            page: Some(Page::Httpd),
            ..PLAIN
        },
        "library/python" | "bitnami/python" => Profile {
            renamed: &[("python", "python3"), ("pip", "pip3")],
            ..PLAIN
        },
        _ => PLAIN,
    }
}

/// The repository `image` names, without its registry, tag or digest,
/// with Docker Hub's `library/` for a bare name.
fn repository(image: &str) -> &str {
    let image = image.split_once('@').map_or(image, |(name, _)| name);
    // A tag is after the last colon, unless that colon is a registry's port.
    let image = match image.rsplit_once(':') {
        Some((name, tag)) if !tag.contains('/') => name,
        _ => image,
    };
    let (first, rest) = match image.split_once('/') {
        Some((first, rest)) => (first, Some(rest)),
        None => (image, None),
    };
    // The first part is a registry when it looks like a host.
    let path = match rest {
        Some(rest) if first.contains('.') || first.contains(':') || first == "localhost" => rest,
        _ => image,
    };
    match path {
        "" => path,
        p if !p.contains('/') => match p {
            "nginx" => "library/nginx",
            "httpd" => "library/httpd",
            "python" => "library/python",
            _ => p,
        },
        p => p,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repositories_are_told_apart_from_registries_tags_and_digests() {
        for (image, repo) in [
            ("nginx", "library/nginx"),
            ("nginx:1.27", "library/nginx"),
            ("docker.io/library/nginx:1.27-alpine", "library/nginx"),
            ("mirror.gcr.io/library/nginx@sha256:abc", "library/nginx"),
            ("localhost:5000/nginx:1", "library/nginx"),
            (
                "nginxinc/nginx-unprivileged:stable-alpine",
                "nginxinc/nginx-unprivileged",
            ),
            ("quay.io/submariner/nettest", "submariner/nettest"),
            ("example/web:1.0", "example/web"),
            ("busybox", "busybox"),
        ] {
            assert_eq!(repository(image), repo, "{image}");
        }
    }

    #[test]
    fn well_known_images_listen_where_they_would_and_others_on_8080() {
        assert_eq!(profile("nginx:1.27").default_port, 80);
        assert_eq!(profile("nginx").page, Some(Page::Nginx));
        let unprivileged = profile("nginxinc/nginx-unprivileged:stable-alpine");
        assert_eq!(
            (unprivileged.default_port, unprivileged.page),
            (8080, Some(Page::Nginx))
        );
        assert_eq!(profile("httpd:2.4").page, Some(Page::Httpd));
        assert_eq!(profile("python:3.12").renamed[0], ("python", "python3"));
        assert_eq!(profile("example/payment-api:1.0"), PLAIN);
        assert_eq!(profile("registry.example.com/team/nginx"), PLAIN);
    }

    #[test]
    fn a_page_carries_the_identity_in_a_comment_that_cannot_end_early() {
        let page = Page::Nginx.render(r#"{"pod":"web-1","path":"/--> x"}"#);
        assert!(page.contains("<h1>Welcome to nginx!</h1>"));
        assert!(page.contains(r#""pod":"web-1""#));
        assert_eq!(page.matches("-->").count(), 1, "{page}");
        assert_eq!("nginx".parse::<Page>(), Ok(Page::Nginx));
        assert_eq!(Page::Httpd.to_string().parse::<Page>(), Ok(Page::Httpd));
    }
}
