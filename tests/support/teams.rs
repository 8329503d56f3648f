//! Team boards' model for the tests (`tests/teams*.rs`): the boards' rules,
//! a stream of joins, switches, leaves and scores, what the model makes of
//! it (with hidden players and teams, removals and erasures), what Redis
//! holds, and the reads that must equal it.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::json;

use super::periods::Lcg;
use super::{Record, Worker};

pub const HOUR: i64 = 3_600_000;

/// The boards `RULES` describes.
pub const BOARDS: &str = r#"
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
pub struct Rules {
    pub id: &'static str,
    pub sum: bool,
    pub forfeit: bool,
    pub after: i64,
    pub daily: bool,
}

pub const RULES: [Rules; 3] = [
    Rules { id: "clans", sum: true, forfeit: false, after: HOUR, daily: true },
    Rules { id: "guilds", sum: false, forfeit: true, after: 0, daily: true },
    Rules { id: "squads", sum: true, forfeit: true, after: HOUR / 2, daily: false },
];

/// One produced event: a score, or a join or leave of a team.
#[derive(Clone, Debug)]
pub enum Ev {
    Score { player: String, score: i64, ts: i64 },
    Join { player: String, team: String, ts: i64 },
    Leave { player: String, team: String, ts: i64 },
}

/// Per (period id, team): each member's contribution.
pub type Contributions = BTreeMap<(String, String), BTreeMap<String, i64>>;

/// One board's model: who is in which team (and since when), and the contributions.
#[derive(Default)]
pub struct Board {
    pub members: BTreeMap<String, (String, i64)>,
    /// Every contribution, a hidden player's too.
    pub contributions: Contributions,
    pub hidden: BTreeSet<String>,
    pub hidden_teams: BTreeSet<String>,
}

impl Board {
    /// Applies one event of a player, in the player's order.
    pub fn apply(&mut self, rules: &Rules, ev: &Ev) {
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

    /// The contributions the teams' scores count (no hidden player's), or
    /// with `hidden` the hidden players' only.
    pub fn counted(&self, hidden: bool) -> Contributions {
        let mut out = Contributions::new();
        for (k, c) in &self.contributions {
            let c: BTreeMap<String, i64> =
                c.iter().filter(|(p, _)| self.hidden.contains(*p) == hidden).map(|(p, v)| (p.clone(), *v)).collect();
            if !c.is_empty() {
                out.insert(k.clone(), c);
            }
        }
        out
    }

    /// Per period, each shown team's score: the sum or the best of its counted contributions.
    pub fn teams(&self, rules: &Rules) -> BTreeMap<String, BTreeMap<String, i64>> {
        let mut out: BTreeMap<String, BTreeMap<String, i64>> = BTreeMap::new();
        for ((p, t), c) in &self.counted(false) {
            if self.hidden_teams.contains(t) {
                continue;
            }
            let score = if rules.sum { c.values().sum() } else { *c.values().max().unwrap() };
            out.entry(p.clone()).or_default().insert(t.clone(), score);
        }
        out
    }

    /// Takes the player's contributions off in one period (`None`: every one).
    pub fn remove(&mut self, player: &str, period: Option<&str>) {
        for ((p, _), c) in self.contributions.iter_mut() {
            if period.is_none_or(|x| x == p) {
                c.remove(player);
            }
        }
        self.contributions.retain(|_, c| !c.is_empty());
    }

    /// Forgets the player: contributions, team and hiding.
    pub fn erase(&mut self, player: &str) {
        self.remove(player, None);
        self.members.remove(player);
        self.hidden.remove(player);
    }
}

/// Per player, a stream of joins, switches, re-joins, leaves (of their
/// team, and now and then of another) and scores over the last two days.
pub fn stream(seed: u64, players: usize, events: usize, now: i64) -> Vec<Ev> {
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

pub fn record(ev: &Ev, id: &str, record_ts: i64) -> Record {
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
pub async fn reads_equal_the_model(w: &Worker, rules: &Rules, model: &Board) {
    let board = rules.id;
    let counted = model.counted(false);
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
                let size = counted[&(period.clone(), team.clone())].len();
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
            let mut members: Vec<(&String, &i64)> = counted[&(period.clone(), team.clone())].iter().collect();
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
                    let c = counted.get(&(period.clone(), team.clone())).and_then(|c| c.get(&player)).copied();
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

/// What Redis holds of a board: per period its (shown) teams, the
/// contributions the teams count, and the hidden players' contributions.
pub async fn held(
    conn: &mut redis::aio::MultiplexedConnection,
    board: &str,
) -> (BTreeMap<String, BTreeMap<String, i64>>, Contributions, Contributions) {
    let base = format!("lb:{{{board}}}:");
    let registry: Vec<String> = redis::cmd("SMEMBERS").arg(format!("{base}_keys")).query_async(conn).await.unwrap();
    let mut teams = BTreeMap::new();
    for key in registry {
        let rows = zset(conn, &key).await;
        if !rows.is_empty() {
            teams.insert(key.strip_prefix(&base).unwrap().to_string(), rows);
        }
    }
    let mut both = [Contributions::new(), Contributions::new()];
    for (i, family) in ["_tc:", "_tch:"].into_iter().enumerate() {
        let keys: Vec<String> = redis::cmd("KEYS").arg(format!("{base}{family}*")).query_async(conn).await.unwrap();
        for key in keys {
            let period = key.strip_prefix(&format!("{base}{family}")).unwrap().to_string();
            let fields: Vec<(String, i64)> = redis::cmd("HGETALL").arg(&key).query_async(conn).await.unwrap();
            for (field, value) in fields {
                let (team, player) = field.split_once(':').unwrap();
                both[i].entry((period.clone(), team.to_string())).or_default().insert(player.to_string(), value);
            }
        }
    }
    // Each team's set of contributors holds exactly its counted contributors.
    for ((period, team), c) in &both[0] {
        let mut set: Vec<String> =
            redis::cmd("SMEMBERS").arg(format!("{base}_tt:{period}:{team}")).query_async(conn).await.unwrap();
        set.sort();
        assert_eq!(set, c.keys().cloned().collect::<Vec<_>>(), "{board} {period} {team}: the set of contributors");
    }
    let [counted, hidden] = both;
    (teams, counted, hidden)
}

/// Redis holds what the model says, and every read answers it.
pub async fn equal_the_model(conn: &mut redis::aio::MultiplexedConnection, w: &Worker, rules: &Rules, model: &Board) {
    let (teams, counted, hidden) = held(conn, rules.id).await;
    assert_eq!(counted, model.counted(false), "{}: the contributions", rules.id);
    assert_eq!(hidden, model.counted(true), "{}: the hidden players' contributions", rules.id);
    assert_eq!(teams, model.teams(rules), "{}: the teams' scores", rules.id);
    reads_equal_the_model(w, rules, model).await;
}
