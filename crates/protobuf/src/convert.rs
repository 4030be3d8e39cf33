//! Messages to JSON and back, field by field, by descriptor.
//!
//! A message field's name is its JSON name (go-to-protobuf takes it from
//! the JSON tag), except in these places, where the JSON differs from the
//! message and upstream's Go types marshal them by hand:
//! - times (`Time`: RFC 3339 to the second; `MicroTime`: to the
//!   microsecond; `Duration`: Go's duration string), `IntOrString`,
//!   `Quantity`;
//! - raw JSON carried as bytes (`RawExtension`, `FieldsV1`, the
//!   apiextensions `JSON`); a RawExtension holding a protobuf envelope (a
//!   watch event's object) is decoded as an object;
//! - structs embedded without a JSON name (a Volume's `volumeSource`, a
//!   key selector's `localObjectReference`, ...): their fields sit in the
//!   parent's JSON (`INLINE`);
//! - the CRD schema (`JSONSchemaProps`): `$ref`, `$schema`,
//!   `x-kubernetes-*`, and its `...Or...` unions.
//!
//! Protobuf cannot tell an empty string from an absent one, and Go writes
//! every non-pointer field; like Go's `omitempty`, empty strings and zero
//! times are left out of the JSON (except inside lists and maps).

use std::collections::HashMap;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use prost::Message as _;
use prost_reflect::{
    DynamicMessage, FieldDescriptor, Kind, MapKey, MessageDescriptor, ReflectMessage, Value as Pb,
};
use serde_json::{Map, Number, Value};

use crate::envelope::{self, MAGIC};
use crate::{Error, types};

/// How deep envelopes may nest inside RawExtensions.
const MAX_DEPTH: usize = 8;

/// Names of struct fields that Go embeds without a JSON name (upstream's
/// `json:""` or `json:",inline"` with a protobuf name), message-typed.
const INLINE: &[&str] = &[
    "volumeSource",             // core Volume
    "persistentVolumeSource",   // core PersistentVolumeSpec
    "localObjectReference", // core {ConfigMap,Secret}{KeySelector,EnvSource,Projection,VolumeSource}
    "handler",              // core Probe (RuntimeClass.handler is a string)
    "ephemeralContainerCommon", // core EphemeralContainer
    "ruleWithOperations",   // admissionregistration NamedRuleWithOperations
    "rule",                 // admissionregistration RuleWithOperations
    "ingressRuleValue",     // networking IngressRule
];

/// The message types whose JSON is not a JSON object of their fields.
#[derive(Clone, Copy)]
enum Special {
    Time,
    MicroTime,
    Duration,
    IntOrString,
    Quantity,
    RawJson,
    SchemaOrArray,
    SchemaOrBool,
    SchemaOrStringArray,
    /// A list of strings wrapped in a message (`ExtraValue`, `Verbs`).
    StringList,
}

const APIEXTENSIONS: &str = "apiextensions_apiserver.pkg.apis.apiextensions.v1";

fn special(m: &MessageDescriptor) -> Option<Special> {
    Some(match m.full_name() {
        "apimachinery.pkg.apis.meta.v1.Time" => Special::Time,
        "apimachinery.pkg.apis.meta.v1.MicroTime" => Special::MicroTime,
        "apimachinery.pkg.apis.meta.v1.Duration" => Special::Duration,
        "apimachinery.pkg.util.intstr.IntOrString" => Special::IntOrString,
        "apimachinery.pkg.api.resource.Quantity"
        | "apimachinery.pkg.api.resource.QuantityValue" => Special::Quantity,
        "apimachinery.pkg.runtime.RawExtension"
        | "apimachinery.pkg.apis.meta.v1.FieldsV1"
        | "apiextensions_apiserver.pkg.apis.apiextensions.v1.JSON" => Special::RawJson,
        "apimachinery.pkg.apis.meta.v1.Verbs"
        | "api.authentication.v1.ExtraValue"
        | "api.authorization.v1.ExtraValue"
        | "api.certificates.v1.ExtraValue" => Special::StringList,
        name => match name.strip_prefix(APIEXTENSIONS) {
            Some(".JSONSchemaPropsOrArray") => Special::SchemaOrArray,
            Some(".JSONSchemaPropsOrBool") => Special::SchemaOrBool,
            Some(".JSONSchemaPropsOrStringArray") => Special::SchemaOrStringArray,
            _ => return None,
        },
    })
}

