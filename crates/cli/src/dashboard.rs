//! The hub's web dashboard: its pages as the control plane's API server
//! serves them (`/dashboard/`, before authentication: they hold no data),
//! and `flotilla dashboard`, which prints where it is and the token to
//! sign in with.

use std::sync::Arc;

use anyhow::Context;
use flotilla_apiserver::config::{PublicAnswer, PublicPages};

use crate::inspect::HubArgs;

/// The dashboard's files, by path, for the API server.
pub fn pages() -> PublicPages {
    Arc::new(|path: &str| {
        if path == "/dashboard" {
            return Some(PublicAnswer::Redirect(flotilla_dashboard::PREFIX));
        }
        flotilla_dashboard::asset(path).map(|a| PublicAnswer::Page {
            content_type: a.content_type,
            body: a.body,
            headers: flotilla_dashboard::HEADERS,
        })
    })
}

#[derive(clap::Args)]
pub struct DashboardArgs {
    /// Also open it in the desktop's browser (xdg-open, or open on macOS).
    #[arg(long)]
    pub open: bool,
    #[command(flatten)]
    pub hub: HubArgs,
}

/// Opens `url` in the desktop's browser; why not, if it cannot.
fn open_in_browser(url: &str) -> Result<(), String> {
    let opener = if cfg!(target_os = "macos") {
        "open"
    } else {
        "xdg-open"
    };
    match std::process::Command::new(opener)
        .arg(url)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
    {
        Ok(s) if s.success() => Ok(()),
        Ok(s) => Err(format!(
            "{opener} {url} exited with {s}: open the URL in a browser yourself"
        )),
        Err(e) => Err(format!("cannot run {opener} ({e}): open {url} yourself")),
    }
}

/// Prints the dashboard's address on the hub of the kubeconfig's context
/// and its user's bearer token (the dashboard's login).
pub async fn run(args: DashboardArgs) -> anyhow::Result<()> {
    let kubeconfig = args.hub.kubeconfig()?;
    let context_name = args
        .hub
        .context
        .clone()
        .or(kubeconfig.current_context.clone())
        .context("the kubeconfig has no current context: pass --context")?;
    let context = kubeconfig
        .contexts
        .iter()
        .find(|c| c.name == context_name)
        .and_then(|c| c.context.clone())
        .with_context(|| format!("the kubeconfig has no context {context_name:?}"))?;
    let server = kubeconfig
        .clusters
        .iter()
        .find(|c| c.name == context.cluster)
        .and_then(|c| c.cluster.as_ref())
        .and_then(|c| c.server.clone())
        .with_context(|| format!("context {context_name:?} names no cluster with a server"))?;
    let token = context.user.as_ref().and_then(|user| {
        kubeconfig
            .auth_infos
            .iter()
            .find(|a| a.name == *user)
            .and_then(|a| a.auth_info.as_ref())
            .and_then(|a| a.token.as_ref())
            .map(|t| secrecy::ExposeSecret::expose_secret(t).to_string())
    });
    let url = format!(
        "{}{}",
        server.trim_end_matches('/'),
        flotilla_dashboard::PREFIX
    );
    let mut out = format!("Dashboard: {url}\n");
    match token {
        Some(token) => out.push_str(&format!("Sign in with this token (context {context_name}):\n{token}\n")),
        None => out.push_str(&format!(
            "Context {context_name}'s user has no bearer token to sign in with: make one with `kubectl create token SERVICEACCOUNT -n NAMESPACE` (you see what it may see)\n"
        )),
    }
    crate::inspect::emit(&out)?;
    if args.open
        && let Err(why) = open_in_browser(&url)
    {
        anyhow::bail!("{why}");
    }
    Ok(())
}
