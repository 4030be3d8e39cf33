//! An imitation of agnhost, the Kubernetes project's test image
//! (`registry.k8s.io/e2e-test-images/agnhost`), whose subcommands the
//! Kubernetes documentation and clients' tests run: the hello-node
//! tutorial's `netexec`, the liveness-probe task's `liveness`, Services'
//! `serve-hostname`, and `pause`. The netns runtime pulls no image, so a
//! container running `/agnhost SUBCOMMAND` (its command, or its args after
//! the image's ENTRYPOINT) runs this through `flotilla __agnhost`
//! instead. What each answers follows agnhost's own README.

use std::net::{Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{ConnectInfo, Query, Request};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;

/// The subcommands imitated, as `agnhost` names them.
pub const SUBCOMMANDS: &[&str] = &["netexec", "serve-hostname", "liveness", "pause"];

/// Runs agnhost's `args` (the subcommand and its flags); an error is what
/// agnhost would print before exiting non-zero.
pub async fn run(args: Vec<String>) -> Result<(), String> {
    let Some((subcommand, flags)) = args.split_first() else {
        return Err(format!(
            "agnhost needs a subcommand; Flotilla imitates {}",
            SUBCOMMANDS.join(", ")
        ));
    };
    let flags = Flags(flags);
    match subcommand.as_str() {
        "netexec" => {
            let http = flags.port("http-port", 8080)?;
            let udp = flags.port("udp-port", 8081)?;
            netexec(http, udp).await
        }
        "serve-hostname" => {
            let port = flags.port("port", 9376)?;
            serve(port, Router::new().fallback(hostname_reply)).await
        }
        "liveness" => serve(Some(8080), liveness(Instant::now())).await,
        "pause" => {
            println!("Paused");
            std::future::pending::<()>().await;
            Ok(())
        }
        other => Err(format!(
            "agnhost {other} is not imitated by Flotilla's netns runtime (it imitates {})",
            SUBCOMMANDS.join(", ")
        )),
    }
}

/// agnhost's flags, `--name=value` or `--name value`; others are ignored.
struct Flags<'a>(&'a [String]);

impl Flags<'_> {
    fn value(&self, name: &str) -> Option<String> {
        let long = format!("--{name}");
        let mut args = self.0.iter();
        while let Some(arg) = args.next() {
            // Go's flag package takes `-name` as well as `--name`.
            let arg = match arg.strip_prefix("--") {
                Some(_) => arg.clone(),
                None if arg.starts_with('-') => format!("-{arg}"),
                None => continue,
            };
            if arg == long {
                return args.next().cloned();
            }
            if let Some(value) = arg.strip_prefix(&format!("{long}=")) {
                return Some(value.to_string());
            }
        }
        None
    }

    /// A port flag: `default` when absent, none when negative (agnhost's
    /// `-1` switches a listener off).
    fn port(&self, name: &str, default: u16) -> Result<Option<u16>, String> {
        match self.value(name) {
            None => Ok(Some(default)),
            Some(v) => match v.parse::<i32>() {
                Ok(n) if n < 0 => Ok(None),
                Ok(n) => u16::try_from(n)
                    .map(Some)
                    .map_err(|_| format!("--{name}={v}: not a port")),
                Err(_) => Err(format!("--{name}={v}: not a number")),
            },
        }
    }
}

fn hostname() -> String {
    nix::unistd::gethostname()
        .map(|h| h.to_string_lossy().into_owned())
        .unwrap_or_default()
}

async fn hostname_reply(request: Request) -> String {
    println!("{} {}", request.method(), request.uri());
    hostname()
}

async fn serve(port: Option<u16>, app: Router) -> Result<(), String> {
    let Some(port) = port else {
        return std::future::pending().await;
    };
    let addr = SocketAddr::from((Ipv4Addr::UNSPECIFIED, port));
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| format!("cannot listen on port {port}: {e}"))?;
    println!("Started HTTP server on port {port}");
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .await
    .map_err(|e| e.to_string())
}

