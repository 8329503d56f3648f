//! Bad input at volume: the event parser fed arbitrary bytes and arbitrary
//! JSON shapes, and the read API fed arbitrary query strings and path
//! segments. Nothing panics; every rejection carries its reason; every 400
//! names the parameter it is about. 100,000 cases per target (set
//! `PROPTEST_CASES` to change it).

use proptest::prelude::*;
use rankflow::event::{self, Parsed, Reason};
use serde_json::{json, Map, Value};

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(100_000)
}

/// Checks one parse outcome: a valid event obeys the rules it was checked
/// against; a rejection has a reason and a sentence.
fn check(value: &[u8], parsed: Parsed) {
    match parsed {
        Parsed::Event(e) => {
            assert!(!e.player_id.is_empty() && e.player_id.len() <= 128);
            // A score, or scores (whose values each board checks), or both.
            assert!(e.score.is_some() || e.scores.is_some(), "neither score nor scores in {value:?}");
            let scores = e.scores.iter().flat_map(|s| s.0.values().flatten());
            for v in e.score.iter().chain(scores) {
                assert!(v.unsigned_abs() < 1 << 53, "score {v} out of range for {value:?}");
            }
            assert!(e.attrs.values().all(|v| v.len() <= 64 * 1024));
        }
        Parsed::Admin(a) => assert!(!a.player_id.is_empty() && a.player_id.len() <= 128),
        Parsed::Skipped(kind) => assert!(!kind.is_empty()),
        Parsed::Rejected(r) => {
            assert!(!r.detail.is_empty(), "{:?} without detail for {value:?}", r.reason);
            assert!(!r.reason.as_str().is_empty());
        }
    }
}

/// Any JSON value, a few levels deep.
fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(|f| json!(f)),
        "\\PC{0,40}".prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 24, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map("\\PC{0,12}", inner, 0..4).prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// An object with the event's own field names, each absent or of any shape,
/// plus strings that often are valid, so that every rule gets reached.
fn event_shaped() -> impl Strategy<Value = Value> {
    let field = |good: BoxedStrategy<Value>| prop_oneof![2 => good, 1 => any_json()].prop_map(Some).boxed();
    let maybe = |s: BoxedStrategy<Option<Value>>| prop_oneof![1 => Just(None), 5 => s];
    let uuid = any::<u128>().prop_map(|n| json!(uuid::Uuid::from_u128(n).to_string())).boxed();
    let kind = prop_oneof![Just(json!("match")), Just(json!("player_erased")), Just(json!("other"))].boxed();
    let player = "\\PC{0,140}".prop_map(Value::String).boxed();
    let score = prop_oneof![any::<i64>().prop_map(|n| json!(n)), (-1e17f64..1e17).prop_map(|f| json!(f))].boxed();
    let ts =
        prop_oneof![(0i64..300_000_000_000_000).prop_map(|n| json!(n)), Just(json!("2026-08-14T12:00:00Z"))].boxed();
    let attrs = prop::collection::btree_map("[a-z]{0,6}", "\\PC{0,70}".prop_map(Value::String), 0..3)
        .prop_map(|m| Value::Object(m.into_iter().collect()))
        .boxed();
    (
        maybe(field(uuid)),
        maybe(field(kind)),
        maybe(field(player)),
        maybe(field(score)),
        maybe(field(ts)),
        maybe(field(attrs)),
    )
        .prop_map(|(id, kind, player, score, ts, attrs)| {
            let mut m = Map::new();
            for (k, v) in [
                ("event_id", id),
                ("type", kind),
                ("player_id", player),
                ("score", score),
                ("ts", ts),
                ("attrs", attrs),
            ] {
                if let Some(v) = v {
                    m.insert(k.to_string(), v);
                }
            }
            Value::Object(m)
        })
}

#[test]
fn the_parser_never_panics_on_arbitrary_bytes_and_gives_every_rejection_a_reason() {
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig::with_cases(cases()));
    runner
        .run(&prop::collection::vec(any::<u8>(), 0..300), |bytes| {
            check(
                &bytes,
                event::parse(&bytes, event::Limits { max_event_bytes: 256, ..Default::default() }, |t| t == "match"),
            );
            Ok(())
        })
        .unwrap();
}

