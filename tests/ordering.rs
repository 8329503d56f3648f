//! The assumptions the write order rests on (see `store/write/writer.rs`), each
//! held by a test that fails when it breaks: here, that redis-rs queues a
//! command on the connection the first time its future is polled, so a
//! command polled once is ahead of every command queued after it, on the
//! connection types the store uses (a `ConnectionManager` on one Redis, a
//! cluster connection on a cluster).

use futures::FutureExt;
use support::{Redis, RedisCluster};

/// Polls `SET key first` once, then runs `GET key` to its end on a clone of
/// the same connection: the GET sees the SET only if the first poll queued it.
async fn first_poll_queues<C>(conn: C, key: &str) -> Option<String>
where
    C: redis::aio::ConnectionLike + Clone + Send + 'static,
{
    let (mut a, mut b) = (conn.clone(), conn);
    let mut set = Box::pin({
        let key = key.to_string();
        async move { redis::cmd("SET").arg(key).arg("first").query_async::<()>(&mut a).await }
    });
    let polled = set.as_mut().now_or_never();
    let got: Option<String> = redis::cmd("GET").arg(key).query_async(&mut b).await.unwrap();
    if polled.is_none() {
        set.await.unwrap();
    }
    got
}

#[tokio::test]
async fn redis_rs_queues_a_command_on_its_first_poll() {
    let redis = Redis::start();
    let client = redis::Client::open(redis.url()).unwrap();
    let conn = redis::aio::ConnectionManager::new(client).await.unwrap();
    for i in 0..50 {
        let key = format!("order:{i}");
        assert_eq!(first_poll_queues(conn.clone(), &key).await.as_deref(), Some("first"), "{key}");
    }
}

#[tokio::test]
async fn redis_rs_queues_a_command_on_its_first_poll_on_a_cluster() {
    let cluster = RedisCluster::start(3);
    let client = redis::cluster::ClusterClient::new(cluster.urls()).unwrap();
    let conn = client.get_async_connection().await.unwrap();
    for i in 0..50 {
        let key = format!("order:{{t{i}}}");
        assert_eq!(first_poll_queues(conn.clone(), &key).await.as_deref(), Some("first"), "{key}");
    }
}
