//! The Redis key layout, in one place: every key name rankflow uses is built
//! here, and the Lua scripts receive the keys and key prefixes they touch in
//! KEYS and ARGV (they only append a member, a marker hash number or a
//! record's position to a prefix built here). Nothing else assembles a key.
//!
//! Every key of one board (or one split of a board) carries the same hash tag,
//! `{board}` or `{board:split}`, so a Lua script that touches them all runs on
//! one Redis Cluster node. Period keys are the public contract; keys whose
//! last segments start with `_` are rankflow's own bookkeeping:
//!
//! | key | type | holds |
//! |---|---|---|
//! | `{prefix}:{tag}:all`, `:h:..`, `:d:..`, `:w:..`, `:m:..`, `:y:..` | zset | the boards |
//! | `{prefix}:{tag}:_seen:<n>` | hash | dedupe markers set while Redis's clock was in the `n`th `dedupe_ttl` since the epoch, in buckets: `<b>` -> bucket `b`'s 12-byte markers, concatenated; `level`, `split`, `count` (see [`crate::markers`]); expires `dedupe_ttl / 2` after the next one ends |
//! | `{prefix}:{tag}:_offsets` | hash | `<topic>:<partition>` -> last applied offset; `registered` -> when the tag was registered (ms): a tag without it takes no write (its data is gone, see `store::registry`) |
//! | `{prefix}:{tag}:_refused:<topic>:<partition>:<offset>` | string | refusal code of a record, `EX dedupe_ttl` |
//! | `{prefix}:{tag}:_chg:<topic>:<partition>:<offset>` | string | boards with `notify_top`: the rank changes an applied record made (MessagePack), `EX dedupe_ttl`, which its redelivery answers again |
//! | `{prefix}:{tag}:_dense:<period>` | zset | distinct values of the period board (dense ranks), same expiry |
//! | `{prefix}:{tag}:_dcount:<period>` | hash | value -> how many members of the period board hold it, for values held by two or more (no field: one; keeps the dense index exact), same expiry; plus the field `encoding`, whose long value keeps the hash a hash table |
//! | `{prefix}:{tag}:_ts:<period>` | hash | `latest` boards: member -> event time of its value, same expiry |
//! | `{prefix}:{tag}:_meta:<period>` | hash | boards with `meta = true`: member -> the compact JSON `meta` of the event that explains its score (no field: none), same expiry; `_meta:<period>:final` and `_meta:r:<name>` for sealed snapshots and rolling boards |
//! | `{prefix}:{tag}:_att:<period>` | hash | `max_attempts` boards: member -> events applied to the period board, same expiry |
//! | `{prefix}:{tag}:_rows:<period>` | hash | boards with `columns`: member -> its row (the member's bytes before the player id, then on boards with a `latest` column the newest event time), same expiry |
//! | `{prefix}:{tag}:_hidden` | set | players hidden on the tag (`player_hidden`) |
//! | `{prefix}:{tag}:_hid:<period>` | zset | the hidden players' values of a period board (and `_hid:<period>:final` of its snapshot), same expiry |
//! | `{prefix}:{.deploy}:_applied:<group>` | hash | `<topic>:<partition>` -> the offset the group last stored, recorded before storing it (detects a Redis that lost data); `registry` -> 1 once the registry of tags holds a tag (an empty registry then means it was lost) |
//! | `{prefix}:{.admin}:_outcome:<event_id>` | string | an admin event's outcome (JSON), for `rankflow admin --wait`, `EX dedupe_ttl` |
//! | `{prefix}:{tag}:_rl:<member>` | zset | rate limit: the member's admitted event times |
//! | `{prefix}:{tag}:_gain` | hash | `gain_over`: member -> its applied (event time, delta) pairs of the last two windows (MessagePack); windows two windows stale are swept out a few per call (`\x01sweep`: the sweep's cursor); `PX` two windows and a day |
//! | `{prefix}:{tag}:_held` | hash | integrity: event id -> a held event (MessagePack: state, player, score, ts, rule, value, stamp, meta), pending or decided |
//! | `{prefix}:{tag}:_heldq` | zset | integrity: the pending held events, `<stamp>:<event id>` (stamp: the holding call's time in µs, 16 digits, and the event's place among those it held, 4 digits), in lexical order (scores 0) |
//! | `{prefix}:{tag}:_heldp:<member>` | zset | integrity: the member's pending held events, as `_heldq` |
//! | `{prefix}:{tag}:_heldt:<member>` | zset | `hold_hides_after`: the member's held events (id -> event time) of the last two windows, `PX` two windows and a day |
//! | `{prefix}:{tag}:_keys` | set | every period key written on the tag, for erasure |
//! | `{prefix}:{tag}:<period>:final` | zset | sealed snapshot of a closed period (`close_after`), same expiry |
//! | `{prefix}:{tag}:_lgc:<round>` | zset | leagues: player -> cohort code (`tier * 2^32 + n`) in the round; same expiry |
//! | `{prefix}:{tag}:_lgo:<round>` | hash | leagues: `<tier>` -> the round's newest cohort of the tier, `<tier>:size` -> players placed in it, `seq` -> arrivals; same expiry |
//! | `{prefix}:{tag}:_lgp:<round>` | zset | leagues: players of the round waiting for the previous round's settlement -> arrival number; same expiry |
//! | `{prefix}:{tag}:_lgr:<round>` | hash | leagues: a settled round's results, player -> `<rank>:<zone>:<next tier>`; same expiry |
//! | `{prefix}:{tag}:_lgt` | hash | leagues: player -> the tier (index) of their next placement |
//! | `{prefix}:{tag}:_lgx` | hash | leagues: player -> the tier `player_tier_set` gave, which the next settlement keeps |
//! | `{prefix}:{tag}:_lgs` | hash | leagues: `<round>` -> 1 once settled; `<round>:step` -> the settlement's progress; `<round>:published` -> cohorts published; `<round>:from` -> where the seal topic ended before the publication began |
//! | `{prefix}:{tag}:_lgk` | set | leagues: the tag's round keys, for erasure |
//! | `{prefix}:{tag}:_tm` | hash | team boards: player -> `<join time ms>:<team id>` of their team |
//! | `{prefix}:{tag}:_tc:<period>` | hash | team boards: `<team id>:<player>` -> the player's contribution to the team in the period, same expiry as the period key (which ranks the teams) |
//! | `{prefix}:{tag}:_tch:<period>` | hash | team boards: the hidden players' contributions, off their teams' scores, same expiry |
//! | `{prefix}:{tag}:_tt:<period>:<team>` | set | team boards: the team's counted contributors in the period (its `members`), same expiry |
//! | `{prefix}:{tag}:_tth` | set | team boards: the hidden teams (`team_hidden`), whose rows are in the periods' `_hid:<period>` |
//! | `{prefix}:{tag}:_tp:<player>` | set | team boards: `<team id> <period id>` of each contribution the player holds |
//! | `{prefix}:{tag}:_sealed` | hash | period key -> its close time (ms) once sealed; `<period key>:published` -> 1 once its top is on the topic; `<period key>:closes` -> the close time `rankflow close` set (ms); `<period key>:history` -> how far its history is recorded (`done` at the end) |
//! | `{prefix}:{tag}:_hist:<period>` | hash | history: a sealed period's standings, player -> `<ordinal>:<competition>:<total>:<stored score>` at the seal; expires with the snapshot |
//! | `{prefix}:{tag}:_best:<kind>` | hash | history: player -> `<best ordinal rank>:<period>` over the sealed periods of a kind (`daily`, a window's or schedule's name, ...); never expires |
//! | `{prefix}:{tag}:_hk` | set | history: the tag's `_hist` and `_best` keys, for erasure and history reads |
//! | `{prefix}:{tag}:r:<name>` | zset | rolling board `<name>`, recomputed by the scheduler |
//! | `{prefix}:{tag}:_roll:r:<name>`, `..:<d>` | zset | a rolling board's build in progress: the staged union, and day `d`'s staged copy (in the registry while they exist); the staged dense index is `_dense:_roll:r:<name>` |
//! | `{prefix}:{tag}:_roll:<name>` | hash | where that build is: `window`, `phase`, `d`, `at` |
//! | `{prefix}:{tag}:_ver:<period>` | hash | a sealed snapshot's (`<period>:final`) or rolling board's (`r:<name>`) change counters: `seals` (`seal.lua`), `swaps` (`roll.lua`), `admin` (`admin.lua`); the version of a sharded board's read of it; same expiry |
//! | `{prefix}:{.tags}:_bases` | set | every board tag's key base, for erasure |
//! | `{prefix}:{.sched}:due` | zset | scheduler: job -> when it is due (ms) |
//! | `{prefix}:{.sched}:lease` | zset | scheduler: claimed job -> when its claim lapses (ms) |
//! | `{prefix}:{.sched}:wm` | hash | `<topic>:<partition>` -> the record time every record before has been applied to (ms) |
//! | `_rebuild:{prefix}:...` | any | `rankflow rebuild`'s keys while it runs: the same layout under the prefix `_rebuild:{prefix}`, each on its live key's hash tag; swapped in per tag, the rest removed at the end |
//!
//! `.sched`, `.tags`, `.admin` and `.deploy` cannot be board ids (ids are `[a-z0-9_-]`), so
//! those hash tags never meet a board's.

