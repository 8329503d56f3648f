//! The team script's calling convention (`scripts/team.lua`), kept pure so
//! it is unit tested: how a batch's events on one team board tag (scores
//! and membership events) become its KEYS and ARGV.

use rustc_hash::FxHashMap;

use crate::board::team::Leave;
use crate::board::PeriodWrite;
use crate::keys;
use crate::store::conn::msgpack::{self, MapWriter};

use super::protocol::{Invocation, Script, TagBatch};

/// The event kinds as the script names them (`team/teams.lua`).
const SCORE: i64 = 0;
const JOIN: i64 = 1;
const LEAVE: i64 = 2;

/// Lays out one team tag batch for the script.
pub(super) fn build_invocation(batch: &TagBatch<'_>, dedupe_ttl_secs: u64) -> Invocation {
    let p = &batch.params;
    let team = p.team.expect("a team board's batch");
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
    h.str("refused", &keys::refused_prefix(batch.base));
    h.str("seen", &keys::dedupe_prefix(batch.base));
    h.int("offsets", push(&mut keys, keys::offsets_key(batch.base)));
    h.int("registry", push(&mut keys, keys::registry_key(batch.base)));
    h.int("members", push(&mut keys, keys::team_members_key(batch.base)));
    h.str("period", &keys::period_prefix(batch.base));
    h.str("contrib", &keys::team_contrib_prefix(batch.base));
    h.str("index", &keys::team_index_prefix(batch.base));

    // The batch's distinct periods, in the order its events first write them.
    let mut period_index: FxHashMap<&str, usize> = FxHashMap::default();
    let mut periods: Vec<&PeriodWrite> = Vec::new();
    let mut fields: Vec<(&str, i64)> = Vec::new();
    let mut ids = Vec::with_capacity(16 * batch.items.len());
    msgpack::array_len(&mut ids, batch.items.len());
    let mut body = Vec::new();
    let mut n = 0;
    for item in &batch.items {
        let f = match fields.iter().position(|(f, _)| *f == item.field) {
            Some(f) => f,
            None => {
                fields.push((item.field, item.offset));
                fields.len() - 1
            }
        };
        fields[f].1 = fields[f].1.max(item.offset);
        msgpack::bytes_as_str(&mut ids, &crate::markers::marker(item.event_id));
        let (kind, team_id) = match item.team {
            None => (SCORE, ""),
            Some(m) if m.joined => (JOIN, m.team_id.as_str()),
            Some(m) => (LEAVE, m.team_id.as_str()),
        };
        msgpack::int(&mut body, f as i64 + 1);
        msgpack::int(&mut body, item.offset);
        msgpack::str(&mut body, item.member);
        msgpack::int(&mut body, kind);
        msgpack::int(&mut body, item.num);
        msgpack::int(&mut body, item.ts);
        msgpack::str(&mut body, team_id);
        msgpack::int(&mut body, item.periods.len() as i64);
        n += 8 + item.periods.len();
        for period in item.periods {
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
