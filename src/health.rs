//! What the worker knows of its connections, shared with `/readyz`.
//!
//! The Kafka client callbacks and the pipeline write it; the HTTP server
//! only reads it.

use std::sync::atomic::AtomicBool;

/// Liveness facts shared with the HTTP server's `/readyz`.
#[derive(Debug, Default)]
pub struct Health {
    /// Some broker is up, as librdkafka last reported.
    pub kafka_up: AtomicBool,
    /// The last Redis call succeeded.
    pub redis_up: AtomicBool,
    /// Why the worker refuses to consume: Redis lost data (see `pipeline::lost`).
    pub data_lost: std::sync::Mutex<Option<String>>,
}
