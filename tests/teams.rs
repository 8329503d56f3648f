//! Team boards through the real worker, Apache Kafka and Redis, against a
//! model: players joining, leaving, switching teams and re-joining while
//! they score, on a `sum` board that keeps a leaver's contributions (and
//! counts a joiner's scores an hour after the join), a `best` board and a
//! `sum` board that forfeit them, over 4 partitions with producer retries
//! of every kind of event and a kill -9 mid-stream. Every team's score and
//! every member's contribution in every period equal the model's, in Redis
//! and through the reads.

use std::collections::BTreeMap;

use serde_json::json;
use support::periods::Lcg;
use support::*;

const PARTITIONS: i32 = 4;
const HOUR: i64 = 3_600_000;

const BOARDS: &str = r#"
[[board]]
id = "clans"
on = ["match"]
mode = "sum"
periods = ["all_time", "daily"]
team = { leave = "keep", counts_after = "1h" }

[[board]]
id = "guilds"
on = ["match"]
mode = "best"
periods = ["all_time", "daily"]
team = { leave = "forfeit" }

[[board]]
id = "squads"
on = ["match"]
mode = "sum"
periods = ["all_time"]
team = { leave = "forfeit", counts_after = "30m" }
"#;

/// A board as the model runs it: its mode, leave rule and `counts_after`.
struct Rules {
    id: &'static str,
    sum: bool,
    forfeit: bool,
    after: i64,
    daily: bool,
}

const RULES: [Rules; 3] = [
    Rules { id: "clans", sum: true, forfeit: false, after: HOUR, daily: true },
    Rules { id: "guilds", sum: false, forfeit: true, after: 0, daily: true },
    Rules { id: "squads", sum: true, forfeit: true, after: HOUR / 2, daily: false },
];

/// One produced event: a score, or a join or leave of a team.
#[derive(Clone, Debug)]
enum Ev {
    Score { player: String, score: i64, ts: i64 },
    Join { player: String, team: String, ts: i64 },
    Leave { player: String, team: String, ts: i64 },
}

/// Per (period id, team): each member's contribution.
type Contributions = BTreeMap<(String, String), BTreeMap<String, i64>>;

/// One board's model: who is in which team (and since when), and the contributions.
#[derive(Default)]
struct Board {
    members: BTreeMap<String, (String, i64)>,
    contributions: Contributions,
}

impl Board {
    /// Applies one event of a player, in the player's order.
    fn apply(&mut self, rules: &Rules, ev: &Ev) {
        match ev {
            Ev::Join { player, team, ts } => {
                match self.members.get(player) {
                    Some((t, _)) if t == team => return,
                    Some((t, _)) => {
                        let t = t.clone();
                        self.leave(rules, player, &t);
                    }
                    None => {}
                }
                self.members.insert(player.clone(), (team.clone(), *ts));
            }
            Ev::Leave { player, team, .. } => self.leave(rules, player, team),
            Ev::Score { player, score, ts } => {
                let Some((team, joined)) = self.members.get(player) else { return };
                if *ts < joined + rules.after {
                    return;
                }
                let mut periods = vec!["all".to_string()];
                if rules.daily {
                    periods.push(format!(
                        "d:{}",
                        chrono::DateTime::from_timestamp_millis(*ts).unwrap().format("%Y-%m-%d")
                    ));
                }
                for p in periods {
                    let c = self.contributions.entry((p, team.clone())).or_default();
                    let slot = c.entry(player.clone());
                    match slot {
                        std::collections::btree_map::Entry::Vacant(v) => {
                            v.insert(*score);
                        }
                        std::collections::btree_map::Entry::Occupied(mut o) => {
                            let v = o.get_mut();
                            *v = if rules.sum { *v + score } else { (*v).max(*score) };
                        }
                    }
                }
            }
        }
    }

    fn leave(&mut self, rules: &Rules, player: &str, team: &str) {
        if self.members.get(player).map(|(t, _)| t.as_str()) != Some(team) {
            return;
        }
        self.members.remove(player);
        if rules.forfeit {
            for ((_, t), c) in self.contributions.iter_mut() {
                if t == team {
                    c.remove(player);
                }
            }
            self.contributions.retain(|_, c| !c.is_empty());
        }
    }

    /// Per period, each team's score: the sum or the best of its contributions.
    fn teams(&self, rules: &Rules) -> BTreeMap<String, BTreeMap<String, i64>> {
        let mut out: BTreeMap<String, BTreeMap<String, i64>> = BTreeMap::new();
        for ((p, t), c) in &self.contributions {
            let score = if rules.sum { c.values().sum() } else { *c.values().max().unwrap() };
            out.entry(p.clone()).or_default().insert(t.clone(), score);
        }
        out
    }
}

