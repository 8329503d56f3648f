//! Admin events on Redis: the calling convention of `scripts/admin.lua`
//! (pure, so it is unit tested) and the calls, one per board tag, each
//! atomic. What an admin event does is decided before, in `moderation`.

use crate::board::Board;
use crate::keys;
use crate::moderation::AdminOp;
use crate::store::conn::msgpack::{self, MapWriter};
use crate::store::conn::scripts::{ADMIN, TEAM};
use crate::store::{ApplyResult, Store, StoreError};

/// One admin event on one board tag, as the script's caller knows it.
#[derive(Clone, Copy, Debug)]
pub struct AdminCall<'a> {
    /// `<topic>:<partition>` of the record, and its offset.
    pub field: &'a str,
    pub offset: i64,
    pub event_id: &'a uuid::Uuid,
    pub member: &'a str,
    /// The event time, which a correction's `latest` boards record.
    pub ts_ms: i64,
    pub op: &'a AdminOp,
}

/// KEYS and ARGV of `admin.lua` for the tag at `base`, whose board is
/// `board` (`None`: a tag of a board no longer configured, written as a
/// plain `sum` board): the header names each key by its index in KEYS.
pub fn admin_invocation(
    base: &str,
    board: Option<&Board>,
    call: &AdminCall<'_>,
    dedupe_ttl_secs: u64,
) -> (Vec<String>, Vec<Vec<u8>>) {
    let mut keys =
        vec![keys::offsets_key(base), keys::registry_key(base), keys::hidden_key(base), keys::version_prefix(base)];
    let (mode, shift, desc, top_k, dense, sealed, max_value) = match board {
        Some(b) => (
            b.write_op().as_str(),
            b.packing().shift(),
            b.order().as_str() == "desc",
            b.max_members().unwrap_or(0),
            b.dense_rank(),
            b.close_after().is_some(),
            b.packing().max_value(),
        ),
        None => ("sum", 1, true, 0, true, false, crate::score::MAX_EXACT),
    };
    let mut h = MapWriter::default();
    for (i, name) in ["offsets", "registry", "hidden", "versions"].into_iter().enumerate() {
        h.int(name, i as i64 + 1);
    }
    if sealed {
        keys.push(keys::sealed_key(base));
        h.int("sealed", keys.len() as i64);
    }
    // Every tag's: an erasure reaches the league and history keys of a board that no longer keeps them too.
    for (name, key) in [
        ("league_tiers", keys::league_tiers_key(base)),
        ("league_overrides", keys::league_overrides_key(base)),
        ("league_registry", keys::league_registry_key(base)),
        ("history_registry", keys::history_registry_key(base)),
    ] {
        keys.push(key);
        h.int(name, keys.len() as i64);
    }
    h.str("field", call.field);
    h.int("offset", call.offset);
    h.str("member", call.member);
    h.str("seen", &keys::dedupe_prefix(base));
    h.int("ttl", dedupe_ttl_secs as i64);
    h.str("refused", &keys::refused_prefix(base));
    type Prefix = fn(&str) -> String;
    let prefixes: [(&str, Prefix); 7] = [
        ("period", keys::period_prefix),
        ("dense", keys::dense_prefix),
        ("counts", keys::dense_count_prefix),
        ("times", keys::times_prefix),
        ("meta", keys::meta_prefix),
        ("shadow", keys::shadow_prefix),
        ("attempts", keys::attempts_prefix),
    ];
    for (name, prefix) in prefixes {
        h.str(name, &prefix(base));
    }
    keys.push(keys::rate_key(base, call.member));
    h.int("rate_key", keys.len() as i64);
    for (name, key) in [
        ("held", keys::held_key(base)),
        ("held_queue", keys::held_queue_key(base)),
        ("held_player", keys::held_player_key(base, call.member)),
        ("gain_key", keys::gain_key(base)),
        ("held_times", keys::held_times_key(base, call.member)),
    ] {
        keys.push(key);
        h.int(name, keys.len() as i64);
    }
    if let Some(c) = board.and_then(Board::column_spec) {
        h.str("rows", &keys::rows_prefix(base));
        h.int("row_prefix", c.prefix_len() as i64);
        h.int("row_len", (crate::board::columns::COLUMN_BYTES * c.n as usize) as i64);
    }
    h.str("mode", mode);
    h.int("shift", shift);
    h.bool("desc", desc);
    h.int("top_k", top_k as i64);
    h.bool("dense_on", dense);
    h.str("op", call.op.script_name());
    match call.op {
        AdminOp::Set { stored, periods } => {
            h.int("stored", *stored);
            h.int("ts", call.ts_ms);
            h.raw("periods", &periods_list(periods));
        }
        AdminOp::SetRow { row, periods } => {
            let mut bytes = Vec::with_capacity(row.len() + 5);
            msgpack::bytes_as_str(&mut bytes, row);
            h.raw("row", &bytes);
            h.int("ts", call.ts_ms);
            h.raw("periods", &periods_list(periods));
        }
        AdminOp::Adjust { delta, tie, periods } => {
            h.int("delta", *delta);
            h.int("ts", call.ts_ms);
            h.int("tie", *tie);
            h.int("max_value", max_value);
            h.raw("periods", &periods_list(periods));
        }
        AdminOp::Remove { period } => h.str("period_id", period.as_deref().unwrap_or_default()),
        AdminOp::Tier(t) => h.int("tier", *t as i64),
        // A review is the apply script's (see `pipeline::reviews`), a team's
        // hide the team script's, never this one's.
        AdminOp::Hide | AdminOp::Unhide | AdminOp::Erase | AdminOp::Review { .. } | AdminOp::TeamHide { .. } => {}
    }
    (keys, vec![h.finish(), crate::markers::marker(call.event_id).to_vec()])
}