mod integrity;
mod league;
mod team;
pub use integrity::*;
pub use league::*;
pub use team::*;

/// The key base of one board tag: `lb:{points}` or `lb:{points:eu}`.
pub fn base(prefix: &str, board: &str, split: Option<&str>) -> String {
    match split {
        Some(s) => format!("{prefix}:{{{board}:{s}}}"),
        None => format!("{prefix}:{{{board}}}"),
    }
}

/// The key base of shard `k` of `n` of a sharded board's tag:
/// `lb:{points#3}` or `lb:{laps:monza#3}` (see `board::shard_of`), or with a
/// spreading suffix, `lb:{points#3.2}`: the first of `points#3`,
/// `points#3.1`, `points#3.2`, ... whose Redis Cluster slot lies in the
/// `k`th of `n` equal ranges of slots. Tags that differ in a digit or two
/// have CRC16s that cluster (twelve `points#k` tags can land eight on one
/// primary of three); spread this way, a cluster whose primaries hold equal
/// ranges of slots (what `redis-cli --cluster create` makes) holds equal
/// shares of the shards.
pub fn shard_base(prefix: &str, board: &str, split: Option<&str>, k: u32, n: u32) -> String {
    let tag = match split {
        Some(s) => format!("{board}:{s}#{k}"),
        None => format!("{board}#{k}"),
    };
    let n = u64::from(n.max(1));
    let range = (u64::from(k) * SLOTS / n)..((u64::from(k) + 1) * SLOTS / n);
    let spread = (0u32..)
        .map(|j| if j == 0 { tag.clone() } else { format!("{tag}.{j}") })
        .find(|t| range.contains(&u64::from(slot(t))))
        .expect("some suffix lands in every range");
    format!("{prefix}:{{{spread}}}")
}

