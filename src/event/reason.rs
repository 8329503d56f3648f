//! Why a record, or one board's share of it, was not applied: the reasons
//! as dead-letter headers and metric labels name them, and the codes the
//! apply scripts store for the refusals they decide.

use std::fmt;

use super::rule::{self, Rule};

/// Why a record, or one board's share of it, was not applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Reason {
    TooLarge,
    InvalidJson,
    MissingField,
    InvalidType,
    InvalidEventId,
    InvalidPlayerId,
    InvalidScore,
    ScoreOutOfRange,
    InvalidTs,
    InvalidAttrs,
    FutureTimestamp,
    ExpiredPeriod,
    MissingSplit,
    InvalidSplit,
    RateLimited,
    PeriodClosed,
    InvalidMeta,
    NotAllowed,
    InvalidAdmin,
    AttemptsExhausted,
    /// Not in the Schema Registry wire format its topic's format expects.
    InvalidFrame,
    /// The frame's schema id is in neither `kafka.schemas` nor the registry.
    UnknownSchema,
    /// The body does not decode by the schema its frame names.
    InvalidBody,
    /// Refused by the board's integrity rule of that name (`action = "reject"`).
    ScoreOver,
    GainOver,
    JumpOver,
    BetterThan,
    /// A membership event's `team_id` is not 1 to 64 of `[A-Za-z0-9_-]`.
    InvalidTeam,
}

impl Reason {
    pub const ALL: [Reason; 28] = [
        Reason::TooLarge,
        Reason::InvalidJson,
        Reason::MissingField,
        Reason::InvalidType,
        Reason::InvalidEventId,
        Reason::InvalidPlayerId,
        Reason::InvalidScore,
        Reason::ScoreOutOfRange,
        Reason::InvalidTs,
        Reason::InvalidAttrs,
        Reason::FutureTimestamp,
        Reason::ExpiredPeriod,
        Reason::MissingSplit,
        Reason::InvalidSplit,
        Reason::RateLimited,
        Reason::PeriodClosed,
        Reason::InvalidMeta,
        Reason::NotAllowed,
        Reason::InvalidAdmin,
        Reason::AttemptsExhausted,
        Reason::InvalidFrame,
        Reason::UnknownSchema,
        Reason::InvalidBody,
        Reason::ScoreOver,
        Reason::GainOver,
        Reason::JumpOver,
        Reason::BetterThan,
        Reason::InvalidTeam,
    ];

    /// The reason as it appears in dead-letter headers and metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::TooLarge => "too_large",
            Reason::InvalidJson => "invalid_json",
            Reason::MissingField => "missing_field",
            Reason::InvalidType => "invalid_type",
            Reason::InvalidEventId => "invalid_event_id",
            Reason::InvalidPlayerId => "invalid_player_id",
            Reason::InvalidScore => "invalid_score",
            Reason::ScoreOutOfRange => "score_out_of_range",
            Reason::InvalidTs => "invalid_ts",
            Reason::InvalidAttrs => "invalid_attrs",
            Reason::FutureTimestamp => "future_timestamp",
            Reason::ExpiredPeriod => "expired_period",
            Reason::MissingSplit => "missing_split",
            Reason::InvalidSplit => "invalid_split",
            Reason::RateLimited => "rate_limited",
            Reason::PeriodClosed => "period_closed",
            Reason::InvalidMeta => "invalid_meta",
            Reason::NotAllowed => "not_allowed",
            Reason::InvalidAdmin => "invalid_admin",
            Reason::AttemptsExhausted => "attempts_exhausted",
            Reason::InvalidFrame => "invalid_frame",
            Reason::UnknownSchema => "unknown_schema",
            Reason::InvalidBody => "invalid_body",
            Reason::ScoreOver => "score_over",
            Reason::GainOver => "gain_over",
            Reason::JumpOver => "jump_over",
            Reason::BetterThan => "better_than",
            Reason::InvalidTeam => "invalid_team_id",
        }
    }

    /// The code the apply script stores for a refusal it decided itself.
    pub fn script_code(self) -> Option<i64> {
        match self {
            Reason::ScoreOutOfRange => Some(4),
            Reason::RateLimited => Some(5),
            Reason::PeriodClosed => Some(6),
            Reason::AttemptsExhausted => Some(7),
            _ => Some(rule::refused_code(Reason::rule(self)?)),
        }
    }

    pub fn from_script_code(code: i64) -> Option<Reason> {
        match code {
            4 => Some(Reason::ScoreOutOfRange),
            5 => Some(Reason::RateLimited),
            6 => Some(Reason::PeriodClosed),
            7 => Some(Reason::AttemptsExhausted),
            _ => match rule::rule_of_code(code)? {
                (rule, false) => Some(Reason::of_rule(rule)),
                (_, true) => None,
            },
        }
    }

    /// The integrity rule a refusal names, if it is one.
    pub fn rule(self) -> Option<Rule> {
        match self {
            Reason::ScoreOver => Some(Rule::ScoreOver),
            Reason::GainOver => Some(Rule::GainOver),
            Reason::JumpOver => Some(Rule::JumpOver),
            Reason::BetterThan => Some(Rule::BetterThan),
            _ => None,
        }
    }

    /// The refusal of an integrity rule with `action = "reject"`.
    pub fn of_rule(rule: Rule) -> Reason {
        match rule {
            Rule::ScoreOver => Reason::ScoreOver,
            Rule::GainOver => Reason::GainOver,
            Rule::JumpOver => Reason::JumpOver,
            Rule::BetterThan => Reason::BetterThan,
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
