//! Argo CD's ApplicationSet and Application on the hub, end to end: the
//! Cluster Generator example of Argo CD's documentation (label selector,
//! `goTemplate`), pointed at a git repository in a temporary directory,
//! makes one Application per cluster labelled `environment: production`;
//! each syncs the repository's manifests to its cluster (automated, with
//! prune and selfHeal), follows new commits, and a newly labelled cluster
//! gets its own; without `automated`, a requested `operation` syncs once
//! (from a plain-path repoURL). A template rendering an invalid name and a Helm source
//! are reported as Argo CD reports them, while the rest keeps syncing.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::fleet::{Fleet, exists, jsonpath};
use common::{assert_has, wait_for};

const WAIT: Duration = Duration::from_secs(90);

const DEPLOYMENT: &str = r#"apiVersion: apps/v1
kind: Deployment
metadata:
  name: guestbook-ui
spec:
  replicas: 1
  selector:
    matchLabels:
      app: guestbook-ui
  template:
    metadata:
      labels:
        app: guestbook-ui
    spec:
      containers:
      - name: guestbook-ui
        image: gcr.io/heptio-images/ks-guestbook-demo:0.2
        ports:
        - containerPort: 80
"#;

/// Argo CD's Cluster Generator example (label selector form), its repo
/// URL the local repository and with an automated sync policy.
fn appset(repo: &Path) -> String {
    format!(
        r#"
apiVersion: argoproj.io/v1alpha1
kind: ApplicationSet
metadata:
  name: guestbook
  namespace: argocd
spec:
  goTemplate: true
  goTemplateOptions: ["missingkey=error"]
  generators:
  - clusters:
      selector:
        matchLabels:
          environment: production
  template:
    metadata:
      name: '{{{{.name}}}}-guestbook'
    spec:
      project: "my-project"
      source:
        repoURL: file://{}
        targetRevision: HEAD
        path: guestbook
      destination:
        server: '{{{{.server}}}}'
        namespace: guestbook
      syncPolicy:
        automated:
          prune: true
          selfHeal: true
"#,
        repo.display()
    )
}

/// Renders `{{.name}}_Guestbook`: not a valid object name.
fn bad_appset(repo: &Path) -> String {
    appset(repo)
        .replace("name: guestbook\n", "name: broken\n")
        .replace("'{{.name}}-guestbook'", "'{{.name}}_Guestbook'")
}

const HELM_APP: &str = r#"
apiVersion: argoproj.io/v1alpha1
kind: Application
metadata:
  name: helm-guestbook
  namespace: argocd
spec:
  project: default
  source:
    repoURL: https://argoproj.github.io/argo-helm
    chart: guestbook
    targetRevision: 0.1.0
    helm:
      releaseName: guestbook
  destination:
    name: prod-east
    namespace: helm
  syncPolicy:
    automated: {}
"#;