#[test]
fn the_parser_decides_every_json_shape_and_rejects_with_the_reason_of_the_field() {
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig::with_cases(cases()));
    runner
        .run(&prop_oneof![1 => any_json(), 4 => event_shaped()], |value| {
            let bytes = serde_json::to_vec(&value).unwrap();
            let parsed = event::parse(&bytes, Default::default(), |t| t == "match");
            if let Parsed::Rejected(r) = &parsed {
                // A rejection names the field it is about, or says the value is no object.
                let named = ["event_id", "type", "player_id", "score", "ts", "attrs", "JSON object"]
                    .iter()
                    .any(|f| r.detail.contains(f));
                prop_assert!(named || r.reason == Reason::TooLarge, "{:?}: {}", r.reason, r.detail);
            }
            check(&bytes, parsed);
            Ok(())
        })
        .unwrap();
}

const BOARDS: &str = r#"
[kafka]
brokers = "127.0.0.1:1"
topics = ["scores"]
dead_letter_topic = "scores.dlq"

[[board]]
id = "points"
on = ["match"]
mode = "sum"
periods = ["daily", "weekly", "all_time"]
close_after = "1h"
rolling = [{ name = "last7d", days = 7 }]

[[board]]
id = "laps"
on = ["lap"]
mode = "best"
order = "asc"
periods = ["daily", "all_time"]
split_by = "track"
dense_rank = false
"#;

/// The read API's parameters, which a 400 must name.
const PARAMETERS: &[&str] = &["period", "at", "split", "limit", "offset", "rank", "radius"];

/// A query string: known and unknown names with values that are often
/// valid, often not, percent-encoded or not.
fn query() -> impl Strategy<Value = String> {
    let name = prop_oneof![4 => prop::sample::select(PARAMETERS).prop_map(String::from), 1 => "[a-z%&=]{0,6}"];
    let value = prop_oneof![
        prop::sample::select(vec![
            "daily",
            "weekly",
            "all_time",
            "all",
            "last7d",
            "r:last7d",
            "daily:final",
            "d:2026-08-14",
            "w:2026-W33",
            "d:2026-08-14:final",
            "monza",
            "10",
            "0",
            "1001",
            "-1",
            "ordinal",
            "competition",
            "dense",
            "2026-08-14",
            "2026-08-14T12:00:00Z",
            "",
        ])
        .prop_map(String::from),
        "[ -~]{0,24}".prop_map(|s| s.replace(['&', '#', ' '], "%20")),
        any::<u64>().prop_map(|n| n.to_string()),
    ];
    prop::collection::vec((name, value), 0..5)
        .prop_map(|pairs| pairs.into_iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join("&"))
}

/// A path segment: a board, a player or anything else, percent-encoded.
fn segment() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec!["points", "laps", "nope", "alice", ""]).prop_map(String::from),
        "\\PC{0,20}".prop_map(|s| s.bytes().map(|b| format!("%{b:02X}")).collect()),
    ]
}

#[test]
fn the_read_api_never_fails_inside_and_every_400_names_a_parameter() {
    use tower::ServiceExt;
    let settings = rankflow::config::load_str(BOARDS, Vec::new()).unwrap();
    let router = std::sync::Arc::new(rankflow::board::Router::new(settings.boards.clone(), "lb"));
    // No Redis behind it: a request that passes validation answers 503.
    let state = rankflow::http::AppState::new(router, Default::default(), 1000);
    let app = rankflow::http::app(state);
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig::with_cases(cases()));
    let shape = prop::sample::select(vec!["top", "player", "around", "boards"]);
    runner
        .run(&(shape, segment(), segment(), query()), |(shape, board, player, q)| {
            let path = match shape {
                "top" => format!("/v1/boards/{board}/top?{q}"),
                "player" => format!("/v1/boards/{board}/players/{player}?{q}"),
                "around" => format!("/v1/boards/{board}/players/{player}/around?{q}"),
                _ => format!("/v1/boards?{q}"),
            };
            let Ok(req) = axum::http::Request::get(&path).body(axum::body::Body::empty()) else {
                return Ok(()); // not a URI at all: no request to make
            };
            let (status, body) = rt.block_on(async {
                let resp = app.clone().oneshot(req).await.unwrap();
                let status = resp.status().as_u16();
                (status, axum::body::to_bytes(resp.into_body(), 1 << 20).await.unwrap())
            });
            prop_assert!(status < 500 || status == 503, "{path}: {status}");
            if status == 400 {
                let v: Value = serde_json::from_slice(&body).unwrap();
                let p = v["parameter"].as_str().unwrap_or_default();
                prop_assert!(PARAMETERS.contains(&p), "{path}: a 400 naming '{p}': {v}");
                prop_assert!(!v["error"].as_str().unwrap_or_default().is_empty(), "{path}: {v}");
            }
            if (400..500).contains(&status) {
                let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                prop_assert!(v["error"].is_string() || status == 404 || status == 405, "{path}: {status} {v}");
            }
            Ok(())
        })
        .unwrap();
}
