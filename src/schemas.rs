//! Schemas by id for framed records (Avro, Protobuf): the files of
//! `[kafka.schemas]`, then the Schema Registry's `GET /schemas/ids/{id}`,
//! fetched once per id and kept. A registry that does not answer (or
//! refuses our credentials, or fails) is an outage, never a reason to
//! dead-letter: the pipeline waits on [`Schemas::fetch`], which retries
//! with backoff while `/readyz` names the registry. Only an id the registry
//! says it does not have (404), or a schema it gives that rankflow cannot
//! read, is unknown; that answer is kept a minute, then asked again.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::Value;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::config::{KafkaSettings, RegistrySettings};
use crate::event::schema::Schema;
use crate::event::Found;
use crate::health::Health;
use crate::metrics;

/// How long an id the registry did not have stays unknown before it is asked again.
const UNKNOWN_FOR: Duration = Duration::from_secs(60);
/// One request's limit.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// The longest wait between two tries while the registry is down.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// Every schema a worker knows, and where to fetch the others.
pub struct Schemas {
    files: BTreeMap<u32, Arc<Schema>>,
    fetched: RwLock<HashMap<u32, Fetched>>,
    registry: Option<Registry>,
}

/// What the registry said of an id.
enum Fetched {
    Schema(Arc<Schema>),
    Unknown { why: String, at: Instant },
}

impl Schemas {
    pub fn new(kafka: &KafkaSettings) -> Result<Schemas, String> {
        let registry = kafka.schema_registry.as_ref().map(Registry::new).transpose()?;
        Ok(Schemas { files: kafka.schemas.clone(), fetched: RwLock::default(), registry })
    }

    /// What is known of `id` now, without waiting.
    pub fn find(&self, id: u32) -> Found {
        if let Some(schema) = self.files.get(&id) {
            return Found::Schema(schema.clone());
        }
        if self.registry.is_none() {
            return Found::Unknown("not in kafka.schemas, and no kafka.schema_registry is set".into());
        }
        match self.fetched.read().unwrap_or_else(|e| e.into_inner()).get(&id) {
            Some(Fetched::Schema(schema)) => Found::Schema(schema.clone()),
            Some(Fetched::Unknown { why, at }) if at.elapsed() < UNKNOWN_FOR => Found::Unknown(why.clone()),
            _ => Found::NotFetched,
        }
    }

    /// Fetches `id` from the registry, retrying until it answers; `false`
    /// if `cancel` fired first (the record is left unread).
    pub async fn fetch(&self, id: u32, health: &Health, cancel: &CancellationToken) -> bool {
        let Some(registry) = &self.registry else { return true };
        let mut backoff = Duration::from_millis(200);
        let fetched = loop {
            match registry.get(id).await {
                Ok(fetched) => break fetched,
                Err(outage) => {
                    if health.registry_down(outage.clone()) {
                        warn!(reason = %outage, schema_id = id, "The Schema Registry does not answer; consuming waits for it.");
                    }
                    tokio::select! {
                        _ = cancel.cancelled() => return false,
                        _ = tokio::time::sleep(backoff) => {}
                    }
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                }
            }
        };
        if health.registry_up() {
            info!("The Schema Registry answers again.");
        }
        let entry = match fetched {
            Ok(schema) => {
                info!(schema_id = id, kind = %schema.kind(), "Schema fetched from the registry.");
                Fetched::Schema(Arc::new(schema))
            }
            Err(why) => Fetched::Unknown { why, at: Instant::now() },
        };
        self.fetched.write().unwrap_or_else(|e| e.into_inner()).insert(id, entry);
        true
    }
}

/// The registry's one read, over HTTP(S) with basic authentication.
struct Registry {
    http: reqwest::Client,
    settings: RegistrySettings,
}

impl Registry {
    fn new(settings: &RegistrySettings) -> Result<Registry, String> {
        let mut builder = reqwest::Client::builder().timeout(REQUEST_TIMEOUT).use_rustls_tls();
        if let Some(pem) = &settings.ca {
            let certs = reqwest::Certificate::from_pem_bundle(pem)
                .map_err(|e| format!("kafka.schema_registry.ca_file: {e}"))?;
            builder = builder.tls_built_in_root_certs(false);
            for cert in certs {
                builder = builder.add_root_certificate(cert);
            }
        }
        let http = builder.build().map_err(|e| format!("the Schema Registry client: {e}"))?;
        Ok(Registry { http, settings: settings.clone() })
    }

    /// `Ok(Ok(schema))`; `Ok(Err(why))` for an id the registry does not
    /// have or a schema rankflow cannot read; `Err(outage)` when the
    /// registry did not answer as a registry.
    async fn get(&self, id: u32) -> Result<Result<Schema, String>, String> {
        let m = metrics::get();
        let mut request = self.http.get(format!("{}/schemas/ids/{id}", self.settings.url));
        if let Some((user, password)) = &self.settings.auth {
            request = request.basic_auth(user, Some(password.expose()));
        }
        let outage = |why: String| {
            m.schema_registry_up.set(0);
            Err(why)
        };
        let response = match request.send().await {
            Ok(r) => r,
            Err(e) => {
                return outage(format!("the Schema Registry at {} does not answer: {}", self.settings.url, causes(&e)))
            }
        };
        let status = response.status();
        if status == StatusCode::NOT_FOUND {
            m.schema_registry_up.set(1);
            return Ok(Err(format!("the Schema Registry has no schema {id}")));
        }
        if status == StatusCode::UNAUTHORIZED || status == StatusCode::FORBIDDEN {
            return outage(format!(
                "the Schema Registry refused our credentials ({status}): check kafka.schema_registry.username and password"
            ));
        }
        if !status.is_success() {
            return outage(format!("the Schema Registry answered {status} for schema {id}"));
        }
        let answer: Value = match response.json().await {
            Ok(v) => v,
            Err(e) => return outage(format!("the Schema Registry's answer for schema {id} is not JSON: {e}")),
        };
        m.schema_registry_up.set(1);
        Ok(Schema::from_registry(&answer).map_err(|e| format!("the Schema Registry's schema {id}: {e}")))
    }
}

/// An error and its causes, `: `-joined (a refused certificate shows
/// only in the cause of reqwest's "error sending request").
fn causes(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
