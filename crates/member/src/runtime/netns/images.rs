//! What the netns runtime imitates of well-known images, since it pulls
//! none: the port a stand-in serves when the container declares none
//! (nginx listens on 80, not the stand-in's 8080), the page it answers at
//! `/` (nginx's welcome page, httpd's "It works!", which documentation
//! and clients' own tests look for), the names an image gives its
//! programs that the host spells otherwise (`python` in the python
//! images is the host's `python3`), and, for the base images whose
//! programs the host has (busybox, alpine, debian, python, curl...),
//! what the image runs when the pod names no command: its ENTRYPOINT and
//! CMD, so that `kubectl run -it --image=busybox -- sh` and `kubectl
//! debug -it --image=busybox` get a shell. Images not named here get the
//! plain stand-in.

use std::str::FromStr;

/// A page a stand-in answers at `/` in place of its JSON identity (which
/// it then carries in an HTML comment, so callers still learn who
/// answered).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Page {
    Nginx,
    Httpd,
    /// The HorizontalPodAutoscaler walkthrough's php-apache: its
    /// index.php spends CPU on every request, then says `OK!`.
    HpaExample,
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
            Page::HpaExample => "OK!".into(),
        }
    }

    /// The work the image's page does before it answers (the stand-in
    /// does it too, so the pod's CPU follows its load).
    pub fn work(self) {
        if self == Page::HpaExample {
            // hpa-example's index.php: a million square roots.
            let mut x = 0.0001f64;
            for _ in 0..=1_000_000 {
                x += std::hint::black_box(x).sqrt();
            }
            std::hint::black_box(x);
        }
    }
}

impl Page {
    /// Where the image's server reads its files: a volume mounted there
    /// is served as the server would serve it (hpa-example's page is a
    /// program, not a file).
    pub fn docroot(self) -> Option<&'static str> {
        match self {
            Page::Nginx => Some("/usr/share/nginx/html"),
            Page::Httpd => Some("/usr/local/apache2/htdocs"),
            Page::HpaExample => None,
        }
    }

    /// The server's page for an error status (`404 Not Found`).
    pub fn error(self, status: &str) -> String {
        match self {
            Page::Nginx => format!(
                "<html>\n<head><title>{status}</title></head>\n<body>\n\
                 <center><h1>{status}</h1></center>\n<hr><center>nginx</center>\n\
                 </body>\n</html>\n"
            ),
            Page::Httpd | Page::HpaExample => format!(
                "<!DOCTYPE HTML PUBLIC \"-//IETF//DTD HTML 2.0//EN\">\n<html><head>\n\
                 <title>{status}</title>\n</head><body>\n<h1>{}</h1>\n</body></html>\n",
                status.split_once(' ').map_or(status, |(_, text)| text)
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
            "hpa-example" => Ok(Page::HpaExample),
            other => Err(format!(
                "no page named {other:?} (nginx, httpd, hpa-example)"
            )),
        }
    }
}

impl std::fmt::Display for Page {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Page::Nginx => "nginx",
            Page::Httpd => "httpd",
            Page::HpaExample => "hpa-example",
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
    /// What it runs when the pod names no command; `None`: an
    /// application whose program the host lacks, imitated by the stand-in.
    pub process: Option<ImageProcess>,
    /// Programs of the image the host lacks that Flotilla imitates: (the
    /// program as the image names it, the hidden `flotilla` subcommand
    /// that runs in its place).
    pub imitated: &'static [(&'static str, &'static str)],
}

/// An image's ENTRYPOINT and CMD.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ImageProcess {
    pub entrypoint: &'static [&'static str],
    pub cmd: &'static [&'static str],
    /// The entrypoint is a script that runs its first argument when that
    /// names a program and puts the entrypoint's program before the
    /// arguments otherwise (the `docker-entrypoint.sh` of curlimages/curl
    /// and of the bash image).
    pub runs_programs: bool,
}

impl ImageProcess {
    /// What a container of this image runs given `args` and no command:
    /// as Kubernetes, the ENTRYPOINT followed by `args` in place of the
    /// CMD (the CMD when `args` is empty). `is_program` says whether a
    /// name is a program the container can run.
    pub fn argv(&self, args: &[String], is_program: impl Fn(&str) -> bool) -> Vec<String> {
        let args: Vec<String> = if args.is_empty() {
            self.cmd.iter().map(|a| a.to_string()).collect()
        } else {
            args.to_vec()
        };
        if self.runs_programs {
            let first = args.first().map(String::as_str);
            if first.is_some_and(|a| !a.starts_with('-') && is_program(a)) {
                return args;
            }
        }
        self.entrypoint
            .iter()
            .map(|a| a.to_string())
            .chain(args)
            .collect()
    }
}

const PLAIN: Profile = Profile {
    default_port: 8080,
    page: None,
    renamed: &[],
    process: None,
    imitated: &[],
};

/// A base image whose CMD is a shell or another program of the host's.
const fn runs(cmd: &'static [&'static str]) -> Profile {
    Profile {
        process: Some(ImageProcess {
            entrypoint: &[],
            cmd,
            runs_programs: false,
        }),
        ..PLAIN
    }
}

