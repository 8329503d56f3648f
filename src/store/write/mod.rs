//! The write path: the apply call's convention (`protocol`, its header
//! declared in `header`, the integrity rules' part in `rules`, its answers
//! in `reply` and `changes`), a batch's calls as they are sent (`prepared`,
//! sized by `sizer`), sent in order through `gate` (`send`) and owned by
//! the [`Writer`](writer::Writer), the contract of the order in which
//! batches reach Redis.

pub(super) mod changes;
pub(super) mod gate;
pub(super) mod header;
#[cfg(test)]
mod header_tests;
pub(super) mod prepared;
pub(super) mod protocol;
pub(super) mod reply;
pub(super) mod rules;
pub(super) mod send;
pub(super) mod sizer;
pub(super) mod team;
pub(super) mod writer;
