//! The apply call's header (ARGV[1] of `scripts/apply.lua`), declared once:
//! every map it holds and the fields each may carry. `protocol.rs` writes
//! it through [`Fields`], which takes only declared fields; the apply
//! script starts with the same declaration, made from this one
//! ([`lua_declaration`]), and reads the header through
//! `scripts/apply/header.lua`, which makes a read of a field not declared
//! an error naming it. The tests below check that headers with every option
//! on carry exactly the declared fields, and that the script reads each.
//! A field added to the header is added here, written in `protocol.rs` and
//! read in the script; forgetting one of the three fails a test.

use crate::store::conn::msgpack::MapWriter;

/// What a field holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::store) enum Holds {
    /// A value (a number, a string, a boolean or a list of strings).
    Value,
    /// A map of the named scope.
    Map(&'static str),
    /// A list of maps of the named scope.
    Maps(&'static str),
}

use Holds::{Map, Maps, Value as V};

/// Each map of the header, by scope, with its fields. What each field means
/// is in `scripts/apply.lua`'s header and the phase that reads it.
pub(in crate::store) const SCOPES: [(&str, &[(&str, Holds)]); 9] = [
    (
        "top",
        &[
            ("op", V),
            ("shift", V),
            ("max_value", V),
            ("desc", V),
            ("top_k", V),
            ("dense", V),
            ("meta", V),
            ("attempts", V),
            ("rate_events", V),
            ("rate_window", V),
            ("rate", V),
            ("ttl", V),
            ("refused", V),
            ("seen", V),
            ("offsets", V),
            ("hidden", V),
            ("registry", V),
            ("sealed", V),
            ("league", Map("league")),
            ("notify", V),
            ("changes", V),
            ("rules", Map("rules")),
            ("cols", Map("cols")),
            ("review", Map("review")),
            ("fields", V),
            ("periods", Maps("period")),
        ],
    ),
    (
        "period",
        &[
            ("key", V),
            ("dense", V),
            ("counts", V),
            ("shadow", V),
            ("times", V),
            ("meta", V),
            ("attempts", V),
            ("rows", V),
            ("expire_at", V),
            ("all_time", V),
            ("id", V),
            ("round", Map("round")),
        ],
    ),
    ("round", &[("cohorts", V), ("open", V), ("pending", V), ("prev", V), ("prev_cohorts", V), ("prev_pending", V)]),
    ("league", &[("tiers", V), ("overrides", V), ("state", V), ("registry", V), ("size", V), ("count", V)]),
    (
        "rules",
        &[
            ("score", Map("rule")),
            ("gain", Map("rule")),
            ("jump", Map("rule")),
            ("better", Map("rule")),
            ("hides", Map("hides")),
            ("held", V),
            ("queue", V),
            ("gain_key", V),
            ("pqueue", V),
        ],
    ),
    ("rule", &[("limit", V), ("hold", V), ("window", V), ("amount", V), ("ratio", V), ("column", V)]),
    ("hides", &[("count", V), ("window", V), ("prefix", V)]),
    ("cols", &[("n", V), ("desc", V), ("modes", V), ("best", V), ("earliest", V)]),
    ("review", &[("id", V), ("approve", V), ("early", V)]),
];

/// What `field` of a map of `scope` holds, if it is declared.
pub(in crate::store) fn holds(scope: &str, field: &str) -> Option<Holds> {
    let (_, fields) = SCOPES.iter().find(|(s, _)| *s == scope)?;
    fields.iter().find(|(f, _)| *f == field).map(|(_, h)| *h)
}

/// One map of the header, written field by field; a field its scope does
/// not declare is a bug, caught by every test that writes a header.
pub(in crate::store) struct Fields {
    scope: &'static str,
    map: MapWriter,
}

impl Fields {
    pub(in crate::store) fn new(scope: &'static str) -> Fields {
        Fields { scope, map: MapWriter::default() }
    }

    fn check(&self, field: &str) {
        debug_assert!(
            holds(self.scope, field).is_some(),
            "the apply header's {} declares no field {field}",
            self.scope
        );
        #[cfg(test)]
        tests::note(self.scope, field);
    }

    pub(in crate::store) fn int(&mut self, field: &str, v: i64) {
        self.check(field);
        self.map.int(field, v);
    }
    pub(in crate::store) fn str(&mut self, field: &str, v: &str) {
        self.check(field);
        self.map.str(field, v);
    }
    pub(in crate::store) fn bool(&mut self, field: &str, v: bool) {
        self.check(field);
        self.map.bool(field, v);
    }
    /// A value already encoded: a list, or a map of the scope the field declares.
    pub(in crate::store) fn raw(&mut self, field: &str, v: &[u8]) {
        self.check(field);
        self.map.raw(field, v);
    }
    pub(in crate::store) fn finish(self) -> Vec<u8> {
        self.map.finish()
    }
}

/// The declaration as the apply script reads it (`HeaderFields` and
/// `HeaderNested`, see `scripts/apply/header.lua`): per scope, each field's
/// `true` for a value, its scope's name for a map, `{ scope }` for a list
/// of maps; and the same for the maps and lists of maps alone.
pub(in crate::store) fn lua_declaration() -> String {
    let lua = |(f, h): &(&str, Holds)| match h {
        Holds::Value => format!("{f} = true"),
        Holds::Map(s) => format!("{f} = '{s}'"),
        Holds::Maps(s) => format!("{f} = {{ '{s}' }}"),
    };
    let mut fields = String::from("local HeaderFields = {\n");
    let mut nested = String::from("local HeaderNested = {\n");
    for (scope, declared) in SCOPES {
        let all: Vec<String> = declared.iter().map(lua).collect();
        fields.push_str(&format!("  {scope} = {{ {} }},\n", all.join(", ")));
        let maps: Vec<String> = declared.iter().filter(|(_, h)| *h != Holds::Value).map(lua).collect();
        if !maps.is_empty() {
            nested.push_str(&format!("  {scope} = {{ {} }},\n", maps.join(", ")));
        }
    }
    format!("-- Generated by src/store/write/header.rs: the apply header's maps and their fields.\n{fields}}}\n{nested}}}\n")
}

#[cfg(test)]
pub(in crate::store) mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::collections::BTreeSet;

    thread_local! {
        static WRITTEN: RefCell<BTreeSet<(String, String)>> = RefCell::default();
    }

    /// Notes a field written on this thread.
    pub(in crate::store) fn note(scope: &str, field: &str) {
        WRITTEN.with(|w| w.borrow_mut().insert((scope.to_string(), field.to_string())));
    }

    /// The fields written on this thread while `f` ran.
    pub(crate) fn written_by(f: impl FnOnce()) -> BTreeSet<(String, String)> {
        WRITTEN.with(|w| w.borrow_mut().clear());
        f();
        WRITTEN.with(|w| w.take())
    }

    pub(crate) fn declared() -> BTreeSet<(String, String)> {
        SCOPES.iter().flat_map(|(s, fields)| fields.iter().map(|(f, _)| (s.to_string(), f.to_string()))).collect()
    }

    #[test]
    fn every_nested_scope_is_declared_and_reached_from_the_top() {
        let mut reached = BTreeSet::from(["top"]);
        let mut todo = vec!["top"];
        while let Some(scope) = todo.pop() {
            let (_, fields) = SCOPES.iter().find(|(s, _)| *s == scope).expect("a declared scope");
            for (_, h) in *fields {
                if let Holds::Map(s) | Holds::Maps(s) = h {
                    if reached.insert(s) {
                        todo.push(s);
                    }
                }
            }
        }
        let all: BTreeSet<&str> = SCOPES.iter().map(|(s, _)| *s).collect();
        assert_eq!(reached, all);
    }

    #[test]
    fn the_lua_declaration_names_every_field_by_what_it_holds() {
        let lua = lua_declaration();
        assert!(lua.contains("  top = { op = true, "), "{lua}");
        assert!(lua.contains("periods = { 'period' }"), "{lua}");
        assert!(lua.contains("round = 'round'"), "{lua}");
        assert!(lua.contains("  review = { id = true, approve = true, early = true },"), "{lua}");
    }
}
