//! Admin events (corrections and moderation, see `moderation`): each is
//! alone in its batch, sent once every batch before it has settled, and
//! carried out by one atomic `admin.lua` call per board tag it reaches. A
//! reach of several tags finds them through the registry of tags
//! (`keys::tags_key`), never by scanning the keyspace. The outcome is
//! logged (the audit line), counted, and left in Redis for
//! `rankflow admin --wait`.

use tracing::{info, warn};

use crate::board::Board;
use crate::event::{AdminEvent, Reason, Rejection};
use crate::keys;
use crate::metrics;
use crate::moderation::{AdminOp, AdminPlan, Reach};
use crate::retry::retry;

use super::lost::retry_unless_lost;
use crate::store::{AdminCall, ApplyResult, StoreError};

use super::Context;

/// What an admin event came to.
#[derive(Debug, PartialEq)]
pub enum AdminOutcome {
    /// Carried out on every tag it reaches (or on some, the others having
    /// seen the record before).
    Applied,
    /// A producer retry of an event already carried out, or a redelivery.
    Duplicate,
    /// Refused by a board's state (a sealed period, a total out of range):
    /// the record is dead-lettered with this.
    Refused(Rejection),
}

/// The tags an admin event reaches, each with its board (`None`: a tag of
/// a board no longer configured, reached only by an erasure or by hiding).
async fn tags_of(cx: &Context, plan: &AdminPlan, player: &str) -> Result<Vec<(String, Option<Board>)>, StoreError> {
    let prefix = cx.router.prefix();
    let reach = &plan.reach;
    let mut bases = match reach {
        Reach::Tag(base) => vec![base.clone()],
        Reach::Boards(_) | Reach::All => {
            let mut bases = cx.store.tag_bases(&keys::tags_key(prefix)).await?;
            // A board without splits has its one tag before it has any data:
            // hiding a player there takes effect for their first event too.
            // (Nothing else needs a tag that holds no data yet.)
            if matches!(plan.op, AdminOp::Hide | AdminOp::Unhide) {
                let unsplit = cx.router.boards().iter().filter(|b| b.split_by().is_none());
                bases.extend(unsplit.map(|b| cx.router.base(b, None, player)));
            }
            bases.sort();
            bases.dedup();
            if let Reach::Boards(ids) = reach {
                bases.retain(|b| keys::board_of_base(b).is_some_and(|id| ids.iter().any(|i| i == id)));
            }
            bases
        }
    };
    bases.sort();
    Ok(bases
        .into_iter()
        .map(|base| {
            let board = keys::board_of_base(&base).and_then(|id| cx.router.board(id)).cloned();
            (base, board)
        })
        .collect())
}

/// What the tags' answers come to.
fn outcome_of(results: &[ApplyResult]) -> AdminOutcome {
    if let Some(code) = results.iter().find_map(|r| match r {
        ApplyResult::Refused(code) => Some(*code),
        _ => None,
    }) {
        let reason = Reason::from_script_code(code).unwrap_or(Reason::InvalidAdmin);
        let detail = match reason {
            Reason::PeriodClosed => "every period the correction names is sealed".to_string(),
            Reason::ScoreOutOfRange => "the adjusted total would leave the board's range".to_string(),
            _ => format!("the admin script refused it (code {code})"),
        };
        return AdminOutcome::Refused(Rejection::new(reason, detail));
    }
    if !results.is_empty()
        && results.iter().all(|r| matches!(r, ApplyResult::DuplicateEvent | ApplyResult::DuplicateOffset))
    {
        return AdminOutcome::Duplicate;
    }
    AdminOutcome::Applied
}

/// Carries out an admin event on every tag it reaches, at most once per
/// record and once per event id, retrying until Redis has done it; then
/// logs, counts and records its outcome. `None`: abandoned on shutdown.
pub async fn apply_admin(
    cx: &Context,
    field: &str,
    offset: i64,
    event: &AdminEvent,
    plan: &AdminPlan,
) -> Option<AdminOutcome> {
    let call = AdminCall {
        field,
        offset,
        event_id: &event.event_id,
        member: &event.player_id,
        ts_ms: event.ts_ms,
        op: &plan.op,
    };
    let registry = keys::tags_key(cx.router.prefix());
    let max_backoff = cx.settings.worker.max_backoff;
    let (tags, results) =
        retry_unless_lost("carry out an admin event", &cx.cancel, max_backoff, &cx.health, || async {
            let tags = tags_of(cx, plan, &event.player_id).await?;
            // A correction may write a split's first data, and hiding reaches a
            // board's tag before its first event: a tag new to the registry is
            // registered first, so that an erasure finds it and its writes are
            // checked for lost data like any other's (see `store::registry`).
            let bases: Vec<String> = tags.iter().map(|(b, _)| b.clone()).collect();
            let known = !cx.tags.lock().unwrap_or_else(|e| e.into_inner()).is_empty();
            cx.store.register_tags(&registry, &bases, known).await?;
            cx.tags.lock().unwrap_or_else(|e| e.into_inner()).extend(bases);
            let results = cx.store.admin(&tags, &call).await?;
            Ok::<_, StoreError>((tags.len(), results))
        })
        .await?;
    let outcome = outcome_of(&results);
    let redelivered = !results.is_empty() && results.iter().all(|r| *r == ApplyResult::DuplicateOffset);
    conclude(cx, event, outcome, redelivered, tags).await
}

/// Logs, counts and records (for `rankflow admin --wait`) what an admin
/// event on `tags` tags came to; `redelivered`: its record had been
/// carried out before, and reports what that did. `None`: abandoned on shutdown.
pub(super) async fn conclude(
    cx: &Context,
    event: &AdminEvent,
    outcome: AdminOutcome,
    redelivered: bool,
    tags: usize,
) -> Option<AdminOutcome> {
    let kind = event.kind.as_str();
    let board = event.board.as_deref().or(event.boards.as_ref().map(|_| "(several)")).unwrap_or("(all)");
    let label = match &outcome {
        AdminOutcome::Applied => {
            info!(event_id = %event.event_id, r#type = kind, board, player = %event.player_id, tags, "Admin event applied.");
            "applied"
        }
        AdminOutcome::Duplicate => {
            info!(event_id = %event.event_id, r#type = kind, board, player = %event.player_id, "An admin event already applied (a producer retry or a redelivery) changed nothing.");
            "duplicate"
        }
        AdminOutcome::Refused(r) => {
            warn!(event_id = %event.event_id, r#type = kind, board, player = %event.player_id, reason = %r.reason, detail = %r.detail, "Admin event refused; it goes to the dead-letter topic.");
            "refused"
        }
    };
    metrics::get().admin_events.with_label_values(&[kind, label]).inc();
    let note = match &outcome {
        AdminOutcome::Refused(r) => {
            serde_json::json!({ "outcome": "refused", "reason": r.reason.as_str(), "detail": r.detail })
        }
        // A redelivery of an event carried out before reports what that did.
        _ if redelivered => serde_json::json!({ "outcome": "applied" }),
        AdminOutcome::Applied => serde_json::json!({ "outcome": "applied" }),
        AdminOutcome::Duplicate => serde_json::json!({ "outcome": "duplicate" }),
    };
    let key = keys::admin_outcome_key(cx.router.prefix(), &event.event_id);
    let ttl = cx.settings.redis.dedupe_ttl.as_secs().max(1);
    let noted = retry("record an admin event's outcome", &cx.cancel, cx.settings.worker.max_backoff, || async {
        cx.store.note_outcome(&key, &note.to_string(), ttl).await
    })
    .await;
    noted.map(|()| outcome)
}
