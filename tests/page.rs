//! The leaderboard page (`GET /`) in a real headless browser (Debian's
//! Chromium, installed by `scripts/setup.sh --test`), against a worker that
//! consumed real events: the top with ranks, scores and metadata, the
//! cursor to the next page, a player found with their ranks and the players
//! around them, a board ranked by several columns showing each column and
//! the players' display names, on a
//! league board the player's cohort with its zones, and
//! the first page following the live top (a score produced while the page
//! is open tops it, through the stream).
//! A screenshot is left under the target directory
//! (`page/leaderboard.png`) for a person to look at.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::json;
use support::browser::{cells, chromium, Browser};
use support::*;

const BOARDS: &str = r#"
[[board]]
id = "best"
on = ["match"]
mode = "best"
periods = ["all_time", "daily"]
meta = true

[[board]]
id = "arena"
on = ["match"]
columns = [{ name = "wins", mode = "sum" }, { name = "time_ms", mode = "min", order = "asc" }]
periods = ["all_time"]
meta = true

[[board]]
id = "laps"
on = ["lap"]
mode = "best"
order = "asc"
periods = ["all_time"]
split_by = "track"

[[board]]
id = "clans"
on = ["match"]
mode = "sum"
periods = ["all_time"]
team = { leave = "keep" }

[[board]]
id = "lg"
on = ["match"]
mode = "sum"
periods = ["all_time"]
schedules = [{ name = "round", cron = "0 * * * *", duration = "1h" }]
close_after = "2h"
[board.league]
rounds = "round"
tiers = ["bronze", "silver"]
cohort_size = 4
promote = 1
demote = 1
"#;

/// A board ranked by several columns: each column's value, in column
/// order, in the top, the player's standing and around them.
fn columns_board_shows_each_column(port: u16, profile: &std::path::Path, players: &[String]) {
    let url = format!("http://127.0.0.1:{port}/?board=arena&rank=competition&player=p07&live=0");
    let out = chromium(profile, &["--virtual-time-budget=20000", "--dump-dom", &url]);
    let dom = String::from_utf8_lossy(&out.stdout).to_string();
    assert_eq!(cells(&dom, "top", "player"), players);
    assert_eq!(cells(&dom, "top", "score")[4], "wins 4 \u{b7} time_ms 54000");
    assert_eq!(cells(&dom, "top", "meta")[4], "name: Player 4", "display names beside the rows");
    for (field, value) in
        [("ordinal", "8"), ("competition", "8"), ("score", "wins 3 \u{b7} time_ms 57000"), ("meta", "name: Player 7")]
    {
        assert!(dom.contains(&format!("<dd id=\"me-{field}\">{value}</dd>")), "{field} {value} not shown:\n{dom}");
    }
    assert_eq!(cells(&dom, "around", "player"), ["p05", "p06", "p07", "p08", "p09"]);
    assert_eq!(cells(&dom, "around", "meta")[0], "name: Player 5");
}

/// On clans, p00 .. p14 are in red, green and blue by turns (joined before they score).
fn team_joins(now: i64) -> Vec<Record> {
    let teams = ["red", "green", "blue"];
    (0..15)
        .map(|i| {
            let v = json!({"event_id": uuid::Uuid::new_v4().to_string(), "type": "team_joined", "player_id": format!("p{i:02}"),
                           "team_id": teams[i % 3], "ts": now - 2000});
            (format!("p{i:02}"), v.to_string().into_bytes(), Some(now))
        })
        .collect()
}

