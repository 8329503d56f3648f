//! rankflow: exactly-once Kafka-to-Redis sorted-set leaderboards.
//!
//! A game server produces a scoring event to Kafka; rankflow reads it,
//! applies it once to every leaderboard period it belongs to, and serves the
//! standings over HTTP.
//!
//! # Modules
//!
//! - [`config`]: the TOML file, `RANKFLOW_` overrides, validation into [`config::Settings`].
//! - [`event`]: parsing one record value into an [`event::Event`], or a rejection reason.
//! - [`period`]: period ids (`d:2026-08-14`, `w:2026-W33`), bounds and expiry, in a time zone.
//! - [`board`]: validated boards, routing events to them, planning each board's writes.
//! - [`score`]: the exact-integer rule for stored scores.
//! - [`keys`]: the Redis key layout, in one place.
//! - [`store`]: Redis connections and the atomic apply script (`src/scripts/apply.lua`).
//! - [`offsets`]: per-partition offset bookkeeping (the +1 lives there).
//! - [`worker`]: the Kafka consumer loop, dead-lettering and offset storing.
//! - [`producer`]: the producer for the dead-letter and sealed-periods topics.
//! - [`schedule`]: sealed periods and rolling boards, as due jobs in a Redis sorted set.
//! - [`http`]: `/metrics`, `/healthz`, `/readyz` and the read API.
//! - [`metrics`]: every Prometheus family.
//! - [`generator`], [`admin`]: sample events, topic creation (demo and benchmarks).
//! - [`bench`]: the benchmark harness, with the machine's ceilings measured in the same run.
//!
//! # The flow of one event
//!
//! `worker` reads a batch of records; `event::parse` validates each value
//! and `board::Router::plan` turns a valid event into per-board writes
//! (period keys with `EXPIREAT`) or refusals. `store::Store::apply` sends one
//! `apply.lua` call per board tag for the whole batch: per event it checks
//! the tag's recorded offset (a redelivery changes nothing), looks up the
//! `event_id` marker (one hash of markers per `dedupe_ttl`, see `keys`) and,
//! only if absent, writes every period and sets the marker.
//! Records no board applied go to the dead-letter topic. Only when every
//! record of the batch is final does `worker` store each partition's last
//! offset + 1, which librdkafka then commits.

pub mod admin;
pub mod bench;
pub mod board;
pub mod config;
pub mod event;
pub mod generator;
pub mod http;
pub mod keys;
pub mod metrics;
pub mod offsets;
pub mod period;
pub mod producer;
pub mod schedule;
pub mod score;
pub mod store;
pub mod worker;
