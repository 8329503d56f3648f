//! Score integrity's rules in the apply script, against a real redis-server:
//! what each rule holds or refuses, the value that broke it, and that a
//! redelivery or a producer retry never holds an event twice or lets it
//! through once held. (The whole flow, from Kafka to the review topic and
//! the reviews, is `integrity.rs`.)

use std::sync::Arc;

use rankflow::board::integrity::{Action, Integrity, Jump};
use rankflow::board::{PeriodWrite, Review, WriteOp, WriteParams};
use rankflow::event::Rule;
use rankflow::keys;
use rankflow::store::{decode_held, ApplyItem, ApplyResult, Store, TagBatch};
use support::apply::{period_write, store_with_ttl, zscore, MAX};
use support::Redis;
use uuid::Uuid;

const HOUR: i64 = 3_600_000;
const T0: i64 = 1_790_000_000_000;

fn ev<'a>(
    offset: i64,
    member: &'a str,
    num: i64,
    ts: i64,
    id: &'a Uuid,
    periods: &'a [Arc<PeriodWrite>],
) -> ApplyItem<'a> {
    ApplyItem {
        field: "scores:0",
        offset,
        member,
        num,
        tie: 0,
        ts,
        event_id: id,
        periods,
        meta: None,
        record_ts: 0,
        values: &[],
        team: None,
    }
}

async fn apply(s: &Store, params: WriteParams, items: Vec<ApplyItem<'_>>) -> Vec<ApplyResult> {
    let batch = vec![TagBatch { base: "lb:{p}", params, items }];
    s.apply(&batch).await.unwrap().remove(0)
}

/// The tag's held events: (event id, state, player, value, ts, rule, observed), and its queue.
async fn held(
    conn: &mut redis::aio::MultiplexedConnection,
) -> (Vec<(String, String, String, i64, i64, i64, i64)>, Vec<String>) {
    let all: Vec<(String, Vec<u8>)> =
        redis::cmd("HGETALL").arg(keys::held_key("lb:{p}")).query_async(conn).await.unwrap();
    let mut out = Vec::new();
    for (id, blob) in all {
        let h = decode_held(&id, &blob).expect("a held record");
        out.push((id, h.state.as_str().to_string(), h.player_id, h.score, h.ts, h.rule.index() as i64, h.value));
    }
    out.sort_by(|a, b| (a.4, &a.0).cmp(&(b.4, &b.0)));
    let queue: Vec<String> =
        redis::cmd("ZRANGE").arg(keys::held_queue_key("lb:{p}")).arg(0).arg(-1).query_async(conn).await.unwrap();
    (out, queue)
}

#[tokio::test]
async fn sum_rules_hold_a_big_score_and_a_window_too_full_and_a_held_event_stays_held() {
    let redis = Redis::start();
    let s = store_with_ttl(&redis, 60, &[]).await;
    let mut conn = redis.conn().await;
    let mut params = WriteParams::plain(WriteOp::Sum, 1, MAX);
    params.integrity = Integrity {
        score_over: Some((100, Action::Hold)),
        gain_over: Some((500, HOUR, Action::Hold)),
        ..Integrity::default()
    };
    let p = vec![period_write("p", "all", None)];
    let ids: Vec<Uuid> = (1..=8).map(Uuid::from_u128).collect();
    let got = apply(
        &s,
        params,
        vec![
            ev(1, "alice", 50, T0, &ids[0], &p),
            ev(2, "alice", 150, T0 + 1, &ids[1], &p),
            ev(3, "alice", 100, T0 + 2, &ids[2], &p),
            ev(4, "alice", 100, T0 + 3, &ids[3], &p),
            ev(5, "alice", 100, T0 + 4, &ids[4], &p),
            ev(6, "alice", 100, T0 + 5, &ids[5], &p),
            ev(7, "alice", 100, T0 + 6, &ids[6], &p),
        ],
    )
    .await;
    use ApplyResult::{Applied, Held};
    // 50 + 4 x 100 = 450 in the window; the fifth 100 would make 550.
    assert_eq!(
        got,
        [Applied, Held(Rule::ScoreOver, 150), Applied, Applied, Applied, Applied, Held(Rule::GainOver, 550)]
    );
    assert_eq!(zscore(&mut conn, "lb:{p}:all", "alice").await, Some(450.0), "held events count nowhere");
    // Redelivered: the same answer (the review record goes out again); a
    // producer retry at a later offset: a duplicate, never held twice.
    let got =
        apply(&s, params, vec![ev(2, "alice", 150, T0 + 1, &ids[1], &p), ev(8, "alice", 150, T0 + 1, &ids[1], &p)])
            .await;
    assert_eq!(got, [Held(Rule::ScoreOver, 150), ApplyResult::DuplicateEvent]);
    // An hour after the first events, the window has room again.
    let got = apply(&s, params, vec![ev(9, "alice", 100, T0 + HOUR + 6, &ids[7], &p)]).await;
    assert_eq!(got, [Applied]);
    assert_eq!(zscore(&mut conn, "lb:{p}:all", "alice").await, Some(550.0));

    let (records, queue) = held(&mut conn).await;
    let want = |id: &Uuid, value, ts, rule: Rule, observed| {
        (id.to_string(), "pending".to_string(), "alice".to_string(), value, ts, rule.index() as i64, observed)
    };
    assert_eq!(
        records,
        [want(&ids[1], 150, T0 + 1, Rule::ScoreOver, 150), want(&ids[6], 100, T0 + 6, Rule::GainOver, 550)]
    );
    assert_eq!(queue.len(), 2);
    assert!(queue[0].ends_with(&ids[1].to_string()) && queue[1].ends_with(&ids[6].to_string()), "{queue:?}");
    let mine: i64 =
        redis::cmd("ZCARD").arg(keys::held_player_key("lb:{p}", "alice")).query_async(&mut conn).await.unwrap();
    assert_eq!(mine, 2);
}

