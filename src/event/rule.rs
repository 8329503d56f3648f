//! The integrity rules' names and the codes the apply script answers for
//! them (an event held by a rule, or refused by it); what each rule checks
//! is configured in `board::integrity` and decided in `scripts/apply/rules.lua`.

/// The three rules, by their place in the scripts' codes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Rule {
    ScoreOver,
    GainOver,
    JumpOver,
}

impl Rule {
    pub const ALL: [Rule; 3] = [Rule::ScoreOver, Rule::GainOver, Rule::JumpOver];

    /// Its name in config, dead letters, review records and metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            Rule::ScoreOver => "score_over",
            Rule::GainOver => "gain_over",
            Rule::JumpOver => "jump_over",
        }
    }

    pub fn parse(name: &str) -> Option<Rule> {
        Rule::ALL.into_iter().find(|r| r.as_str() == name)
    }

    /// Its index in the scripts' codes (see [`held_code`]).
    pub fn index(self) -> i64 {
        self as i64
    }
}

/// The scripts' code for an event held by `rule` (followed in the reply
/// by the value that broke it), and for one refused by it.
pub const HELD_BASE: i64 = 10;
pub const REFUSED_BASE: i64 = 13;

/// An event held by a rule that brings its player to `hold_hides_after`:
/// the code is this plus the rule's index (the player is to be hidden).
pub const HIDE_BASE: i64 = 20;

/// Whether a held code also hides the player.
pub fn hides(code: i64) -> bool {
    (HIDE_BASE..HIDE_BASE + 3).contains(&code)
}

/// A review's codes: no held event of that id on the tag; already decided.
pub const UNKNOWN_HELD: i64 = 16;
pub const DECIDED: i64 = 17;

pub fn held_code(rule: Rule) -> i64 {
    HELD_BASE + rule.index()
}

/// What a script code says of a rule: (rule, held?) for the six rule codes.
pub fn rule_of_code(code: i64) -> Option<(Rule, bool)> {
    let rule = |i: i64| Rule::ALL.get(usize::try_from(i).ok()?).copied();
    match code {
        c if (HELD_BASE..REFUSED_BASE).contains(&c) => Some((rule(c - HELD_BASE)?, true)),
        c if (REFUSED_BASE..REFUSED_BASE + 3).contains(&c) => Some((rule(c - REFUSED_BASE)?, false)),
        c if hides(c) => Some((rule(c - HIDE_BASE)?, true)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rule_codes_name_the_rule_and_whether_it_held() {
        for rule in Rule::ALL {
            assert_eq!(rule_of_code(held_code(rule)), Some((rule, true)));
            assert_eq!(rule_of_code(REFUSED_BASE + rule.index()), Some((rule, false)));
            assert_eq!(Rule::parse(rule.as_str()), Some(rule));
        }
        assert_eq!(rule_of_code(HIDE_BASE + Rule::GainOver.index()), Some((Rule::GainOver, true)));
        assert!(hides(HIDE_BASE + Rule::JumpOver.index()) && !hides(held_code(Rule::JumpOver)));
        assert_eq!(rule_of_code(7), None);
        assert_eq!(rule_of_code(16), None);
        assert_eq!(rule_of_code(23), None);
    }
}
