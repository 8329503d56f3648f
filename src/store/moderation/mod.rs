//! Admin events and what operators ask of rankflow's bookkeeping: the
//! admin script's convention (`admin`), held events for review
//! (`review`), the bookkeeping that operators' commands read and write
//! (`operator`, `maintenance`).

pub(super) mod admin;
pub mod maintenance;
pub(super) mod operator;
pub mod review;