fn is_inline(f: &FieldDescriptor) -> bool {
    INLINE.contains(&f.name())
        && !f.is_list()
        && matches!(f.kind(), Kind::Message(m) if special(&m).is_none())
}

fn is_schema(m: &MessageDescriptor) -> bool {
    m.full_name() == format!("{APIEXTENSIONS}.JSONSchemaProps")
}

/// Fields whose protobuf name is not their JSON name (go-to-protobuf
/// took these from the Go field, not its JSON tag): (message field, JSON).
/// `DaemonEndpoint.Port` really is `Port` in JSON too.
const RENAMED: &[(&str, &str)] = &[
    ("Webhooks", "webhooks"),     // admissionregistration webhook configurations
    ("Expression", "expression"), // admissionregistration Validation, Variable
    ("Name", "name"),             // admissionregistration Variable
    ("aPIGroup", "apiGroup"),     // networking IngressClassParametersReference
    ("uID", "uid"),               // authentication BoundObjectReference
];

/// The message field a JSON key names in `m`.
fn field_name(m: &MessageDescriptor, key: &str) -> String {
    if !is_schema(m) {
        return match RENAMED.iter().find(|(_, json)| *json == key) {
            Some((field, _)) if m.get_field_by_name(field).is_some() => field.to_string(),
            _ => key.to_string(),
        };
    }
    match key {
        "$ref" => "ref".into(),
        "$schema" => "schema".into(),
        _ => match key.strip_prefix("x-kubernetes-") {
            // x-kubernetes-list-map-keys -> xKubernetesListMapKeys
            Some(rest) => {
                let mut name = String::from("xKubernetes");
                for word in rest.split('-') {
                    let mut chars = word.chars();
                    if let Some(first) = chars.next() {
                        name.extend(first.to_uppercase());
                        name.push_str(chars.as_str());
                    }
                }
                name
            }
            None => key.to_string(),
        },
    }
}

/// The JSON key of field `f` of `m`.
fn json_name(m: &MessageDescriptor, f: &FieldDescriptor) -> String {
    let name = f.name();
    if !is_schema(m) {
        return match RENAMED.iter().find(|(field, _)| *field == name) {
            Some((_, json)) => json.to_string(),
            None => name.to_string(),
        };
    }
    match name {
        "ref" => "$ref".into(),
        "schema" => "$schema".into(),
        _ => match name.strip_prefix("xKubernetes") {
            Some(rest) => {
                let mut key = String::from("x-kubernetes");
                for c in rest.chars() {
                    if c.is_ascii_uppercase() {
                        key.push('-');
                        key.push(c.to_ascii_lowercase());
                    } else {
                        key.push(c);
                    }
                }
                key
            }
            None => name.to_string(),
        },
    }
}

// ---------------------------------------------------------------------
// JSON to protobuf

pub(crate) fn encode_object(object: &Value) -> Result<Vec<u8>, Error> {
    let obj = object
        .as_object()
        .ok_or_else(|| Error::field("", "an object is a JSON object"))?;
    let text = |k: &str| obj.get(k).and_then(Value::as_str).unwrap_or("");
    let (api_version, kind) = (text("apiVersion"), text("kind"));
    let m = types::message_for(api_version, kind).ok_or_else(|| Error::UnknownKind {
        api_version: api_version.to_string(),
        kind: kind.to_string(),
    })?;
    let message = to_message(&m, obj, "")?;
    Ok(envelope::seal(api_version, kind, message.encode_to_vec()))
}

/// The WatchEvent message around an event's (enveloped) object.
pub(crate) fn encode_watch_event(event: &Value) -> Result<Vec<u8>, Error> {
    let type_ = event.get("type").and_then(Value::as_str).unwrap_or("");
    let object = event
        .get("object")
        .ok_or_else(|| Error::field("object", "a watch event has an object"))?;
    let event = WatchEvent {
        r#type: Some(type_.to_string()),
        object: Some(RawExtension {
            raw: Some(encode_object(object)?),
        }),
    };
    // Frames of a watch stream are raw WatchEvents, without the `k8s\0`
    // envelope (upstream's stream serializer is the raw one); only the
    // object inside is enveloped.
    Ok(event.encode_to_vec())
}