/// Redis Cluster's slot count.
const SLOTS: u64 = 16384;

/// The Redis Cluster slot of a hash tag's content: CRC16 (XMODEM) mod 16384.
pub fn slot(tag: &str) -> u16 {
    let mut crc: u16 = 0;
    for b in tag.bytes() {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 { (crc << 1) ^ 0x1021 } else { crc << 1 };
        }
    }
    crc % SLOTS as u16
}

/// The Redis Cluster slot of a key: of its hash tag (what is between its
/// first `{` and the first `}` after it, when not empty), else of the whole key.
pub fn key_slot(key: &str) -> u16 {
    let tag = key
        .split_once('{')
        .and_then(|(_, rest)| rest.split_once('}'))
        .map(|(tag, _)| tag)
        .filter(|tag| !tag.is_empty());
    slot(tag.unwrap_or(key))
}

/// `lb:{points}:d:2026-08-14`; the all-time board is `lb:{points}:all`.
pub fn period_key(base: &str, period_id: &str) -> String {
    format!("{base}:{period_id}")
}

/// What every period key of a tag starts with (`lb:{points}:`); the rest is the period id.
pub fn period_prefix(base: &str) -> String {
    format!("{base}:")
}

/// The dense-rank index of a period board: one member per distinct value.
pub fn dense_key(base: &str, period_id: &str) -> String {
    format!("{}{period_id}", dense_prefix(base))
}

