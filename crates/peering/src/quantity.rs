//! Quantities of shared resources, parsed and printed as the API does.

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

pub use flotilla_core::quantity::parse as parse_opt;

/// A quantity's value (cores, bytes, a count).
pub fn parse(q: &str) -> Option<f64> {
    parse_opt(q)
}

/// `value` of resource `name` as a Quantity, rounded down: cpu in
/// millicores, memory in the largest binary unit, anything else whole.
pub fn format(name: &str, value: f64) -> Quantity {
    use flotilla_core::quantity::{format_bytes, format_millicores};
    Quantity(match name {
        "cpu" => format_millicores((value * 1000.0).floor() as i64),
        "memory" | "ephemeral-storage" => format_bytes(value.floor() as i64),
        _ => (value.floor() as i64).to_string(),
    })
}