/// Per player, a stream of joins, switches, re-joins, leaves (of their
/// team, and now and then of another) and scores over the last two days.
fn stream(seed: u64, players: usize, events: usize, now: i64) -> Vec<Ev> {
    let mut rng = Lcg(seed);
    let mut out = Vec::with_capacity(events);
    let mut teams: BTreeMap<usize, String> = BTreeMap::new();
    for _ in 0..events {
        let p = rng.next(players as u64) as usize;
        let player = format!("p{p:03}");
        let ts = now - rng.next(48 * HOUR as u64) as i64 - HOUR;
        let team = |rng: &mut Lcg| format!("t{:02}", rng.next(12));
        let ev = match rng.next(100) {
            0..=11 => {
                let t = team(&mut rng);
                teams.insert(p, t.clone());
                Ev::Join { player, team: t, ts }
            }
            12..=15 => {
                let t = match teams.remove(&p) {
                    Some(t) if rng.next(4) > 0 => t,
                    _ => team(&mut rng),
                };
                Ev::Leave { player, team: t, ts }
            }
            _ => Ev::Score { player, score: rng.next(200) as i64 + 1, ts },
        };
        out.push(ev);
    }
    out
}

fn record(ev: &Ev, id: &str, record_ts: i64) -> Record {
    let (player, v) = match ev {
        Ev::Score { player, score, ts } => {
            (player, json!({"event_id": id, "type": "match", "player_id": player, "score": score, "ts": ts}))
        }
        Ev::Join { player, team, ts } => {
            (player, json!({"event_id": id, "type": "team_joined", "player_id": player, "team_id": team, "ts": ts}))
        }
        Ev::Leave { player, team, ts } => {
            (player, json!({"event_id": id, "type": "team_left", "player_id": player, "team_id": team, "ts": ts}))
        }
    };
    (player.clone(), v.to_string().into_bytes(), Some(record_ts))
}

/// Every read of a board equals the model's, in every period: the top (in
/// pages by cursor) with each team's members, each team's read, the
/// window around a team, and each player's read.
async fn reads_equal_the_model(w: &Worker, rules: &Rules, model: &Board) {
    let board = rules.id;
    for (period, teams) in model.teams(rules) {
        // Board order: the better score first, ties by team id as Redis orders them (descending).
        let mut order: Vec<(&String, &i64)> = teams.iter().collect();
        order.sort_by(|a, b| b.1.cmp(a.1).then(b.0.cmp(a.0)));
        let mut listed = Vec::new();
        let mut url = format!("/v1/boards/{board}/top?period={period}&limit=7&fresh=true");
        loop {
            let (status, body) = w.get_json(&url).await;
            assert_eq!(status, 200, "{body}");
            assert_eq!(body["total"], json!(teams.len()));
            for e in body["entries"].as_array().unwrap() {
                let team = e["team_id"].as_str().unwrap().to_string();
                let size = model.contributions[&(period.clone(), team.clone())].len();
                assert_eq!(e["members"], json!(size), "{board} {period} {team}");
                assert_eq!(e["rank"], json!(listed.len() + 1));
                listed.push((team, e["score"].as_i64().unwrap()));
            }
            match body["next_cursor"].as_str() {
                Some(c) => url = format!("/v1/boards/{board}/top?cursor={c}&limit=7&fresh=true"),
                None => break,
            }
        }
        let expected: Vec<(String, i64)> = order.iter().map(|(t, v)| (t.to_string(), **v)).collect();
        assert_eq!(listed, expected, "{board} {period}: the top");
        for (rank, (team, score)) in expected.iter().enumerate() {
            let (status, body) =
                w.get_json(&format!("/v1/boards/{board}/teams/{team}?period={period}&fresh=true")).await;
            assert_eq!(status, 200, "{body}");
            assert_eq!((body["rank"].clone(), body["score"].clone()), (json!(rank + 1), json!(score)));
            let mut members: Vec<(&String, &i64)> =
                model.contributions[&(period.clone(), team.clone())].iter().collect();
            members.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
            let want: Vec<_> = members
                .iter()
                .enumerate()
                .map(|(i, (p, c))| json!({"player_id": p, "score": c, "rank": i + 1}))
                .collect();
            assert_eq!(body["members"], json!(want), "{board} {period} {team}: the members");
            let (_, around) = w
                .get_json(&format!("/v1/boards/{board}/teams/{team}/around?period={period}&radius=1&fresh=true"))
                .await;
            let near: Vec<&str> =
                around["entries"].as_array().unwrap().iter().map(|e| e["team_id"].as_str().unwrap()).collect();
            let want: Vec<&str> = expected[rank.saturating_sub(1)..(rank + 2).min(expected.len())]
                .iter()
                .map(|(t, _)| t.as_str())
                .collect();
            assert_eq!(near, want, "{board} {period}: around {team}");
        }
        let (status, _) = w.get_json(&format!("/v1/boards/{board}/teams/nobody?period={period}")).await;
        assert_eq!(status, 404);
        for p in 0..90 {
            let player = format!("p{p:03}");
            let (status, body) =
                w.get_json(&format!("/v1/boards/{board}/players/{player}?period={period}&fresh=true")).await;
            match model.members.get(&player) {
                None => assert_eq!((status, body["team_id"].clone()), (404, json!(null)), "{board} {player}"),
                Some((team, _)) => {
                    assert_eq!(status, 200, "{body}");
                    assert_eq!(body["team_id"], json!(team));
                    let c = model.contributions.get(&(period.clone(), team.clone())).and_then(|c| c.get(&player));
                    assert_eq!(body["contribution"], json!(c), "{board} {period} {player}");
                    let team_score = teams.get(team).map(|v| json!(v)).unwrap_or(json!(null));
                    assert_eq!(body["team"]["score"], team_score, "{board} {period} {player}: {body}");
                }
            }
        }
    }
}

