//! Settling a league round, once it is sealed: every cohort ranked on the
//! round's final board (`board::league` decides each player's zone and next
//! tier), then the idle players of the round before, then the next round's
//! waiting players placed in arrival order; each step written by
//! `settle.lua` only where the settlement stands, so that a crash, a
//! second worker or a re-run leaves the same tiers. Then each cohort's
//! result is published to `[sealing] topic` as one record, key
//! `<board>/<round>/<cohort>`.

use std::collections::HashSet;

use serde_json::{json, Value};
use tracing::info;

use super::{now_ms, JobError, Outcome, Scheduler};
use crate::board::league::{self, League, Zone};
use crate::board::Board;
use crate::kafka::readback;
use crate::keys;
use crate::metrics;
use crate::period::Period;
use crate::store::{Progress, RowsOf, SettlePlace, SettleWrite, TierWrite};

/// About how many players one settlement step reads and writes: a step
/// holds Redis a few milliseconds.
const STEP_PLAYERS: usize = 2000;

/// How many cohorts' records are sent before their publication is recorded.
const PUBLISH_COHORTS: usize = 500;

/// The round's cohorts in settlement order: (tier, n), tier by tier.
fn cohorts(newest: &[i64]) -> impl Iterator<Item = (usize, i64)> + '_ {
    newest.iter().enumerate().flat_map(|(t, &last)| (1..=last).map(move |n| (t, n)))
}

/// The first cohort at or after (tier, n) that exists, else what follows the cohorts.
fn from(newest: &[i64], tier: usize, n: i64, after: Progress) -> Progress {
    if newest.get(tier).is_some_and(|&last| n <= last) {
        return Progress::Cohorts { tier, n };
    }
    match (tier + 1..newest.len()).find(|&t| newest[t] >= 1) {
        Some(t) => Progress::Cohorts { tier: t, n: 1 },
        None => after,
    }
}