/// `meta.v1.WatchEvent`, for its frames.
#[derive(Clone, PartialEq, prost::Message)]
struct WatchEvent {
    #[prost(string, optional, tag = "1")]
    r#type: Option<String>,
    #[prost(message, optional, tag = "2")]
    object: Option<RawExtension>,
}

/// `runtime.RawExtension`.
#[derive(Clone, PartialEq, prost::Message)]
struct RawExtension {
    #[prost(bytes = "vec", optional, tag = "1")]
    raw: Option<Vec<u8>>,
}

fn to_message(
    m: &MessageDescriptor,
    obj: &Map<String, Value>,
    path: &str,
) -> Result<DynamicMessage, Error> {
    let mut message = DynamicMessage::new(m.clone());
    let inline: Vec<FieldDescriptor> = m.fields().filter(is_inline).collect();
    let mut inlined: Vec<Map<String, Value>> = vec![Map::new(); inline.len()];
    for (key, value) in obj {
        if value.is_null() {
            continue;
        }
        if let Some(f) = m.get_field_by_name(&field_name(m, key))
            && !is_inline(&f)
        {
            let v = to_field(&f, value, &format!("{path}.{key}"))?;
            message.set_field(&f, v);
        } else if let Some(i) = inline.iter().position(|f| inlines(f, key)) {
            inlined[i].insert(key.clone(), value.clone());
        }
        // Anything else is not in this version's message (apiVersion and
        // kind, or a field newer than the definitions): left out.
    }
    for (f, fields) in inline.iter().zip(inlined) {
        if let (false, Kind::Message(sub)) = (fields.is_empty(), f.kind()) {
            let value = to_message(&sub, &fields, path)?;
            message.set_field(f, Pb::Message(value));
        }
    }
    Ok(message)
}

/// True when JSON key `key` belongs to the struct that `f` inlines.
fn inlines(f: &FieldDescriptor, key: &str) -> bool {
    let Kind::Message(m) = f.kind() else {
        return false;
    };
    m.get_field_by_name(key).is_some_and(|f| !is_inline(&f))
        || m.fields().filter(is_inline).any(|f| inlines(&f, key))
}

fn to_field(f: &FieldDescriptor, value: &Value, path: &str) -> Result<Pb, Error> {
    if f.is_map() {
        let Kind::Message(entry) = f.kind() else {
            return Err(Error::field(path, "unsupported map"));
        };
        let value_field = entry.map_entry_value_field();
        let obj = value
            .as_object()
            .ok_or_else(|| Error::field(path, "expected a JSON object"))?;
        let mut map = HashMap::with_capacity(obj.len());
        for (k, v) in obj {
            let v = match (v, value_field.kind()) {
                // null: the zero value (a map of times may hold Go's zero time).
                (Value::Null, Kind::Message(m)) => Pb::Message(DynamicMessage::new(m)),
                (Value::Null, _) => continue,
                (v, _) => to_single(&value_field, v, &format!("{path}[{k}]"))?,
            };
            map.insert(MapKey::String(k.clone()), v);
        }
        return Ok(Pb::Map(map));
    }
    if f.is_list() {
        let items = value
            .as_array()
            .ok_or_else(|| Error::field(path, "expected a JSON array"))?;
        let items = items
            .iter()
            .enumerate()
            .filter(|(_, v)| !v.is_null())
            .map(|(i, v)| to_single(f, v, &format!("{path}[{i}]")))
            .collect::<Result<_, _>>()?;
        return Ok(Pb::List(items));
    }
    to_single(f, value, path)
}

