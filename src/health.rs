//! What the worker knows of its connections, shared with `/readyz`.
//!
//! The Kafka client callbacks, the pipeline and the scheduler write it; the
//! HTTP server only reads it.

use std::sync::atomic::AtomicBool;

use tracing::error;

use crate::metrics;

/// Liveness facts shared with the HTTP server's `/readyz`.
#[derive(Debug, Default)]
pub struct Health {
    /// Some broker is up, as librdkafka last reported.
    pub kafka_up: AtomicBool,
    /// The last Redis call succeeded.
    pub redis_up: AtomicBool,
    /// Why the worker refuses to consume: Redis lost data (see `pipeline::lost`).
    pub data_lost: std::sync::Mutex<Option<String>>,
    /// The last time a broker refused the client's TLS or credentials, and
    /// why (`kafka::connect::refusal`); cleared once a broker is up.
    kafka_refused: std::sync::Mutex<Option<String>>,
    /// Why the Schema Registry is down, while it is (`schemas::Schemas::fetch`).
    registry_down: std::sync::Mutex<Option<String>>,
}

impl Health {
    /// Redis lost data: from now on nothing is consumed, applied or stored
    /// (the pipeline and the scheduler look here), `/readyz` answers 503
    /// with `reason`, `rankflow_redis_data_lost` is 1, and the log says what
    /// to do. The first reason stays.
    pub fn lost_data(&self, reason: String) {
        metrics::get().redis_data_lost.set(1);
        let mut lost = self.data_lost.lock().unwrap_or_else(|e| e.into_inner());
        if lost.is_some() {
            return;
        }
        error!(%reason, "Redis lost data: it holds fewer applied records than the group committed, or than it acknowledged (it came back empty, was flushed, was restored from an older snapshot, or failed over to a replica without the latest writes). \
            Nothing is consumed or written from now on. Rebuild the boards from the topics (rankflow rebuild), or accept the loss (rankflow accept-loss); then restart the workers.");
        *lost = Some(reason);
    }

    /// A broker refused the client's TLS handshake or credentials: the
    /// reason, naming the settings to check, is what `/readyz` says while
    /// no broker is up.
    pub fn kafka_refused(&self, reason: String) {
        *self.kafka_refused.lock().unwrap_or_else(|e| e.into_inner()) = Some(reason);
    }

    /// The last refusal, unless a broker has been up since.
    pub fn kafka_refusal(&self) -> Option<String> {
        self.kafka_refused.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// A broker is up: refusals are past.
    pub fn kafka_connected(&self) {
        *self.kafka_refused.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }

    /// The Schema Registry did not answer; `true` if it was up until now.
    pub fn registry_down(&self, reason: String) -> bool {
        self.registry_down.lock().unwrap_or_else(|e| e.into_inner()).replace(reason).is_none()
    }

    /// The Schema Registry answered; `true` if it was down until now.
    pub fn registry_up(&self) -> bool {
        self.registry_down.lock().unwrap_or_else(|e| e.into_inner()).take().is_some()
    }

    /// Why the Schema Registry is down, if it is.
    pub fn registry_outage(&self) -> Option<String> {
        self.registry_down.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Whether Redis lost data (see [`Health::lost_data`]).
    pub fn is_lost(&self) -> bool {
        self.data_lost.lock().unwrap_or_else(|e| e.into_inner()).is_some()
    }
}
