//! Admin events on Redis: the calling convention of `scripts/admin.lua`
//! (pure, so it is unit tested) and the calls, one per board tag, each
//! atomic. What an admin event does is decided before, in `moderation`.

use super::{ApplyResult, Store, StoreError, MARKERS_LUA, REGISTERED_LUA};
use crate::board::Board;
use crate::keys;
use crate::moderation::AdminOp;

static ADMIN_LUA: std::sync::LazyLock<String> =
    std::sync::LazyLock::new(|| [REGISTERED_LUA, MARKERS_LUA, include_str!("../scripts/admin.lua")].concat());

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
/// plain `sum` board).
pub fn admin_invocation(
    base: &str,
    board: Option<&Board>,
    call: &AdminCall<'_>,
    dedupe_ttl_secs: u64,
) -> (Vec<String>, Vec<Vec<u8>>) {
    let keys =
        vec![keys::offsets_key(base), keys::registry_key(base), keys::hidden_key(base), keys::version_prefix(base)];
    let (mode, shift, order, top_k, dense, sealed) = match board {
        Some(b) => (
            b.write_op().as_str(),
            b.packing().shift(),
            b.order().as_str(),
            b.max_members().unwrap_or(0),
            b.dense_rank(),
            b.close_after().is_some(),
        ),
        None => ("sum", 1, "desc", 0, true, false),
    };
    let mut text: Vec<String> = vec![
        call.field.to_string(),
        call.offset.to_string(),
        call.member.to_string(),
        keys::dedupe_prefix(base),
        dedupe_ttl_secs.to_string(),
    ];
    let mut args: Vec<Vec<u8>> = text.drain(..).map(String::into_bytes).collect();
    args.push(crate::markers::marker(call.event_id).to_vec());
    text = vec![
        keys::refused_prefix(base),
        keys::period_prefix(base),
        keys::dense_prefix(base),
        keys::dense_count_prefix(base),
        keys::times_prefix(base),
        keys::meta_prefix(base),
        keys::shadow_prefix(base),
        keys::rate_key(base, call.member),
        mode.to_string(),
        shift.to_string(),
        order.to_string(),
        top_k.to_string(),
        if dense { "1" } else { "0" }.to_string(),
        if sealed { keys::sealed_key(base) } else { String::new() },
        call.op.script_name().to_string(),
        keys::attempts_prefix(base),
    ];
    match call.op {
        AdminOp::Set { stored, periods } => {
            text.push(stored.to_string());
            text.push(call.ts_ms.to_string());
            push_periods(&mut text, periods);
        }
        AdminOp::Adjust { delta, tie, periods } => {
            text.push(delta.to_string());
            text.push(call.ts_ms.to_string());
            text.push(tie.to_string());
            text.push(board.map_or(crate::score::MAX_EXACT, |b| b.packing().max_value()).to_string());
            push_periods(&mut text, periods);
        }
        AdminOp::Remove { period } => text.push(period.clone().unwrap_or_default()),
        AdminOp::Hide | AdminOp::Unhide | AdminOp::Erase => {}
    }
    args.extend(text.into_iter().map(String::into_bytes));
    (keys, args)
}

/// (period id, EXPIREAT seconds or "0") of each period a correction writes.
fn push_periods(text: &mut Vec<String>, periods: &[std::sync::Arc<crate::board::PeriodWrite>]) {
    for p in periods {
        text.push(p.id.clone());
        text.push(p.expire_at.unwrap_or(0).to_string());
    }
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
        let script = redis::Script::new(&ADMIN_LUA);
        let calls = tags.iter().map(|(base, board)| {
            let script = &script;
            async move {
                let (keys, args) = admin_invocation(base, board.as_ref(), call, self.dedupe_ttl_secs);
                let reply: Result<i64, redis::RedisError> = self.eval(script, &ADMIN_LUA, &keys, &args).await?;
                reply.map(ApplyResult::from_code).map_err(|source| {
                    StoreError::from_script(base, source, |source| StoreError::Admin { base: base.clone(), source })
                })
            }
        });
        futures::future::try_join_all(calls).await
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
    use crate::store::protocol::tests::pw;

    #[test]
    fn an_adjustment_names_its_tag_keys_prefixes_and_periods_as_the_script_reads_them() {
        let id = uuid::Uuid::from_u128(7);
        let op = AdminOp::Adjust { delta: -5, tie: 3, periods: vec![pw("d:2026-08-14", Some(100)), pw("all", None)] };
        let call = AdminCall { field: "admin:0", offset: 9, event_id: &id, member: "alice", ts_ms: 42, op: &op };
        let (keys, args) = admin_invocation("lb:{p}", None, &call, 60);
        assert_eq!(keys, ["lb:{p}:_offsets", "lb:{p}:_keys", "lb:{p}:_hidden", "lb:{p}:_ver:"]);
        let text: Vec<String> = args.iter().map(|a| String::from_utf8_lossy(a).into_owned()).collect();
        assert_eq!(args[5], crate::markers::marker(&id).to_vec());
        assert_eq!(&text[..5], ["admin:0", "9", "alice", "lb:{p}:_seen:", "60"]);
        assert_eq!(
            &text[6..],
            [
                "lb:{p}:_refused:",
                "lb:{p}:",
                "lb:{p}:_dense:",
                "lb:{p}:_dcount:",
                "lb:{p}:_ts:",
                "lb:{p}:_meta:",
                "lb:{p}:_hid:",
                "lb:{p}:_rl:alice",
                "sum",
                "1",
                "desc",
                "0",
                "1",
                "",
                "adjust",
                "lb:{p}:_att:",
                "-5",
                "42",
                "3",
                &crate::score::MAX_EXACT.to_string(),
                "d:2026-08-14",
                "100",
                "all",
                "0"
            ]
        );
    }
}
