//! rankflow: exactly-once Kafka-to-Redis sorted-set leaderboards.
//!
//! A game server produces a scoring event to Kafka; rankflow reads it,
//! applies it once to every leaderboard period it belongs to, and serves the
//! standings over HTTP.
//!
//! # Layers
//!
//! Each module imports only from the layers below it.
//!
//! - **Wiring** — [`app`]: starts the HTTP server, the scheduler and the
//!   pipeline, and stops them on SIGTERM. [`admin`]: `rankflow admin`, an
//!   operator's admin event produced and waited for. [`close`]: `rankflow
//!   close`, a period closed on demand. [`rebuild`] and
//!   [`recovery`]: `rankflow rebuild` and `rankflow accept-loss`, what an
//!   operator runs after Redis lost data. [`demo`]: `rankflow
//!   demo`, the whole flow on an embedded broker. `main.rs` only parses
//!   arguments.
//! - **Services** — [`pipeline`]: the batch loop (read, send, settle, store
//!   offsets). [`schedule`]: sealed periods and rolling boards as due jobs.
//!   [`http`]: `/metrics`, `/healthz`, `/readyz` and the read API.
//! - **I/O** — [`kafka`]: client configs (built in one place), consumer
//!   callbacks, offset commits, the producer, topic creation. [`store`]:
//!   the only door to Redis: connections, every script (apply, admin, the
//!   scheduler's, reads) and every command, as typed calls. [`metrics`]: every Prometheus family. [`health`], [`retry`].
//!   [`schemas`]: the schemas of Avro and Protobuf records, from files and
//!   the Schema Registry.
//!   [`progress`]: the progress of long commands, drawn on a terminal.
//! - **Domain, pure** — [`config`]: the TOML file into validated types.
//!   [`event`]: one record value into an event or a rejection. [`board`]:
//!   routing an event to boards and planning their writes. [`period`]: period
//!   ids, bounds and expiry in a time zone. [`score`]: the exact-integer and
//!   tie-break packing of stored scores. [`keys`]: the Redis key layout,
//!   stated once and handed to the scripts. [`markers`]: what a dedupe
//!   marker is and which bucket holds it. [`watermarks`]: how far each
//!   partition has been applied. [`moderation`]: what an admin event
//!   (a correction, a removal, hiding, erasure) does to which board tags.
//!   [`samples`]: the demo's sample events.
//!
//! # The flow of one event
//!
//! 1. `pipeline` reads a record and copies it out of the consumer
//!    (`pipeline::record`); [`event::parse`] validates its value.
//! 2. [`board::Router::plan`] turns the event into per-board writes (period
//!    keys from [`period`], scores from [`score`], key names from [`keys`]) or
//!    refusals.
//! 3. `pipeline` hands the batch to the [`store::Writer`], which sends one
//!    `apply.lua` call per board tag (and `max_events_per_call` events),
//!    each batch behind the one before, and retries what did not land. Per
//!    event the script checks the tag's recorded offset (a redelivery
//!    changes nothing), looks up the `event_id` marker and, only if absent,
//!    writes every period and sets the marker, atomically.
//! 4. `pipeline` folds the script's answers into the record's outcome;
//!    records no board applied go to the dead-letter topic ([`kafka`]'s
//!    producer).
//! 5. Only when every record of the batch is final does `pipeline` store each
//!    partition's last offset + 1, which librdkafka then commits.
//!
//! The benchmarks are tools, in the `rankflow-tools` crate (`tools/`), not
//! part of this library. `tests/layers.rs` checks the layers above against
//! the imports.

pub mod admin;
pub mod app;
pub mod board;
pub mod close;
pub mod config;
pub mod demo;
pub mod event;
pub mod health;
pub mod http;
pub mod kafka;
pub mod keys;
pub mod markers;
pub mod metrics;
pub mod moderation;
pub mod period;
pub mod pipeline;
pub mod progress;
pub mod rebuild;
pub mod recovery;
pub mod retry;
pub mod samples;
pub mod schedule;
pub mod schemas;
pub mod score;
pub mod store;
pub mod watermarks;