fn to_single(f: &FieldDescriptor, value: &Value, path: &str) -> Result<Pb, Error> {
    let wrong = |what: &str| Error::field(path, format!("expected {what}, got {value}"));
    let int = || {
        value
            .as_i64()
            .or_else(|| {
                value
                    .as_f64()
                    .filter(|f| f.fract() == 0.0)
                    .map(|f| f as i64)
            })
            .ok_or_else(|| wrong("an integer"))
    };
    Ok(match f.kind() {
        Kind::Message(m) => match special(&m) {
            Some(kind) => to_special(kind, &m, value, path)?,
            None => {
                let obj = value.as_object().ok_or_else(|| wrong("a JSON object"))?;
                Pb::Message(to_message(&m, obj, path)?)
            }
        },
        Kind::String => Pb::String(value.as_str().ok_or_else(|| wrong("a string"))?.to_string()),
        Kind::Bool => Pb::Bool(value.as_bool().ok_or_else(|| wrong("a boolean"))?),
        Kind::Int32 | Kind::Sint32 | Kind::Sfixed32 => {
            Pb::I32(i32::try_from(int()?).map_err(|_| wrong("a 32-bit integer"))?)
        }
        Kind::Int64 | Kind::Sint64 | Kind::Sfixed64 => Pb::I64(int()?),
        Kind::Uint32 | Kind::Fixed32 => {
            Pb::U32(u32::try_from(int()?).map_err(|_| wrong("an unsigned 32-bit integer"))?)
        }
        Kind::Uint64 | Kind::Fixed64 => {
            Pb::U64(u64::try_from(int()?).map_err(|_| wrong("an unsigned integer"))?)
        }
        Kind::Double => Pb::F64(value.as_f64().ok_or_else(|| wrong("a number"))?),
        Kind::Float => Pb::F32(value.as_f64().ok_or_else(|| wrong("a number"))? as f32),
        Kind::Bytes => {
            let text = value.as_str().ok_or_else(|| wrong("base64 data"))?;
            let bytes = BASE64
                .decode(text)
                .map_err(|e| Error::field(path, format!("illegal base64 data: {e}")))?;
            Pb::Bytes(bytes.into())
        }
        Kind::Enum(_) => Pb::EnumNumber(i32::try_from(int()?).map_err(|_| wrong("an enum"))?),
    })
}

/// Sets field `name` of a new `m`, or fails as a defect of the definitions.
fn with_fields(m: &MessageDescriptor, fields: Vec<(&str, Pb)>) -> Result<Pb, Error> {
    let mut message = DynamicMessage::new(m.clone());
    for (name, value) in fields {
        let f = m
            .get_field_by_name(name)
            .ok_or_else(|| Error::field(m.full_name(), format!("no field {name}")))?;
        message.set_field(&f, value);
    }
    Ok(Pb::Message(message))
}

fn schema_message(m: &MessageDescriptor, field: &str) -> Result<MessageDescriptor, Error> {
    match m.get_field_by_name(field).map(|f| f.kind()) {
        Some(Kind::Message(sub)) => Ok(sub),
        _ => Err(Error::field(
            m.full_name(),
            format!("no message field {field}"),
        )),
    }
}