/// A team board: its teams with their members in the top, and a player's
/// team, its standing, their contribution and the team's members.
fn team_board_shows_teams_and_members(port: u16, profile: &std::path::Path) {
    let url = format!("http://127.0.0.1:{port}/?board=clans&player=p04&live=0");
    let out = chromium(profile, &["--virtual-time-budget=20000", "--dump-dom", &url]);
    let dom = String::from_utf8_lossy(&out.stdout).to_string();
    // p00 .. p14 in three teams by i % 3: red holds 1000 + 970 + ... (5 members).
    assert_eq!(cells(&dom, "top", "player"), ["red", "green", "blue"], "{dom}");
    assert_eq!(cells(&dom, "top", "score")[0], "4700 \u{b7} 5 members");
    for (field, value) in [("team", "green"), ("team rank", "2"), ("team score", "4650"), ("contribution", "960")] {
        assert!(dom.contains(&format!("<dd id=\"me-{field}\">{value}</dd>")), "{field} {value} not shown:\n{dom}");
    }
    assert_eq!(cells(&dom, "around", "player"), ["p01", "p04", "p07", "p10", "p13"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_page_shows_the_top_a_player_and_their_neighbours_in_a_real_browser() {
    let stack = Stack::start(1).await;
    let now = chrono::Utc::now().timestamp_millis();
    // p00 .. p14 with scores 1000, 990, ... and a display name each.
    let records: Vec<_> = (0..15)
        .map(|i| {
            // On arena, p00 .. p14 tie on wins by threes and rank by time within.
            let scores = json!({ "wins": 5 - i / 3, "time_ms": 50_000 + 1000 * i });
            let v = json!({"event_id": uuid::Uuid::new_v4().to_string(), "type": "match", "player_id": format!("p{i:02}"),
                           "score": 1000 - 10 * i, "scores": scores, "ts": now - 1000, "meta": { "name": format!("Player {i}") }});
            (format!("p{i:02}"), v.to_string().into_bytes(), Some(now))
        })
        .collect();
    stack.broker.produce(&stack.topic, &team_joins(now)).await;
    stack.broker.produce(&stack.topic, &records).await;
    let cfg = WorkerConfig::new(&stack.broker, &stack.redis, &stack.topic, &stack.dlq, BOARDS);
    let w = Worker::spawn(&cfg);
    stack.broker.wait_committed_to_end(&cfg.group, &stack.topic, 1, Duration::from_secs(60));
    wait_http(w.http_port, Duration::from_secs(10)).await;

    let (status, html) = w.http_get("/").await;
    assert_eq!(status, 200);
    assert!(html.contains("<title>rankflow leaderboards</title>"));

    let profile = temp_dir();
    let url =
        format!("http://127.0.0.1:{}/?board=best&period=all_time&rank=competition&player=p07&live=0", w.http_port);
    let out = chromium(profile.path(), &["--virtual-time-budget=20000", "--dump-dom", &url]);
    let dom = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        dom.contains("data-ready=\"1\""),
        "the page did not finish loading:\n{dom}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // The top: ten rows in board order, with ranks, scores and metadata.
    let players: Vec<String> = (0..10).map(|i| format!("p{i:02}")).collect();
    assert_eq!(cells(&dom, "top", "player"), players);
    assert_eq!(cells(&dom, "top", "rank"), (1..=10).map(|r| r.to_string()).collect::<Vec<_>>());
    assert_eq!(cells(&dom, "top", "score")[0], "1000");
    assert_eq!(cells(&dom, "top", "meta")[3], "name: Player 3");
    assert!(dom.contains("all \u{b7} 15 players"), "{dom}");
    // A board without splits asks for none.
    assert!(dom.contains("<label id=\"split-label\" hidden=\"\">"), "{dom}");
    // A next page follows (the cursor button is enabled), no previous one.
    assert!(dom.contains("<button id=\"next\">") && dom.contains("<button id=\"prev\" disabled=\"\">"), "{dom}");
    // The player found: their ranks and the four around them, themselves marked.
    for (field, value) in
        [("ordinal", "8"), ("competition", "8"), ("dense", "8"), ("score", "930"), ("meta", "name: Player 7")]
    {
        assert!(dom.contains(&format!("<dd id=\"me-{field}\">{value}</dd>")), "{field} {value} not shown:\n{dom}");
    }
    assert_eq!(cells(&dom, "around", "player"), ["p05", "p06", "p07", "p08", "p09"]);
    assert!(dom.contains("<tr class=\"you\"><td class=\"rank\">8</td><td class=\"player\">p07</td>"), "{dom}");

    columns_board_shows_each_column(w.http_port, profile.path(), &players);
    team_board_shows_teams_and_members(w.http_port, profile.path());

    // A split board without its split says what is missing, rather than showing nothing.
    let url = format!("http://127.0.0.1:{}/?board=laps&live=0", w.http_port);
    let out = chromium(profile.path(), &["--virtual-time-budget=20000", "--dump-dom", &url]);
    let dom = String::from_utf8_lossy(&out.stdout);
    assert!(dom.contains("class=\"error\"") && dom.contains("name a split"), "{dom}");

    // A league board's round: the player's cohort (arrival order p04..p07) with its zones.
    let url = format!("http://127.0.0.1:{}/?board=lg&period=round&player=p07&live=0", w.http_port);
    let out = chromium(profile.path(), &["--virtual-time-budget=20000", "--dump-dom", &url]);
    let dom = String::from_utf8_lossy(&out.stdout);
    assert!(dom.contains("<h2 id=\"cohort-title\">Cohort bronze-2</h2>"), "{dom}");
    assert_eq!(cells(&dom, "cohort", "player"), ["p04", "p05", "p06", "p07"]);
    assert_eq!(cells(&dom, "cohort", "zone zone-promote"), ["promote"], "the top of a cohort moves up");
    assert_eq!(cells(&dom, "cohort", "zone zone-stay").len(), 3, "the lowest tier keeps its bottom");

    // The first page follows the live top: a score produced while the page
    // is open tops it within seconds, through the stream (the page draws
    // its first page once from a top read, then from the stream's events,
    // which it counts).
    let live_profile = temp_dir();
    let url = format!("http://127.0.0.1:{}/?board=best&period=all_time", w.http_port);
    let show = "document.querySelector('#top tbody').textContent + ' / tops: ' + document.body.dataset.liveTops";
    tokio::task::block_in_place(|| {
        let mut page = Browser::open(live_profile.path(), &url);
        page.wait_until(
            "document.querySelector('#top td.player')?.textContent === 'p00' \
             && Number(document.body.dataset.liveTops || 0) >= 1",
            show,
            Duration::from_secs(30),
        );
        let before = page.eval("Number(document.body.dataset.liveTops || 0)").as_i64().unwrap_or(0);
        let v = json!({"event_id": uuid::Uuid::new_v4().to_string(), "type": "match", "player_id": "p99",
                       "score": 5000, "ts": now, "meta": { "name": "Newcomer" }});
        let record = ("p99".to_string(), v.to_string().into_bytes(), Some(now));
        tokio::runtime::Handle::current().block_on(stack.broker.produce(&stack.topic, &[record]));
        page.wait_until(
            "document.querySelector('#top td.player')?.textContent === 'p99'",
            show,
            Duration::from_secs(20),
        );
        assert_eq!(page.eval("document.querySelector('#top-sub').textContent"), json!("all \u{b7} 16 players"));
        let after = page.eval("Number(document.body.dataset.liveTops || 0)").as_i64().unwrap_or(0);
        assert!(after > before, "the top changed without a live event: {}", page.eval(show));
    });

    // A screenshot for a person to look at.
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("page");
    std::fs::create_dir_all(&dir).unwrap();
    let shot = dir.join("leaderboard.png");
    let _ = std::fs::remove_file(&shot);
    let url = format!("http://127.0.0.1:{}/?board=best&player=p07&live=0", w.http_port);
    let out = chromium(
        profile.path(),
        &["--virtual-time-budget=20000", "--window-size=1280,800", &format!("--screenshot={}", shot.display()), &url],
    );
    let size = std::fs::metadata(&shot).map(|m| m.len()).unwrap_or(0);
    assert!(size > 10_000, "no screenshot ({size} bytes): {}", String::from_utf8_lossy(&out.stderr));
}
