//! What a test reads back from Redis to check it: boards, dense indexes'
//! value counts and the offsets the boards recorded.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

/// A sorted set's members and integer scores.
pub async fn zset_values(conn: &mut redis::aio::MultiplexedConnection, key: &str) -> BTreeMap<String, i64> {
    let v: Vec<(String, f64)> =
        redis::cmd("ZRANGE").arg(key).arg(0).arg(-1).arg("WITHSCORES").query_async(conn).await.unwrap();
    v.into_iter().map(|(m, s)| (m, s as i64)).collect()
}

/// A dense index's value counts: value -> members holding it, read from the
/// `_dcount` hash (`key`), which holds only counts of 2 or more, and the
/// index beside it (a value there without a field is held once). Checks
/// the hash's pin (one other field, which keeps it a hash table rather than
/// a listpack scanned on every lookup), that no field holds less than 2 and
/// that every field's value is in the index.
pub async fn value_counts(conn: &mut redis::aio::MultiplexedConnection, key: &str) -> HashMap<String, i64> {
    let mut all: HashMap<String, String> = redis::cmd("HGETALL").arg(key).query_async(conn).await.unwrap();
    if !all.is_empty() {
        let pin = all.remove("encoding").unwrap_or_else(|| panic!("{key} has no encoding pin"));
        assert!(pin.len() > 64, "the pin of {key} is longer than hash-max-listpack-value");
        let encoding: String = redis::cmd("OBJECT").arg("ENCODING").arg(key).query_async(conn).await.unwrap();
        assert_eq!(encoding, "hashtable", "{key} is a hash table");
    }
    let index: Vec<String> =
        redis::cmd("ZRANGE").arg(key.replace(":_dcount:", ":_dense:")).arg(0).arg(-1).query_async(conn).await.unwrap();
    let mut counts: HashMap<String, i64> = index.into_iter().map(|v| (v, 1)).collect();
    for (v, n) in all {
        let count: i64 = n.parse().unwrap_or_else(|_| panic!("{key}: count {n} of {v}"));
        assert!(count >= 2, "{key} keeps a count of {count} for {v}: only counts of 2 or more are kept");
        assert!(counts.insert(v.clone(), count).is_some(), "{key} counts {v}, which its index lacks");
    }
    counts
}

/// `lb:{points#3}:all` -> `lb:{points}:all`: the key the unsharded board would have.
pub fn unsharded_key(key: &str) -> String {
    match (key.find('#'), key.find('}')) {
        (Some(h), Some(b)) if h < b => format!("{}{}", &key[..h], &key[b..]),
        _ => key.to_string(),
    }
}

/// [`board_keys`] with each sharded board's shards put back together under
/// the unsharded board's keys (a member in two shards fails).
pub async fn merged_board_keys(
    conn: &mut redis::aio::MultiplexedConnection,
    prefix: &str,
) -> HashMap<String, HashMap<String, f64>> {
    let mut merged: HashMap<String, HashMap<String, f64>> = HashMap::new();
    for (key, members) in board_keys(conn, prefix).await {
        let into = merged.entry(unsharded_key(&key)).or_default();
        for (m, v) in members {
            assert!(into.insert(m.clone(), v).is_none(), "{m} is in two shards of {key}");
        }
    }
    merged
}

/// Every key under `prefix:` with its members and scores, for comparing
/// against a model. Internal keys (a segment starting with `_`) are left out.
pub async fn board_keys(
    conn: &mut redis::aio::MultiplexedConnection,
    prefix: &str,
) -> HashMap<String, HashMap<String, f64>> {
    let keys: Vec<String> = redis::cmd("KEYS").arg(format!("{prefix}:*")).query_async(conn).await.unwrap();
    let mut out = HashMap::new();
    for k in keys {
        if k.split(':').any(|seg| seg.starts_with('_')) {
            continue;
        }
        let entries: Vec<(String, f64)> =
            redis::cmd("ZRANGE").arg(&k).arg(0).arg(-1).arg("WITHSCORES").query_async(conn).await.unwrap();
        out.insert(k, entries.into_iter().collect());
    }
    out
}

/// Every `_offsets` hash field that names `topic`, over all board tags, with
/// the offset it records.
pub async fn topic_offsets(conn: &mut redis::aio::MultiplexedConnection, topic: &str) -> Vec<(String, i64)> {
    let keys: Vec<String> = redis::cmd("KEYS").arg("lb:*:_offsets").query_async(conn).await.unwrap();
    let mut out = Vec::new();
    for k in keys {
        let fields: Vec<(String, i64)> = redis::cmd("HGETALL").arg(&k).query_async(conn).await.unwrap();
        out.extend(fields.into_iter().filter(|(f, _)| f.starts_with(&format!("{topic}:"))));
    }
    out
}

/// How many `_offsets` hash fields name `topic`.
pub async fn offsets_fields(conn: &mut redis::aio::MultiplexedConnection, topic: &str) -> usize {
    topic_offsets(conn, topic).await.len()
}

/// How many records of `topic` the boards have applied: per partition, the
/// furthest offset any board tag has recorded, plus one, summed.
pub async fn applied(conn: &mut redis::aio::MultiplexedConnection, topic: &str) -> i64 {
    applied_on(std::slice::from_ref(conn), topic).await
}

/// [`applied`] over several nodes (a cluster's primaries): the furthest
/// offset any tag on any of them recorded per partition, plus one, summed.
pub async fn applied_on(conns: &[redis::aio::MultiplexedConnection], topic: &str) -> i64 {
    let mut furthest: HashMap<String, i64> = HashMap::new();
    for conn in conns {
        for (f, o) in topic_offsets(&mut conn.clone(), topic).await {
            let e = furthest.entry(f).or_insert(-1);
            *e = (*e).max(o);
        }
    }
    furthest.values().map(|o| o + 1).sum()
}

/// Waits up to 120 s until the boards have applied at least `at_least`
/// records of `topic` (see `applied`); fails with `what` and the worker's log.
pub async fn wait_applied(
    conn: &mut redis::aio::MultiplexedConnection,
    topic: &str,
    at_least: i64,
    worker: &super::Worker,
    what: &str,
) {
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    while applied(conn, topic).await < at_least {
        assert!(std::time::Instant::now() < deadline, "{what}\n{}", worker.log());
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