/// What [`dense_key`] puts before the period id.
pub fn dense_prefix(base: &str) -> String {
    format!("{base}:_dense:")
}

/// How many members of a period board hold each value: a value joins the
/// dense index when its count leaves 0 and leaves it when the count returns to 0.
pub fn dense_count_key(base: &str, period_id: &str) -> String {
    format!("{}{period_id}", dense_count_prefix(base))
}

/// What [`dense_count_key`] puts before the period id.
pub fn dense_count_prefix(base: &str) -> String {
    format!("{base}:_dcount:")
}

/// `latest` boards: the event time of each member's value in a period board.
pub fn times_key(base: &str, period_id: &str) -> String {
    format!("{}{period_id}", times_prefix(base))
}

/// What [`times_key`] puts before the period id.
pub fn times_prefix(base: &str) -> String {
    format!("{base}:_ts:")
}

/// `meta = true` boards: the metadata of each member of a period board.
pub fn meta_key(base: &str, period_id: &str) -> String {
    format!("{}{period_id}", meta_prefix(base))
}

/// What [`meta_key`] puts before the period id.
pub fn meta_prefix(base: &str) -> String {
    format!("{base}:_meta:")
}

/// `max_attempts` boards: how many events each member has had applied to a period board.
pub fn attempts_key(base: &str, period_id: &str) -> String {
    format!("{}{period_id}", attempts_prefix(base))
}

/// What [`attempts_key`] puts before the period id.
pub fn attempts_prefix(base: &str) -> String {
    format!("{base}:_att:")
}

/// Boards with `columns`: each member's row in a period board (see `board::columns`).
pub fn rows_key(base: &str, period_id: &str) -> String {
    format!("{}{period_id}", rows_prefix(base))
}

/// What [`rows_key`] puts before the period id.
pub fn rows_prefix(base: &str) -> String {
    format!("{base}:_rows:")
}

/// The set of a tag's hidden players (`player_hidden`).
pub fn hidden_key(base: &str) -> String {
    format!("{base}:_hidden")
}

/// A period board's shadow: the values of the tag's hidden players, kept
/// out of the period key so that others' reads never see them.
pub fn shadow_key(base: &str, period_id: &str) -> String {
    format!("{}{period_id}", shadow_prefix(base))
}

/// What [`shadow_key`] puts before the period id.
pub fn shadow_prefix(base: &str) -> String {
    format!("{base}:_hid:")
}

/// The field of a tag's offsets hash that registers the tag (see
/// `store::registry`). It holds no colon, so no `<topic>:<partition>`
/// field can be it; the scripts that write to a tag check it by this name.
pub const REGISTERED_FIELD: &str = "registered";

/// The field of a deployment marker that says the registry of tags has
/// held a tag: an empty registry is then a lost one.
pub const REGISTRY_FIELD: &str = "registry";