fn to_special(
    kind: Special,
    m: &MessageDescriptor,
    value: &Value,
    path: &str,
) -> Result<Pb, Error> {
    let wrong = |what: &str| Error::field(path, format!("expected {what}, got {value}"));
    match kind {
        Special::Time | Special::MicroTime => {
            let text = value.as_str().ok_or_else(|| wrong("an RFC 3339 time"))?;
            let t: jiff::Timestamp = text
                .parse()
                .map_err(|e| Error::field(path, format!("invalid time {text:?}: {e}")))?;
            with_fields(
                m,
                vec![
                    ("seconds", Pb::I64(t.as_second())),
                    ("nanos", Pb::I32(t.subsec_nanosecond())),
                ],
            )
        }
        Special::Duration => {
            let text = value.as_str().ok_or_else(|| wrong("a duration"))?;
            let nanos = parse_go_duration(text)
                .ok_or_else(|| Error::field(path, format!("invalid duration {text:?}")))?;
            with_fields(m, vec![("duration", Pb::I64(nanos))])
        }
        Special::IntOrString => match value {
            Value::String(s) => with_fields(
                m,
                vec![("type", Pb::I64(1)), ("strVal", Pb::String(s.clone()))],
            ),
            Value::Number(n) => {
                let i = n
                    .as_i64()
                    .and_then(|i| i32::try_from(i).ok())
                    .ok_or_else(|| wrong("a 32-bit integer or a string"))?;
                with_fields(m, vec![("type", Pb::I64(0)), ("intVal", Pb::I32(i))])
            }
            _ => Err(wrong("an integer or a string")),
        },
        Special::Quantity => {
            let text = match value {
                Value::String(s) => s.clone(),
                Value::Number(n) => n.to_string(),
                _ => return Err(wrong("a quantity")),
            };
            with_fields(m, vec![("string", Pb::String(text))])
        }
        Special::RawJson => {
            let f = m
                .get_field(1)
                .ok_or_else(|| Error::field(path, "raw field missing"))?;
            let bytes = serde_json::to_vec(value).map_err(|e| Error::field(path, e.to_string()))?;
            let mut message = DynamicMessage::new(m.clone());
            message.set_field(&f, Pb::Bytes(bytes.into()));
            Ok(Pb::Message(message))
        }
        Special::SchemaOrArray => {
            let schema = schema_message(m, "schema")?;
            match value {
                Value::Array(items) => {
                    let items = items
                        .iter()
                        .enumerate()
                        .map(|(i, v)| {
                            let obj = v.as_object().ok_or_else(|| wrong("schemas"))?;
                            to_message(&schema, obj, &format!("{path}[{i}]")).map(Pb::Message)
                        })
                        .collect::<Result<_, _>>()?;
                    with_fields(m, vec![("jSONSchemas", Pb::List(items))])
                }
                Value::Object(obj) => with_fields(
                    m,
                    vec![("schema", Pb::Message(to_message(&schema, obj, path)?))],
                ),
                _ => Err(wrong("a schema or a list of schemas")),
            }
        }
        Special::SchemaOrBool => {
            let schema = schema_message(m, "schema")?;
            match value {
                Value::Bool(b) => with_fields(m, vec![("allows", Pb::Bool(*b))]),
                Value::Object(obj) => with_fields(
                    m,
                    vec![
                        ("allows", Pb::Bool(true)),
                        ("schema", Pb::Message(to_message(&schema, obj, path)?)),
                    ],
                ),
                _ => Err(wrong("a schema or a boolean")),
            }
        }
        Special::StringList => {
            let items = value
                .as_array()
                .and_then(|items| {
                    items
                        .iter()
                        .map(|v| v.as_str().map(|s| Pb::String(s.to_string())))
                        .collect::<Option<_>>()
                })
                .ok_or_else(|| wrong("a list of strings"))?;
            with_fields(m, vec![("items", Pb::List(items))])
        }
        Special::SchemaOrStringArray => {
            let schema = schema_message(m, "schema")?;
            match value {
                Value::Array(items) => {
                    let items = items
                        .iter()
                        .map(|v| v.as_str().map(|s| Pb::String(s.to_string())))
                        .collect::<Option<_>>()
                        .ok_or_else(|| wrong("a list of strings"))?;
                    with_fields(m, vec![("property", Pb::List(items))])
                }
                Value::Object(obj) => with_fields(
                    m,
                    vec![("schema", Pb::Message(to_message(&schema, obj, path)?))],
                ),
                _ => Err(wrong("a schema or a list of strings")),
            }
        }
    }
}

// ---------------------------------------------------------------------
// protobuf to JSON

pub(crate) fn decode_object(bytes: &[u8], depth: usize) -> Result<Value, Error> {
    if depth > MAX_DEPTH {
        return Err(Error::Malformed("objects are nested too deeply".into()));
    }
    let unknown = envelope::open(bytes)?;
    let (api_version, kind) = unknown.type_meta();
    let m = types::message_for(&api_version, &kind).ok_or_else(|| Error::UnknownKind {
        api_version: api_version.clone(),
        kind: kind.clone(),
    })?;
    let raw = unknown.raw.as_deref().unwrap_or_default();
    let message = DynamicMessage::decode(m, raw).map_err(|e| Error::Malformed(e.to_string()))?;
    // Upstream's JSON order: kind, apiVersion, then the fields.
    let mut obj = Map::new();
    obj.insert("kind".into(), Value::String(kind));
    obj.insert("apiVersion".into(), Value::String(api_version));
    obj.extend(to_json(&message, depth)?);
    Ok(Value::Object(obj))
}

