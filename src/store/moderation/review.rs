//! Held events (score integrity) on Redis: the record `apply/rules.lua`
//! keeps per held event, decoded (pure, so it is unit tested), and the
//! reads of the review queue: a page of a tag's pending events from a
//! cursor, a player's count, one event by id.

use rmp::decode;

use crate::event::Rule;
use crate::keys;
use crate::store::{Reader, StoreError};

/// A held event's stamp: 16 digits of µs and 4 of its place in its call.
pub const STAMP_DIGITS: usize = 20;

/// Where a held event stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeldState {
    Pending,
    Approved,
    Rejected,
}

impl HeldState {
    pub fn as_str(self) -> &'static str {
        match self {
            HeldState::Pending => "pending",
            HeldState::Approved => "approved",
            HeldState::Rejected => "rejected",
        }
    }

    fn parse(s: &str) -> Option<HeldState> {
        [HeldState::Pending, HeldState::Approved, HeldState::Rejected].into_iter().find(|h| h.as_str() == s)
    }
}

/// One held event, as its tag keeps it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeldEvent {
    pub event_id: String,
    pub state: HeldState,
    pub player_id: String,
    /// The event's score (its delta on `sum` boards).
    pub score: i64,
    /// The event time, ms.
    pub ts: i64,
    pub rule: Rule,
    /// The value that broke the rule.
    pub value: i64,
    /// When it was held (Redis's clock), ms.
    pub held_ms: i64,
    /// Its stamp: the holding call's time (µs, 16 digits) and its place
    /// among the events that call held (4 digits).
    pub stamp: String,
    /// The event's `meta`, on boards that keep it.
    pub meta: Option<String>,
    /// On a board ranked by several columns: the event's value in each
    /// column, in the board's order (`score` is then 0).
    pub values: Vec<i64>,
}

impl HeldEvent {
    /// Its place in the queues: `<stamp>:<event id>`, which is also the
    /// review listing's cursor.
    pub fn place(&self) -> String {
        format!("{}:{}", self.stamp, self.event_id)
    }
}

/// A held record: `[state, player, score, ts, rule, value, stamp, meta]`,
/// and on a board ranked by several columns `values` (an array) after them.
pub fn decode_held(event_id: &str, mut rd: &[u8]) -> Option<HeldEvent> {
    let rd = &mut rd;
    let len = decode::read_array_len(rd).ok()?;
    if len != 8 && len != 9 {
        return None;
    }
    let state = HeldState::parse(&string(rd)?)?;
    let player_id = string(rd)?;
    let score = decode::read_int(rd).ok()?;
    let ts = decode::read_int(rd).ok()?;
    let rule = Rule::ALL.get(decode::read_int::<usize, _>(rd).ok()?).copied()?;
    let value = decode::read_int(rd).ok()?;
    let stamp = string(rd)?;
    if stamp.len() != STAMP_DIGITS || !stamp.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let held_ms = stamp[..13].parse().ok()?;
    let meta = Some(string(rd)?).filter(|m| !m.is_empty());
    let mut values = Vec::new();
    if len == 9 {
        let n = decode::read_array_len(rd).ok()?;
        for _ in 0..n {
            values.push(decode::read_int(rd).ok()?);
        }
    }
    rd.is_empty().then(|| HeldEvent {
        event_id: event_id.to_string(),
        state,
        player_id,
        score,
        ts,
        rule,
        value,
        held_ms,
        stamp,
        meta,
        values,
    })
}

fn string(rd: &mut &[u8]) -> Option<String> {
    let len = decode::read_str_len(rd).ok()? as usize;
    let bytes = rd.get(..len)?;
    *rd = &rd[len..];
    String::from_utf8(bytes.to_vec()).ok()
}

fn bad(event_id: &str) -> StoreError {
    StoreError::Reply {
        script: "the held events' hash",
        got: format!("a record for {event_id} that is not a held event"),
    }
}

impl crate::store::Store {
    /// The held event `event_id` of the tag `base` (on the primary).
    pub async fn held_event(&self, base: &str, event_id: &str) -> Result<Option<HeldEvent>, StoreError> {
        self.primary_reader().held_event(base, event_id).await
    }
}