/// The key prefix of a key base (`lb` of `lb:{points}`).
pub fn prefix_of_base(base: &str) -> &str {
    base.split_once(":{").map_or(base, |(p, _)| p)
}

/// A consumer group's deployment marker: `<topic>:<partition>` -> the offset
/// last stored (recorded before it is stored), against which a Redis that
/// lost data is detected.
pub fn deploy_key(prefix: &str, group: &str) -> String {
    format!("{prefix}:{{.deploy}}:_applied:{group}")
}

/// Where the worker leaves an admin event's outcome for `rankflow admin --wait`.
pub fn admin_outcome_key(prefix: &str, event_id: &uuid::Uuid) -> String {
    format!("{prefix}:{{.admin}}:_outcome:{event_id}")
}

/// Prefix the apply script completes with a member for its rate-limit window.
pub fn rate_prefix(base: &str) -> String {
    format!("{base}:_rl:")
}

/// A member's rate-limit window (the apply script builds it from [`rate_prefix`]).
pub fn rate_key(base: &str, member: &str) -> String {
    format!("{}{member}", rate_prefix(base))
}

/// The hash of the dedupe markers set while Redis's clock was in its `n`th
/// `dedupe_ttl` since the epoch.
pub fn dedupe_hash_key(base: &str, n: u64) -> String {
    format!("{}{n}", dedupe_prefix(base))
}

/// What [`dedupe_hash_key`] puts before `n` (the apply script completes it).
pub fn dedupe_prefix(base: &str) -> String {
    format!("{base}:_seen:")
}

/// The set of period keys a tag has written (walked by an erasure).
pub fn registry_key(base: &str) -> String {
    format!("{base}:_keys")
}

/// The hash tag of a key base without its shard: `points` of
/// `prefix:{points}` and `prefix:{points#3}`, `laps:monza` of `prefix:{laps:monza#3}`.
pub fn tag_of_base(base: &str) -> Option<&str> {
    let tag = base.split_once('{')?.1.strip_suffix('}')?;
    Some(tag.split_once('#').map_or(tag, |(t, _)| t))
}

/// The board id of a key base `prefix:{board}` or `prefix:{board:split}`
/// (either with a shard, `#k`).
pub fn board_of_base(base: &str) -> Option<&str> {
    let tag = tag_of_base(base)?;
    Some(tag.split(':').next().unwrap_or(tag))
}

/// The board's own key base of a shard's (`prefix:{points}` of
/// `prefix:{points#3.1}`); a base without a shard is its own. A sharded
/// board's scheduled seal is named by it: one job seals every shard.
pub fn unsharded_base(base: &str) -> Option<String> {
    let (prefix, _) = base.split_once('{')?;
    Some(format!("{prefix}{{{}}}", tag_of_base(base)?))
}

/// The (board, split) of a split board's key base `prefix:{board:split}`;
/// `None` for a board without splits.
pub fn split_of_base(base: &str) -> Option<(&str, &str)> {
    tag_of_base(base)?.split_once(':')
}

/// The field of a tag's sealed hash that holds a period's manual close time
/// (ms, `rankflow close`).
pub fn closes_field(period_key: &str) -> String {
    format!("{period_key}:closes")
}

/// The field of a tag's sealed hash that says a period's top was published.
pub fn published_field(period_key: &str) -> String {
    format!("{period_key}:published")
}

/// What starts the id of a rolling board's build ([`rolling_build_id`]).
pub const ROLL_BUILD_PREFIX: &str = "_roll:";

/// A key rankflow never writes, on the same hash tag as `key`: what a read
/// of a snapshot not made yet reads (an empty board).
pub fn absent_key(key: &str) -> String {
    format!("{key}:_absent")
}

