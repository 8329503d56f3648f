//! The settings of event formats (`kafka.formats`, `kafka.fields`,
//! `[kafka.schemas]`, `[kafka.schema_registry]`), checked at load: schema
//! files are read and compiled now, so a bad one is an error naming its
//! field, not a dead letter later.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::field::Errors;
use super::raw::{RawFieldEntry, RawKafka};
use super::secrets;
use super::settings::RegistrySettings;
use crate::event::fields::FieldMap;
use crate::event::schema::Schema;
use crate::event::Format;

/// What the format settings come to.
pub struct Formats {
    pub formats: BTreeMap<String, Format>,
    pub fields: FieldMap,
    pub topic_fields: BTreeMap<String, FieldMap>,
    pub schemas: BTreeMap<u32, Arc<Schema>>,
    pub registry: Option<RegistrySettings>,
}

pub fn formats(k: &RawKafka, e: &mut Errors) -> Formats {
    let (fields, topic_fields) = fields(k, e);
    let mut schemas = BTreeMap::new();
    for (id, path) in &k.schemas {
        let field = format!("kafka.schemas.{id}");
        let Ok(n) = id.parse::<u32>() else {
            e.push(field, format!("'{id}' is not a schema id (a number, 0 to {})", u32::MAX));
            continue;
        };
        match Schema::from_file(path) {
            Ok(schema) => {
                schemas.insert(n, Arc::new(schema));
            }
            Err(reason) => e.push(field, reason),
        }
    }
    let registry = k.schema_registry.as_ref().and_then(|r| registry(r, e));
    let mut formats = BTreeMap::new();
    for (topic, name) in &k.formats {
        let field = format!("kafka.formats.{topic}");
        if !k.topics.contains(topic) {
            e.push(field, format!("'{topic}' is not one of kafka.topics (admin topics carry JSON only)"));
            continue;
        }
        match Format::parse(name) {
            Some(Format::Json) => {}
            Some(Format::Avro | Format::Protobuf) if k.schemas.is_empty() && k.schema_registry.is_none() => {
                let reason =
                    format!("'{name}' records name their schema by id: set [kafka.schemas] or [kafka.schema_registry]");
                e.push(field, reason);
            }
            Some(format) => {
                formats.insert(topic.clone(), format);
            }
            None => e.push(field, format!("'{name}' is not a format: one of {}", Format::NAMES.join(", "))),
        }
    }
    Formats { formats, fields, topic_fields, schemas, registry }
}

/// `[kafka.fields]`: the map every topic shares, and the topics' own.
fn fields(k: &RawKafka, e: &mut Errors) -> (FieldMap, BTreeMap<String, FieldMap>) {
    let shared: BTreeMap<String, String> = k
        .fields
        .iter()
        .filter_map(|(name, entry)| match entry {
            RawFieldEntry::Path(path) => Some((name.clone(), path.clone())),
            RawFieldEntry::Topic(_) => None,
        })
        .collect();
    let fields = FieldMap::new(&shared).unwrap_or_else(|(field, reason)| {
        e.push(format!("kafka.fields.{field}"), reason);
        FieldMap::default()
    });
    let mut topics = BTreeMap::new();
    for (topic, entry) in &k.fields {
        let RawFieldEntry::Topic(own) = entry else { continue };
        if !k.topics.contains(topic) {
            e.push(
                format!("kafka.fields.{topic}"),
                format!("'{topic}' is neither an event field nor one of kafka.topics"),
            );
            continue;
        }
        match fields.with(own) {
            Ok(map) => {
                topics.insert(topic.clone(), map);
            }
            Err((field, reason)) => e.push(format!("kafka.fields.{topic}.{field}"), reason),
        }
    }
    (fields, topics)
}

/// `[kafka.schema_registry]`: an `http(s)://` URL, basic auth's user and
/// password together, a CA file for `https://` only.
fn registry(r: &super::raw::RawSchemaRegistry, e: &mut Errors) -> Option<RegistrySettings> {
    let url = r.url.trim_end_matches('/').to_string();
    let tls = url.starts_with("https://");
    let host = url.strip_prefix("https://").or_else(|| url.strip_prefix("http://"));
    if host.is_none_or(str::is_empty) {
        e.push("kafka.schema_registry.url", format!("'{}' is not an http:// or https:// URL", r.url));
        return None;
    }
    let auth = match (&r.username, &r.password) {
        (Some(user), Some(password)) => Some((user.clone(), password.clone())),
        (None, None) => None,
        (Some(_), None) => {
            e.push("kafka.schema_registry.password", "must be set with username");
            return None;
        }
        (None, Some(_)) => {
            e.push("kafka.schema_registry.username", "must be set with password");
            return None;
        }
    };
    let ca = match &r.ca_file {
        None => None,
        Some(_) if !tls => {
            e.push("kafka.schema_registry.ca_file", "is set, but the registry's url is not https://");
            return None;
        }
        Some(path) => match secrets::read_certificates(path) {
            Ok(pem) => Some(pem),
            Err(reason) => {
                e.push("kafka.schema_registry.ca_file", reason);
                return None;
            }
        },
    };
    Some(RegistrySettings { url, auth, ca })
}
