//! Backup and restore on Velero's API, as Velero's users drive it with
//! kubectl: two members share a storage location; a Backup of a
//! namespace in one is synced into the other and restored there, and
//! into a new namespace of the first; bad requests fail validation with
//! Velero's messages.

mod common;
#[path = "common/s3.rs"]
mod s3;

use std::time::Duration;

use common::{Server, assert_has, wait_for};

const WAIT: Duration = Duration::from_secs(60);

/// Velero's nginx example, with a claim its pods use.
const NGINX_EXAMPLE: &str = r#"
apiVersion: v1
kind: Namespace
metadata: {name: nginx-example, labels: {app: nginx}}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: nginx-logs, namespace: nginx-example, labels: {app: nginx}}
spec:
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 50Mi}}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: nginx-config, namespace: nginx-example}
data: {greeting: hello}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: nginx-deployment, namespace: nginx-example}
spec:
  replicas: 2
  selector: {matchLabels: {app: nginx}}
  template:
    metadata: {labels: {app: nginx}}
    spec:
      volumes: [{name: nginx-logs, persistentVolumeClaim: {claimName: nginx-logs}}]
      containers:
      - image: nginx:1.17.6
        name: nginx
        ports: [{containerPort: 80}]
        volumeMounts: [{mountPath: /var/log/nginx, name: nginx-logs}]
---
apiVersion: v1
kind: Service
metadata: {name: my-nginx, namespace: nginx-example, labels: {app: nginx}}
spec:
  ports: [{port: 80, targetPort: 80}]
  selector: {app: nginx}
  type: LoadBalancer
"#;

fn field(m: &Server, args: &[&str], path: &str) -> String {
    let mut all = args.to_vec();
    let jsonpath = format!("jsonpath={path}");
    all.extend(["-o", &jsonpath]);
    String::from_utf8_lossy(&m.kubectl(&all).stdout)
        .trim()
        .to_string()
}

/// A field of one of Velero's objects.
fn velero_field(m: &Server, kind: &str, name: &str, path: &str) -> String {
    field(m, &["get", kind, name, "-n", "velero"], path)
}

fn phase(m: &Server, kind: &str, name: &str) -> String {
    velero_field(m, kind, name, "{.status.phase}")
}

