//! Operator work on rankflow's bookkeeping keys, outside the write path:
//! finding every board tag, and forgetting a topic's recorded offsets.
//! Both `SCAN` the keyspace, so neither runs on the hot path.

use crate::config::RedisSettings;
use crate::keys;
use crate::store::{scan_keys, RedisConn};

/// The key base of every board tag that has recorded an offset.
pub async fn tag_bases(settings: &RedisSettings) -> Result<Vec<String>, String> {
    let found = scan_keys(settings, &keys::offsets_pattern(&settings.key_prefix)).await?;
    Ok(found.iter().map(|k| keys::base_of_offsets_key(k).to_string()).collect())
}

/// Deletes every board tag's recorded offsets (and remembered refusals and
/// rank changes) of
/// `topic`, so that a topic deleted and recreated under the same name is
/// consumed afresh instead of being taken for redeliveries. Returns how many
/// partition entries were removed.
pub async fn forget_offsets(settings: &RedisSettings, topic: &str) -> Result<u64, String> {
    let mut conn = RedisConn::connect(settings).await.map_err(|e| e.to_string())?;
    let mut removed = 0u64;
    for base in tag_bases(settings).await? {
        let key = keys::offsets_key(&base);
        let fields: Vec<String> =
            redis::cmd("HKEYS").arg(&key).query_async(&mut conn).await.map_err(|e| e.to_string())?;
        let ours: Vec<&String> = fields.iter().filter(|f| keys::topic_of_field(f) == Some(topic)).collect();
        if !ours.is_empty() {
            let n: u64 =
                redis::cmd("HDEL").arg(&key).arg(&ours).query_async(&mut conn).await.map_err(|e| e.to_string())?;
            removed += n;
        }
    }
    let prefix = &settings.key_prefix;
    let mut remembered = scan_keys(settings, &keys::refused_pattern(prefix, topic)).await?;
    remembered.extend(scan_keys(settings, &keys::changes_pattern(prefix, topic)).await?);
    for key in remembered {
        let _: i64 = redis::cmd("DEL").arg(&key).query_async(&mut conn).await.map_err(|e| e.to_string())?;
    }
    Ok(removed)
}
