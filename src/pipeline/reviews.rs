//! Reviews of held events (score integrity): `review_approved` and
//! `review_rejected`, admin events alone in their batch like every other.
//! The held event is found on its board's tags; an approval is planned
//! again as the event it was (its periods at its own event time, closed
//! ones left out at the review's record time) and carried out by the apply
//! script with the review in its header, which checks, in the same atomic
//! step, that the held event is still pending, applies it once and records
//! the decision (a rejection writes nothing but the decision). The admin
//! record's offset and event id make a redelivered or retried review change
//! nothing, as for every event. A rebuild reads the admin topic beside the
//! source topics, so it may read a review before the event it decides: the
//! decision is then recorded on the player's tag, and the event decided so
//! as it is held (a live worker refuses such a review: unknown).

use std::collections::BTreeMap;

use crate::board::{Board, BoardWrite, Decision, Review};
use crate::event::rule::{DECIDED, UNKNOWN_HELD};
use crate::event::{AdminEvent, Event, Reason, Rejection};
use crate::keys;
use crate::metrics;
use crate::store::{ApplyItem, ApplyResult, HeldEvent, HeldState, StoreError, TagBatch};

use super::lost::retry_unless_lost;
use super::moderation::{conclude, AdminOutcome};
use super::{Context, Produce};

/// What one attempt at a review found and did.
enum Found {
    /// No tag of the board holds the event.
    Unknown,
    /// Planned again, the event takes no period now (expired, closed).
    Unplanned(Reason),
    /// The apply script's answer, and the held event as it was before.
    Done(ApplyResult, Box<HeldEvent>),
    /// A rebuild's review read before its event: the script's answer.
    Early(ApplyResult),
}

/// The tags of `board` that may hold the held event (its split's, if named).
async fn bases(cx: &Context, board: &Board, split: Option<&str>) -> Result<Vec<String>, StoreError> {
    match cx.router.known_bases(board, split) {
        Some(bases) => Ok(bases),
        None => Ok(keys::bases_of_board(cx.store.tag_bases(&keys::tags_key(cx.router.prefix())).await?, board.id())),
    }
}

/// The held event `h` (on the tag `base` of `board`) as the event it was.
fn original(board: &Board, base: &str, id: uuid::Uuid, h: &HeldEvent) -> Event {
    let mut attrs = BTreeMap::new();
    if let (Some(attr), Some((_, split))) = (board.split_by(), keys::split_of_base(base)) {
        attrs.insert(attr.to_string(), split.to_string());
    }
    // On a board with columns, the row the held submission carried.
    let scores = board
        .columns()
        .map(|c| crate::event::Scores(c.names().zip(&h.values).map(|(n, v)| (n.to_string(), Some(*v))).collect()));
    Event {
        event_id: id,
        kind: board.on().first().cloned().unwrap_or_default(),
        player_id: h.player_id.clone(),
        score: scores.is_none().then_some(h.score),
        scores,
        ts_ms: h.ts,
        attrs,
        meta: h.meta.clone(),
        team: None,
    }
}