impl Reader {
    /// Up to `limit` pending held events of the tag `base` (of `player`
    /// only, if given), oldest first, after the place `after`.
    pub async fn held_page(
        &self,
        base: &str,
        player: Option<&str>,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<HeldEvent>, StoreError> {
        let queue = match player {
            Some(p) => keys::held_player_key(base, p),
            None => keys::held_queue_key(base),
        };
        let from = after.map_or_else(|| "-".to_string(), |a| format!("({a}"));
        let places: Vec<String> = self
            .run(|mut c| {
                let (queue, from) = (queue.clone(), from.clone());
                async move {
                    redis::cmd("ZRANGE")
                        .arg(queue)
                        .arg(from)
                        .arg("+")
                        .arg("BYLEX")
                        .arg("LIMIT")
                        .arg(0)
                        .arg(limit)
                        .query_async(&mut c)
                        .await
                }
            })
            .await?;
        let ids: Vec<&str> = places.iter().filter_map(|p| p.split_once(':').map(|(_, id)| id)).collect();
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let held = keys::held_key(base);
        let blobs: Vec<Option<Vec<u8>>> = self
            .run(|mut c| {
                let (held, ids) = (held.clone(), ids.clone());
                async move { redis::cmd("HMGET").arg(held).arg(ids).query_async(&mut c).await }
            })
            .await?;
        let mut out = Vec::with_capacity(ids.len());
        for (id, blob) in ids.iter().zip(blobs) {
            // A place whose record is gone was decided (or erased) between the two reads.
            let Some(blob) = blob else { continue };
            out.push(decode_held(id, &blob).ok_or_else(|| bad(id))?);
        }
        Ok(out)
    }

    /// Every board tag's key base (the registry of tags at `tags_key`).
    pub async fn tag_bases(&self, tags_key: &str) -> Result<Vec<String>, StoreError> {
        self.run(|mut c| async move { redis::cmd("SMEMBERS").arg(tags_key).query_async(&mut c).await }).await
    }

    /// How many held events of `player` are pending on the tag `base`.
    pub async fn held_count(&self, base: &str, player: &str) -> Result<u64, StoreError> {
        let key = keys::held_player_key(base, player);
        self.run(|mut c| {
            let key = key.clone();
            async move { redis::cmd("ZCARD").arg(key).query_async(&mut c).await }
        })
        .await
    }

    /// The held event `event_id` of the tag `base`, pending or decided.
    pub async fn held_event(&self, base: &str, event_id: &str) -> Result<Option<HeldEvent>, StoreError> {
        let key = keys::held_key(base);
        let blob: Option<Vec<u8>> = self
            .run(|mut c| {
                let key = key.clone();
                async move { redis::cmd("HGET").arg(key).arg(event_id).query_async(&mut c).await }
            })
            .await?;
        blob.map(|b| decode_held(event_id, &b).ok_or_else(|| bad(event_id))).transpose()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn blob(state: &str, meta: &str) -> Vec<u8> {
        blob_of(state, meta, None)
    }

    /// A record; with `values`, a board with columns' (9 fields).
    fn blob_of(state: &str, meta: &str, values: Option<&[i64]>) -> Vec<u8> {
        let mut b = Vec::new();
        rmp::encode::write_array_len(&mut b, if values.is_some() { 9 } else { 8 }).unwrap();
        rmp::encode::write_str(&mut b, state).unwrap();
        rmp::encode::write_str(&mut b, "alice").unwrap();
        for n in [150i64, 1_790_000_000_001, 0, 150] {
            rmp::encode::write_sint(&mut b, n).unwrap();
        }
        rmp::encode::write_str(&mut b, "17900000005001230002").unwrap();
        rmp::encode::write_str(&mut b, meta).unwrap();
        if let Some(values) = values {
            rmp::encode::write_array_len(&mut b, values.len() as u32).unwrap();
            for v in values {
                rmp::encode::write_sint(&mut b, *v).unwrap();
            }
        }
        b
    }

    #[test]
    fn a_held_record_reads_back_whole_and_a_malformed_one_does_not() {
        let h = decode_held("e1", &blob("pending", "")).unwrap();
        assert_eq!(
            (h.state, h.player_id.as_str(), h.score, h.rule, h.value),
            (HeldState::Pending, "alice", 150, Rule::ScoreOver, 150)
        );
        assert_eq!((h.ts, h.held_ms, h.meta.as_deref()), (1_790_000_000_001, 1_790_000_000_500, None));
        assert_eq!(h.place(), "17900000005001230002:e1");
        assert_eq!(decode_held("e1", &blob("rejected", "{\"a\":1}")).unwrap().meta.as_deref(), Some("{\"a\":1}"));
        assert!(decode_held("e1", &blob("lost", "")).is_none());
        let mut long = blob("pending", "");
        long.push(0);
        assert!(decode_held("e1", &long).is_none());
        assert!(decode_held("e1", &blob("pending", "")[..20]).is_none());
        // A board with columns' record carries the event's row.
        let row = decode_held("e1", &blob_of("pending", "", Some(&[2, -(1 << 53) + 1, 53_120]))).unwrap();
        assert_eq!(row.values, [2, -(1 << 53) + 1, 53_120]);
        assert!(decode_held("e1", &blob_of("pending", "", Some(&[]))[..40]).is_none());
    }
}