impl Scheduler<'_> {
    /// Settles league round `round` of the tag at `base` (sealed), then publishes it.
    pub(super) async fn settle(&mut self, base: &str, board: &Board, round: &Period) -> Result<Outcome, JobError> {
        let league = board.league().cloned().ok_or_else(|| JobError::UnknownBoard(board.id().into()))?;
        let previous = board.previous_round(round).map(|p| p.id);
        let expire_at = round.expire_at_secs(board.retention(round.kind)).unwrap_or(0);
        let newest = self.store.league_newest(base, &round.id, league.tiers.len()).await?;
        let after_cohorts = if previous.is_some() { Progress::Idle(0) } else { Progress::Place };
        let mut counted = false;
        loop {
            let at = self.store.league_progress(base, &round.id).await?;
            // A step another worker took first writes nothing: the loop reads where it left the settlement.
            match at {
                Progress::Done => break,
                Progress::Cohorts { tier: 0, n: 1 }
                    if !self.store.league_ready(base, &round.id, previous.as_deref()).await? =>
                {
                    let check = self.settings.sealing.check_interval.as_millis() as i64;
                    return Ok(Outcome::Again(now_ms() + check, "waiting"));
                }
                Progress::Cohorts { tier, n } => {
                    let (next, writes) =
                        self.settle_cohorts(base, board, &league, &round.id, &newest, (tier, n)).await?;
                    let next = if matches!(next, Progress::Cohorts { .. }) { next } else { after_cohorts };
                    let call = SettleWrite { base, round: &round.id, at, next, writes: &writes, expire_at };
                    let written = self.store.settle_write(&call).await?;
                    if written {
                        count_moves(board, &writes);
                        counted = true;
                    }
                }
                Progress::Idle(k) => {
                    let prev = previous.as_deref().unwrap_or_default();
                    let (next, writes) = self.idle_players(base, &league, &round.id, prev, k).await?;
                    let call = SettleWrite { base, round: &round.id, at, next, writes: &writes, expire_at };
                    let written = self.store.settle_write(&call).await?;
                    if written {
                        let demoted = writes.len() as u64;
                        metrics::get().league.moves.with_label_values(&[board.id(), "demote"]).inc_by(demoted);
                    }
                }
                Progress::Place => {
                    let next_round = board.next_round(round);
                    let next = next_round
                        .as_ref()
                        .map(|p| (p.id.as_str(), p.expire_at_secs(board.retention(p.kind)).unwrap_or(0)));
                    let call = SettlePlace {
                        base,
                        round: &round.id,
                        next_round: next,
                        cohort_size: league.cohort_size,
                        tiers: league.tiers.len(),
                        max: STEP_PLAYERS,
                    };
                    self.store.settle_place(&call).await?;
                }
            }
        }
        if counted {
            let m = metrics::get();
            m.league.settlements.with_label_values(&[board.id()]).inc();
            let tiers = self.store.league_tier_counts(base, &round.id, league.tiers.len()).await?;
            for (name, n) in league.tiers.iter().zip(tiers) {
                m.league.players.with_label_values(&[board.id(), name]).set(n as i64);
            }
            info!(board = %board.id(), round = %round.id, "League round settled.");
        }
        self.publish_cohorts(base, board, &league, round, &newest).await?;
        Ok(Outcome::Done)
    }

    /// One step of cohorts from (tier, n): their players' next tiers, and
    /// where the settlement goes on.
    async fn settle_cohorts(
        &self,
        base: &str,
        board: &Board,
        league: &League,
        round: &str,
        newest: &[i64],
        (tier, n): (usize, i64),
    ) -> Result<(Progress, Vec<TierWrite>), JobError> {
        let end = Progress::Done;
        let Progress::Cohorts { tier, n } = from(newest, tier, n, end) else {
            return Ok((end, Vec::new()));
        };
        let take = (STEP_PLAYERS / league.cohort_size.max(1) as usize).max(1) as i64;
        let last = (n + take - 1).min(newest[tier]);
        let players = self.store.league_cohorts(base, round, league::code(tier, n), league::code(tier, last)).await?;
        let names: Vec<String> = players.iter().map(|(m, _)| m.clone()).collect();
        // Each player's key in board order on the final board (a board with
        // columns: its member's bytes); a player without one there is hidden
        // (or erased): ranked nowhere, moved nowhere.
        let keys = self.final_keys(base, board, round, &names).await?;
        let mut by_cohort: Vec<Vec<(SortKey, String)>> = vec![Vec::new(); (last - n + 1) as usize];
        for ((member, code), key) in players.into_iter().zip(keys) {
            if let (Some(key), Some((_, c))) = (key, league::split_code(code)) {
                by_cohort[(c - n) as usize].push((key, member));
            }
        }
        let mut writes = Vec::with_capacity(names.len());
        for cohort in by_cohort {
            for s in settle(board, league, tier, cohort) {
                writes.push(TierWrite { tier: s.next_tier, result: Some(s.result_text()), member: s.member });
            }
        }
        Ok((from(newest, tier, last + 1, end), writes))
    }

    /// Each player's key on the final board of `round` (see [`SortKey`]),
    /// `None` for one without an entry there.
    async fn final_keys(
        &self,
        base: &str,
        board: &Board,
        round: &str,
        names: &[String],
    ) -> Result<Vec<Option<SortKey>>, JobError> {
        let final_id = crate::period::id::final_id(round);
        let final_key = keys::period_key(base, &final_id);
        Ok(match board.column_spec() {
            None => {
                let scores = self.store.scores_of(&final_key, names).await?;
                scores.into_iter().map(|s| s.map(|s| SortKey::Stored(s as i64))).collect()
            }
            Some(spec) => {
                let rows_key = keys::rows_key(base, &final_id);
                let at = RowsOf { key: &final_key, rows_key: &rows_key, prefix: spec.prefix_len() };
                self.store.rows_of(at, names).await?.into_iter().map(|m| m.map(SortKey::Member)).collect()
            }
        })
    }

    /// One step of the previous round's players from the `k`th: those who
    /// played nothing in this round follow `idle`.
    async fn idle_players(
        &self,
        base: &str,
        league: &League,
        round: &str,
        previous: &str,
        k: u64,
    ) -> Result<(Progress, Vec<TierWrite>), JobError> {
        if league.idle == league::Idle::Keep {
            return Ok((Progress::Place, Vec::new()));
        }
        let players = self.store.league_players(base, previous, k, STEP_PLAYERS as u64).await?;
        if players.is_empty() {
            return Ok((Progress::Place, Vec::new()));
        }
        let next = Progress::Idle(k + players.len() as u64);
        let here = self.store.league_codes(base, round, &players).await?;
        let idle: Vec<String> = players.into_iter().zip(here).filter(|(_, c)| c.is_none()).map(|(m, _)| m).collect();
        let held = self.store.league_tiers(base, &idle).await?;
        let top = league.tiers.len() - 1;
        let writes = idle
            .into_iter()
            .zip(held)
            .map(|(member, held)| TierWrite {
                tier: league.idle_tier(held.unwrap_or(0).min(top)),
                result: None,
                member,
            })
            .collect();
        Ok((next, writes))
    }

    /// Publishes each cohort of a settled round once (the count published is recorded).
    async fn publish_cohorts(
        &self,
        base: &str,
        board: &Board,
        league: &League,
        round: &Period,
        newest: &[i64],
    ) -> Result<(), JobError> {
        let all: Vec<(usize, i64)> = cohorts(newest).collect();
        let mut done = self.store.league_published(base, &round.id).await? as usize;
        let split = keys::split_of_base(base).map(|(_, s)| s);
        let board_name = match split {
            Some(s) => format!("{}:{s}", board.id()),
            None => board.id().to_string(),
        };
        // Without transactions, records sent before a crash are read back
        // (with them, the outbox appends each id once).
        let unfinished = done < all.len() && !self.settings.kafka.transactions;
        let already = self.published_before(base, &board_name, &round.id, unfinished).await?;
        let at = Publication { base, board, league, round, split, board_name: &board_name };
        while done < all.len() {
            // Cohorts of one tier, so that their players are one range of codes.
            let (tier, first) = all[done];
            let count = all[done..].iter().take(PUBLISH_COHORTS).take_while(|(t, _)| *t == tier).count();
            let records = self.cohort_records(&at, tier, first, first + count as i64 - 1).await?;
            let records = records
                .into_iter()
                .filter(|(key, _)| !already.contains(key))
                .map(|(key, payload)| (format!("league/{key}"), key, payload))
                .collect();
            self.publish(records).await?;
            done += count;
            self.store.note_league_published(base, &round.id, done as u64).await?;
        }
        Ok(())
    }

    /// The records (key, value) of cohorts `first..=last` of `tier`, read
    /// with one command per kind for them all.
    async fn cohort_records(
        &self,
        at: &Publication<'_>,
        tier: usize,
        first: i64,
        last: i64,
    ) -> Result<Vec<(String, String)>, JobError> {
        let (base, board, league, round) = (at.base, at.board, at.league, &at.round.id);
        let final_id = crate::period::id::final_id(round);
        let players =
            self.store.league_cohorts(base, round, league::code(tier, first), league::code(tier, last)).await?;
        let names: Vec<String> = players.iter().map(|(m, _)| m.clone()).collect();
        let scores = self.final_keys(base, board, round, &names).await?;
        let results = self.store.league_results(base, round, &names).await?;
        let metas = match board.meta() {
            true => self.store.hash_fields(&keys::meta_key(base, &final_id), &names).await?,
            false => vec![None; names.len()],
        };
        let mut standings: Vec<Vec<(usize, Value)>> = vec![Vec::new(); (last - first + 1) as usize];
        for ((((member, code), score), result), meta) in players.iter().zip(scores).zip(results).zip(metas) {
            let (Some(score), Some((rank, zone, next)), Some((_, n))) =
                (score, result.as_deref().and_then(league::parse_result), league::split_code(*code))
            else {
                continue;
            };
            let mut entry = json!({
                "rank": rank, "player_id": member, "zone": zone.as_str(), "next_tier": league.tiers.get(next),
            });
            match (score, board.columns().zip(board.column_spec())) {
                (SortKey::Stored(stored), _) => entry["score"] = json!(board.packing().decode(stored)),
                (SortKey::Member(m), Some((c, spec))) => {
                    entry["scores"] = spec.parse_member(&m).map(|(values, _, _)| c.scores(&values)).unwrap_or_default()
                }
                (SortKey::Member(_), None) => {}
            }
            if let Some(meta) = meta.as_deref().and_then(|m| serde_json::from_str::<Value>(m).ok()) {
                entry["meta"] = meta;
            }
            standings[(n - first) as usize].push((rank, entry));
        }
        let mut records = Vec::with_capacity(standings.len());
        for (i, mut entries) in standings.into_iter().enumerate() {
            entries.sort_by_key(|(rank, _)| *rank);
            let cohort = league.cohort_id(league::code(tier, first + i as i64)).unwrap_or_default();
            let payload = json!({
                "kind": "league", "board": board.id(), "split": at.split, "round": round,
                "tier": league.tiers[tier], "cohort": cohort,
                "standings": entries.into_iter().map(|(_, e)| e).collect::<Vec<_>>(),
            });
            records.push((format!("{}/{round}/{cohort}", at.board_name), payload.to_string()));
        }
        Ok(records)
    }
}