/// `{id, expire_at}` of each period a correction writes (expire_at 0: none).
fn periods_list(periods: &[std::sync::Arc<crate::board::PeriodWrite>]) -> Vec<u8> {
    let mut out = Vec::new();
    msgpack::array_len(&mut out, periods.len());
    for p in periods {
        let mut m = MapWriter::default();
        m.str("id", &p.id);
        m.int("expire_at", p.expire_at.unwrap_or(0));
        out.extend_from_slice(&m.finish());
    }
    out
}

impl Store {
    /// Carries out one admin event on each tag in `tags` (key base and its
    /// board, if still configured), concurrently, each atomically (see
    /// `scripts/admin.lua`). Answers, per tag, what the script did.
    pub async fn admin(
        &self,
        tags: &[(String, Option<Board>)],
        call: &AdminCall<'_>,
    ) -> Result<Vec<ApplyResult>, StoreError> {
        let calls = tags.iter().map(|(base, board)| async move {
            if let Some(params) = board.as_ref().map(Board::write_params).filter(|p| p.team.is_some()) {
                return self.team_admin(base, &params, call).await;
            }
            let (keys, args) = admin_invocation(base, board.as_ref(), call, self.dedupe_ttl_secs);
            let reply: Result<i64, redis::RedisError> = self.eval(&ADMIN, &keys, &args).await?;
            reply.map(ApplyResult::from_code).map_err(|source| {
                StoreError::from_script(base, source, |source| StoreError::Admin { base: base.clone(), source })
            })
        });
        futures::future::try_join_all(calls).await
    }