/// The profile of `image` (`nginx`, `nginx:1.27`,
/// `docker.io/library/nginx@sha256:...`, `nginxinc/nginx-unprivileged`).
pub fn profile(image: &str) -> Profile {
    match repository(image) {
        // The Kubernetes tutorials' nginx-slim, from every registry it had.
        "library/nginx" | "nginx/nginx" | "nginx-slim" | "google_containers/nginx-slim" => {
            Profile {
                default_port: 80,
                page: Some(Page::Nginx),
                ..PLAIN
            }
        }
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
        // The HPA walkthrough's php-apache (Apache on port 80).
        "hpa-example" | "google_containers/hpa-example" => Profile {
            default_port: 80,
            page: Some(Page::HpaExample),
            ..PLAIN
        },
        "library/python" | "bitnami/python" => Profile {
            renamed: &[("python", "python3"), ("pip", "pip3")],
            ..runs(&["python3"])
        },
        "library/busybox" | "google-containers/busybox" => runs(&["sh"]),
        "library/alpine" => runs(&["/bin/sh"]),
        "library/debian" | "library/ubuntu" | "library/fedora" => runs(&["bash"]),
        // Their entrypoint scripts run a program named first, else theirs.
        "curlimages/curl" => Profile {
            process: Some(ImageProcess {
                entrypoint: &["curl"],
                cmd: &["curl"],
                runs_programs: true,
            }),
            ..PLAIN
        },
        "library/bash" => Profile {
            process: Some(ImageProcess {
                entrypoint: &["bash"],
                cmd: &["bash"],
                runs_programs: true,
            }),
            ..PLAIN
        },
        "submariner/nettest" => runs(&["/bin/bash", "-l"]),
        // The Kubernetes test image: its entrypoint is agnhost itself.
        "e2e-test-images/agnhost" => Profile {
            process: Some(ImageProcess {
                entrypoint: &["/agnhost"],
                cmd: &[],
                runs_programs: false,
            }),
            imitated: &[("/agnhost", "__agnhost"), ("agnhost", "__agnhost")],
            ..PLAIN
        },
        // zsh where the host has it, bash where not.
        "nicolaka/netshoot" => Profile {
            renamed: &[("zsh", "bash")],
            ..runs(&["zsh"])
        },
        _ => PLAIN,
    }
}

/// The official images named in [`profile`].
const OFFICIAL: &[&str] = &[
    "library/nginx",
    "library/httpd",
    "library/python",
    "library/busybox",
    "library/alpine",
    "library/debian",
    "library/ubuntu",
    "library/fedora",
    "library/bash",
];

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
        // Docker Hub's official images: `library/` before a bare name.
        p if !p.contains('/') => OFFICIAL
            .iter()
            .find(|o| o.strip_prefix("library/") == Some(p))
            .copied()
            .unwrap_or(p),
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
            ("busybox", "library/busybox"),
            ("registry.k8s.io/busybox:1.28", "library/busybox"),
            (
                "gcr.io/google-containers/busybox",
                "google-containers/busybox",
            ),
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
    fn base_images_run_their_entrypoint_with_the_pods_args_in_place_of_their_cmd() {
        let host = |p: &str| ["sh", "curl", "bash"].contains(&p);
        let argv = |image: &str, args: &[&str]| {
            let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
            profile(image).process.map(|p| p.argv(&args, host))
        };
        let strings = |v: &[&str]| Some(v.iter().map(|a| a.to_string()).collect::<Vec<_>>());
        assert_eq!(argv("busybox:1.36", &[]), strings(&["sh"]));
        assert_eq!(argv("busybox", &["sleep", "10"]), strings(&["sleep", "10"]));
        assert_eq!(argv("alpine:3.20", &[]), strings(&["/bin/sh"]));
        assert_eq!(argv("python:3.12", &[]), strings(&["python3"]));
        // curl's entrypoint: options go to curl, a program runs itself.
        assert_eq!(argv("curlimages/curl", &[]), strings(&["curl"]));
        assert_eq!(
            argv("curlimages/curl:8.10.1", &["-s", "http://web"]),
            strings(&["curl", "-s", "http://web"])
        );
        assert_eq!(
            argv("curlimages/curl", &["sh", "-c", "x"]),
            strings(&["sh", "-c", "x"])
        );
        assert_eq!(
            argv("curlimages/curl", &["http://web"]),
            strings(&["curl", "http://web"])
        );
        assert_eq!(
            argv("registry.k8s.io/e2e-test-images/agnhost:2.39", &["netexec"]),
            strings(&["/agnhost", "netexec"])
        );
        assert_eq!(
            profile("registry.k8s.io/e2e-test-images/agnhost:2.40").imitated[0],
            ("/agnhost", "__agnhost")
        );
        // Applications and web servers: the stand-in imitates them.
        assert_eq!(argv("nginx", &[]), None);
        assert_eq!(argv("example/web:1.0", &["--port=9090"]), None);
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