/// A player's place on a round's final board: its stored score, or on a
/// board with columns its member's bytes (whose order is the board's).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum SortKey {
    Stored(i64),
    Member(Vec<u8>),
}

/// A cohort of `tier` settled from its players' keys.
fn settle(board: &Board, league: &League, tier: usize, mut cohort: Vec<(SortKey, String)>) -> Vec<league::Settled> {
    if cohort.iter().all(|(k, _)| matches!(k, SortKey::Stored(_))) {
        let scored =
            cohort.into_iter().filter_map(|(k, m)| if let SortKey::Stored(s) = k { Some((s, m)) } else { None });
        return league.settle(board.order(), tier, scored.collect());
    }
    cohort.sort();
    league.settle_ranked(tier, cohort.into_iter().map(|(_, m)| m).collect())
}

/// What a round's publication is about.
struct Publication<'a> {
    base: &'a str,
    board: &'a Board,
    league: &'a League,
    round: &'a Period,
    split: Option<&'a str>,
    /// The board as record keys name it (`<board>` or `<board>:<split>`).
    board_name: &'a str,
}

impl Scheduler<'_> {
    /// The cohort records of a round already on the seal topic: none when
    /// this publication starts now (it notes where the topic ends); those
    /// since that note when it is taken over (a worker died between sending
    /// records and recording them), so that each is sent once.
    async fn published_before(
        &self,
        base: &str,
        board_name: &str,
        round: &str,
        unfinished: bool,
    ) -> Result<HashSet<String>, JobError> {
        if !unfinished {
            return Ok(HashSet::new());
        }
        let (kafka, topic) = (self.settings.kafka.clone(), self.settings.sealing.topic.clone());
        let name = topic.clone();
        let publish = move |source| JobError::Publish { topic: name.clone(), source };
        let ends = {
            let (kafka, topic) = (kafka.clone(), topic.clone());
            tokio::task::spawn_blocking(move || readback::end_offsets(&kafka, &topic))
                .await
                .map_err(|e| JobError::MetadataTask(e.to_string()))?
                .map_err(&publish)?
        };
        let (from, started_now) =
            self.store.start_league_publication(base, round, &readback::offsets_text(&ends)).await?;
        if started_now {
            return Ok(HashSet::new());
        }
        let from = readback::parse_offsets(&from)
            .ok_or(JobError::BadReply { script: "the league's publication start", got: from.clone() })?;
        let prefix = format!("{board_name}/{round}/");
        tokio::task::spawn_blocking(move || readback::keys_since(&kafka, &topic, &from, &prefix))
            .await
            .map_err(|e| JobError::MetadataTask(e.to_string()))?
            .map_err(publish)
    }
}

/// Counts a step's moves (`rankflow_league_moves_total`).
fn count_moves(board: &Board, writes: &[TierWrite]) {
    let m = metrics::get();
    for w in writes {
        if let Some((_, zone, _)) = w.result.as_deref().and_then(league::parse_result) {
            if zone != Zone::Stay {
                m.league.moves.with_label_values(&[board.id(), zone.as_str()]).inc();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cohorts_are_walked_tier_by_tier_skipping_empty_tiers() {
        let newest = [2, 0, 1];
        assert_eq!(cohorts(&newest).collect::<Vec<_>>(), vec![(0, 1), (0, 2), (2, 1)]);
        assert_eq!(from(&newest, 0, 3, Progress::Done), Progress::Cohorts { tier: 2, n: 1 });
        assert_eq!(from(&newest, 2, 2, Progress::Place), Progress::Place);
        assert_eq!(from(&[0, 0], 0, 1, Progress::Idle(0)), Progress::Idle(0));
    }
}
