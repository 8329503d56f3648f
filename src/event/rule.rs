//! The integrity rules' names and the codes the apply script answers for
//! them (an event held by a rule, or refused by it); what each rule checks
//! is configured in `board::integrity` and decided in `scripts/apply/rules.lua`.

/// The four rules, by their place in the scripts' code tables.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Rule {
    ScoreOver,
    GainOver,
    JumpOver,
    /// Boards ranked by several columns: a value better than a limit by its column's order.
    BetterThan,
}

impl Rule {
    pub const ALL: [Rule; 4] = [Rule::ScoreOver, Rule::GainOver, Rule::JumpOver, Rule::BetterThan];

    /// Its name in config, dead letters, review records and metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            Rule::ScoreOver => "score_over",
            Rule::GainOver => "gain_over",
            Rule::JumpOver => "jump_over",
            Rule::BetterThan => "better_than",
        }
    }

    pub fn parse(name: &str) -> Option<Rule> {
        Rule::ALL.into_iter().find(|r| r.as_str() == name)
    }

    /// Its index in the scripts' code tables (and in a held record).
    pub fn index(self) -> usize {
        self as usize
    }
}

/// The scripts' codes, per rule in [`Rule::ALL`]'s order: an event held by
/// the rule (followed in the reply by the value that broke it), one
/// refused by it, and one held that brings its player to
/// `hold_hides_after` (the player is to be hidden). The first three rules'
/// codes are those of the versions before `better_than`, which a rolling
/// upgrade runs beside this one: a refusal a tag remembers for a record
/// reads the same in both.
pub const HELD_CODES: [i64; 4] = [10, 11, 12, 23];
pub const REFUSED_CODES: [i64; 4] = [13, 14, 15, 24];
pub const HIDE_CODES: [i64; 4] = [20, 21, 22, 25];

/// A review's codes: no held event of that id on the tag; already decided.
pub const UNKNOWN_HELD: i64 = 16;
pub const DECIDED: i64 = 17;

/// Whether a held code also hides the player.
pub fn hides(code: i64) -> bool {
    HIDE_CODES.contains(&code)
}

pub fn held_code(rule: Rule) -> i64 {
    HELD_CODES[rule.index()]
}

pub fn refused_code(rule: Rule) -> i64 {
    REFUSED_CODES[rule.index()]
}

/// What a script code says of a rule: (rule, held?) for the rule codes.
pub fn rule_of_code(code: i64) -> Option<(Rule, bool)> {
    let find = |codes: &[i64; 4]| codes.iter().position(|c| *c == code).map(|i| Rule::ALL[i]);
    find(&HELD_CODES)
        .or_else(|| find(&HIDE_CODES))
        .map(|r| (r, true))
        .or_else(|| find(&REFUSED_CODES).map(|r| (r, false)))
}

/// A Lua table of `codes`, indexed from 1 as the rules' indexes from 0.
pub fn lua_table(codes: &[i64; 4]) -> String {
    let list: Vec<String> = codes.iter().map(i64::to_string).collect();
    format!("{{ {} }}", list.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rule_codes_name_the_rule_and_whether_it_held() {
        for rule in Rule::ALL {
            assert_eq!(rule_of_code(held_code(rule)), Some((rule, true)));
            assert_eq!(rule_of_code(refused_code(rule)), Some((rule, false)));
            assert_eq!(rule_of_code(HIDE_CODES[rule.index()]), Some((rule, true)));
            assert_eq!(Rule::parse(rule.as_str()), Some(rule));
        }
        assert!(hides(HIDE_CODES[Rule::JumpOver.index()]) && !hides(held_code(Rule::JumpOver)));
        for other in [7, UNKNOWN_HELD, DECIDED, 18, 26] {
            assert_eq!(rule_of_code(other), None, "{other}");
        }
        // Every code is one rule's, once.
        let mut all: Vec<i64> = [HELD_CODES, REFUSED_CODES, HIDE_CODES].concat();
        all.extend([UNKNOWN_HELD, DECIDED]);
        let n = all.len();
        all.sort();
        all.dedup();
        assert_eq!(all.len(), n);
        assert_eq!(lua_table(&HELD_CODES), "{ 10, 11, 12, 23 }");
    }
}