pub(crate) fn decode_watch_event(bytes: &[u8]) -> Result<Value, Error> {
    // Raw, as upstream frames them; an enveloped one is read too.
    let unknown;
    let raw_event = if bytes.starts_with(&envelope::MAGIC) {
        unknown = envelope::open(bytes)?;
        unknown.raw.as_deref().unwrap_or_default()
    } else {
        bytes
    };
    let event = WatchEvent::decode(raw_event).map_err(|e| Error::Malformed(e.to_string()))?;
    let raw = event.object.and_then(|o| o.raw).unwrap_or_default();
    let mut obj = Map::new();
    obj.insert(
        "type".into(),
        Value::String(event.r#type.unwrap_or_default()),
    );
    obj.insert("object".into(), decode_object(&raw, 1)?);
    Ok(Value::Object(obj))
}

fn to_json(message: &DynamicMessage, depth: usize) -> Result<Map<String, Value>, Error> {
    let m = message.descriptor();
    let mut out = Map::new();
    for (f, value) in message.fields() {
        if is_inline(&f) {
            if let Pb::Message(inner) = value {
                out.extend(to_json(inner, depth)?);
            }
            continue;
        }
        let json = match value {
            Pb::Map(map) if f.is_map() => {
                let Kind::Message(entry) = f.kind() else {
                    continue;
                };
                let value_field = entry.map_entry_value_field();
                let mut obj = Map::new();
                let mut keys: Vec<(&MapKey, &Pb)> = map.iter().collect();
                keys.sort_by_key(|(k, _)| map_key(k));
                for (k, v) in keys {
                    // A zero time in a map is null, as Go writes it.
                    let v = from_single(&value_field, v, false, depth)?;
                    obj.insert(map_key(k), v.unwrap_or(Value::Null));
                }
                Some(Value::Object(obj))
            }
            Pb::List(items) => {
                let items = items
                    .iter()
                    .map(|v| from_single(&f, v, false, depth))
                    .collect::<Result<Vec<_>, _>>()?;
                Some(Value::Array(items.into_iter().flatten().collect()))
            }
            single => from_single(&f, single, true, depth)?,
        };
        if let Some(json) = json {
            out.insert(json_name(&m, &f), json);
        }
    }
    Ok(out)
}

fn map_key(k: &MapKey) -> String {
    match k {
        MapKey::String(s) => s.clone(),
        MapKey::Bool(b) => b.to_string(),
        MapKey::I32(i) => i.to_string(),
        MapKey::I64(i) => i.to_string(),
        MapKey::U32(i) => i.to_string(),
        MapKey::U64(i) => i.to_string(),
    }
}

/// One value as JSON; None leaves it out (`omit_empty`: an empty string
/// or bytes of a field of its own).
fn from_single(
    f: &FieldDescriptor,
    value: &Pb,
    omit_empty: bool,
    depth: usize,
) -> Result<Option<Value>, Error> {
    let number = |n: Option<Number>| n.map(Value::Number);
    Ok(match value {
        Pb::Message(inner) => match special(&inner.descriptor()) {
            Some(kind) => from_special(kind, inner, depth)?,
            None => Some(Value::Object(to_json(inner, depth)?)),
        },
        Pb::String(s) if omit_empty && s.is_empty() => None,
        Pb::String(s) => Some(Value::String(s.clone())),
        Pb::Bool(b) => Some(Value::Bool(*b)),
        Pb::I32(i) => Some(Value::from(*i)),
        Pb::I64(i) => Some(Value::from(*i)),
        Pb::U32(i) => Some(Value::from(*i)),
        Pb::U64(i) => Some(Value::from(*i)),
        Pb::F32(x) => number(Number::from_f64(f64::from(*x))),
        Pb::F64(x) => number(Number::from_f64(*x)),
        Pb::EnumNumber(i) => Some(Value::from(*i)),
        Pb::Bytes(b) if omit_empty && b.is_empty() => None,
        Pb::Bytes(b) => Some(Value::String(BASE64.encode(b))),
        Pb::List(_) | Pb::Map(_) => {
            return Err(Error::Malformed(format!(
                "unexpected repeated value in {}",
                f.full_name()
            )));
        }
    })
}

fn get<'a>(message: &'a DynamicMessage, name: &str) -> Option<std::borrow::Cow<'a, Pb>> {
    message.get_field_by_name(name)
}