/// The id of a rolling board's build in progress, `_roll:r:last7d`: its
/// staged union is `period_key(base, id)`, the staged dense index
/// `dense_key(base, id)`, and day `d`'s staged copy `period_key(base, "{id}:{d}")`.
pub fn rolling_build_id(name: &str) -> String {
    format!("{ROLL_BUILD_PREFIX}{}", crate::period::id::rolling_id(name))
}

/// The hash that records where a rolling board's build is (`roll.lua`).
pub fn rolling_state_key(base: &str, name: &str) -> String {
    format!("{base}:_roll:{name}")
}

/// The change counters of a sealed snapshot or a rolling board (see the
/// table above): they rise whenever it can change, so a read of it that
/// sees the same sum before and after saw it stand still.
pub fn version_key(base: &str, period_id: &str) -> String {
    format!("{}{period_id}", version_prefix(base))
}

/// What [`version_key`] puts before the period id.
pub fn version_prefix(base: &str) -> String {
    format!("{base}:_ver:")
}

/// History: a sealed period's standings at the seal (see `scripts/history.lua`).
pub fn history_key(base: &str, period_id: &str) -> String {
    format!("{base}:_hist:{period_id}")
}

/// What [`history_key`] puts before the period id.
pub fn history_prefix(base: &str) -> String {
    format!("{base}:_hist:")
}

/// History: each player's best rank over the sealed periods of one kind.
pub fn best_key(base: &str, kind: &str) -> String {
    format!("{base}:_best:{kind}")
}

/// What [`best_key`] puts before the kind.
pub fn best_prefix(base: &str) -> String {
    format!("{base}:_best:")
}

/// History: the tag's history and best hashes, for erasure and reads.
pub fn history_registry_key(base: &str) -> String {
    format!("{base}:_hk")
}

/// The field of a tag's sealed hash that says how far a period's history is recorded.
pub fn history_field(period_key: &str) -> String {
    format!("{period_key}:history")
}

/// Which periods of the tag are sealed (see the table above).
pub fn sealed_key(base: &str) -> String {
    format!("{base}:_sealed")
}

/// The registry of board tags: a set of every key base rankflow has
/// written, which an erasure walks (never a keyspace scan).
pub fn tags_key(prefix: &str) -> String {
    format!("{prefix}:{{.tags}}:_bases")
}

/// The scheduler's keys, all under one hash tag: `(due, lease, watermarks)`.
pub fn sched_keys(prefix: &str) -> (String, String, String) {
    (format!("{prefix}:{{.sched}}:due"), format!("{prefix}:{{.sched}}:lease"), format!("{prefix}:{{.sched}}:wm"))
}

/// The outbox of scheduled jobs' records (`scripts/outbox.lua`), all under
/// one hash tag: `(seq, items, lease, epoch, ids prefix)`.
pub fn outbox_keys(prefix: &str) -> (String, String, String, String, String) {
    let k = |name: &str| format!("{prefix}:{{.outbox}}:{name}");
    (k("seq"), k("items"), k("lease"), k("epoch"), k("id:"))
}

/// What `rankflow rebuild` puts before the key prefix.
const REBUILD: &str = "_rebuild:";

/// The key prefix of `rankflow rebuild`'s keys, `_rebuild:lb`: a rebuilt
/// key keeps the hash tag of the live key it replaces
/// (`_rebuild:lb:{points}:all` is on the slot of `lb:{points}:all`), so
/// swapping a tag's keys is one script on one node.
pub fn rebuild_prefix(prefix: &str) -> String {
    format!("{REBUILD}{prefix}")
}

/// The rebuilt key base that replaces a live one (`lb:{points}` -> `_rebuild:lb:{points}`).
pub fn rebuilt_base(live: &str) -> String {
    format!("{REBUILD}{live}")
}

/// The live key base a rebuilt one replaces (`_rebuild:lb:{points}` -> `lb:{points}`).
pub fn live_base(rebuilt: &str) -> Option<&str> {
    rebuilt.strip_prefix(REBUILD)
}

pub fn offsets_key(base: &str) -> String {
    format!("{base}:_offsets")
}

