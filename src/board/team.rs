//! Team boards: a `sum` or `best` board that ranks teams by what their
//! members score. Membership comes from `team_joined` / `team_left`
//! events; the apply step (`scripts/team.lua`) keeps each member's
//! contribution per period and the team's score from them.

/// What becomes of a leaver's contributions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Leave {
    /// They stay with the team (earned while a member); a re-join adds to them.
    Keep,
    /// They are taken off the team in every period not yet sealed; a
    /// re-join starts from nothing.
    Forfeit,
}

impl Leave {
    pub fn as_str(self) -> &'static str {
        match self {
            Leave::Keep => "keep",
            Leave::Forfeit => "forfeit",
        }
    }

    pub fn parse(text: &str) -> Option<Leave> {
        [Leave::Keep, Leave::Forfeit].into_iter().find(|l| l.as_str() == text)
    }
}

/// `team = { leave, counts_after }`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Team {
    pub leave: Leave,
    /// A score counts for the team only when its event time is at least
    /// this long after the player's join (event time), ms.
    pub counts_after_ms: i64,
}
