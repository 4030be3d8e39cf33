//! The cluster's own records: CertificateSigningRequests, APIServices,
//! Leases, CustomResourceDefinitions (`crd.rs` serves what they define),
//! with `kubectl get`'s columns.

use super::{Discovered, Methods, READ_WRITE_VERBS, ServedBy, Strategy, Subresource};
use crate::error::Cause;
use crate::table::prelude::*;

pub struct CertificateSigningRequests;

impl Strategy for CertificateSigningRequests {
    fn subresources(&self) -> &'static [Subresource] {
        &[Subresource {
            name: "approval",
            methods: Methods::NotPost,
            served_by: ServedBy::Handlers,
            discovered: Some(Discovered {
                response: None,
                verbs: READ_WRITE_VERBS,
            }),
        }]
    }

    /// The requester's identity, from the request, whatever the body says.
    fn prepare_create_by(&self, obj: &mut Value, user: Option<&crate::user::User>) {
        crate::csr::prepare_create(obj, user);
    }

    fn update_subresource(&self, subresource: &str, new: &mut Value, old: &Value) -> Vec<Cause> {
        crate::csr::update_subresource(subresource, new, old)
    }

    fn columns(&self) -> Option<Vec<Column>> {
        Some(vec![
            NAME,
            AGE,
            col("SignerName", "string", 0),
            col("Requestor", "string", 0),
            col("RequestedDuration", "string", 0),
            col("Condition", "string", 0),
        ])
    }

    fn cells(&self, o: &Value, name: Value, created: String) -> Vec<Value> {
        let mut conditions: Vec<&str> = arr(o, "/status/conditions")
            .iter()
            .map(|c| s(c, "/type"))
            .collect();
        if !s(o, "/status/certificate").is_empty() {
            conditions.push("Issued");
        }
        let duration = o
            .pointer("/spec/expirationSeconds")
            .and_then(Value::as_i64)
            .map_or("<none>".to_string(), human_duration);
        vec![
            name,
            json!(created),
            json!(s(o, "/spec/signerName")),
            json!(s(o, "/spec/username")),
            json!(duration),
            json!(if conditions.is_empty() {
                "Pending".to_string()
            } else {
                conditions.join(",")
            }),
        ]
    }
}

pub struct ApiServices;

impl Strategy for ApiServices {
    fn columns(&self) -> Option<Vec<Column>> {
        Some(vec![
            NAME,
            col("Service", "string", 0),
            col("Available", "string", 0),
            AGE,
        ])
    }

    fn cells(&self, o: &Value, name: Value, created: String) -> Vec<Value> {
        let service = match s(o, "/spec/service/name") {
            "" => "Local".to_string(),
            n => format!("{}/{n}", s(o, "/spec/service/namespace")),
        };
        let available = arr(o, "/status/conditions")
            .iter()
            .find(|c| s(c, "/type") == "Available")
            .map_or("Unknown".to_string(), |c| s(c, "/status").to_string());
        vec![name, json!(service), json!(available), json!(created)]
    }
}

pub struct Leases;

impl Strategy for Leases {
    fn columns(&self) -> Option<Vec<Column>> {
        Some(vec![NAME, col("Holder", "string", 0), AGE])
    }

    fn cells(&self, o: &Value, name: Value, created: String) -> Vec<Value> {
        vec![name, json!(s(o, "/spec/holderIdentity")), json!(created)]
    }
}

pub struct CustomResourceDefinitions;

impl Strategy for CustomResourceDefinitions {
    /// apiextensions' SetDefaults_CustomResourceDefinitionSpec: no
    /// conversion is `strategy: None`.
    fn default(&self, obj: &mut Value) {
        if let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut)
            && spec.get("conversion").is_none_or(Value::is_null)
        {
            spec.insert("conversion".into(), json!({"strategy": "None"}));
        }
    }

    fn columns(&self) -> Option<Vec<Column>> {
        Some(vec![NAME, col("Created At", "date", 0)])
    }

    fn cells(&self, o: &Value, name: Value, _created: String) -> Vec<Value> {
        vec![name, json!(s(o, "/metadata/creationTimestamp"))]
    }
}