fn get_i64(message: &DynamicMessage, name: &str) -> i64 {
    match get(message, name).as_deref() {
        Some(Pb::I64(i)) => *i,
        Some(Pb::I32(i)) => i64::from(*i),
        _ => 0,
    }
}

/// Go's zero time (0001-01-01T00:00:00Z) in Unix seconds: JSON null.
const GO_ZERO_TIME: i64 = -62_135_596_800;

fn from_special(
    kind: Special,
    message: &DynamicMessage,
    depth: usize,
) -> Result<Option<Value>, Error> {
    let has = |name: &str| {
        message
            .descriptor()
            .get_field_by_name(name)
            .is_some_and(|f| message.has_field(&f))
    };
    Ok(match kind {
        Special::Time | Special::MicroTime => {
            let (seconds, nanos) = (get_i64(message, "seconds"), get_i64(message, "nanos"));
            if (seconds == 0 && nanos == 0) || seconds <= GO_ZERO_TIME {
                return Ok(None);
            }
            let t = jiff::Timestamp::from_second(seconds)
                .map_err(|e| Error::Malformed(format!("time out of range: {e}")))?;
            let whole = t.strftime("%Y-%m-%dT%H:%M:%S").to_string();
            Some(Value::String(match kind {
                Special::MicroTime => format!("{whole}.{:06}Z", nanos.clamp(0, 999_999_999) / 1000),
                _ => format!("{whole}Z"),
            }))
        }
        Special::Duration => Some(Value::String(go_duration(get_i64(message, "duration")))),
        Special::IntOrString => {
            if get_i64(message, "type") == 1 {
                let s = match get(message, "strVal").as_deref() {
                    Some(Pb::String(s)) => s.clone(),
                    _ => String::new(),
                };
                Some(Value::String(s))
            } else {
                Some(Value::from(get_i64(message, "intVal")))
            }
        }
        Special::Quantity => match get(message, "string").as_deref() {
            Some(Pb::String(s)) if !s.is_empty() => Some(Value::String(s.clone())),
            _ => None,
        },
        Special::RawJson => {
            let raw = match message.descriptor().get_field(1) {
                Some(f) => match message.get_field(&f).as_ref() {
                    Pb::Bytes(b) => b.clone(),
                    _ => Default::default(),
                },
                None => Default::default(),
            };
            if raw.is_empty() {
                None
            } else if raw.starts_with(&MAGIC) {
                Some(decode_object(&raw, depth + 1)?)
            } else {
                Some(
                    serde_json::from_slice(&raw)
                        .map_err(|e| Error::Malformed(format!("raw JSON is not valid: {e}")))?,
                )
            }
        }
        Special::SchemaOrArray => {
            if has("schema") {
                schema_json(message, "schema", depth)?
            } else {
                match get(message, "jSONSchemas").as_deref() {
                    Some(Pb::List(items)) => Some(Value::Array(
                        items
                            .iter()
                            .filter_map(|v| match v {
                                Pb::Message(m) => Some(to_json(m, depth).map(Value::Object)),
                                _ => None,
                            })
                            .collect::<Result<_, _>>()?,
                    )),
                    _ => Some(Value::Array(Vec::new())),
                }
            }
        }
        Special::SchemaOrBool => {
            if has("schema") {
                schema_json(message, "schema", depth)?
            } else {
                Some(Value::Bool(matches!(
                    get(message, "allows").as_deref(),
                    Some(Pb::Bool(true))
                )))
            }
        }
        Special::StringList => match get(message, "items").as_deref() {
            Some(Pb::List(items)) => Some(Value::Array(
                items
                    .iter()
                    .filter_map(|v| v.as_str().map(|s| Value::String(s.to_string())))
                    .collect(),
            )),
            _ => Some(Value::Array(Vec::new())),
        },
        Special::SchemaOrStringArray => match get(message, "property").as_deref() {
            Some(Pb::List(items)) if !items.is_empty() => Some(Value::Array(
                items
                    .iter()
                    .filter_map(|v| v.as_str().map(|s| Value::String(s.to_string())))
                    .collect(),
            )),
            _ => schema_json(message, "schema", depth)?,
        },
    })
}

