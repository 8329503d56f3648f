//! Connections to Redis: one multiplexed connection to a single node or a
//! cluster, usable as either, and per-node connections for the few
//! commands a cluster answers per node (`SCAN`).

use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisFuture, Value};

use super::StoreError;
use crate::config::RedisSettings;

/// A connection to a single Redis or to a cluster, usable as either.
#[derive(Clone)]
pub enum RedisConn {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

impl RedisConn {
    /// Connects with short timeouts: callers retry with their own backoff,
    /// and redis-rs reconnects in the background after a failure.
    pub async fn connect(settings: &RedisSettings) -> Result<RedisConn, StoreError> {
        if settings.cluster {
            let client = redis::cluster::ClusterClient::builder(vec![settings.url.as_str()])
                .connection_timeout(Duration::from_secs(2))
                .response_timeout(Duration::from_secs(10))
                .retries(3)
                .build()
                .map_err(StoreError::Connect)?;
            let conn = client.get_async_connection().await.map_err(StoreError::Connect)?;
            Ok(RedisConn::Cluster(conn))
        } else {
            let client = redis::Client::open(settings.url.as_str()).map_err(StoreError::Connect)?;
            let config = ConnectionManagerConfig::new()
                .set_connection_timeout(Some(Duration::from_secs(2)))
                .set_response_timeout(Some(Duration::from_secs(10)))
                .set_number_of_retries(1)
                .set_max_delay(Duration::from_secs(1));
            let conn = ConnectionManager::new_with_config(client, config).await.map_err(StoreError::Connect)?;
            Ok(RedisConn::Single(conn))
        }
    }
}

impl ConnectionLike for RedisConn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            RedisConn::Single(c) => c.req_packed_command(cmd),
            RedisConn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            RedisConn::Single(c) => c.req_packed_commands(cmd, offset, count),
            RedisConn::Cluster(c) => c.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            RedisConn::Single(c) => c.get_db(),
            RedisConn::Cluster(c) => c.get_db(),
        }
    }
}

/// The connections replica reads go to (`redis.read_from = "replica"`),
/// each answering within `timeout`: one per `redis.replica_urls` for a
/// single Redis, made lazily so that a replica down at start only sends
/// reads to the primary; for a cluster, one connection that routes each
/// read to a replica of the key's node (`READONLY`, sent by redis-rs).
/// `None` when reads go to the primary.
pub async fn replica_connections(
    settings: &RedisSettings,
    timeout: Duration,
) -> Result<Option<std::sync::Arc<super::reads::Replicas>>, StoreError> {
    if settings.read_from != crate::config::ReadFrom::Replica {
        return Ok(None);
    }
    let conns = if settings.cluster {
        vec![cluster_replica_reads(settings, timeout).await?]
    } else {
        let mut conns = Vec::new();
        for url in &settings.replica_urls {
            let client = redis::Client::open(url.as_str()).map_err(StoreError::Connect)?;
            let config = ConnectionManagerConfig::new()
                .set_connection_timeout(Some(Duration::from_secs(1)))
                .set_response_timeout(Some(timeout))
                .set_number_of_retries(1)
                .set_max_delay(Duration::from_secs(1));
            conns.push(RedisConn::Single(
                ConnectionManager::new_lazy_with_config(client, config).map_err(StoreError::Connect)?,
            ));
        }
        conns
    };
    Ok(Some(std::sync::Arc::new(super::reads::Replicas::new(conns))))
}

/// A cluster connection that routes reads to replicas. redis-rs learns a
/// cluster's replicas when it connects, and a replica appears in `CLUSTER
/// SLOTS` only once it has data: [`refresh_replicas`] connects again.
async fn cluster_replica_reads(settings: &RedisSettings, timeout: Duration) -> Result<RedisConn, StoreError> {
    let client = redis::cluster::ClusterClient::builder(vec![settings.url.as_str()])
        .read_routing_strategy(redis::cluster_read_routing::RoundRobinReplicaStrategy::default())
        .connection_timeout(Duration::from_secs(2))
        .response_timeout(timeout)
        .retries(1)
        .build()
        .map_err(StoreError::Connect)?;
    Ok(RedisConn::Cluster(client.get_async_connection().await.map_err(StoreError::Connect)?))
}

/// How often a cluster's replica reads learn its replicas again (new ones,
/// failovers).
pub const REPLICA_REFRESH: Duration = Duration::from_secs(10);

/// Every [`REPLICA_REFRESH`], until `cancel`: a cluster's replica-read
/// connection made again, so that replicas added (or that received their
/// first data) since are read from.
pub async fn refresh_replicas(
    settings: RedisSettings,
    replicas: std::sync::Arc<super::reads::Replicas>,
    timeout: Duration,
    cancel: tokio_util::sync::CancellationToken,
) {
    if !settings.cluster {
        return;
    }
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(REPLICA_REFRESH) => {}
        }
        match cluster_replica_reads(&settings, timeout).await {
            Ok(conn) => replicas.replace(vec![conn]),
            Err(e) => tracing::debug!(error = %e, "Connecting for replica reads failed; the last connection stays."),
        }
    }
}

/// One connection to each Redis node that holds data: the server, or every
/// primary of a cluster (for scans, which a cluster answers per node).
pub async fn node_connections(settings: &RedisSettings) -> Result<Vec<redis::aio::MultiplexedConnection>, String> {
    let client = redis::Client::open(settings.url.as_str()).map_err(|e| format!("redis url: {e}"))?;
    let mut seed = client.get_multiplexed_async_connection().await.map_err(|e| format!("connect to Redis: {e}"))?;
    if !settings.cluster {
        return Ok(vec![seed]);
    }
    let nodes: String =
        redis::cmd("CLUSTER").arg("NODES").query_async(&mut seed).await.map_err(|e| format!("CLUSTER NODES: {e}"))?;
    let mut out = Vec::new();
    for line in nodes.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.len() < 3 || !fields[2].contains("master") || fields[2].contains("fail") {
            continue;
        }
        let addr = fields[1].split('@').next().unwrap_or_default();
        let (host, port) = addr.rsplit_once(':').ok_or_else(|| format!("bad node address {addr}"))?;
        let port: u16 = port.parse().map_err(|_| format!("bad node address {addr}"))?;
        let info = client.get_connection_info().clone().set_addr(redis::ConnectionAddr::Tcp(host.to_string(), port));
        let c = redis::Client::open(info).map_err(|e| e.to_string())?;
        out.push(c.get_multiplexed_async_connection().await.map_err(|e| format!("connect to {addr}: {e}"))?);
    }
    Ok(out)
}

/// Every key matching `pattern` on every node.
pub async fn scan_keys(settings: &RedisSettings, pattern: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for mut conn in node_connections(settings).await? {
        let mut cursor: u64 = 0;
        loop {
            let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(pattern)
                .arg("COUNT")
                .arg(1000)
                .query_async(&mut conn)
                .await
                .map_err(|e| format!("SCAN: {e}"))?;
            out.extend(keys);
            if next == 0 {
                break;
            }
            cursor = next;
        }
    }
    Ok(out)
}
