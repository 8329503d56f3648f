//! Everything that talks to Kafka: client configuration (one builder,
//! `client`), the consumer's callbacks (`callbacks`), storing and committing
//! offsets (`commit`, `offsets`), the worker's first connection and the
//! refusals that stop it (`connect`), the producer of every record rankflow
//! writes (`producer`: dead letters, rank changes, held events for review,
//! the `player_hidden` events of `hold_hides_after`, sealed tops, league
//! results and the admin command's events), reading back what a topic
//! holds without a group (`readback`), and topic creation (`topics`). The
//! pipeline decides *what* to store and produce; this layer only does it.

pub mod callbacks;
pub mod client;
pub mod commit;
pub mod connect;
pub mod offsets;
pub mod producer;
pub mod readback;
pub mod topics;
pub mod transaction;