/// One attempt: find the held event, plan it, send the review.
async fn attempt(
    cx: &Context,
    i: usize,
    (field, offset, record_ts): (&str, i64, i64),
    event: &AdminEvent,
    (held, approve): (uuid::Uuid, bool),
) -> Result<Found, StoreError> {
    let board = &cx.router.boards()[i];
    let id = held.to_string();
    let mut found = None;
    for base in bases(cx, board, event.split.as_deref()).await? {
        if let Some(h) = cx.store.held_event(&base, &id).await? {
            found = Some((base, h));
            break;
        }
    }
    let early = cx.produce == Produce::Drop;
    let Some((base, h)) = found else {
        if !early || (board.split_by().is_some() && event.split.is_none()) {
            return Ok(Found::Unknown);
        }
        // A rebuild reads the admin topic beside the source topics: the
        // decision waits on the player's tag for the event to be held.
        let base = cx.router.base(board, event.split.as_deref(), &event.player_id);
        let mut params = board.write_params();
        params.review = Some(Review { held, approve, early });
        let item = ApplyItem {
            field,
            offset,
            member: &event.player_id,
            num: 0,
            tie: 0,
            ts: event.ts_ms,
            event_id: &event.event_id,
            periods: &[],
            meta: None,
            record_ts,
            values: &[],
            team: None,
        };
        let mut results = cx.store.apply(&[TagBatch { base: &base, params, items: vec![item] }]).await?;
        return Ok(Found::Early(results.pop().and_then(|mut r| r.pop()).unwrap_or(ApplyResult::DuplicateOffset)));
    };
    let nothing = || BoardWrite {
        base: base.clone(),
        params: board.write_params(),
        periods: Vec::new(),
        num: 0,
        tie: 0,
        ts: h.ts,
        values: Vec::new(),
    };
    // A decided event's review (or a redelivered one) writes nothing: the
    // script tells a redelivery from a second decision.
    let mut write = if approve && h.state == HeldState::Pending {
        match cx.router.plan_board(i, &original(board, &base, held, &h), record_ts) {
            Decision::Write(w) => w,
            Decision::Refused(reason) => return Ok(Found::Unplanned(reason)),
        }
    } else {
        nothing()
    };
    write.params.review = Some(Review { held, approve, early });
    let item = ApplyItem {
        field,
        offset,
        member: &h.player_id,
        num: write.num,
        tie: write.tie,
        ts: write.ts,
        event_id: &event.event_id,
        periods: &write.periods,
        meta: h.meta.as_deref(),
        record_ts,
        values: &write.values,
        team: None,
    };
    let batch = TagBatch { base: &write.base, params: write.params, items: vec![item] };
    let mut results = cx.store.apply(&[batch]).await?;
    let result = results.pop().and_then(|mut r| r.pop()).unwrap_or(ApplyResult::DuplicateOffset);
    Ok(Found::Done(result, Box::new(h)))
}

/// Carries out a review, retrying until Redis has; then logs, counts and
/// records its outcome. `None`: abandoned on shutdown.
pub async fn apply_review(
    cx: &Context,
    record: (&str, i64, i64),
    event: &AdminEvent,
    review: (uuid::Uuid, bool),
) -> Option<AdminOutcome> {
    let board_id = event.board.as_deref().unwrap_or_default();
    let i = cx.router.index_of(board_id)?;
    let max_backoff = cx.settings.worker.max_backoff;
    let found = retry_unless_lost("carry out a review", &cx.cancel, max_backoff, &cx.health, || {
        attempt(cx, i, record, event, review)
    })
    .await?;
    let (held, approve) = review;
    let refused = |reason, detail: String| AdminOutcome::Refused(Rejection::new(reason, detail));
    let (outcome, redelivered) = match found {
        Found::Unknown => {
            (refused(Reason::InvalidAdmin, format!("no event {held} is held on board '{board_id}'")), false)
        }
        Found::Unplanned(reason) => (
            refused(reason, format!("held event {held} takes no period of board '{board_id}' now: it stays pending")),
            false,
        ),
        Found::Early(ApplyResult::DuplicateOffset) => (AdminOutcome::Duplicate, true),
        Found::Early(ApplyResult::DuplicateEvent) => (AdminOutcome::Duplicate, false),
        Found::Early(_) => (AdminOutcome::Applied, false),
        Found::Done(result, h) => match result {
            ApplyResult::Applied => {
                let decision = if approve { "approved" } else { "rejected" };
                metrics::get().review.decided.with_label_values(&[board_id, h.rule.as_str(), decision]).inc();
                (AdminOutcome::Applied, false)
            }
            ApplyResult::DuplicateOffset => (AdminOutcome::Duplicate, true),
            ApplyResult::DuplicateEvent => (AdminOutcome::Duplicate, false),
            ApplyResult::Refused(UNKNOWN_HELD) => {
                (refused(Reason::InvalidAdmin, format!("no event {held} is held on board '{board_id}'")), false)
            }
            ApplyResult::Refused(DECIDED) => {
                let detail = format!("held event {held} was already {}", h.state.as_str());
                (refused(Reason::InvalidAdmin, detail), false)
            }
            ApplyResult::Refused(code) => {
                let reason = Reason::from_script_code(code).unwrap_or(Reason::InvalidAdmin);
                let detail = format!("held event {held} could not be applied ({reason}): it stays pending");
                (refused(reason, detail), false)
            }
            other => (refused(Reason::InvalidAdmin, format!("unexpected answer {other:?}")), false),
        },
    };
    conclude(cx, event, outcome, redelivered, 1).await
}