fn git(repo: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(args)
        .current_dir(repo)
        .env("GIT_AUTHOR_NAME", "flotilla-test")
        .env("GIT_AUTHOR_EMAIL", "test@flotilla.invalid")
        .env("GIT_COMMITTER_NAME", "flotilla-test")
        .env("GIT_COMMITTER_EMAIL", "test@flotilla.invalid")
        .output()
        .expect("git runs");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn write(repo: &Path, path: &str, text: &str) {
    let p = repo.join(path);
    std::fs::create_dir_all(p.parent().expect("a parent")).expect("mkdir");
    std::fs::write(p, text).expect("write");
}

fn configmap(name: &str, color: &str) -> String {
    format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\ndata:\n  color: {color}\n")
}

fn app_field(fleet: &Fleet, app: &str, path: &str) -> String {
    fleet.jsonpath_hub(&["get", "application", app, "-n", "argocd"], path)
}

fn color(fleet: &Fleet, member: &str) -> String {
    jsonpath(
        fleet.member(member),
        &["get", "cm", "guestbook-config", "-n", "guestbook"],
        "{.data.color}",
    )
}

fn has(fleet: &Fleet, member: &str, kind: &str, name: &str) -> bool {
    exists(
        fleet.member(member),
        &["get", kind, name, "-n", "guestbook"],
    )
}

fn synced_healthy(fleet: &Fleet, app: &str, revision: &str) -> bool {
    app_field(
        fleet,
        app,
        "{.status.sync.status}/{.status.health.status}/{.status.sync.revision}/{.status.operationState.phase}",
    ) == format!("Synced/Healthy/{revision}/Succeeded")
}

#[test]
fn an_application_set_syncs_a_local_git_repository_to_every_production_cluster() {
    assert!(
        common::which("git").is_some(),
        "the git CLI makes this test's repository: install git (`.ci/run` does)"
    );
    let repo_dir = tempfile::tempdir().expect("tempdir");
    let repo = repo_dir.path();
    git(repo, &["init", "-q", "-b", "main"]);
    write(repo, "guestbook/guestbook-ui-deployment.yaml", DEPLOYMENT);
    write(
        repo,
        "guestbook/config.yaml",
        &format!(
            "{}---\n{}",
            configmap("guestbook-config", "blue"),
            configmap("guestbook-extra", "green")
        ),
    );
    write(repo, "guestbook/README.md", "not a manifest\n");
    git(repo, &["add", "."]);
    git(repo, &["commit", "-q", "-m", "guestbook"]);
    let first = git(repo, &["rev-parse", "HEAD"]);

    let fleet = Fleet::with_args(
        &[
            ("prod-east", "us-east"),
            ("prod-west", "us-west"),
            ("staging", "eu-west"),
        ],
        &[],
        &["--frontends", "argocd"],
    );
    for c in ["prod-east", "prod-west"] {
        fleet
            .hub
            .ok(&["label", "cluster", c, "environment=production"]);
    }
    fleet
        .hub
        .ok(&["label", "cluster", "staging", "environment=staging"]);
    fleet.apply("apiVersion: v1\nkind: Namespace\nmetadata: {name: argocd}\n");
    fleet.apply(&appset(repo));

    // One Application per production cluster, owned by the set.
    let apps = || {
        fleet.jsonpath_hub(
            &[
                "get",
                "applications",
                "-n",
                "argocd",
                "-l",
                "argocd.argoproj.io/application-set-name=guestbook",
            ],
            "{.items[*].metadata.name}",
        )
    };
    wait_for(WAIT, "two Applications", || {
        apps() == "prod-east-guestbook prod-west-guestbook"
    });
    assert_eq!(
        app_field(
            &fleet,
            "prod-east-guestbook",
            "{.metadata.ownerReferences[0].kind}/{.metadata.ownerReferences[0].name}"
        ),
        "ApplicationSet/guestbook"
    );
    for app in ["prod-east-guestbook", "prod-west-guestbook"] {
        wait_for(WAIT, &format!("{app} Synced and Healthy"), || {
            synced_healthy(&fleet, app, &first)
        });
    }
    wait_for(WAIT, "the ApplicationSet up to date", || {
        fleet.jsonpath_hub(
            &["get", "applicationset", "guestbook", "-n", "argocd"],
            "{.status.conditions[?(@.type==\"ResourcesUpToDate\")].status}",
        ) == "True"
    });
    // The manifests in exactly the production members, tracked by app.
    for m in ["prod-east", "prod-west"] {
        assert!(has(&fleet, m, "deploy", "guestbook-ui"), "{m}");
        assert_eq!(color(&fleet, m), "blue");
        assert!(has(&fleet, m, "cm", "guestbook-extra"), "{m}");
    }
    assert_eq!(
        jsonpath(
            fleet.member("prod-west"),
            &["get", "deploy", "guestbook-ui", "-n", "guestbook"],
            "{.metadata.labels.app\\.kubernetes\\.io/instance}",
        ),
        "prod-west-guestbook"
    );
    assert!(!has(&fleet, "staging", "deploy", "guestbook-ui"));
    // `flotilla get` lists each Application under its destination cluster.
    let out = common::flotilla(&[
        "get",
        "applications",
        "-n",
        "argocd",
        "--kubeconfig",
        fleet.hub.kubeconfig.to_str().unwrap_or_default(),
    ]);
    assert!(
        out.status.success(),
        "flotilla get: {}",
        common::fleet::stderr(&out)
    );
    let table = String::from_utf8_lossy(&out.stdout);
    assert_has(
        &table,
        &[
            "CLUSTER",
            "prod-east",
            "prod-west-guestbook",
            "Synced/Healthy",
        ],
    );
    assert!(!table.contains("staging"), "{table}");
    let resources = app_field(
        &fleet,
        "prod-east-guestbook",
        "{range .status.resources[*]}{.kind}/{.name}={.status};{end}",
    );
    assert_has(
        &resources,
        &[
            "Deployment/guestbook-ui=Synced",
            "ConfigMap/guestbook-config=Synced",
        ],
    );

    // A new commit: a changed ConfigMap is updated, a removed one pruned.
    write(
        repo,
        "guestbook/config.yaml",
        &configmap("guestbook-config", "red"),
    );
    git(repo, &["commit", "-q", "-am", "red, and no extra"]);
    let second = git(repo, &["rev-parse", "HEAD"]);
    for m in ["prod-east", "prod-west"] {
        wait_for(WAIT, &format!("{m} red, extra pruned"), || {
            color(&fleet, m) == "red" && !has(&fleet, m, "cm", "guestbook-extra")
        });
    }
    for app in ["prod-east-guestbook", "prod-west-guestbook"] {
        wait_for(WAIT, &format!("{app} Synced at the new commit"), || {
            synced_healthy(&fleet, app, &second)
        });
    }

    // selfHeal: a member's edit is reverted.
    fleet.member("prod-east").ok(&[
        "patch",
        "cm",
        "guestbook-config",
        "-n",
        "guestbook",
        "--type=merge",
        "-p",
        r#"{"data": {"color": "drifted"}}"#,
    ]);
    wait_for(WAIT, "the drift reverted", || {
        color(&fleet, "prod-east") == "red"
    });

    // Bad input: an invalid generated name, a Helm source.
    fleet.apply(&bad_appset(repo));
    fleet.apply(HELM_APP);
    let broken = |field: &str| {
        fleet.jsonpath_hub(
            &["get", "applicationset", "broken", "-n", "argocd"],
            &format!("{{.status.conditions[?(@.type==\"ErrorOccurred\")].{field}}}"),
        )
    };
    wait_for(WAIT, "the broken set's ErrorOccurred", || {
        broken("status") == "True"
    });
    assert_eq!(broken("reason"), "UpdateApplicationError");
    assert_has(&broken("message"), &["prod-east_Guestbook", "RFC 1123"]);
    assert_eq!(
        fleet.jsonpath_hub(
            &["get", "applicationset", "broken", "-n", "argocd"],
            "{.status.conditions[?(@.type==\"ResourcesUpToDate\")].status}",
        ),
        "False"
    );
    wait_for(WAIT, "the Helm Application's condition", || {
        app_field(&fleet, "helm-guestbook", "{.status.conditions[0].type}") == "InvalidSpecError"
    });
    assert_has(
        &app_field(&fleet, "helm-guestbook", "{.status.conditions[0].message}"),
        &["Helm", "not supported"],
    );
    assert!(!exists(fleet.member("prod-east"), &["get", "ns", "helm"]));

    // Without `automated`, an Application waits OutOfSync until a sync
    // operation is requested, which runs once and is cleared.
    fleet.apply(&format!(
        r#"
apiVersion: argoproj.io/v1alpha1
kind: Application
metadata:
  name: manual-guestbook
  namespace: argocd
spec:
  project: default
  source:
    repoURL: {}
    path: guestbook
  destination:
    name: prod-west
    namespace: manual
"#,
        repo.display()
    ));
    wait_for(WAIT, "manual-guestbook OutOfSync and Missing", || {
        app_field(
            &fleet,
            "manual-guestbook",
            "{.status.sync.status}/{.status.health.status}/{.status.sync.revision}",
        ) == format!("OutOfSync/Missing/{second}")
    });
    assert!(!exists(fleet.member("prod-west"), &["get", "ns", "manual"]));
    fleet.hub.ok(&[
        "patch",
        "application",
        "manual-guestbook",
        "-n",
        "argocd",
        "--type=merge",
        "-p",
        r#"{"operation": {"sync": {"prune": true}}}"#,
    ]);
    wait_for(WAIT, "manual-guestbook synced on request", || {
        synced_healthy(&fleet, "manual-guestbook", &second)
    });
    assert_eq!(app_field(&fleet, "manual-guestbook", "{.operation}"), "");
    assert!(exists(
        fleet.member("prod-west"),
        &["get", "cm", "guestbook-config", "-n", "manual"]
    ));

    // The good ones keep working: a third production cluster gets its
    // Application, synced at the current commit.
    fleet.hub.ok(&[
        "label",
        "cluster",
        "staging",
        "environment=production",
        "--overwrite",
    ]);
    wait_for(WAIT, "three Applications", || {
        apps() == "prod-east-guestbook prod-west-guestbook staging-guestbook"
    });
    wait_for(WAIT, "staging-guestbook Synced and Healthy", || {
        synced_healthy(&fleet, "staging-guestbook", &second)
    });
    assert_eq!(color(&fleet, "staging"), "red");
    assert!(has(&fleet, "staging", "deploy", "guestbook-ui"));
}
