//! Team boards through the real worker, Apache Kafka and Redis, against a
//! model: players joining, leaving, switching teams and re-joining while
//! they score, on a `sum` board that keeps a leaver's contributions (and
//! counts a joiner's scores an hour after the join), a `best` board and a
//! `sum` board that forfeit them, over 4 partitions with producer retries
//! of every kind of event and a kill -9 mid-stream. Every team's score and
//! every member's contribution in every period equal the model's, in Redis
//! and through the reads, and so do they after an erasure and a rebuild.

use serde_json::json;
use support::teams::*;
use support::*;

const PARTITIONS: i32 = 4;

#[tokio::test(flavor = "multi_thread")]
async fn team_boards_equal_the_model_through_switches_leaves_retries_and_a_kill() {
    let stack = Stack::start(PARTITIONS).await;
    let admin = stack.admin_topic().await;
    let mut cfg = WorkerConfig::new(&stack.broker, &stack.redis, &stack.topic, &stack.dlq, BOARDS);
    cfg.admin_topics = vec![admin.clone()];
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
    let mut models: Vec<Board> = RULES.iter().map(|_| Board::default()).collect();
    for (model, rules) in models.iter_mut().zip(&RULES) {
        events.iter().for_each(|ev| model.apply(rules, ev));
        let periods = model.teams(rules).len();
        assert!(periods >= if rules.daily { 3 } else { 1 }, "{}: {periods} periods", rules.id);
        equal_the_model(&mut conn, &w, rules, model).await;
    }
    let dead = stack.broker.read_all(&stack.dlq, 1);
    assert_eq!(dead.len(), 1, "{}", w.log());
    assert_eq!(header(&dead[0], "rankflow.reason").as_deref(), Some("invalid_team_id"));

    // An erasure forgets a member's contributions and team on every board.
    let erased = models[0].members.keys().next().expect("a member").clone();
    let erase = json!({"event_id": uuid::Uuid::new_v4().to_string(), "type": "player_erased", "player_id": erased});
    stack.broker.produce(&admin, &[admin_record(erase)]).await;
    stack.broker.wait_committed_to_end(&cfg.group, &admin, 1, std::time::Duration::from_secs(60));
    for (model, rules) in models.iter_mut().zip(&RULES) {
        model.erase(&erased);
        equal_the_model(&mut conn, &w, rules, model).await;
    }
    // A rebuild from the topics reproduces every board (the erasure is an
    // admin event it reads too), whatever a bad manual edit left.
    let key = |suffix: &str| format!("lb:{{clans}}:{suffix}");
    let fields: Vec<String> = redis::cmd("HKEYS").arg(key("_tc:all")).query_async(&mut conn).await.unwrap();
    let sets: Vec<String> = redis::cmd("KEYS").arg(key("_tt:all:*")).query_async(&mut conn).await.unwrap();
    let member = models[0].members.keys().last().unwrap().clone();
    let mut edit = redis::pipe();
    edit.cmd("HDEL").arg(key("_tc:all")).arg(&fields[0]).cmd("UNLINK").arg(&sets[0]);
    edit.cmd("ZADD").arg(key("all")).arg(5).arg("bogus").cmd("HDEL").arg(key("_tm")).arg(&member);
    let () = edit.query_async(&mut conn).await.unwrap();
    let out = run_rankflow(&["rebuild"], &w.config_path).await;
    assert!(out.status.success(), "rebuild: {}", String::from_utf8_lossy(&out.stderr));
    for (model, rules) in models.iter().zip(&RULES) {
        equal_the_model(&mut conn, &w, rules, model).await;
    }
    let leftovers: Vec<String> = redis::cmd("KEYS").arg("_rebuild:*").query_async(&mut conn).await.unwrap();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}