#[tokio::test]
async fn jump_over_compares_a_new_best_with_the_all_time_best_and_reject_refuses() {
    let redis = Redis::start();
    let s = store_with_ttl(&redis, 60, &[]).await;
    let mut conn = redis.conn().await;
    let mut params = WriteParams::plain(WriteOp::Gt, 1, MAX);
    params.integrity = Integrity { jump_over: Some((Jump::Ratio(3000), Action::Hold)), ..Integrity::default() };
    let p = vec![period_write("p", "d:2026-12-06", None), period_write("p", "all", None)];
    let ids: Vec<Uuid> = (1..=6).map(Uuid::from_u128).collect();
    use ApplyResult::{Applied, Held};
    let got = apply(
        &s,
        params,
        vec![
            ev(1, "bob", 1000, T0, &ids[0], &p), // no earlier best: no jump
            ev(2, "bob", 2500, T0, &ids[1], &p), // 2.5x
            ev(3, "bob", 7600, T0, &ids[2], &p), // beyond 3 x 2500
            ev(4, "bob", 7400, T0, &ids[3], &p), // within
            ev(5, "bob", 100, T0, &ids[4], &p),  // not a new best
        ],
    )
    .await;
    assert_eq!(got, [Applied, Applied, Held(Rule::JumpOver, 2500), Applied, Applied]);
    assert_eq!(zscore(&mut conn, "lb:{p}:all", "bob").await, Some(7400.0));
    assert_eq!(zscore(&mut conn, "lb:{p}:d:2026-12-06", "bob").await, Some(7400.0));

    // An amount, refusing: beyond best + 1000 is dead-lettered naming the rule.
    params.integrity = Integrity {
        jump_over: Some((Jump::Amount(1000), Action::Reject)),
        score_over: Some((50_000, Action::Hold)),
        ..Integrity::default()
    };
    let got = apply(&s, params, vec![ev(6, "bob", 99_000, T0, &ids[5], &p)]).await;
    assert_eq!(got, [ApplyResult::RuleRefused(Rule::JumpOver, 7400)], "a refusing rule wins over a holding one");
    let got = apply(&s, params, vec![ev(6, "bob", 99_000, T0, &ids[5], &p)]).await;
    assert_eq!(got, [ApplyResult::RuleRefused(Rule::JumpOver, 7400)], "its redelivery answers the same");
    assert_eq!(held(&mut conn).await.0.len(), 1);
}

#[tokio::test]
async fn a_held_event_spends_no_rate_limit_slot_and_a_rate_limited_one_is_not_held() {
    let redis = Redis::start();
    let s = store_with_ttl(&redis, 60, &[]).await;
    let mut params = WriteParams::plain(WriteOp::Sum, 1, MAX);
    params.rate_events = 2;
    params.rate_window_ms = HOUR;
    params.integrity = Integrity { score_over: Some((100, Action::Hold)), ..Integrity::default() };
    let p = vec![period_write("p", "all", None)];
    let ids: Vec<Uuid> = (1..=5).map(Uuid::from_u128).collect();
    use ApplyResult::{Applied, Held, Refused};
    let limited = rankflow::event::Reason::RateLimited.script_code().unwrap();
    let got = apply(
        &s,
        params,
        vec![
            ev(1, "carol", 500, T0, &ids[0], &p),
            ev(2, "carol", 10, T0 + 1, &ids[1], &p),
            ev(3, "carol", 10, T0 + 2, &ids[2], &p),
            ev(4, "carol", 500, T0 + 3, &ids[3], &p),
        ],
    )
    .await;
    assert_eq!(got, [Held(Rule::ScoreOver, 500), Applied, Applied, Refused(limited)]);
}

