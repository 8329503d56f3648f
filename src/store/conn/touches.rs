//! What each script touches, as its header declares it (the `-- keys:` and
//! `-- derives:` lines): its fixed keys by name, in KEYS, and the families
//! of keys it derives itself (per period, per player, per marker bucket)
//! by the prefix it derives them from. Every one carries the board tag (or
//! `{.sched}`), so a script's keys are in one hash slot. The tests below
//! hold each script's header, its code and this table to each other; the
//! scripts whose KEYS are positional get their keys built from this table
//! ([`named`]), so the order is written once.

/// One script's declaration.
#[derive(Clone, Copy, Debug)]
pub struct Touches {
    pub script: &'static str,
    /// Positional KEYS in order (a trailing `?`: given on boards that keep
    /// metadata only), or with `by_name`, the header fields that give KEYS
    /// indexes.
    pub keys: &'static [&'static str],
    pub by_name: bool,
    /// The prefixes (header fields, ARGV or KEYS it reads them from) of the
    /// key families it derives itself.
    pub derives: &'static [&'static str],
}

const fn positional(script: &'static str, keys: &'static [&'static str], derives: &'static [&'static str]) -> Touches {
    Touches { script, keys, by_name: false, derives }
}

const fn by_name(script: &'static str, keys: &'static [&'static str], derives: &'static [&'static str]) -> Touches {
    Touches { script, keys, by_name: true, derives }
}

pub const SEAL: Touches = positional(
    "seal.lua",
    &[
        "live",
        "final",
        "live_dense",
        "final_dense",
        "sealed",
        "registry",
        "live_shadow",
        "final_shadow",
        "offsets",
        "final_versions",
        "live_meta?",
        "final_meta?",
        "live_rows?",
        "final_rows?",
    ],
    &[],
);
pub const HISTORY: Touches =
    positional("history.lua", &["final", "history", "best", "sealed", "history_registry", "offsets"], &[]);
pub const HISTORY_PUT: Touches =
    positional("history_put.lua", &["history", "best", "history_registry", "offsets"], &[]);
pub const READ: Touches = positional("read.lua", &["period", "dense", "shadow", "versions", "meta?"], &[]);
pub const READ_ROWS: Touches =
    positional("read_rows.lua", &["period", "rows", "shadow", "dense?", "meta?", "versions?"], &[]);
pub const SCHED: Touches = positional("sched.lua", &["due", "lease", "watermarks"], &[]);
pub const DEPLOY: Touches = positional("deploy.lua", &["marker"], &[]);
pub const OUTBOX: Touches = positional("outbox.lua", &["seq", "items", "lease", "epoch"], &["ids"]);
pub const SWAP: Touches = positional(
    "swap.lua",
    &[
        "live_offsets",
        "built_offsets",
        "live_registry",
        "built_registry",
        "live_sealed",
        "built_sealed",
        "live_hidden",
        "built_hidden",
        "live_held",
        "built_held",
        "live_queue",
        "built_queue",
        "live_members?",
        "built_members?",
        "live_teams_hidden?",
        "built_teams_hidden?",
    ],
    &["live_pp", "built_pp", "live_seen", "built_seen", "live_pqueue", "built_pqueue", "team", "aux"],
);
pub const APPLY: Touches = by_name(
    "apply.lua",
    &[
        "offsets",
        "hidden",
        "registry",
        "sealed",
        "key",
        "dense",
        "counts",
        "shadow",
        "times",
        "meta",
        "attempts",
        "tiers",
        "overrides",
        "state",
        "cohorts",
        "open",
        "pending",
        "prev_cohorts",
        "prev_pending",
        "held",
        "queue",
        "gain_key",
        "rows",
    ],
    &["rate", "refused", "seen", "changes", "pqueue", "hides"],
);
pub const TEAM: Touches = by_name(
    "team.lua",
    &["offsets", "registry", "members", "hidden", "teams_hidden", "sealed", "key"],
    &["refused", "seen", "contrib", "shadow_contrib", "team_set", "index", "period", "shadow"],
);
pub const ADMIN: Touches = by_name(
    "admin.lua",
    &[
        "offsets",
        "registry",
        "hidden",
        "versions",
        "sealed",
        "league_tiers",
        "league_overrides",
        "league_registry",
        "history_registry",
        "rate_key",
        "held",
        "held_queue",
        "held_player",
        "gain_key",
        "held_times",
    ],
    &["period", "dense", "counts", "times", "meta", "shadow", "attempts", "rows", "versions", "seen", "refused"],
);
pub const ROLL: Touches = by_name(
    "roll.lua",
    &[
        "dest",
        "dest_dense",
        "registry",
        "state",
        "staged",
        "staged_dense",
        "key",
        "copy",
        "meta",
        "copy_meta",
        "dest_meta",
        "staged_meta",
        "offsets",
        "versions",
    ],
    &[],
);
pub const SETTLE: Touches = by_name(
    "settle.lua",
    &["offsets", "state", "tiers", "overrides", "results", "registry", "cohorts", "open", "pending"],
    &[],
);

/// Every script's.
pub const ALL: [Touches; 14] =
    [SEAL, HISTORY, HISTORY_PUT, READ, READ_ROWS, SCHED, DEPLOY, OUTBOX, SWAP, APPLY, TEAM, ADMIN, ROLL, SETTLE];

/// The KEYS of a positional script, in its declared order, each made by
/// `key` from its name (`None`: an optional key not given, left out).
/// A required name `key` does not know is a bug the script's tests catch.
pub(in crate::store) fn named(t: &Touches, key: impl Fn(&str) -> Option<String>) -> Vec<String> {
    debug_assert!(!t.by_name, "{} names its keys in its header", t.script);
    t.keys
        .iter()
        .filter_map(|name| match name.strip_suffix('?') {
            Some(optional) => key(optional),
            None => Some(key(name).unwrap_or_else(|| panic!("{}: no key for '{name}'", t.script))),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    fn source(name: &str) -> String {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/src/scripts/");
        std::fs::read_to_string(format!("{dir}{name}")).unwrap_or_else(|e| panic!("{name}: {e}"))
    }

    /// The script's code and the code of its own folder's parts (apply/).
    fn code(script: &str) -> String {
        let mut text = source(script);
        let folder = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/src/scripts/"))
            .join(script.trim_end_matches(".lua"));
        if let Ok(dir) = std::fs::read_dir(folder) {
            for f in dir.flatten() {
                text.push_str(&std::fs::read_to_string(f.path()).unwrap());
            }
        }
        text.lines().filter(|l| !l.trim_start().starts_with("--")).collect::<Vec<_>>().join("\n")
    }

    /// The words after `-- <label>:` in the script's header.
    fn declared(script: &str, label: &str) -> Vec<String> {
        let text = source(script);
        let line = text
            .lines()
            .take_while(|l| l.starts_with("--") || l.is_empty())
            .find_map(|l| l.strip_prefix(&format!("-- {label}:")))
            .unwrap_or_else(|| panic!("{script}'s header has no '-- {label}:' line"));
        line.split_whitespace().filter(|w| *w != "(none)").map(String::from).collect()
    }

    /// What each `KEYS[...]` holds, nested brackets and all.
    fn indexes(code: &str) -> Vec<&str> {
        let mut out = Vec::new();
        for (at, _) in code.match_indices("KEYS[") {
            let rest = &code[at + 5..];
            let mut depth = 1;
            let end = rest.find(|c| {
                depth += match c {
                    '[' => 1,
                    ']' => -1,
                    _ => 0,
                };
                depth == 0
            });
            out.push(&rest[..end.unwrap_or(rest.len())]);
        }
        out
    }

    /// The names in `KEYS[h.name]`, `KEYS[p.name]`, `KEYS[h.days[d].name]` ...
    fn names_used(code: &str) -> BTreeSet<String> {
        let named = indexes(code).into_iter().filter(|i| i.parse::<usize>().is_err());
        named.map(|i| i.rsplit('.').next().unwrap_or(i).to_string()).collect()
    }

    /// The highest `KEYS[n]` the code reads.
    fn highest_index(code: &str) -> usize {
        indexes(code).into_iter().filter_map(|i| i.parse().ok()).max().unwrap_or(0)
    }

    #[test]
    fn every_script_declares_what_it_touches_as_this_table_does() {
        let dir = std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/src/scripts")).unwrap();
        let scripts: BTreeSet<String> = dir
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".lua"))
            .collect();
        let table: BTreeSet<String> = ALL.iter().map(|t| t.script.to_string()).collect();
        assert_eq!(scripts, table, "every script has a row in store/conn/touches.rs");
        for t in ALL {
            let label = if t.by_name { "keys by name" } else { "keys" };
            assert_eq!(declared(t.script, label), t.keys, "{}: its '-- {label}:' line", t.script);
            assert_eq!(declared(t.script, "derives"), t.derives, "{}: its '-- derives:' line", t.script);
            let code = code(t.script);
            if t.by_name {
                let wanted: BTreeSet<String> = t.keys.iter().map(|k| k.to_string()).collect();
                assert_eq!(names_used(&code), wanted, "{}: the KEYS its code reads by name", t.script);
                assert_eq!(highest_index(&code), 0, "{}: names its keys, reads none by position", t.script);
            } else {
                assert_eq!(highest_index(&code), t.keys.len(), "{}: the KEYS its code reads", t.script);
            }
            for prefix in t.derives {
                assert!(code.contains(prefix), "{}: derives from '{prefix}', which its code never reads", t.script);
            }
        }
    }

    #[test]
    fn names_are_read_from_keys_indexes_of_every_shape() {
        let code = "KEYS[h.offsets] KEYS[p.key] KEYS[lg.tiers] KEYS[h.days[d].copy_meta] KEYS[1]";
        let want: BTreeSet<String> = ["offsets", "key", "tiers", "copy_meta"].map(String::from).into();
        assert_eq!(names_used(code), want);
        assert_eq!(highest_index("KEYS[2] KEYS[11] KEYS[h.x]"), 11);
    }

    #[test]
    fn positional_keys_come_in_the_declared_order_optional_ones_only_when_given() {
        let key = |with: bool| move |n: &str| (with || !n.ends_with("meta")).then(|| n.to_uppercase());
        assert_eq!(named(&READ, key(false)), ["PERIOD", "DENSE", "SHADOW", "VERSIONS"]);
        assert_eq!(named(&READ, key(true)).last().map(String::as_str), Some("META"));
    }
}
