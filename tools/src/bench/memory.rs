//! What rankflow keeps in Redis, per applied event: the bytes of its own
//! keys (a key segment that starts with `_`, or the `{.sched}` and `{.tags}`
//! tags) and of the boards, by kind, from `MEMORY USAGE` of every key.

use std::collections::BTreeMap;

use super::*;

/// Redis's memory by kind of key.
pub(super) struct Footprint {
    /// Per kind (`_seen`, `_dense`, `_offsets`, ..., or `boards`): bytes, keys and elements.
    pub(super) kinds: BTreeMap<String, Usage>,
}

/// What the keys of one kind hold.
#[derive(Clone, Copy, Default)]
pub(super) struct Usage {
    pub(super) bytes: u64,
    pub(super) keys: u64,
    /// Members of a zset or set, fields of a hash, markers of a marker hash.
    pub(super) elements: u64,
}

/// The command that counts a key's elements, by kind.
fn count_command(kind: &str, key: &str) -> redis::Cmd {
    let mut cmd = match kind {
        "boards" | "_dense" | "_rl" | "sched" => redis::cmd("ZCARD"),
        "_keys" | "tags" => redis::cmd("SCARD"),
        "_seen" => {
            let mut c = redis::cmd("HGET");
            c.arg(key).arg("count");
            return c;
        }
        "_refused" => redis::cmd("EXISTS"),
        _ => redis::cmd("HLEN"),
    };
    cmd.arg(key);
    cmd
}

/// The kind of a key: its first segment after the hash tag that starts
/// with `_`, `sched`/`tags` for rankflow's shared tags, else `boards`.
fn kind(key: &str) -> String {
    let Some((tag, rest)) = key.split_once('}') else { return "other".to_string() };
    if tag.ends_with("{.sched") || tag.ends_with("{.tags") {
        return tag.rsplit_once('.').map_or("other", |(_, t)| t).to_string();
    }
    match rest.split(':').find(|s| s.starts_with('_')) {
        Some(own) => own.to_string(),
        None => "boards".to_string(),
    }
}

impl Footprint {
    /// Every key's `MEMORY USAGE` (exact: `SAMPLES 0`) and element count, by kind.
    pub(super) async fn measure(conn: &RedisConn, settings: &Settings) -> Result<Footprint, String> {
        let mut c = conn.clone();
        let mut kinds: BTreeMap<String, Usage> = BTreeMap::new();
        let keys = rankflow::store::scan_keys(&settings.redis, "*").await?;
        for chunk in keys.chunks(1000) {
            let mut pipe = redis::pipe();
            for k in chunk {
                pipe.cmd("MEMORY").arg("USAGE").arg(k).arg("SAMPLES").arg(0);
                pipe.add_command(count_command(&kind(k), k));
            }
            let answers: Vec<Option<u64>> = pipe.query_async(&mut c).await.map_err(|e| format!("MEMORY USAGE: {e}"))?;
            for (k, pair) in chunk.iter().zip(answers.chunks(2)) {
                let e = kinds.entry(kind(k)).or_default();
                e.bytes += pair[0].unwrap_or(0);
                e.elements += pair[1].unwrap_or(0);
                e.keys += 1;
            }
        }
        Ok(Footprint { kinds })
    }

    /// Bytes of rankflow's own keys (every kind but the boards).
    pub(super) fn own(&self) -> u64 {
        self.kinds.iter().filter(|(k, _)| *k != "boards").map(|(_, u)| u.bytes).sum()
    }

    /// "own keys 23.1 bytes per applied event per board tag (_seen 19.0 in
    /// 5 keys: 19.0 bytes per element, ...); the boards ...", over `applied`
    /// events applied to a tag (an event applied to two boards counts twice).
    pub(super) fn line(&self, applied: u64) -> String {
        let per = |b: u64| b as f64 / applied.max(1) as f64;
        let each = |u: &Usage| {
            format!(
                "{:.1} in {} keys, {:.1} bytes each of {} elements",
                per(u.bytes),
                u.keys,
                u.bytes as f64 / u.elements.max(1) as f64,
                u.elements
            )
        };
        let parts: Vec<String> =
            self.kinds.iter().filter(|(k, _)| *k != "boards").map(|(k, u)| format!("{k} {}", each(u))).collect();
        let boards = self.kinds.get("boards").copied().unwrap_or_default();
        format!(
            "rankflow's own keys {:.1} bytes per applied event per board tag ({}); the boards {}; \
             over {applied} applied (event, board tag) pairs",
            per(self.own()),
            parts.join(", "),
            each(&boards)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::kind;

    #[test]
    fn keys_are_told_apart_by_their_first_own_segment() {
        assert_eq!(kind("lb:{points}:_seen:20417"), "_seen");
        assert_eq!(kind("lb:{laps:monza}:_dense:d:2026-12-01"), "_dense");
        assert_eq!(kind("lb:{points}:d:2026-12-01"), "boards");
        assert_eq!(kind("lb:{points}:all"), "boards");
        assert_eq!(kind("lb:{.sched}:due"), "sched");
        assert_eq!(kind("lb:{.tags}:_bases"), "tags");
    }
}