fn wait_phase(m: &Server, kind: &str, name: &str, want: &str) {
    let mut last = String::new();
    let deadline = std::time::Instant::now() + WAIT;
    while std::time::Instant::now() < deadline {
        last = phase(m, kind, name);
        if last == want {
            return;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let yaml = m.kubectl(&["get", kind, name, "-n", "velero", "-o", "yaml"]);
    panic!(
        "{kind} {name} is {last:?}, not {want}:\n{}\n{}",
        String::from_utf8_lossy(&yaml.stdout),
        m.log()
    );
}

/// Applies `location` (a default BackupStorageLocation) to a member once
/// Velero's kinds are served, and waits for it to be Available.
fn use_location(m: &Server, location: &str) {
    wait_for(WAIT, "Velero's kinds served", || {
        m.kubectl(&["get", "bsl", "-n", "velero"]).status.success()
    });
    m.ok_stdin(&["apply", "-f", "-"], location);
    wait_for(WAIT, "the location Available", || {
        phase(m, "bsl", "default") == "Available"
    });
}

/// The directory on this host of the volume bound to the nginx example's
/// claim in namespace `ns`.
fn volume_dir(m: &Server, ns: &str) -> std::path::PathBuf {
    let pv = field(
        m,
        &["get", "pvc", "nginx-logs", "-n", ns],
        "{.spec.volumeName}",
    );
    std::path::PathBuf::from(field(m, &["get", "pv", &pv], "{.spec.hostPath.path}"))
}

#[test]
fn a_backup_in_one_member_restores_in_another_and_in_a_new_namespace() {
    let storage = tempfile::tempdir().expect("tempdir");
    let a = Server::member("bk-a", &["--nodes", "2"]);
    let b = Server::member("bk-b", &["--nodes", "2"]);
    for m in [&a, &b] {
        use_location(m, &common::velero_location(storage.path()));
        assert_has(
            &m.ok(&["get", "bsl", "-n", "velero"]),
            &["PHASE", "LAST VALIDATED", "DEFAULT", "Available", "true"],
        );
    }
    a.ok_stdin(&["apply", "-f", "-"], NGINX_EXAMPLE);
    a.ok(&[
        "rollout",
        "status",
        "-n",
        "nginx-example",
        "deployment/nginx-deployment",
        "--timeout=60s",
    ]);
    wait_for(WAIT, "the claim bound", || {
        field(
            &a,
            &["get", "pvc", "nginx-logs", "-n", "nginx-example"],
            "{.status.phase}",
        ) == "Bound"
    });
    // What the pods wrote to their volume (a directory on this host).
    let written = volume_dir(&a, "nginx-example");
    std::fs::create_dir_all(written.join("archive")).expect("volume dir");
    std::fs::write(written.join("access.log"), "GET / 200\n").expect("write");
    std::fs::write(written.join("archive/old.log"), "GET /old 404\n").expect("write");

    a.ok_stdin(
        &["apply", "-f", "-"],
        r#"
apiVersion: velero.io/v1
kind: Backup
metadata: {name: nginx-backup, namespace: velero}
spec:
  includedNamespaces: [nginx-example]
  defaultVolumesToFsBackup: true
  ttl: 720h0m0s
"#,
    );
    wait_phase(&a, "backup", "nginx-backup", "Completed");
    let status = |path: &str| field(&a, &["get", "backup", "nginx-backup", "-n", "velero"], path);
    let items: usize = status("{.status.progress.itemsBackedUp}")
        .parse()
        .unwrap_or(0);
    // The namespace, claim and its volume, config map, deployment, its
    // replica set and two pods, service, endpoints...
    assert!(items >= 9, "{items} items backed up");
    assert_eq!(status("{.status.formatVersion}"), "1.1.0");
    assert!(!status("{.status.expiration}").is_empty());
    let stored = storage.path().join("velero/fleet/backups/nginx-backup");
    for file in [
        "nginx-backup.tar.gz",
        "velero-backup.json",
        "nginx-backup-resource-list.json.gz",
        "nginx-backup-logs.gz",
        "nginx-backup-podvolumebackups.json.gz",
    ] {
        assert!(stored.join(file).is_file(), "{file} in the location");
    }

    // The other member finds it in the shared location and restores it.
    wait_for(WAIT, "the backup synced into the other member", || {
        phase(&b, "backup", "nginx-backup") == "Completed"
    });
    b.ok_stdin(
        &["apply", "-f", "-"],
        r#"
apiVersion: velero.io/v1
kind: Restore
metadata: {name: nginx-restore, namespace: velero}
spec:
  backupName: nginx-backup
"#,
    );
    wait_phase(&b, "restore", "nginx-restore", "Completed");
    b.ok(&[
        "rollout",
        "status",
        "-n",
        "nginx-example",
        "deployment/nginx-deployment",
        "--timeout=60s",
    ]);
    assert_eq!(
        field(
            &b,
            &["get", "cm", "nginx-config", "-n", "nginx-example"],
            "{.data.greeting}"
        ),
        "hello"
    );
    assert_eq!(
        field(
            &b,
            &["get", "deploy", "nginx-deployment", "-n", "nginx-example"],
            "{.metadata.labels.velero\\.io/restore-name}"
        ),
        "nginx-restore"
    );
    // Two pods, not four: the Deployment made its own again.
    wait_for(WAIT, "two nginx pods in the restored namespace", || {
        field(
            &b,
            &["get", "pods", "-n", "nginx-example", "-l", "app=nginx"],
            "{.items[*].metadata.name}",
        )
        .split_whitespace()
        .count()
            == 2
    });
    // The claim got a volume of this member; the Service an address of
    // this member's range.
    wait_for(WAIT, "the restored claim bound here", || {
        field(
            &b,
            &["get", "pvc", "nginx-logs", "-n", "nginx-example"],
            "{.status.phase}",
        ) == "Bound"
    });

    // Its data came along, into this member's new volume.
    let restored = volume_dir(&b, "nginx-example");
    assert_ne!(restored, written);
    assert_eq!(
        std::fs::read_to_string(restored.join("access.log")).expect("restored file"),
        "GET / 200\n"
    );
    assert_eq!(
        std::fs::read_to_string(restored.join("archive/old.log")).expect("restored file"),
        "GET /old 404\n"
    );
    assert_ne!(
        field(
            &b,
            &["get", "svc", "my-nginx", "-n", "nginx-example"],
            "{.spec.clusterIP}"
        ),
        ""
    );

    // Into a new namespace of the first member.
    a.ok_stdin(
        &["apply", "-f", "-"],
        r#"
apiVersion: velero.io/v1
kind: Restore
metadata: {name: nginx-copy, namespace: velero}
spec:
  backupName: nginx-backup
  namespaceMapping: {nginx-example: nginx-copy}
"#,
    );
    wait_phase(&a, "restore", "nginx-copy", "Completed");
    a.ok(&[
        "rollout",
        "status",
        "-n",
        "nginx-copy",
        "deployment/nginx-deployment",
        "--timeout=60s",
    ]);
    assert_eq!(
        field(
            &a,
            &["get", "cm", "nginx-config", "-n", "nginx-copy"],
            "{.data.greeting}"
        ),
        "hello"
    );

    // Again where everything exists: warnings, nothing changed.
    b.ok_stdin(
        &["apply", "-f", "-"],
        r#"
apiVersion: velero.io/v1
kind: Restore
metadata: {name: nginx-again, namespace: velero}
spec:
  backupName: nginx-backup
"#,
    );
    wait_phase(&b, "restore", "nginx-again", "Completed");
    let warnings: usize = velero_field(&b, "restore", "nginx-again", "{.status.warnings}")
        .parse()
        .unwrap_or(0);
    assert!(warnings > 0, "an existing, changed object is a warning");
}

#[test]
fn requests_velero_would_refuse_fail_validation_and_say_why() {
    let m = Server::member("bk-bad", &[]);
    wait_for(WAIT, "Velero's kinds served", || {
        m.kubectl(&["get", "backups", "-n", "velero"])
            .status
            .success()
    });
    m.ok_stdin(
        &["apply", "-f", "-"],
        r#"
apiVersion: velero.io/v1
kind: Backup
metadata: {name: nowhere, namespace: velero}
spec:
  storageLocation: nowhere
---
apiVersion: velero.io/v1
kind: Restore
metadata: {name: from-nothing, namespace: velero}
spec:
  backupName: never-made
---
apiVersion: velero.io/v1
kind: Restore
metadata: {name: bad-policy, namespace: velero}
spec:
  backupName: never-made
  existingResourcePolicy: overwrite
---
apiVersion: velero.io/v1
kind: BackupStorageLocation
metadata: {name: s3, namespace: velero}
spec:
  provider: aws
  objectStorage: {bucket: velero}
"#,
    );
    wait_phase(&m, "backup", "nowhere", "FailedValidation");
    assert_has(
        &velero_field(&m, "backup", "nowhere", "{.status.validationErrors[0]}"),
        &["the default nowhere was not found"],
    );
    wait_phase(&m, "restore", "from-nothing", "FailedValidation");
    assert_has(
        &velero_field(
            &m,
            "restore",
            "from-nothing",
            "{.status.validationErrors[0]}",
        ),
        &["backups.velero.io \"never-made\" not found"],
    );
    wait_phase(&m, "restore", "bad-policy", "FailedValidation");
    assert_has(
        &velero_field(&m, "restore", "bad-policy", "{.status.validationErrors}"),
        &["Invalid ExistingResourcePolicy: overwrite"],
    );
    wait_phase(&m, "bsl", "s3", "Unavailable");
    assert_has(
        &velero_field(&m, "bsl", "s3", "{.status.message}"),
        &[
            "BackupStorageLocation \"s3\" is unavailable",
            "no credentials",
            "cloud-credentials",
        ],
    );
}

/// A Schedule backs up at once and then as its expression comes due; a
/// Restore naming the schedule takes its newest backup; an expression
/// Velero cannot read fails validation.
#[test]
fn a_schedule_backs_up_and_a_restore_takes_its_newest_backup() {
    let storage = tempfile::tempdir().expect("tempdir");
    let m = Server::member("bk-sched", &[]);
    use_location(&m, &common::velero_location(storage.path()));
    m.ok(&["create", "namespace", "shop"]);
    m.ok(&[
        "create",
        "configmap",
        "prices",
        "-n",
        "shop",
        "--from-literal=apple=3",
    ]);
    m.ok_stdin(
        &["apply", "-f", "-"],
        r#"
apiVersion: velero.io/v1
kind: Schedule
metadata: {name: shop-hourly, namespace: velero}
spec:
  schedule: "@every 1h"
  template:
    includedNamespaces: [shop]
    ttl: 24h0m0s
---
apiVersion: velero.io/v1
kind: Schedule
metadata: {name: unreadable, namespace: velero}
spec:
  schedule: "every day at noon"
  template: {}
"#,
    );
    wait_phase(&m, "schedule", "shop-hourly", "Enabled");
    wait_for(WAIT, "the first scheduled backup completed", || {
        field(
            &m,
            &[
                "get",
                "backups",
                "-n",
                "velero",
                "-l",
                "velero.io/schedule-name=shop-hourly",
            ],
            "{.items[*].status.phase}",
        ) == "Completed"
    });
    let backup = field(
        &m,
        &[
            "get",
            "backups",
            "-n",
            "velero",
            "-l",
            "velero.io/schedule-name=shop-hourly",
        ],
        "{.items[0].metadata.name}",
    );
    assert!(
        backup.starts_with("shop-hourly-") && backup.len() == "shop-hourly-".len() + 14,
        "{backup}"
    );
    assert_has(
        &m.ok(&["get", "schedules", "-n", "velero"]),
        &[
            "STATUS",
            "SCHEDULE",
            "LASTBACKUP",
            "PAUSED",
            "Enabled",
            "@every 1h",
        ],
    );
    wait_phase(&m, "schedule", "unreadable", "FailedValidation");
    assert_has(
        &velero_field(
            &m,
            "schedule",
            "unreadable",
            "{.status.validationErrors[0]}",
        ),
        &["invalid schedule"],
    );
    m.ok_stdin(
        &["apply", "-f", "-"],
        r#"
apiVersion: velero.io/v1
kind: Restore
metadata: {name: shop-back, namespace: velero}
spec:
  scheduleName: shop-hourly
  namespaceMapping: {shop: shop-restored}
"#,
    );
    wait_phase(&m, "restore", "shop-back", "Completed");
    assert_eq!(
        field(
            &m,
            &["get", "cm", "prices", "-n", "shop-restored"],
            "{.data.apple}"
        ),
        "3"
    );

    // The same through Velero's CLI's verbs.
    let kubeconfig = m.kubeconfig.to_str().expect("utf-8").to_string();
    let cli = |args: &[&str]| {
        let mut all = args.to_vec();
        all.extend(["--kubeconfig", &kubeconfig]);
        common::flotilla(&all)
    };
    let out = cli(&[
        "backup",
        "create",
        "shop-cli",
        "--include-namespaces",
        "shop",
        "--wait",
    ]);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{said}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_has(
        &said,
        &[
            "Backup request \"shop-cli\" submitted successfully.",
            "Backup completed with status: Completed",
        ],
    );
    let described =
        String::from_utf8_lossy(&cli(&["backup", "describe", "shop-cli"]).stdout).into_owned();
    assert_has(
        &described,
        &[
            "Phase:  Completed",
            "Pod Volume Backups: <none included>",
            "Included:  shop",
            "Storage Location:  default",
            "Items backed up:",
        ],
    );
    assert!(cli(&["backup", "logs", "shop-cli"]).status.success());
    let out = cli(&[
        "restore",
        "create",
        "--from-backup",
        "shop-cli",
        "--namespace-mappings",
        "shop:shop-cli",
        "--wait",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_has(
        &String::from_utf8_lossy(&out.stdout),
        &["Restore completed with status: Completed"],
    );
    assert_eq!(
        field(
            &m,
            &["get", "cm", "prices", "-n", "shop-cli"],
            "{.data.apple}"
        ),
        "3"
    );
    let out = cli(&["restore", "create", "--wait"]);
    assert!(!out.status.success());
    assert_has(
        &String::from_utf8_lossy(&out.stderr),
        &["--from-backup", "--from-schedule"],
    );
    let out = cli(&["backup", "describe", "never-made"]);
    assert!(!out.status.success());
    assert_has(
        &String::from_utf8_lossy(&out.stderr),
        &["no backup \"never-made\""],
    );

    // `velero backup delete`: a DeleteBackupRequest takes the backup, its
    // files and the restores made from it.
    let stored = storage.path().join("velero/fleet/backups/shop-cli");
    assert!(stored.join("velero-backup.json").is_file());
    let out = cli(&["backup", "delete", "shop-cli", "--wait"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_has(
        &String::from_utf8_lossy(&out.stdout),
        &[
            "Request to delete backup \"shop-cli\" submitted successfully.",
            "Backup \"shop-cli\" deleted.",
        ],
    );
    assert!(!stored.exists(), "the backup's files are gone");
    assert!(
        !m.kubectl(&["get", "backup", "shop-cli", "-n", "velero"])
            .status
            .success()
    );
    assert_eq!(
        field(
            &m,
            &["get", "restores", "-n", "velero"],
            "{.items[*].spec.backupName}"
        )
        .split_whitespace()
        .filter(|b| *b == "shop-cli")
        .count(),
        0,
        "its restores are gone"
    );
    assert_has(
        &m.ok(&["get", "deletebackuprequests", "-n", "velero"]),
        &["BACKUPNAME", "STATUS", "shop-cli", "Processed"],
    );
    // The objects restored stay in the cluster.
    assert_eq!(
        field(
            &m,
            &["get", "cm", "prices", "-n", "shop-cli"],
            "{.data.apple}"
        ),
        "3"
    );
    let out = cli(&["backup", "delete", "never-made"]);
    assert!(!out.status.success());
    assert_has(
        &String::from_utf8_lossy(&out.stderr),
        &["no backup \"never-made\""],
    );
}

/// Karmada's Velero guide, on the hub: the storage location propagated to
/// both members, a Backup propagated to member1, a Restore to member2,
/// and the namespace with its data arrives in member2.
#[test]
fn karmadas_velero_guide_moves_a_namespace_between_members() {
    let storage = tempfile::tempdir().expect("tempdir");
    let fleet = common::fleet::Fleet::new(&[("member1", "us-east"), ("member2", "eu-west")]);
    // The application lives in member1 only (not propagated).
    let m1 = fleet.member("member1");
    let m2 = fleet.member("member2");
    m1.ok_stdin(&["apply", "-f", "-"], NGINX_EXAMPLE);
    m1.ok(&[
        "rollout",
        "status",
        "-n",
        "nginx-example",
        "deployment/nginx-deployment",
        "--timeout=60s",
    ]);
    fleet.hub.ok(&["create", "namespace", "velero"]);
    fleet.apply(&format!(
        "{}---\n{}",
        common::velero_location(storage.path()),
        r#"
apiVersion: policy.karmada.io/v1alpha1
kind: PropagationPolicy
metadata: {name: velero-locations, namespace: velero}
spec:
  resourceSelectors:
    - {apiVersion: velero.io/v1, kind: BackupStorageLocation}
  placement:
    clusterAffinity:
      clusterNames: [member1, member2]
"#
    ));
    for m in [m1, m2] {
        wait_for(WAIT, "the propagated location Available", || {
            phase(m, "bsl", "default") == "Available"
        });
    }
    fleet.apply(
        r#"
apiVersion: velero.io/v1
kind: Backup
metadata: {name: nginx-backup, namespace: velero}
spec:
  includedNamespaces: [nginx-example]
  defaultVolumesToFsBackup: true
---
apiVersion: policy.karmada.io/v1alpha1
kind: PropagationPolicy
metadata: {name: nginx-backup, namespace: velero}
spec:
  resourceSelectors:
    - {apiVersion: velero.io/v1, kind: Backup, name: nginx-backup}
  placement:
    clusterAffinity:
      clusterNames: [member1]
"#,
    );
    wait_phase(m1, "backup", "nginx-backup", "Completed");
    wait_for(WAIT, "the backup synced into member2", || {
        phase(m2, "backup", "nginx-backup") == "Completed"
    });
    fleet.apply(
        r#"
apiVersion: velero.io/v1
kind: Restore
metadata: {name: nginx-restore, namespace: velero}
spec:
  backupName: nginx-backup
---
apiVersion: policy.karmada.io/v1alpha1
kind: PropagationPolicy
metadata: {name: nginx-restore, namespace: velero}
spec:
  resourceSelectors:
    - {apiVersion: velero.io/v1, kind: Restore, name: nginx-restore}
  placement:
    clusterAffinity:
      clusterNames: [member2]
"#,
    );
    wait_phase(m2, "restore", "nginx-restore", "Completed");
    m2.ok(&[
        "rollout",
        "status",
        "-n",
        "nginx-example",
        "deployment/nginx-deployment",
        "--timeout=60s",
    ]);
    assert_eq!(
        field(
            m2,
            &["get", "cm", "nginx-config", "-n", "nginx-example"],
            "{.data.greeting}"
        ),
        "hello"
    );
    // The Restore went only where its policy sent it.
    assert!(
        !m1.kubectl(&["get", "restore", "nginx-restore", "-n", "velero"])
            .status
            .success()
    );
}

/// Velero's AWS plugin against an S3-compatible store (as MinIO in
/// Velero's examples): credentials from `velero install --secret-file`'s
/// Secret, a bucket with a prefix, path-style requests to `s3Url`.
fn s3_location(url: &str) -> String {
    format!(
        r#"
apiVersion: v1
kind: Secret
metadata: {{name: cloud-credentials, namespace: velero}}
stringData:
  cloud: |
    [default]
    aws_access_key_id = flotilla
    aws_secret_access_key = flotilla-secret
---
apiVersion: velero.io/v1
kind: BackupStorageLocation
metadata: {{name: default, namespace: velero}}
spec:
  provider: aws
  objectStorage: {{bucket: velero, prefix: team}}
  config: {{region: minio, s3ForcePathStyle: "true", s3Url: "{url}"}}
  default: true
"#
    )
}

#[test]
fn an_s3_location_carries_objects_and_volume_data_between_members() {
    let root = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir_all(root.path().join("velero")).expect("bucket");
    let store = s3::S3Server::start(root.path(), "flotilla", "flotilla-secret");
    let a = Server::member("s3-a", &["--nodes", "1"]);
    let b = Server::member("s3-b", &["--nodes", "1"]);
    for m in [&a, &b] {
        use_location(m, &s3_location(&store.url));
    }
    // Wrong keys, or a Secret that is not there: Unavailable, and why.
    a.ok_stdin(
        &["apply", "-f", "-"],
        &format!(
            r#"
apiVersion: v1
kind: Secret
metadata: {{name: wrong-keys, namespace: velero}}
stringData: {{cloud: "[default]\naws_access_key_id = flotilla\naws_secret_access_key = guessed\n"}}
---
apiVersion: velero.io/v1
kind: BackupStorageLocation
metadata: {{name: wrong-keys, namespace: velero}}
spec:
  provider: aws
  credential: {{name: wrong-keys, key: cloud}}
  objectStorage: {{bucket: velero}}
  config: {{region: minio, s3ForcePathStyle: "true", s3Url: "{url}"}}
---
apiVersion: velero.io/v1
kind: BackupStorageLocation
metadata: {{name: no-secret, namespace: velero}}
spec:
  provider: aws
  credential: {{name: not-there, key: cloud}}
  objectStorage: {{bucket: velero}}
  config: {{region: minio, s3ForcePathStyle: "true", s3Url: "{url}"}}
"#,
            url = store.url
        ),
    );
    wait_for(WAIT, "the wrong locations Unavailable", || {
        phase(&a, "bsl", "wrong-keys") == "Unavailable"
            && phase(&a, "bsl", "no-secret") == "Unavailable"
    });
    assert_has(
        &velero_field(&a, "bsl", "no-secret", "{.status.message}"),
        &["Secret velero/not-there has no key \"cloud\""],
    );
    assert!(
        !velero_field(&a, "bsl", "wrong-keys", "{.status.message}").is_empty(),
        "a refused key is said"
    );

    a.ok_stdin(&["apply", "-f", "-"], NGINX_EXAMPLE);
    wait_for(WAIT, "the claim bound", || {
        field(
            &a,
            &["get", "pvc", "nginx-logs", "-n", "nginx-example"],
            "{.status.phase}",
        ) == "Bound"
    });
    let written = volume_dir(&a, "nginx-example");
    std::fs::create_dir_all(&written).expect("volume dir");
    std::fs::write(written.join("access.log"), "GET /s3 200\n").expect("write");
    a.ok_stdin(
        &["apply", "-f", "-"],
        r#"
apiVersion: velero.io/v1
kind: Backup
metadata: {name: to-s3, namespace: velero}
spec:
  includedNamespaces: [nginx-example]
  defaultVolumesToFsBackup: true
"#,
    );
    wait_phase(&a, "backup", "to-s3", "Completed");
    // Velero's record of the volume it read, with its bytes.
    assert_eq!(
        field(
            &a,
            &[
                "get",
                "podvolumebackups",
                "-n",
                "velero",
                "-l",
                "velero.io/backup-name=to-s3"
            ],
            "{range .items[*]}{.status.phase} {.spec.volume} {.status.progress.totalBytes}{end}"
        ),
        "Completed nginx-logs 12"
    );
    assert_has(
        &a.ok(&["get", "podvolumebackups", "-n", "velero"]),
        &[
            "STATUS",
            "BYTES DONE",
            "TOTAL BYTES",
            "STORAGE LOCATION",
            "UPLOADER",
            "kopia",
        ],
    );
    // `velero backup describe`'s volume section, counted and in detail.
    let describe = |details: bool| {
        let mut args = vec![
            "backup",
            "describe",
            "to-s3",
            "--kubeconfig",
            a.kubeconfig.to_str().expect("utf-8"),
        ];
        if details {
            args.push("--details");
        }
        String::from_utf8_lossy(&common::flotilla(&args).stdout).into_owned()
    };
    assert_has(
        &describe(false),
        &[
            "Backup Volumes:",
            "Pod Volume Backups - kopia (specify --details for more information):",
            "Completed:  1",
        ],
    );
    assert_has(
        &describe(true),
        &[
            "Pod Volume Backups - kopia:",
            "Completed:",
            "nginx-example/",
            ": nginx-logs",
        ],
    );
    // In the bucket, under the prefix, as Velero lays it out.
    let stored = root.path().join("velero/team/backups/to-s3");
    for file in [
        "to-s3.tar.gz",
        "velero-backup.json",
        "to-s3-podvolumebackups.json.gz",
    ] {
        assert!(stored.join(file).is_file(), "{file} in the bucket");
    }
    // The other member syncs it from the bucket and restores it, data too.
    wait_for(WAIT, "the backup synced into the other member", || {
        phase(&b, "backup", "to-s3") == "Completed"
    });
    b.ok_stdin(
        &["apply", "-f", "-"],
        r#"
apiVersion: velero.io/v1
kind: Restore
metadata: {name: from-s3, namespace: velero}
spec:
  backupName: to-s3
"#,
    );
    wait_phase(&b, "restore", "from-s3", "Completed");
    assert_eq!(
        field(
            &b,
            &["get", "configmap", "nginx-config", "-n", "nginx-example"],
            "{.data.greeting}"
        ),
        "hello"
    );
    wait_for(WAIT, "the volume's data restored", || {
        std::fs::read_to_string(volume_dir(&b, "nginx-example").join("access.log"))
            .is_ok_and(|t| t == "GET /s3 200\n")
    });
    assert_eq!(
        field(
            &b,
            &[
                "get",
                "podvolumerestores",
                "-n",
                "velero",
                "-l",
                "velero.io/restore-name=from-s3"
            ],
            "{range .items[*]}{.status.phase} {.spec.sourceNamespace} {.status.progress.bytesDone}{end}"
        ),
        "Completed nginx-example 12"
    );
    // Without its volumes (`restorePVs: false`): the objects only.
    b.ok_stdin(
        &["apply", "-f", "-"],
        r#"
apiVersion: velero.io/v1
kind: Restore
metadata: {name: objects-only, namespace: velero}
spec:
  backupName: to-s3
  restorePVs: false
  namespaceMapping: {nginx-example: nginx-objects}
"#,
    );
    wait_phase(&b, "restore", "objects-only", "Completed");
    assert_eq!(
        field(
            &b,
            &["get", "configmap", "nginx-config", "-n", "nginx-objects"],
            "{.data.greeting}"
        ),
        "hello"
    );
    assert_eq!(
        field(
            &b,
            &[
                "get",
                "podvolumerestores",
                "-n",
                "velero",
                "-l",
                "velero.io/restore-name=objects-only"
            ],
            "{.items[*].metadata.name}"
        ),
        ""
    );
    // `flotilla backup logs` reads the log from the bucket.
    let logs = common::flotilla(&[
        "backup",
        "logs",
        "to-s3",
        "--kubeconfig",
        a.kubeconfig.to_str().expect("utf-8"),
    ]);
    assert!(
        logs.status.success(),
        "{}",
        String::from_utf8_lossy(&logs.stderr)
    );
    assert_has(&String::from_utf8_lossy(&logs.stdout), &["to-s3"]);
}

/// A tmpfs of `size` mounted on a directory of its own, unmounted when
/// dropped: a storage location that fills up.
struct SmallDisk {
    dir: tempfile::TempDir,
}

impl SmallDisk {
    fn mount(size: &str) -> SmallDisk {
        let dir = tempfile::tempdir().expect("tempdir");
        let out = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .output()
            .expect("mount");
        assert!(
            out.status.success(),
            "mount a tmpfs (the test needs root): {}",
            String::from_utf8_lossy(&out.stderr)
        );
        SmallDisk { dir }
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg(self.dir.path())
            .status();
    }
}

/// What goes wrong is said, and never reported Completed: a damaged
/// tarball is refused with the failing checksum; a location that fills
/// up fails the backup saying so; a backup whose server is killed -9
/// mid-way is Failed when it comes back; a restore over what exists
/// follows `existingResourcePolicy`.
#[test]
fn damaged_full_and_interrupted_backups_are_never_reported_completed() {
    if !common::can_run_netns() {
        return; // needs root, for the tmpfs
    }
    let storage = tempfile::tempdir().expect("tempdir");
    let a = Server::member("bk-faults", &["--nodes", "1"]);
    use_location(&a, &common::velero_location(storage.path()));
    a.ok_stdin(&["apply", "-f", "-"], NGINX_EXAMPLE);
    wait_for(WAIT, "the claim bound", || {
        field(
            &a,
            &["get", "pvc", "nginx-logs", "-n", "nginx-example"],
            "{.status.phase}",
        ) == "Bound"
    });
    let written = volume_dir(&a, "nginx-example");
    std::fs::create_dir_all(&written).expect("volume dir");
    // 8 MiB of logs that do not compress.
    let mut noise = Vec::with_capacity(8 << 20);
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    while noise.len() < 8 << 20 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        noise.extend_from_slice(&x.to_le_bytes());
    }
    for i in 0..4 {
        std::fs::write(
            written.join(format!("access-{i}.log")),
            &noise[i << 21..(i + 1) << 21],
        )
        .expect("write");
    }
    let backup = |m: &Server, name: &str, extra: &str| {
        m.ok_stdin(
            &["apply", "-f", "-"],
            &format!(
                "apiVersion: velero.io/v1\nkind: Backup\nmetadata: {{name: {name}, namespace: velero}}\nspec:\n  includedNamespaces: [nginx-example]\n  defaultVolumesToFsBackup: true\n{extra}"
            ),
        );
    };
    let restore = |m: &Server, name: &str, from: &str, extra: &str| {
        m.ok_stdin(
            &["apply", "-f", "-"],
            &format!(
                "apiVersion: velero.io/v1\nkind: Restore\nmetadata: {{name: {name}, namespace: velero}}\nspec:\n  backupName: {from}\n{extra}"
            ),
        );
    };

    // A restore over what exists: left alone, or updated when asked.
    backup(&a, "good", "");
    wait_phase(&a, "backup", "good", "Completed");
    a.ok(&[
        "patch",
        "cm",
        "nginx-config",
        "-n",
        "nginx-example",
        "--type=merge",
        "-p",
        r#"{"data":{"greeting":"changed"}}"#,
    ]);
    let greeting = |m: &Server| {
        field(
            m,
            &["get", "cm", "nginx-config", "-n", "nginx-example"],
            "{.data.greeting}",
        )
    };
    restore(&a, "keep", "good", "  restorePVs: false\n");
    wait_phase(&a, "restore", "keep", "Completed");
    assert_eq!(
        greeting(&a),
        "changed",
        "existingResourcePolicy none keeps it"
    );
    restore(
        &a,
        "update",
        "good",
        "  restorePVs: false\n  existingResourcePolicy: update\n",
    );
    wait_phase(&a, "restore", "update", "Completed");
    assert_eq!(
        greeting(&a),
        "hello",
        "existingResourcePolicy update restores it"
    );

    // A damaged tarball: refused, with the checksum that failed.
    backup(&a, "damaged", "");
    wait_phase(&a, "backup", "damaged", "Completed");
    let tarball = storage
        .path()
        .join("velero/fleet/backups/damaged/damaged.tar.gz");
    let mut bytes = std::fs::read(&tarball).expect("tarball");
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xff;
    std::fs::write(&tarball, bytes).expect("damage it");
    restore(&a, "from-damaged", "damaged", "");
    wait_phase(&a, "restore", "from-damaged", "Failed");
    assert_has(
        &velero_field(&a, "restore", "from-damaged", "{.status.failureReason}"),
        &[
            "the tarball of backup damaged does not match its checksum (sha256 ",
            "expected",
            "found): its storage location is damaged",
        ],
    );

    // A location that fills up: the backup fails and says why.
    let disk = SmallDisk::mount("1m");
    a.ok_stdin(
        &["apply", "-f", "-"],
        &format!(
            r#"
apiVersion: velero.io/v1
kind: BackupStorageLocation
metadata: {{name: small, namespace: velero}}
spec:
  provider: filesystem
  objectStorage: {{bucket: velero}}
  config: {{path: "{}"}}
"#,
            disk.dir.path().display()
        ),
    );
    wait_for(WAIT, "the small location Available", || {
        phase(&a, "bsl", "small") == "Available"
    });
    backup(&a, "too-big", "  storageLocation: small\n");
    let deadline = std::time::Instant::now() + WAIT;
    let mut last = String::new();
    while std::time::Instant::now() < deadline {
        last = phase(&a, "backup", "too-big");
        if matches!(last.as_str(), "Completed" | "PartiallyFailed" | "Failed") {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(
        matches!(last.as_str(), "PartiallyFailed" | "Failed"),
        "a backup larger than its location is {last:?}"
    );
    let said = common::flotilla(&[
        "backup",
        "describe",
        "too-big",
        "--kubeconfig",
        a.kubeconfig.to_str().unwrap(),
    ]);
    let logs = common::flotilla(&[
        "backup",
        "logs",
        "too-big",
        "--kubeconfig",
        a.kubeconfig.to_str().unwrap(),
    ]);
    let all = format!(
        "{}{}{}",
        String::from_utf8_lossy(&said.stdout),
        velero_field(&a, "backup", "too-big", "{.status.failureReason}"),
        String::from_utf8_lossy(&logs.stdout)
    );
    assert!(
        all.contains("No space left on device") || all.contains("os error 28"),
        "the backup says the location is full:\n{all}"
    );
    drop(disk);

    // Killed -9 while it runs (held before its upload by a failpoint):
    // Failed once the server is back, as Velero fails it.
    drop(a);
    let mut a = Server::member_with_env(
        "bk-killed",
        &["--nodes", "1"],
        &[("FLOTILLA_FAILPOINTS", "backup-before-upload=sleep(60000)")],
    );
    use_location(&a, &common::velero_location(storage.path()));
    a.ok_stdin(&["apply", "-f", "-"], NGINX_EXAMPLE);
    backup(&a, "interrupted", "");
    wait_for(WAIT, "the backup in progress", || {
        phase(&a, "backup", "interrupted") == "InProgress"
    });
    a.kill9();
    a.spawn();
    wait_phase(&a, "backup", "interrupted", "Failed");
    assert_has(
        &velero_field(&a, "backup", "interrupted", "{.status.failureReason}"),
        &[
            "found a backup with status \"InProgress\" during the server starting, mark it as \"Failed\"",
        ],
    );
}

/// `flotilla bench backup` runs and reports each figure, with every byte
/// backed up and restored (it fails otherwise).
#[test]
fn the_backup_benchmark_runs_and_reports_json() {
    let out = common::flotilla(&["bench", "backup", "--mib", "4", "--files", "8", "--json"]);
    assert!(
        out.status.success(),
        "bench: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let report: serde_json::Value =
        serde_json::from_str(stdout.lines().last().unwrap_or_default()).expect("one JSON object");
    assert_eq!(report["args"]["mib"], 4);
    for figure in ["cp", "backup", "backup_unchanged", "restore"] {
        assert!(
            report[figure]["mib_per_second"]
                .as_f64()
                .is_some_and(|r| r > 0.0),
            "{figure}: {report}"
        );
    }
}