/// A `SCAN` pattern matching every board tag's offsets hash.
pub fn offsets_pattern(prefix: &str) -> String {
    format!("{prefix}:{{*}}:_offsets")
}

/// The key base of an offsets hash found by [`offsets_pattern`].
pub fn base_of_offsets_key(key: &str) -> &str {
    key.strip_suffix(":_offsets").unwrap_or(key)
}

/// A `SCAN` pattern matching every remembered refusal of `topic`'s records.
pub fn refused_pattern(prefix: &str, topic: &str) -> String {
    format!("{prefix}:{{*}}:_refused:{topic}:*")
}

/// Prefix the apply script completes with `<topic>:<partition>:<offset>`.
pub fn refused_prefix(base: &str) -> String {
    format!("{base}:_refused:")
}

/// A `SCAN` pattern matching every remembered rank change of `topic`'s records.
pub fn changes_pattern(prefix: &str, topic: &str) -> String {
    format!("{prefix}:{{*}}:_chg:{topic}:*")
}

/// Prefix the apply script completes with `<topic>:<partition>:<offset>`
/// to remember a record's rank changes.
pub fn changes_prefix(base: &str) -> String {
    format!("{base}:_chg:")
}

/// The field of a topic-partition in the `_offsets` hash. Kafka topic names
/// cannot contain `:`, so the field is unambiguous.
pub fn offsets_field(topic: &str, partition: i32) -> String {
    format!("{topic}:{partition}")
}

