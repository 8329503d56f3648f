//! The scheduler's and the operator commands' scripts on one board tag:
//! seals and rolling builds (`seal_roll`), the due jobs themselves (`sched`),
//! leagues' settlements (`league`), players' history (`history`) and a
//! rebuild's swap (`swap`).

pub(super) mod history;
pub(super) mod league;
pub(super) mod outbox;
pub(super) mod sched;
pub(super) mod seal_roll;
pub(super) mod swap;
