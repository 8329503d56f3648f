//! Everything that talks to Kafka: client configuration (one builder), the
//! consumer's callbacks, storing and committing offsets, the producer of
//! dead letters and sealed periods, and topic creation. The pipeline decides
//! *what* to store; this layer only does it.

pub mod callbacks;
pub mod client;
pub mod commit;
pub mod connect;
pub mod offsets;
pub mod producer;
pub mod readback;
pub mod topics;
