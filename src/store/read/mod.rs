//! The read side: `read.lua`'s and `read_rows.lua`'s queries, typed
//! (`queries`, `row_reads`, `row_shards`), run on the HTTP server's own connection and
//! replicas (`reads`).

pub(super) mod queries;
pub(super) mod reads;
pub(super) mod row_reads;
pub(super) mod row_shards;
pub(super) mod teams;