fn schema_json(message: &DynamicMessage, name: &str, depth: usize) -> Result<Option<Value>, Error> {
    match get(message, name).as_deref() {
        Some(Pb::Message(m)) => Ok(Some(Value::Object(to_json(m, depth)?))),
        _ => Ok(None),
    }
}

// ---------------------------------------------------------------------
// Go's durations ("1h2m3.5s"), as metav1.Duration marshals them

/// Formats nanoseconds as Go's `time.Duration.String()` does.
pub(crate) fn go_duration(nanos: i64) -> String {
    if nanos == 0 {
        return "0s".into();
    }
    let sign = if nanos < 0 { "-" } else { "" };
    let mut u = nanos.unsigned_abs();
    let text = if u < 1_000_000_000 {
        let (unit, div) = match u {
            0..1_000 => ("ns", 1),
            1_000..1_000_000 => ("µs", 1_000),
            _ => ("ms", 1_000_000),
        };
        format!("{}{unit}", fraction(u, div))
    } else {
        const HOUR: u64 = 3_600_000_000_000;
        const MINUTE: u64 = 60_000_000_000;
        let hours = u / HOUR;
        u %= HOUR;
        let minutes = u / MINUTE;
        u %= MINUTE;
        let seconds = fraction(u, 1_000_000_000);
        match (hours, minutes) {
            (0, 0) => format!("{seconds}s"),
            (0, m) => format!("{m}m{seconds}s"),
            (h, m) => format!("{h}h{m}m{seconds}s"),
        }
    };
    format!("{sign}{text}")
}

fn fraction(value: u64, div: u64) -> String {
    let (whole, frac) = (value / div, value % div);
    if frac == 0 {
        return whole.to_string();
    }
    let digits = div.ilog10() as usize;
    let frac = format!("{frac:0digits$}");
    format!("{whole}.{}", frac.trim_end_matches('0'))
}

/// Parses Go's duration syntax (`300ms`, `-1.5h`, `2h45m`) into nanoseconds.
pub(crate) fn parse_go_duration(text: &str) -> Option<i64> {
    let (negative, mut rest) = match text.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    if rest == "0" {
        return Some(0);
    }
    if rest.is_empty() {
        return None;
    }
    let mut total: f64 = 0.0;
    while !rest.is_empty() {
        let number_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let number: f64 = rest[..number_end].parse().ok()?;
        rest = &rest[number_end..];
        let unit_end = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_end] {
            "ns" => 1.0,
            "us" | "µs" | "μs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            _ => return None,
        };
        rest = &rest[unit_end..];
        total += number * scale;
    }
    if !total.is_finite() || total > i64::MAX as f64 {
        return None;
    }
    let nanos = total.round() as i64;
    Some(if negative { -nanos } else { nanos })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_format_and_parse_as_go_does() {
        for (nanos, text) in [
            (0, "0s"),
            (1_500_000, "1.5ms"),
            (2_000, "2µs"),
            (90_000_000_000, "1m30s"),
            (3_600_000_000_000, "1h0m0s"),
            (3_723_500_000_000, "1h2m3.5s"),
            (-5_000_000_000, "-5s"),
        ] {
            assert_eq!(go_duration(nanos), text);
            assert_eq!(parse_go_duration(text), Some(nanos), "{text}");
        }
        assert_eq!(parse_go_duration("2h45m"), Some(9_900_000_000_000));
        for bad in ["", "5", "1x", "h", "-"] {
            assert_eq!(parse_go_duration(bad), None, "{bad}");
        }
    }

    #[test]
    fn schema_keys_map_to_their_fields_and_back() {
        let m = types::message(APIEXTENSIONS, "JSONSchemaProps").unwrap();
        for key in [
            "$ref",
            "x-kubernetes-preserve-unknown-fields",
            "x-kubernetes-list-map-keys",
            "x-kubernetes-int-or-string",
            "type",
        ] {
            let f = m.get_field_by_name(&field_name(&m, key)).expect(key);
            assert_eq!(json_name(&m, &f), key);
        }
    }
}
