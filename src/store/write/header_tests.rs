//! The apply header's declaration (`header.rs`) against both sides: what
//! `protocol.rs` writes with every option on, and what the apply script
//! reads. (Apart from `header.rs`, which `protocol.rs` imports.)

use std::collections::BTreeSet;

use super::header::holds;
use super::header::tests::{declared, written_by};

/// Two calls that between them turn every option of the header on:
/// `latest` with sealing, metadata, attempts, a league round after
/// another, rank changes, every integrity rule (a jump by an amount) and
/// a review; then columns with a jump by a ratio and better_than, each
/// naming its column.
fn every_option() {
    use crate::board::columns::{ColumnMode, ColumnSpec, MAX_COLUMNS};
    use crate::board::integrity::{Action, Integrity, Jump};
    use crate::board::{Review, RoundKeys, WriteOp, WriteParams};
    use crate::store::write::protocol::{build_invocation, tests::pw, ApplyItem, TagBatch};
    let mut p = WriteParams::plain_sum();
    (p.op, p.top_k, p.rate_events, p.rate_window_ms, p.sealed, p.meta, p.attempts) =
        (WriteOp::Latest, 10, 5, 1000, true, true, 3);
    (p.cohort_size, p.tiers, p.notify) = (10, 3, 10);
    p.integrity = Integrity {
        score_over: Some((100, Action::Hold)),
        gain_over: Some((100, 1000, Action::Hold)),
        jump_over: Some((Jump::Amount(5), Action::Reject)),
        hides_after: Some((3, 1000)),
        ..Integrity::default()
    };
    p.review = Some(Review { held: uuid::Uuid::from_u128(9), approve: true, early: true });
    let mut all = (*pw("all", None)).clone();
    let (k, prev) = (|s: &str| format!("lb:{{p}}:{s}"), Some(("r:1".into(), "lb:{p}:c1".into(), "lb:{p}:q1".into())));
    all.round = Some(RoundKeys { cohorts: k("c2"), open: k("o2"), pending: k("q2"), previous: prev });
    let periods = [std::sync::Arc::new(all)];
    let id = uuid::Uuid::from_u128(1);
    let item = ApplyItem {
        field: "t:0",
        offset: 7,
        member: "alice",
        num: 5,
        tie: 0,
        ts: 1,
        event_id: &id,
        periods: &periods,
        meta: Some("{}"),
        record_ts: 1,
        values: &[1, 2],
        team: None,
    };
    build_invocation(&TagBatch { base: "lb:{p}", params: p, items: vec![item] }, 60);
    let mut c = WriteParams::plain_sum();
    c.op = WriteOp::Columns;
    c.integrity.jump_over = Some((Jump::Ratio(3000), Action::Hold));
    c.integrity.better_than = Some((30_000, Action::Hold));
    let (desc, modes) = ([true; MAX_COLUMNS], [ColumnMode::Sum; MAX_COLUMNS]);
    c.columns = Some(ColumnSpec { n: 2, desc, modes, best_row: true, earliest: true });
    build_invocation(&TagBatch { base: "lb:{p}", params: c, items: vec![item] }, 60);
}

#[test]
fn headers_with_every_option_on_carry_exactly_the_declared_fields() {
    let written = written_by(every_option);
    let declared = declared();
    let unwritten: Vec<_> = declared.difference(&written).collect();
    assert!(unwritten.is_empty(), "declared, never written by protocol.rs: {unwritten:?}");
    assert_eq!(written, declared);
}

/// The apply script's code (apply.lua and apply/*.lua), comments left out.
fn apply_code() -> String {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/src/scripts");
    let mut files = vec![format!("{dir}/apply.lua")];
    for e in std::fs::read_dir(format!("{dir}/apply")).unwrap() {
        files.push(e.unwrap().path().display().to_string());
    }
    let text: Vec<String> = files.iter().map(|f| std::fs::read_to_string(f).unwrap()).collect();
    text.join("\n").lines().map(|l| l.split("--").next().unwrap_or_default()).collect::<Vec<_>>().join("\n")
}

/// Each `name` read as `<table>.name` in `code`, with its table's name
/// (`]` or `)` for a table that is an index or a call's result).
fn dotted_reads(code: &str) -> Vec<(String, String)> {
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut out = Vec::new();
    for (i, _) in code.match_indices('.') {
        let table: String =
            code[..i].chars().rev().take_while(|c| ident(*c)).collect::<Vec<_>>().into_iter().rev().collect();
        let name: String = code[i + 1..].chars().take_while(|c| ident(*c)).collect();
        let before = code[..i - table.len()].chars().next_back();
        let table = match (table.is_empty(), before) {
            (true, Some(c @ (']' | ')'))) => c.to_string(),
            (false, b) if b.is_none_or(|c| !ident(c) && c != ':') => table,
            _ => continue,
        };
        if !name.is_empty() && !name.starts_with(|c: char| c.is_ascii_digit()) {
            out.push((table, name));
        }
    }
    out
}

#[test]
fn the_script_reads_every_declared_field_and_no_top_level_field_it_does_not_declare() {
    let code = apply_code();
    let reads = dotted_reads(&code);
    let read: BTreeSet<&str> = reads.iter().map(|(_, name)| name.as_str()).collect();
    let unread: Vec<_> = declared().into_iter().filter(|(_, f)| !read.contains(f.as_str())).collect();
    assert!(unread.is_empty(), "declared in header.rs, read nowhere in the apply script: {unread:?}");
    // The header itself is `h` (in apply.lua) or `A.h` (in the phases).
    let undeclared: Vec<&str> = reads
        .iter()
        .filter(|(table, name)| table == "h" && holds("top", name).is_none())
        .map(|(_, name)| name.as_str())
        .collect();
    assert!(undeclared.is_empty(), "the apply script reads header fields header.rs does not declare: {undeclared:?}");
    assert!(reads.contains(&("h".into(), "max_value".into())), "the scan finds the script's reads");
}
