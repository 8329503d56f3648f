//! The team script's calling convention (`scripts/team.lua`), kept pure so
//! it is unit tested: how a batch's events on one team board tag (scores
//! and membership events) become its KEYS and ARGV.

use rustc_hash::FxHashMap;

use std::sync::Arc;

use crate::board::team::Leave;
use crate::board::{PeriodWrite, WriteParams};
use crate::keys;
use crate::moderation::AdminOp;
use crate::store::conn::msgpack::{self, MapWriter};
use crate::store::moderation::admin::AdminCall;

use super::protocol::{Invocation, Script, TagBatch};

/// The event kinds as the script names them (`team/teams.lua`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Score = 0,
    Join = 1,
    Leave = 2,
    Hide = 3,
    Unhide = 4,
    Remove = 5,
    Erase = 6,
    TeamHide = 7,
    TeamUnhide = 8,
}

/// One event of a team call, as the script reads it.
struct TeamEvent<'a> {
    field: &'a str,
    offset: i64,
    event_id: &'a uuid::Uuid,
    member: &'a str,
    kind: Kind,
    num: i64,
    ts: i64,
    /// A membership's or team event's team id, a removal's period id, or "".
    text: &'a str,
    /// The record's timestamp, ms (a period closed on demand refuses later records).
    record_ts: i64,
    periods: &'a [Arc<PeriodWrite>],
}

/// Lays out one team tag batch for the script.
pub(super) fn build_invocation(batch: &TagBatch<'_>, dedupe_ttl_secs: u64) -> Invocation {
    let events: Vec<TeamEvent<'_>> = batch
        .items
        .iter()
        .map(|item| {
            let (kind, text) = match item.team {
                None => (Kind::Score, ""),
                Some(m) if m.joined => (Kind::Join, m.team_id.as_str()),
                Some(m) => (Kind::Leave, m.team_id.as_str()),
            };
            let (field, offset, event_id, member) = (item.field, item.offset, item.event_id, item.member);
            let (num, ts, record_ts, periods) = (item.num, item.ts, item.record_ts, item.periods);
            TeamEvent { field, offset, event_id, member, kind, num, ts, text, record_ts, periods }
        })
        .collect();
    encode(batch.base, &batch.params, &events, dedupe_ttl_secs)
}

/// One admin event on the team board tag `base` (a hide, a removal, an
/// erasure, a team's hide), as a call of one event; `None` for what a team
/// board refuses before Redis (corrections, tiers, reviews).
pub(in crate::store) fn admin_invocation(
    base: &str,
    params: &WriteParams,
    call: &AdminCall<'_>,
    dedupe_ttl_secs: u64,
) -> Option<Invocation> {
    let (kind, text) = match call.op {
        AdminOp::Hide => (Kind::Hide, ""),
        AdminOp::Unhide => (Kind::Unhide, ""),
        AdminOp::Remove { period } => (Kind::Remove, period.as_deref().unwrap_or_default()),
        AdminOp::Erase => (Kind::Erase, ""),
        AdminOp::TeamHide { team, hide: true } => (Kind::TeamHide, team.as_str()),
        AdminOp::TeamHide { team, hide: false } => (Kind::TeamUnhide, team.as_str()),
        _ => return None,
    };
    let (field, offset, event_id, member) = (call.field, call.offset, call.event_id, call.member);
    let (ts, record_ts) = (call.ts_ms, 0);
    let event = TeamEvent { field, offset, event_id, member, kind, num: 0, ts, text, record_ts, periods: &[] };
    Some(encode(base, params, &[event], dedupe_ttl_secs))
}

fn encode(base: &str, p: &WriteParams, events: &[TeamEvent<'_>], dedupe_ttl_secs: u64) -> Invocation {
    let team = p.team.expect("a team board's call");
    let mut keys: Vec<String> = Vec::new();
    let push = |keys: &mut Vec<String>, k: String| {
        keys.push(k);
        keys.len() as i64
    };
    let mut h = MapWriter::default();
    h.str("op", p.op.as_str());
    h.int("max_value", p.max_value);
    h.str("leave", if team.leave == Leave::Forfeit { "forfeit" } else { "keep" });
    h.int("counts_after", team.counts_after_ms);
    h.int("ttl", dedupe_ttl_secs as i64);
    h.str("refused", &keys::refused_prefix(base));
    h.str("seen", &keys::dedupe_prefix(base));
    h.int("offsets", push(&mut keys, keys::offsets_key(base)));
    h.int("registry", push(&mut keys, keys::registry_key(base)));
    h.int("members", push(&mut keys, keys::team_members_key(base)));
    h.int("hidden", push(&mut keys, keys::hidden_key(base)));
    h.int("teams_hidden", push(&mut keys, keys::teams_hidden_key(base)));
    if p.sealed {
        h.int("sealed", push(&mut keys, keys::sealed_key(base)));
    }
    h.str("period", &keys::period_prefix(base));
    h.str("shadow", &keys::shadow_prefix(base));
    h.str("contrib", &keys::team_contrib_prefix(base));
    h.str("shadow_contrib", &keys::team_hidden_contrib_prefix(base));
    h.str("team_set", &keys::team_set_prefix(base));
    h.str("index", &keys::team_index_prefix(base));

    // The batch's distinct periods, in the order its events first write them.
    let mut period_index: FxHashMap<&str, usize> = FxHashMap::default();
    let mut periods: Vec<&PeriodWrite> = Vec::new();
    let mut fields: Vec<(&str, i64)> = Vec::new();
    let mut ids = Vec::with_capacity(16 * events.len());
    msgpack::array_len(&mut ids, events.len());
    let mut body = Vec::new();
    let mut n = 0;
    for item in events {
        let f = super::protocol::field_index(&mut fields, item.field, item.offset);
        msgpack::bytes_as_str(&mut ids, &crate::markers::marker(item.event_id));
        msgpack::int(&mut body, f as i64 + 1);
        msgpack::int(&mut body, item.offset);
        msgpack::str(&mut body, item.member);
        msgpack::int(&mut body, item.kind as i64);
        msgpack::int(&mut body, item.num);
        msgpack::int(&mut body, item.ts);
        msgpack::str(&mut body, item.text);
        msgpack::int(&mut body, item.record_ts);
        msgpack::int(&mut body, item.periods.len() as i64);
        n += 9 + item.periods.len();
        for period in item.periods.iter() {
            let j = *period_index.entry(period.key.as_str()).or_insert_with(|| {
                periods.push(period);
                periods.len()
            });
            msgpack::int(&mut body, j as i64);
        }
    }
    let mut events = ids;
    msgpack::array_len(&mut events, n);
    events.extend_from_slice(&body);

    let mut list = Vec::new();
    msgpack::array_len(&mut list, fields.len());
    for (f, _) in &fields {
        msgpack::str(&mut list, f);
    }
    h.raw("fields", &list);
    list.clear();
    msgpack::array_len(&mut list, periods.len());
    for period in &periods {
        let mut m = MapWriter::default();
        m.int("key", push(&mut keys, period.key.clone()));
        m.str("id", &period.id);
        m.int("expire_at", period.expire_at.unwrap_or(0));
        list.extend_from_slice(&m.finish());
    }
    h.raw("periods", &list);
    let needs = vec![-1; fields.len()];
    let tails = fields.iter().map(|&(f, last)| (f.to_string(), last)).collect();
    Invocation { keys, header: h.finish(), needs, events, tails, script: Script::Team }
}