/// A zset as member -> integer score.
async fn zset(conn: &mut redis::aio::MultiplexedConnection, key: &str) -> BTreeMap<String, i64> {
    let got: Vec<(String, f64)> =
        redis::cmd("ZRANGE").arg(key).arg(0).arg(-1).arg("WITHSCORES").query_async(conn).await.unwrap();
    got.into_iter().map(|(m, s)| (m, s as i64)).collect()
}

/// What Redis holds of a board: per period its teams, and the contributions.
async fn held(
    conn: &mut redis::aio::MultiplexedConnection,
    board: &str,
) -> (BTreeMap<String, BTreeMap<String, i64>>, Contributions) {
    let base = format!("lb:{{{board}}}:");
    let registry: Vec<String> =
        redis::cmd("SMEMBERS").arg(format!("lb:{{{board}}}:_keys")).query_async(conn).await.unwrap();
    let mut teams = BTreeMap::new();
    for key in registry {
        let rows = zset(conn, &key).await;
        if !rows.is_empty() {
            teams.insert(key.strip_prefix(&base).unwrap().to_string(), rows);
        }
    }
    let contrib_keys: Vec<String> =
        redis::cmd("KEYS").arg(format!("lb:{{{board}}}:_tc:*")).query_async(conn).await.unwrap();
    let mut contributions = Contributions::new();
    for key in contrib_keys {
        let rest = key.strip_prefix(&format!("{base}_tc:")).unwrap();
        let (period, team) = rest.rsplit_once(':').unwrap();
        contributions.insert((period.to_string(), team.to_string()), zset(conn, &key).await);
    }
    (teams, contributions)
}

#[tokio::test(flavor = "multi_thread")]
async fn team_boards_equal_the_model_through_switches_leaves_retries_and_a_kill() {
    let stack = Stack::start(PARTITIONS).await;
    let cfg = WorkerConfig::new(&stack.broker, &stack.redis, &stack.topic, &stack.dlq, BOARDS);
    let now = chrono::Utc::now().timestamp_millis();
    let events = stream(7, 90, 4000, now);
    let mut records = Vec::new();
    let mut ids = Vec::new();
    for (i, ev) in events.iter().enumerate() {
        let id = uuid::Uuid::new_v4().to_string();
        records.push(record(ev, &id, now));
        // A producer retry of one event in 25, of every kind.
        if i % 25 == 3 {
            records.push(record(ev, &id, now));
        }
        ids.push(id);
    }
    // A bad membership event is a dead letter naming its field.
    let bad = json!({"event_id": uuid::Uuid::new_v4().to_string(), "type": "team_joined", "player_id": "p001", "team_id": "a:b", "ts": now});
    records.push(("p001".into(), bad.to_string().into_bytes(), Some(now)));

    let w = killed_mid_stream(&stack, &cfg, &records, PARTITIONS).await;
    let mut conn = stack.redis.conn().await;
    for rules in &RULES {
        let mut model = Board::default();
        for ev in &events {
            model.apply(rules, ev);
        }
        let (teams, contributions) = held(&mut conn, rules.id).await;
        assert_eq!(contributions, model.contributions, "{}: the contributions", rules.id);
        assert_eq!(teams, model.teams(rules), "{}: the teams' scores", rules.id);
        assert!(teams.len() >= if rules.daily { 3 } else { 1 }, "{}: periods {:?}", rules.id, teams.keys());
        reads_equal_the_model(&w, rules, &model).await;
    }
    let dead = stack.broker.read_all(&stack.dlq, 1);
    assert_eq!(dead.len(), 1, "{}", w.log());
    assert_eq!(header(&dead[0], "rankflow.reason").as_deref(), Some("invalid_team_id"));
}