    /// One admin event on a team board's tag, by the team script (see
    /// `scripts/team.lua`). The ops a team board refuses before Redis
    /// (corrections, tiers, reviews: `moderation::plan`) never get here;
    /// were one to, it is refused (`invalid_admin`), never half done.
    async fn team_admin(
        &self,
        base: &str,
        params: &crate::board::WriteParams,
        call: &AdminCall<'_>,
    ) -> Result<ApplyResult, StoreError> {
        let Some(inv) = crate::store::write::team::admin_invocation(base, params, call, self.dedupe_ttl_secs) else {
            return Ok(ApplyResult::Refused(-1));
        };
        let args = vec![inv.header.clone(), inv.needs_arg(), inv.events.clone()];
        let reply: Result<Vec<redis::Value>, redis::RedisError> = self.eval(&TEAM, &inv.keys, &args).await?;
        let reply = reply.map_err(|source| {
            StoreError::from_script(base, source, |source| StoreError::Admin { base: base.to_string(), source })
        })?;
        let bad = || StoreError::BadReply { base: base.to_string(), got: reply.len(), expected: 1 };
        let (codes, _) = crate::store::write::send::split_reply(&reply).ok_or_else(bad)?;
        let (results, _) = crate::store::write::reply::decode_reply(&codes, 1).ok_or_else(bad)?;
        results.into_iter().next().ok_or_else(bad)
    }

    /// Leaves an admin event's outcome at `key` for `ttl_secs`, unless one
    /// is there already (the first decision stays: a producer retry that
    /// comes later does not turn "applied" into "duplicate").
    pub async fn note_outcome(&self, key: &str, outcome: &str, ttl_secs: u64) -> Result<(), StoreError> {
        let mut conn = self.conn.clone();
        let _: Option<String> = redis::cmd("SET")
            .arg(key)
            .arg(outcome)
            .arg("NX")
            .arg("EX")
            .arg(ttl_secs)
            .query_async(&mut conn)
            .await
            .map_err(|source| StoreError::Admin { base: key.to_string(), source })?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::write::protocol::tests::pw;

    #[test]
    fn an_adjustment_names_its_tag_keys_prefixes_and_periods_as_the_script_reads_them() {
        let id = uuid::Uuid::from_u128(7);
        let op = AdminOp::Adjust { delta: -5, tie: 3, periods: vec![pw("d:2026-08-14", Some(100)), pw("all", None)] };
        let call = AdminCall { field: "admin:0", offset: 9, event_id: &id, member: "alice", ts_ms: 42, op: &op };
        let (keys, args) = admin_invocation("lb:{p}", None, &call, 60);
        let tag = ["lb:{p}:_offsets", "lb:{p}:_keys", "lb:{p}:_hidden", "lb:{p}:_ver:"];
        assert_eq!(
            keys,
            [
                &tag[..],
                &[
                    "lb:{p}:_lgt",
                    "lb:{p}:_lgx",
                    "lb:{p}:_lgk",
                    "lb:{p}:_hk",
                    "lb:{p}:_rl:alice",
                    "lb:{p}:_held",
                    "lb:{p}:_heldq",
                    "lb:{p}:_heldp:alice",
                    "lb:{p}:_gain",
                    "lb:{p}:_heldt:alice"
                ]
            ]
            .concat()
        );
        assert_eq!(args.len(), 2);
        assert_eq!(args[1], crate::markers::marker(&id).to_vec());
        let header = msgpack::render(&mut args[0].as_slice());
        let max = crate::score::MAX_EXACT;
        assert_eq!(
            header,
            format!(
                "{{offsets: 1, registry: 2, hidden: 3, versions: 4, league_tiers: 5, league_overrides: 6, \
                 league_registry: 7, history_registry: 8, field: admin:0, offset: 9, member: alice, \
                 seen: lb:{{p}}:_seen:, ttl: 60, refused: lb:{{p}}:_refused:, period: lb:{{p}}:, \
                 dense: lb:{{p}}:_dense:, counts: lb:{{p}}:_dcount:, times: lb:{{p}}:_ts:, meta: lb:{{p}}:_meta:, \
                 shadow: lb:{{p}}:_hid:, attempts: lb:{{p}}:_att:, rate_key: 9, held: 10, held_queue: 11, \
                 held_player: 12, gain_key: 13, held_times: 14, mode: sum, \
                 shift: 1, desc: true, top_k: 0, dense_on: true, op: adjust, delta: -5, ts: 42, tie: 3, \
                 max_value: {max}, periods: [{{id: d:2026-08-14, expire_at: 100}}, {{id: all, expire_at: 0}}]}}"
            )
        );
    }
}
