//! The worker's first connection to the brokers: waited for before anything
//! is read or written, and given up at once when a broker refuses the TLS
//! handshake or the credentials. Those need the operator (a CA, a client
//! certificate, a password, a SASL mechanism), so the worker names the
//! cause and the settings to check and stops, rather than retrying
//! forever behind a vague "all brokers down".

use std::sync::Mutex;
use std::time::Duration;

use rdkafka::client::ClientContext;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{BaseProducer, DeliveryResult, Producer, ProducerContext};
use tokio_util::sync::CancellationToken;

use super::client;
use crate::config::KafkaSettings;

/// The settings a refused TLS handshake points at.
const TLS_SETTINGS: &str =
    "kafka.options: security.protocol, ssl.ca.location, ssl.certificate.location, ssl.key.location";

/// The settings a refused authentication points at.
const SASL_SETTINGS: &str =
    "kafka.options: sasl.mechanism, sasl.username, sasl.password (or the sasl.oauthbearer.* options)";

/// Why a client error means the brokers refuse this client's TLS or
/// credentials, with the settings to check; `None` for any other error (an
/// outage: waited out). librdkafka's own reason says what the broker said.
pub fn refusal(error: &KafkaError, reason: &str) -> Option<String> {
    let code = match error {
        KafkaError::Global(code) => *code,
        _ => return None,
    };
    match code {
        RDKafkaErrorCode::SSL => Some(format!("Kafka TLS handshake failed (check {TLS_SETTINGS}): {reason}")),
        // OpenSSL refusing the handshake, seen while reading the broker's
        // answer, comes as a transport failure: its reason carries
        // OpenSSL's own words. A connection merely lost mid-handshake does not.
        RDKafkaErrorCode::BrokerTransportFailure if reason.contains("SSL routines") => {
            Some(format!("Kafka TLS handshake failed (check {TLS_SETTINGS}): {reason}"))
        }
        RDKafkaErrorCode::Authentication | RDKafkaErrorCode::SaslAuthenticationFailed => {
            Some(format!("Kafka authentication failed (check {SASL_SETTINGS}): {reason}"))
        }
        _ => None,
    }
}

/// How long one metadata request may take before it is sent again.
const PROBE: Duration = Duration::from_secs(2);

/// A client that only asks for metadata, with the connection and security
/// options every client of rankflow's takes: the refusals its error
/// callback sees (served by its own polls, unlike a stream consumer's,
/// which come only once it consumes).
#[derive(Default)]
struct Probe {
    refused: Mutex<Option<String>>,
}

impl ClientContext for Probe {
    fn error(&self, error: KafkaError, reason: &str) {
        if let Some(why) = refusal(&error, reason) {
            *self.refused.lock().unwrap_or_else(|e| e.into_inner()) = Some(why);
        }
    }
}

impl ProducerContext for Probe {
    type DeliveryOpaque = ();
    fn delivery(&self, _: &DeliveryResult<'_>, _: ()) {}
}

/// Waits until a broker answers a metadata request. `Err` with the reason
/// as soon as a broker refused the TLS handshake or the credentials
/// ([`refusal`]) before any answered, or the client cannot be made (a
/// certificate file that does not load); `Ok(false)` when shutdown came first.
pub async fn first_connection(kafka: &KafkaSettings, cancel: &CancellationToken) -> Result<bool, String> {
    let probe: BaseProducer<Probe> = client::admin(kafka)
        .create_with_context(Probe::default())
        .map_err(|e| format!("cannot create a Kafka client (check kafka.options): {e}"))?;
    loop {
        let answered = tokio::task::block_in_place(|| probe.client().fetch_metadata(None, PROBE)).is_ok();
        if answered {
            return Ok(true);
        }
        // Serves every error queued meanwhile (a poll of no time serves one
        // event, and a refusal can queue behind "all brokers down").
        tokio::task::block_in_place(|| probe.poll(Duration::from_millis(100)));
        if let Some(why) = probe.context().refused.lock().unwrap_or_else(|e| e.into_inner()).clone() {
            return Err(why);
        }
        if cancel.is_cancelled() {
            return Ok(false);
        }
    }
}

/// How long an operator's command waits for a first broker answer before
/// it goes on and fails its own way (a broker that is down).
const COMMAND_WAIT: Duration = Duration::from_secs(30);

/// Before an operator's command talks to Kafka (`create-topics`, `admin`):
/// `Err` naming the cause and the settings when a broker refuses the TLS
/// handshake or the credentials, instead of a time-out later.
pub async fn before_command(kafka: &KafkaSettings) -> Result<(), String> {
    let never = CancellationToken::new();
    match tokio::time::timeout(COMMAND_WAIT, first_connection(kafka, &never)).await {
        Ok(Err(why)) => Err(why),
        Ok(Ok(_)) | Err(_) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tls_and_authentication_failures_name_their_settings_and_others_are_outages() {
        let tls = refusal(&KafkaError::Global(RDKafkaErrorCode::SSL), "certificate verify failed").unwrap();
        assert!(tls.contains("TLS") && tls.contains("ssl.ca.location") && tls.contains("certificate verify failed"));
        let auth = refusal(&KafkaError::Global(RDKafkaErrorCode::Authentication), "invalid credentials").unwrap();
        assert!(auth.contains("authentication") && auth.contains("sasl.password"));
        assert_eq!(refusal(&KafkaError::Global(RDKafkaErrorCode::AllBrokersDown), "down"), None);
        assert_eq!(refusal(&KafkaError::Global(RDKafkaErrorCode::BrokerTransportFailure), "reset"), None);
        // As Apache Kafka's refusal of an untrusted certificate can come.
        let read = "sasl_ssl://127.0.0.1:9093/bootstrap: error:0A000086:SSL routines::certificate verify failed \
                    (after 13ms in state SSL_HANDSHAKE)";
        let tls = refusal(&KafkaError::Global(RDKafkaErrorCode::BrokerTransportFailure), read).unwrap();
        assert!(tls.contains("TLS") && tls.contains("ssl.ca.location") && tls.contains("certificate verify failed"));
        let lost = "sasl_ssl://127.0.0.1:9093/bootstrap: Disconnected (after 3ms in state SSL_HANDSHAKE)";
        assert_eq!(refusal(&KafkaError::Global(RDKafkaErrorCode::BrokerTransportFailure), lost), None);
    }
}
