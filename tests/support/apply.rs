//! Building apply calls by hand for the tests that drive `store` directly
//! (the apply script, the writer, rank changes): a store on a test Redis,
//! period writes under the key layout, items and tag batches.

use std::collections::HashMap;
use std::sync::Arc;

use rankflow::board::{PeriodWrite, WriteOp, WriteParams};
use rankflow::config::RedisSettings;
use rankflow::keys;
use rankflow::markers::{self, Growth};
use rankflow::store::{ApplyItem, RedisConn, Store, TagBatch};
use uuid::Uuid;

use super::Redis;

/// The largest exactly representable sum.
pub const MAX: i64 = (1 << 53) - 1;

/// The Redis settings of a config on `redis` with markers kept `dedupe_ttl_secs`.
fn settings(redis: &Redis, dedupe_ttl_secs: u64) -> RedisSettings {
    let text = format!(
        "[kafka]\nbrokers = \"x:1\"\ntopics = [\"t\"]\ndead_letter_topic = \"d\"\n\
         [redis]\nurl = \"{}\"\ndedupe_ttl = \"{dedupe_ttl_secs}s\"\n\
         [[board]]\nid = \"p\"\non = [\"m\"]\nmode = \"sum\"\nperiods = [\"all_time\"]\n",
        redis.url()
    );
    rankflow::config::load_str(&text, Vec::new()).unwrap().redis
}

/// A store on `redis` with markers kept `dedupe_ttl_secs`, `tags` (bases,
/// `lb:{p}`) registered. (`Store::apply` registers the tags it writes;
/// calls prepared and sent by hand need theirs registered first.)
pub async fn store_with_ttl(redis: &Redis, dedupe_ttl_secs: u64, tags: &[&str]) -> Store {
    let settings = settings(redis, dedupe_ttl_secs);
    let store = Store::new(RedisConn::connect(&settings).await.unwrap(), settings.dedupe_ttl);
    if !tags.is_empty() {
        let tags: Vec<String> = tags.iter().map(|t| t.to_string()).collect();
        store.register_tags("lb:{.tags}:_bases", &tags, false).await.unwrap();
    }
    store
}

/// A reader of `redis` (the read API's connection, no replicas).
pub async fn reader(redis: &Redis) -> rankflow::store::Reader {
    rankflow::store::Reader::new(RedisConn::connect(&settings(redis, 60)).await.unwrap(), None)
}

/// The writes of period `period` of tag `lb:{<tag>}`.
pub fn period_write(tag: &str, period: &str, expire_at: Option<i64>) -> Arc<PeriodWrite> {
    let key = |part: &str| format!("lb:{{{tag}}}:{part}{period}");
    Arc::new(PeriodWrite {
        id: period.to_string(),
        key: key(""),
        dense_key: key("_dense:"),
        count_key: key("_dcount:"),
        times_key: key("_ts:"),
        meta_key: key("_meta:"),
        shadow_key: key("_hid:"),
        attempts_key: key("_att:"),
        rows_key: key("_rows:"),
        expire_at,
        close_at: None,
        round: None,
    })
}

/// An event of partition 0 at `offset`: `member` scores `num` on `periods`.
pub fn item<'a>(
    offset: i64,
    member: &'a str,
    num: i64,
    id: &'a Uuid,
    periods: &'a [Arc<PeriodWrite>],
) -> ApplyItem<'a> {
    ApplyItem {
        field: "scores:0",
        offset,
        member,
        num,
        tie: 0,
        ts: 0,
        event_id: id,
        periods,
        meta: None,
        record_ts: 0,
        values: &[],
        team: None,
    }
}

/// An item of a board ranked by several columns: `values` in column order,
/// the event at time `ts`.
pub fn row_item<'a>(
    offset: i64,
    member: &'a str,
    id: &'a Uuid,
    ts: i64,
    periods: &'a [Arc<PeriodWrite>],
    values: &'a [i64],
) -> ApplyItem<'a> {
    ApplyItem { ts, values, ..item(offset, member, 0, id, periods) }
}

/// `items` for tag `base` on a plain board of `op` up to [`MAX`].
pub fn tag<'a>(base: &'a str, op: WriteOp, items: Vec<ApplyItem<'a>>) -> TagBatch<'a> {
    TagBatch { base, params: WriteParams::plain(op, 1, MAX), items }
}

/// How the buckets of marker hash `key` have grown.
pub async fn growth(conn: &mut redis::aio::MultiplexedConnection, key: &str) -> Growth {
    let (level, split): (Option<u32>, Option<u64>) =
        redis::cmd("HMGET").arg(key).arg("level").arg("split").query_async(conn).await.unwrap();
    Growth { level: level.unwrap_or(0), split: split.unwrap_or(0) }
}

/// Member `member`'s score in sorted set `key`.
pub async fn zscore(conn: &mut redis::aio::MultiplexedConnection, key: &str, member: &str) -> Option<f64> {
    redis::cmd("ZSCORE").arg(key).arg(member).query_async(conn).await.unwrap()
}

/// The tag's marker hashes hold exactly the markers of `ids`, each once and
/// in the bucket `rankflow::markers` says, with `count` right and buckets
/// split so that none is far above the mean load.
pub async fn assert_markers_laid_out(
    conn: &mut redis::aio::MultiplexedConnection,
    base: &str,
    ids: &std::collections::BTreeSet<Uuid>,
) {
    let hashes: Vec<String> =
        redis::cmd("KEYS").arg(format!("{}*", keys::dedupe_prefix(base))).query_async(conn).await.unwrap();
    let mut found = std::collections::BTreeSet::new();
    for key in &hashes {
        let g = growth(conn, key).await;
        let fields: HashMap<String, Vec<u8>> = redis::cmd("HGETALL").arg(key).query_async(conn).await.unwrap();
        let count: usize = String::from_utf8_lossy(&fields["count"]).parse().unwrap();
        let mut held = 0;
        for (field, blob) in &fields {
            let Ok(b) = field.parse::<u64>() else { continue };
            assert!(b < g.buckets(), "{key}: bucket {b} beyond {g:?}");
            assert_eq!(blob.len() % markers::BYTES, 0, "{key}: bucket {b}");
            let held_here = blob.len() / markers::BYTES;
            assert!(held_here <= 4 * markers::LOAD as usize, "{key}: bucket {b} holds {held_here}");
            for m in blob.chunks_exact(markers::BYTES) {
                let m: markers::Marker = m.try_into().unwrap();
                assert_eq!(g.bucket(&m), b, "{key}: a marker in the wrong bucket");
                assert!(found.insert(m), "{key}: a marker held twice");
                held += 1;
            }
        }
        assert_eq!(held, count, "{key}: count");
        assert!(count as u64 <= markers::LOAD * g.buckets(), "{key}: {count} markers in {} buckets", g.buckets());
    }
    let want: std::collections::BTreeSet<markers::Marker> = ids.iter().map(markers::marker).collect();
    assert_eq!(want.len(), ids.len(), "the ids' markers are distinct");
    assert_eq!(found, want);
}