/// `netexec`: HTTP endpoints that say who answered and echo what they
/// are sent, and the same over UDP.
async fn netexec(http: Option<u16>, udp: Option<u16>) -> Result<(), String> {
    let app = Router::new()
        .route(
            "/",
            get(|| async { format!("NOW: {}", jiff::Timestamp::now()) }),
        )
        .route("/hostname", get(hostname_reply))
        .route("/hostName", get(hostname_reply))
        .route(
            "/clientip",
            get(|ConnectInfo(peer): ConnectInfo<SocketAddr>| async move { peer.to_string() }),
        )
        .route("/echo", get(echo).post(echo))
        .route("/header", get(header))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(|| async { "ok" }))
        .route("/exit", get(exit).post(exit));
    let udp = async {
        match udp {
            Some(port) => udp_server(port).await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        r = serve(http, app) => r,
        r = udp => r,
    }
}

async fn echo(Query(q): Query<std::collections::HashMap<String, String>>) -> String {
    q.get("msg").cloned().unwrap_or_default()
}

async fn header(
    Query(q): Query<std::collections::HashMap<String, String>>,
    request: Request,
) -> String {
    q.get("key")
        .and_then(|k| request.headers().get(k.as_str()))
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string()
}

/// `/exit?code=N`: the container exits with N (0 when not given), after
/// answering.
async fn exit(Query(q): Query<std::collections::HashMap<String, String>>) -> Response {
    let code = match q.get("code").map(|c| c.parse::<i32>()) {
        None => 0,
        Some(Ok(c)) if (0..=127).contains(&c) => c,
        Some(_) => {
            return (StatusCode::BAD_REQUEST, "code must be a number 0-127\n").into_response();
        }
    };
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        std::process::exit(code);
    });
    StatusCode::NO_CONTENT.into_response()
}

/// netexec's UDP server: `hostname`, `echo MESSAGE` and `clientip`.
async fn udp_server(port: u16) -> Result<(), String> {
    let socket = tokio::net::UdpSocket::bind((Ipv4Addr::UNSPECIFIED, port))
        .await
        .map_err(|e| format!("cannot listen on UDP port {port}: {e}"))?;
    println!("Started UDP server on port {port}");
    let mut buf = vec![0u8; 2048];
    loop {
        let (n, peer) = socket
            .recv_from(&mut buf)
            .await
            .map_err(|e| e.to_string())?;
        let text = String::from_utf8_lossy(&buf[..n]);
        let reply = udp_reply(text.trim(), peer);
        let _ = socket.send_to(reply.as_bytes(), peer).await;
    }
}

fn udp_reply(command: &str, peer: SocketAddr) -> String {
    match command.split_once(' ') {
        Some(("echo", message)) => message.to_string(),
        _ if command == "hostname" || command == "hostName" => hostname(),
        _ if command == "clientip" => peer.to_string(),
        _ => format!("unknown command {command:?}"),
    }
}

/// `liveness`: `/healthz` answers 200 for the first 10 seconds, then 500
/// (what the liveness-probe task watches restart the container).
fn liveness(started: Instant) -> Router {
    Router::new()
        .route(
            "/healthz",
            get(move || async move {
                let up = started.elapsed();
                if up > Duration::from_secs(10) {
                    (
                        StatusCode::INTERNAL_SERVER_ERROR,
                        format!("error: {:.0}", up.as_secs_f64()),
                    )
                } else {
                    (StatusCode::OK, "ok".to_string())
                }
            }),
        )
        .fallback(|| async { StatusCode::NOT_FOUND })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flags(args: &[&str]) -> Vec<String> {
        args.iter().map(|a| a.to_string()).collect()
    }

    #[test]
    fn flags_are_read_as_go_writes_them() {
        let args = flags(&["--http-port=8080", "-udp-port", "-1", "--other=x"]);
        let f = Flags(&args);
        assert_eq!(f.port("http-port", 1), Ok(Some(8080)));
        assert_eq!(f.port("udp-port", 1), Ok(None));
        assert_eq!(f.port("port", 9376), Ok(Some(9376)));
        let bad = flags(&["--port=http"]);
        assert!(Flags(&bad).port("port", 1).is_err());
    }

    #[test]
    fn udp_commands_answer_as_netexecs() {
        let peer: SocketAddr = "10.0.0.7:4000".parse().unwrap();
        assert_eq!(udp_reply("echo hello there", peer), "hello there");
        assert_eq!(udp_reply("clientip", peer), "10.0.0.7:4000");
        assert_eq!(udp_reply("hostname", peer), hostname());
    }

    #[tokio::test]
    async fn an_unknown_subcommand_says_what_is_imitated() {
        let e = run(flags(&["porter"])).await.unwrap_err();
        assert!(e.contains("netexec"), "{e}");
        assert!(run(Vec::new()).await.is_err());
    }
}