/// The topic of an `_offsets` field.
pub fn topic_of_field(field: &str) -> Option<&str> {
    field.rsplit_once(':').map(|(topic, _)| topic)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::period::id::{final_id, rolling_id, PeriodRef};

    #[test]
    fn every_script_that_writes_to_a_tag_checks_its_registration_by_the_same_name() {
        let guard = include_str!("scripts/lib/registered.lua");
        assert!(guard.contains("'HEXISTS', offsets_key, Const.REGISTERED_FIELD"));
        assert!(guard.contains("error_reply(Const.LOST .. "));
        for (name, script) in [
            ("apply.lua", include_str!("scripts/apply.lua")),
            ("admin.lua", include_str!("scripts/admin.lua")),
            ("seal.lua", include_str!("scripts/seal.lua")),
            ("roll.lua", include_str!("scripts/roll.lua")),
        ] {
            assert!(script.contains("local lost = Registered.check("), "{name} does not check it");
            assert!(script.contains("if lost then return lost end"), "{name} does not answer LOST");
        }
        assert!(!REGISTERED_FIELD.contains(':') && !REGISTRY_FIELD.contains(':'));
        assert_eq!(prefix_of_base("lb:{points:eu}"), "lb");
        assert_eq!(prefix_of_base("_rebuild:lb:{points}"), "_rebuild:lb");
    }

    #[test]
    fn keys_follow_the_documented_layout() {
        let b = base("lb", "points", None);
        assert_eq!(b, "lb:{points}");
        assert_eq!(period_key(&b, "d:2026-08-14"), "lb:{points}:d:2026-08-14");
        assert_eq!(period_key(&b, "all"), "lb:{points}:all");
        assert_eq!(base("lb", "points", Some("eu")), "lb:{points:eu}");
        assert_eq!(dedupe_hash_key(&b, 2951), "lb:{points}:_seen:2951");
        assert_eq!(offsets_key(&b), "lb:{points}:_offsets");
        assert_eq!(dense_key(&b, "w:2026-W33"), "lb:{points}:_dense:w:2026-W33");
        assert_eq!(dense_count_key(&b, "w:2026-W33"), "lb:{points}:_dcount:w:2026-W33");
        assert_eq!(offsets_field("scores", 3), "scores:3");
        assert_eq!(board_of_base("lb:{points}"), Some("points"));
        assert_eq!(board_of_base("lb:{laps:monza}"), Some("laps"));
        assert_eq!(registry_key(&b), "lb:{points}:_keys");
        assert_eq!(period_key(&b, &final_id("d:2026-08-14")), "lb:{points}:d:2026-08-14:final");
        assert_eq!(period_key(&b, &rolling_id("last7d")), "lb:{points}:r:last7d");
        assert_eq!(sched_keys("lb").0, "lb:{.sched}:due");
        assert_eq!(tags_key("lb"), "lb:{.tags}:_bases");
        assert_eq!(split_of_base("lb:{laps:monza}"), Some(("laps", "monza")));
        assert_eq!(split_of_base("lb:{points}"), None);
        // Redis's own example: CLUSTER KEYSLOT 123456789 is 12739 (CRC16 0x31C3).
        assert_eq!(slot("123456789"), 12739);
        // A key hashes by its hash tag, as Redis Cluster does (CLUSTER KEYSLOT).
        assert_eq!(key_slot("lb:{123456789}:_seen:3"), 12739);
        assert_eq!(key_slot("lb:{123456789}"), key_slot("x{123456789}y{z}"));
        assert_eq!(key_slot("123456789"), 12739);
        assert_eq!(key_slot("a{}b"), slot("a{}b"));
        assert_eq!(key_slot("a{b"), slot("a{b"));
        for n in [2, 3, 8, 12, 256] {
            for k in 0..n {
                let b = shard_base("lb", "points", None, k, n);
                let tag = b.split_once('{').unwrap().1.trim_end_matches('}');
                let at = u64::from(slot(tag));
                assert!(
                    u64::from(k) * SLOTS / u64::from(n) <= at && at < (u64::from(k) + 1) * SLOTS / u64::from(n),
                    "{b}"
                );
                assert!(tag.starts_with(&format!("points#{k}")), "{b}");
            }
        }
        assert!(shard_base("lb", "laps", Some("monza"), 0, 8).starts_with("lb:{laps:monza#0"));
        assert_eq!(board_of_base("lb:{points#3}"), Some("points"));
        assert_eq!(board_of_base("lb:{points#3.12}"), Some("points"));
        assert_eq!(split_of_base("lb:{laps:monza#0}"), Some(("laps", "monza")));
        assert_eq!(unsharded_base("lb:{laps:monza#3.1}").as_deref(), Some("lb:{laps:monza}"));
        assert_eq!(unsharded_base("lb:{points}").as_deref(), Some("lb:{points}"));
        assert_eq!(version_key(&b, "r:last7d"), "lb:{points}:_ver:r:last7d");
        assert!(PeriodRef::parse(&final_id("d:2026-08-14")).sealed && !PeriodRef::parse("d:2026-08-14").sealed);
        assert_eq!(PeriodRef::parse(&rolling_id("last7d")).names, crate::period::id::Names::Rolling("last7d"));
        assert!(!matches!(PeriodRef::parse("all").names, crate::period::id::Names::Rolling(_)));
        assert_eq!(published_field("lb:{points}:d:2026-08-14"), "lb:{points}:d:2026-08-14:published");
        assert_eq!(base_of_offsets_key(&offsets_key(&b)), b);
        assert_eq!(topic_of_field(&offsets_field("scores", 3)), Some("scores"));
        assert_eq!(dedupe_prefix(&b), "lb:{points}:_seen:");
        assert_eq!(meta_key(&b, "w:2026-W33"), "lb:{points}:_meta:w:2026-W33");
        assert_eq!(shadow_key(&b, "all"), "lb:{points}:_hid:all");
        assert_eq!(hidden_key(&b), "lb:{points}:_hidden");
        let rebuilt = base(&rebuild_prefix("lb"), "points", None);
        assert_eq!(rebuilt, "_rebuild:lb:{points}");
        assert_eq!(live_base(&rebuilt), Some(b.as_str()));
    }
}
