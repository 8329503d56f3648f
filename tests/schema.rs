//! The event schema shipped in `schemas/event.schema.json` agrees with the
//! parser: every generated sample event and every admin event the CLI makes
//! validates, and every rejection class the parser decides from the value
//! alone is an invalid case. A reason added later must be placed here too.

use rankflow::admin::{event_json, AdminRequest};
use rankflow::event::{self, AdminKind, Parsed, Reason};
use rankflow::samples::Generator;
use serde_json::{json, Value};

fn validator() -> jsonschema::Validator {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/schemas/event.schema.json")).unwrap();
    let schema: Value = serde_json::from_str(&text).unwrap();
    jsonschema::validator_for(&schema).expect("the schema compiles")
}

fn parse(v: &Value) -> Parsed {
    event::parse(v.to_string().as_bytes(), Default::default(), |_| true)
}

#[test]
fn every_sample_event_validates_and_every_bad_sample_does_not() {
    let schema = validator();
    let mut g =
        Generator::new(11, 500, 1_786_000_000_000, 1000).with_bad_records(0.2).with_duplicates(0.1).with_names();
    let (mut good, mut bad) = (0, 0);
    for _ in 0..2000 {
        let s = g.next_sample();
        let Ok(v) = serde_json::from_slice::<Value>(&s.value) else { continue }; // not JSON at all
        match parse(&v) {
            Parsed::Event(_) => {
                assert!(schema.is_valid(&v), "a valid event the schema refuses: {v}");
                good += 1;
            }
            Parsed::Rejected(r) => {
                assert!(!schema.is_valid(&v), "the schema takes what the parser rejects ({}): {v}", r.reason);
                bad += 1;
            }
            other => panic!("{other:?}"),
        }
    }
    assert!(good > 1000 && bad > 50, "{good} good, {bad} bad");
}

#[test]
fn admin_events_as_the_cli_makes_them_validate() {
    let schema = validator();
    for kind in AdminKind::ALL {
        let request = AdminRequest {
            kind,
            player: "alice".into(),
            board: Some("points".into()),
            boards: (kind == AdminKind::PlayerHidden).then(|| vec!["points".to_string()]),
            split: None,
            period: Some("w:2026-W49".into()),
            value: -5,
            scores: None,
            tier: (kind == AdminKind::PlayerTierSet).then(|| "gold".to_string()),
            held_event_id: matches!(kind, AdminKind::ReviewApproved | AdminKind::ReviewRejected)
                .then(|| uuid::Uuid::from_u128(7)),
            reason: None,
            wait: None,
        };
        let mut v = event_json(&request.event());
        if matches!(kind, AdminKind::PlayerHidden | AdminKind::PlayerUnhidden | AdminKind::PlayerErased) {
            v.as_object_mut().unwrap().retain(|k, _| !["board", "period"].contains(&k.as_str()));
        }
        if kind == AdminKind::PlayerTierSet {
            v.as_object_mut().unwrap().remove("period");
        }
        if kind.of_team() {
            // A team's admin event names its board and team, no player.
            v.as_object_mut().unwrap().retain(|k, _| !["player_id", "period"].contains(&k.as_str()));
            v["team_id"] = json!("red-dragons");
        }
        assert!(matches!(parse(&v), Parsed::Admin(_)), "{v}");
        assert!(schema.is_valid(&v), "{kind}: {v}");
        if kind == AdminKind::ScoreSet {
            // A row's set, for a board ranked by several columns.
            let scores = rankflow::event::Scores::from_pairs("wins=3,time_ms=53000").ok();
            let v = event_json(&AdminRequest { scores, ..request }.event());
            assert!(matches!(parse(&v), Parsed::Admin(_)) && schema.is_valid(&v), "{v}");
            let mut no_value = v.clone();
            no_value.as_object_mut().unwrap().remove("scores");
            assert!(!schema.is_valid(&no_value), "a set without score or scores: {no_value}");
        }
    }
}