#[tokio::test]
async fn a_rebuilds_review_read_before_its_event_decides_the_event_as_it_is_held() {
    let redis = Redis::start();
    let s = store_with_ttl(&redis, 60, &[]).await;
    let mut conn = redis.conn().await;
    let mut params = WriteParams::plain(WriteOp::Sum, 1, MAX);
    params.integrity = Integrity { score_over: Some((100, Action::Hold)), ..Integrity::default() };
    let p = vec![period_write("p", "all", None)];
    let (approved, rejected, unknown) = (Uuid::from_u128(1), Uuid::from_u128(2), Uuid::from_u128(3));
    let reviews: Vec<Uuid> = (11..=14).map(Uuid::from_u128).collect();
    let review = |held, approve, early| {
        let mut r = params;
        r.review = Some(Review { held, approve, early });
        r
    };
    let admin = |offset, id| ApplyItem { field: "admin:0", ..ev(offset, "alice", 0, T0, id, &[]) };
    // Reviews first (a rebuild reads the admin topic beside the scores), then the events.
    assert_eq!(apply(&s, review(approved, true, true), vec![admin(1, &reviews[0])]).await, [ApplyResult::Applied]);
    assert_eq!(apply(&s, review(rejected, false, true), vec![admin(2, &reviews[1])]).await, [ApplyResult::Applied]);
    let got =
        apply(&s, params, vec![ev(1, "alice", 500, T0, &approved, &p), ev(2, "alice", 700, T0, &rejected, &p)]).await;
    assert_eq!(got, [ApplyResult::Applied, ApplyResult::Held(Rule::ScoreOver, 700)]);
    assert_eq!(zscore(&mut conn, "lb:{p}:all", "alice").await, Some(500.0));
    let (records, queue) = held(&mut conn).await;
    let states: Vec<(String, String)> = records.iter().map(|r| (r.0.clone(), r.1.clone())).collect();
    assert_eq!(states, [(approved.to_string(), "approved".into()), (rejected.to_string(), "rejected".into())]);
    assert!(queue.is_empty(), "decided events wait in no queue: {queue:?}");
    // A live worker's review of an unknown event is refused, and records nothing.
    let got = apply(&s, review(unknown, true, false), vec![admin(3, &reviews[2])]).await;
    assert_eq!(got, [ApplyResult::Refused(rankflow::event::rule::UNKNOWN_HELD)]);
    let got = apply(&s, review(approved, false, false), vec![admin(4, &reviews[3])]).await;
    assert_eq!(got, [ApplyResult::Refused(rankflow::event::rule::DECIDED)]);
    assert_eq!(held(&mut conn).await.0.len(), 2);
}

#[tokio::test]
async fn a_gain_window_of_thousands_of_events_is_stored_and_read_back_whole() {
    // A window's pairs go to and from Redis a few thousand values at a
    // time: 2,600 events (5,200 values) in one call, then the sum of all
    // of them judged by the next call.
    let redis = Redis::start();
    let s = store_with_ttl(&redis, 60, &[]).await;
    let mut params = WriteParams::plain(WriteOp::Sum, 1, MAX);
    params.integrity = Integrity { gain_over: Some((2_605, HOUR, Action::Hold)), ..Integrity::default() };
    let p = vec![period_write("p", "all", None)];
    let ids: Vec<Uuid> = (1..=2_603).map(Uuid::from_u128).collect();
    let first: Vec<ApplyItem> = (0..2_600).map(|i| ev(i as i64 + 1, "dave", 1, T0 + i as i64, &ids[i], &p)).collect();
    let got = apply(&s, params, first).await;
    assert!(got.iter().all(|r| *r == ApplyResult::Applied), "{:?}", got.iter().find(|r| **r != ApplyResult::Applied));
    let got = apply(
        &s,
        params,
        vec![
            ev(2_601, "dave", 5, T0 + 3_000, &ids[2_600], &p),
            ev(2_602, "dave", 1, T0 + 3_001, &ids[2_601], &p),
            // The first 2,600 leave the window: room again.
            ev(2_603, "dave", 1, T0 + HOUR + 2_600, &ids[2_602], &p),
        ],
    )
    .await;
    assert_eq!(got, [ApplyResult::Applied, ApplyResult::Held(Rule::GainOver, 2_606), ApplyResult::Applied]);
    let mut conn = redis.conn().await;
    assert_eq!(zscore(&mut conn, "lb:{p}:all", "dave").await, Some(2_606.0));
}
