//! The contract between a restore that writes a volume's data back and
//! the kubelet that mounts it: a restored claim whose data is still
//! being written carries [`RESTORING_ANNOTATION`], and no container
//! using it starts until the restore removes it (Velero holds restored
//! pods in its `restore-wait` init container for the same reason).

/// On a PersistentVolumeClaim: the restore (`velero/<name>`) still
/// writing its data.
pub const RESTORING_ANNOTATION: &str = "backup.flotilla.io/restoring-data";

/// On a workload template: move its volumes' data with it when it fails
/// over to another cluster (`"true"`).
pub const MIGRATE_DATA_ANNOTATION: &str = "backup.flotilla.io/migrate-data";