#[test]
fn every_rejection_class_decided_from_the_value_is_an_invalid_case() {
    let schema = validator();
    let ok = json!({"event_id": "0b8e3f5e-4c39-4a53-9b7e-2f1f1f4a0c11", "type": "match", "player_id": "alice",
                    "score": 90, "ts": "2026-08-14T13:00:00+02:00", "attrs": {"region": "eu"}, "meta": {"name": "Al"}});
    assert!(schema.is_valid(&ok) && matches!(parse(&ok), Parsed::Event(_)));
    let with = |field: &str, value: Value| {
        let mut v = ok.clone();
        v[field] = value;
        v
    };
    let without = |field: &str| {
        let mut v = ok.clone();
        v.as_object_mut().unwrap().remove(field);
        v
    };
    let admin = json!({"event_id": "0b8e3f5e-4c39-4a53-9b7e-2f1f1f4a0c11", "type": "score_set", "player_id": "alice",
                       "ts": 5, "board": "points", "score": 1});
    let cases: Vec<(Reason, Value)> = vec![
        (Reason::MissingField, without("event_id")),
        (Reason::MissingField, without("ts")),
        (
            Reason::MissingField,
            json!({"event_id": "0b8e3f5e-4c39-4a53-9b7e-2f1f1f4a0c11", "type": "score_set", "player_id": "alice", "ts": 5, "score": 1}),
        ),
        (Reason::InvalidType, with("type", json!(7))),
        (Reason::InvalidEventId, with("event_id", json!("nope"))),
        (Reason::InvalidEventId, with("event_id", json!(12))),
        (Reason::InvalidPlayerId, with("player_id", json!(""))),
        (Reason::InvalidPlayerId, with("player_id", json!("a".repeat(129)))),
        (Reason::InvalidPlayerId, with("player_id", json!("al\nice"))),
        (Reason::InvalidScore, with("score", json!("90"))),
        (Reason::InvalidScore, with("score", json!(90.5))),
        (Reason::ScoreOutOfRange, with("score", json!(9_007_199_254_740_992_i64))),
        (Reason::InvalidTs, with("ts", json!("2026-08-14T13:00:00"))),
        (Reason::InvalidTs, with("ts", json!(-1))),
        (Reason::InvalidAttrs, with("attrs", json!({"region": 1}))),
        (Reason::InvalidMeta, with("meta", json!({"name": 7}))),
        (Reason::InvalidMeta, with("meta", json!("Al"))),
        (
            Reason::InvalidTeam,
            json!({"event_id": "0b8e3f5e-4c39-4a53-9b7e-2f1f1f4a0c11", "type": "team_joined", "player_id": "alice",
                   "team_id": "red:dragons", "ts": 5}),
        ),
        (Reason::InvalidAdmin, {
            let mut v = admin.clone();
            v["board"] = json!(7);
            v
        }),
        (Reason::InvalidAdmin, {
            let mut v = admin.clone();
            v["type"] = json!("player_hidden");
            v["boards"] = json!([]);
            v
        }),
    ];
    for (reason, v) in &cases {
        match parse(v) {
            Parsed::Rejected(r) => assert_eq!(r.reason, *reason, "{v}"),
            other => panic!("the parser took {v}: {other:?}"),
        }
        assert!(!schema.is_valid(v), "the schema takes a {reason} case: {v}");
    }
    // The reasons a schema cannot decide: the record's size, a value that
    // is not JSON, the topic it came on, and what each board decides (its
    // integrity rules among it); and
    // the Avro and Protobuf framing and bodies (tests/formats.rs).
    let elsewhere = [
        Reason::TooLarge,
        Reason::InvalidJson,
        Reason::InvalidFrame,
        Reason::UnknownSchema,
        Reason::InvalidBody,
        Reason::NotAllowed,
        Reason::FutureTimestamp,
        Reason::ExpiredPeriod,
        Reason::MissingSplit,
        Reason::InvalidSplit,
        Reason::RateLimited,
        Reason::PeriodClosed,
        Reason::AttemptsExhausted,
        Reason::ScoreOver,
        Reason::GainOver,
        Reason::JumpOver,
        Reason::BetterThan,
    ];
    for reason in Reason::ALL {
        let covered = cases.iter().any(|(r, _)| *r == reason);
        assert!(covered != elsewhere.contains(&reason), "{reason}: a schema case, or named as decided elsewhere");
    }
}
