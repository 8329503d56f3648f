//! `rankflow admin ...`: an operator's correction or moderation, as an
//! admin event (a fresh `event_id`, `ts` now) produced to the first admin
//! topic, where the workers carry it out exactly once. The command checks
//! the event against the config first (the same `moderation::plan` the
//! workers run) and, for a change to an existing entry, that the player is
//! there; with `--wait` it returns once a worker has recorded the outcome.

use std::time::{Duration, Instant};

use rdkafka::producer::FutureRecord;
use serde_json::{json, Value};

use crate::board::Router;
use crate::config::Settings;
use crate::event::{AdminEvent, AdminKind};
use crate::kafka::producer::KafkaProducer;
use crate::keys;
use crate::moderation::{self, Reach};
use crate::store::{Store, StoreError};
use rdkafka::error::KafkaError;

/// Why an admin command produced nothing, or what its event came to.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    #[error("kafka.admin_topics is empty: admin events are honoured only on an admin topic, so configure one first")]
    NoAdminTopic,
    #[error("{reason}: {detail}")]
    Invalid { reason: String, detail: String },
    #[error(transparent)]
    Redis(#[from] StoreError),
    #[error("cannot create the producer: {0}")]
    Producer(#[source] KafkaError),
    /// A broker refused the TLS handshake or the credentials.
    #[error("{0}")]
    Kafka(String),
    #[error("producing to {topic} failed: {source}")]
    Produce { topic: String, source: KafkaError },
    #[error("unreadable outcome {0}")]
    UnreadableOutcome(String),
    #[error("refused: {reason}: {detail}")]
    Refused { reason: String, detail: String },
    #[error("no worker recorded an outcome within {timeout:?}: is a worker running? A record it could not read goes to {dead_letter_topic}")]
    NoOutcome { timeout: Duration, dead_letter_topic: String },
    #[error("player '{player}' is not {where_}")]
    NotThere { player: String, where_: String },
}

/// What the operator asked for.
#[derive(Clone, Debug)]
pub struct AdminRequest {
    pub kind: AdminKind,
    pub player: String,
    pub board: Option<String>,
    pub boards: Option<Vec<String>>,
    pub split: Option<String>,
    pub period: Option<String>,
    /// `set`: the score; `adjust`: the delta.
    pub value: i64,
    /// `set` on a board ranked by several columns: the row (then `value` is unused).
    pub scores: Option<crate::event::Scores>,
    /// `tier`: the tier's name.
    pub tier: Option<String>,
    /// `approve`, `reject`: the held event, and why.
    pub held_event_id: Option<uuid::Uuid>,
    pub reason: Option<String>,
    /// Wait this long for the outcome; `None`: return once produced.
    pub wait: Option<Duration>,
}

impl AdminRequest {
    /// The admin event, with a fresh id and the time now.
    pub fn event(&self) -> AdminEvent {
        AdminEvent {
            event_id: uuid::Uuid::new_v4(),
            kind: self.kind,
            player_id: self.player.clone(),
            ts_ms: chrono::Utc::now().timestamp_millis(),
            board: self.board.clone(),
            boards: self.boards.clone(),
            split: self.split.clone(),
            period: self.period.clone(),
            value: match (&self.scores, self.kind) {
                (Some(_), AdminKind::ScoreSet) => None,
                _ => Some(self.value),
            },
            scores: self.scores.clone(),
            tier: self.tier.clone(),
            held_event_id: self.held_event_id,
            reason: self.reason.clone(),
            team_id: None,
        }
    }
}

/// The admin event as its record value.
pub fn event_json(e: &AdminEvent) -> Value {
    let mut v =
        json!({ "event_id": e.event_id.to_string(), "type": e.kind.as_str(), "player_id": e.player_id, "ts": e.ts_ms });
    let fields = [
        ("board", e.board.clone()),
        ("split", e.split.clone()),
        ("period", e.period.clone()),
        ("tier", e.tier.clone()),
        ("held_event_id", e.held_event_id.map(|id| id.to_string())),
        ("reason", e.reason.clone()),
        ("team_id", e.team_id.clone()),
    ];
    for (name, value) in fields {
        if let Some(value) = value {
            v[name] = json!(value);
        }
    }
    if let Some(boards) = &e.boards {
        v["boards"] = json!(boards);
    }
    match (e.kind, e.value) {
        (AdminKind::ScoreSet, Some(score)) => v["score"] = json!(score),
        (AdminKind::ScoreAdjusted, Some(delta)) => v["delta"] = json!(delta),
        _ => {}
    }
    if let Some(scores) = &e.scores {
        v["scores"] = scores.json();
    }
    v
}

/// Produces the admin event and prints its id; with `wait`, then waits for
/// and prints its outcome. An error says why nothing was produced, or why
/// the event was refused.
pub async fn run(settings: &Settings, request: &AdminRequest) -> Result<(), AdminError> {
    let topic = settings.kafka.admin_topics.first().ok_or(AdminError::NoAdminTopic)?;
    let router = Router::new(settings.boards.clone(), &settings.redis.key_prefix);
    let mut event = request.event();
    let invalid = |r: crate::event::Rejection| AdminError::Invalid { reason: r.reason.to_string(), detail: r.detail };
    let plan = moderation::plan(&event, &router, event.ts_ms).map_err(invalid)?;
    let store = Store::connect(&settings.redis).await?;
    if let moderation::AdminOp::Review { held, .. } = plan.op {
        // The envelope names the held event's player (and split), found where it is held.
        let board = router.board(event.board.as_deref().unwrap_or_default()).expect("plan checked the board");
        let (base, h) = find_held(&store, &router, board, event.split.as_deref(), &held).await?;
        if h.state != crate::store::HeldState::Pending {
            let detail = format!("held event {held} was already {}", h.state.as_str());
            return Err(AdminError::Invalid { reason: "review_decided".into(), detail });
        }
        event.player_id = h.player_id;
        event.split = keys::split_of_base(&base).map(|(_, s)| s.to_string());
    } else {
        check_player(&store, &router, &event, &plan.reach).await?;
    }

    crate::kafka::connect::before_command(&settings.kafka).await.map_err(AdminError::Kafka)?;
    let producer =
        KafkaProducer::new(&crate::kafka::client::producer(&settings.kafka)).map_err(AdminError::Producer)?;
    let payload = event_json(&event).to_string();
    producer
        .deliver(FutureRecord::to(topic).key(&event.player_id).payload(&payload))
        .await
        .map_err(|source| AdminError::Produce { topic: topic.clone(), source })?;
    println!("{}", event.event_id);
    let Some(timeout) = request.wait else {
        return Ok(());
    };
    let key = keys::admin_outcome_key(router.prefix(), &event.event_id);
    let deadline = Instant::now() + timeout;
    loop {
        let note = store.admin_outcome(&key).await?;
        if let Some(note) = note {
            let v: Value =
                serde_json::from_str(&note).map_err(|e| AdminError::UnreadableOutcome(format!("{note}: {e}")))?;
            return match v["outcome"].as_str() {
                Some("refused") => Err(AdminError::Refused {
                    reason: v["reason"].as_str().unwrap_or("?").to_string(),
                    detail: v["detail"].as_str().unwrap_or_default().to_string(),
                }),
                Some(outcome) => {
                    println!("{outcome}");
                    Ok(())
                }
                None => Err(AdminError::UnreadableOutcome(note)),
            };
        }
        if Instant::now() >= deadline {
            return Err(AdminError::NoOutcome { timeout, dead_letter_topic: settings.kafka.dead_letter_topic.clone() });
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The tag of `board` (of `split`, if named) holding the held event `id`, and the event.
pub async fn find_held(
    store: &Store,
    router: &Router,
    board: &crate::board::Board,
    split: Option<&str>,
    id: &uuid::Uuid,
) -> Result<(String, crate::store::HeldEvent), AdminError> {
    let bases = match router.known_bases(board, split) {
        Some(bases) => bases,
        None => keys::bases_of_board(store.tag_bases(&keys::tags_key(router.prefix())).await?, board.id()),
    };
    for base in bases {
        if let Some(h) = store.held_event(&base, &id.to_string()).await? {
            return Ok((base, h));
        }
    }
    let detail = format!("no event {id} is held on board '{}'", board.id());
    Err(AdminError::Invalid { reason: "unknown_held_event".into(), detail })
}

/// A change to an existing entry needs the player there: on a board the
/// event reaches (or, to unhide, hidden there). A `score_set` may create one.
async fn check_player(store: &Store, router: &Router, event: &AdminEvent, reach: &Reach) -> Result<(), AdminError> {
    // A set may create an entry; a tier is for the player's next placement.
    if matches!(event.kind, AdminKind::ScoreSet | AdminKind::PlayerTierSet) {
        return Ok(());
    }
    let bases: Vec<String> = match reach {
        Reach::Tag(base) => vec![base.clone()],
        Reach::Boards(_) | Reach::All => {
            let all = store.tag_bases(&keys::tags_key(router.prefix())).await?;
            match reach {
                Reach::Boards(ids) => all
                    .into_iter()
                    .filter(|b| keys::board_of_base(b).is_some_and(|id| ids.iter().any(|i| i == id)))
                    .collect(),
                _ => all,
            }
        }
    };
    let player = &event.player_id;
    for base in &bases {
        let hidden = store.is_hidden(base, player).await?;
        match event.kind {
            AdminKind::PlayerUnhidden if hidden => return Ok(()),
            AdminKind::PlayerUnhidden => continue,
            _ if hidden => return Ok(()),
            _ => {}
        }
        let team_board = keys::board_of_base(base).and_then(|id| router.board(id)).is_some_and(|b| b.team().is_some());
        if team_board && store.on_team_board(base, player).await? {
            return Ok(());
        }
        for key in store.period_keys(base).await? {
            if store.stored_score(&key, player).await?.is_some() {
                return Ok(());
            }
        }
    }
    let scope = event.board.as_deref().map_or("any board".to_string(), |b| format!("board '{b}'"));
    let where_ = match event.kind {
        AdminKind::PlayerUnhidden => format!("hidden on {scope}"),
        _ => format!("on {scope}"),
    };
    Err(AdminError::NotThere { player: player.clone(), where_ })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_record_value_is_an_admin_event_the_parser_reads_back() {
        let request = AdminRequest {
            kind: AdminKind::ScoreAdjusted,
            player: "alice".into(),
            board: Some("pts".into()),
            boards: None,
            split: Some("eu".into()),
            period: Some("w:2026-W49".into()),
            value: -5,
            scores: None,
            tier: None,
            held_event_id: None,
            reason: None,
            wait: None,
        };
        let event = request.event();
        let bytes = event_json(&event).to_string();
        match crate::event::parse(bytes.as_bytes(), Default::default(), |_| false) {
            crate::event::Parsed::Admin(parsed) => assert_eq!(parsed, event),
            other => panic!("{other:?}"),
        }
        let hide = AdminRequest { kind: AdminKind::PlayerHidden, boards: Some(vec!["a".into()]), ..request };
        let event = hide.event();
        match crate::event::parse(event_json(&event).to_string().as_bytes(), Default::default(), |_| false) {
            crate::event::Parsed::Admin(parsed) => assert_eq!(parsed, AdminEvent { value: Some(0), ..event }),
            other => panic!("{other:?}"),
        }
        // A set of a row carries its scores and no score.
        let scores = crate::event::Scores::from_pairs("wins=3,time_ms=53000").ok();
        let row = AdminRequest { kind: AdminKind::ScoreSet, boards: None, scores, ..hide };
        let event = row.event();
        assert_eq!(event.value, None);
        match crate::event::parse(event_json(&event).to_string().as_bytes(), Default::default(), |_| false) {
            crate::event::Parsed::Admin(parsed) => assert_eq!(parsed, event),
            other => panic!("{other:?}"),
        }
    }
}
