//! Connections to Redis: one multiplexed connection to a single node or a
//! cluster, usable as either, and per-node connections for the few
//! commands a cluster answers per node (`SCAN`).
//!
//! Every client is made by [`client`] or [`cluster_builder`], so every
//! connection (primary, replicas, cluster nodes, scans) sends
//! `redis.password` and speaks TLS with `[redis.tls]`'s certificates where
//! its URL is `rediss://`.

use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, ConnectionAddr, ConnectionInfo, IntoConnectionInfo, Pipeline, RedisFuture, RedisResult, Value};

use crate::config::secrets::RedisTls;
use crate::config::RedisSettings;
use crate::store::StoreError;

/// `url` with `redis.password` (when set; the URL's own otherwise).
fn connection_info(settings: &RedisSettings, url: &str) -> RedisResult<ConnectionInfo> {
    let info = url.into_connection_info()?;
    Ok(match &settings.password {
        Some(password) => {
            let with = info.redis_settings().clone().set_password(password.expose());
            info.set_redis_settings(with)
        }
        None => info,
    })
}

/// The certificates `[redis.tls]` names, as redis-rs takes them (the
/// system's roots where no CA file is given).
fn certificates(tls: &RedisTls) -> redis::TlsCertificates {
    redis::TlsCertificates {
        client_tls: tls
            .client
            .as_ref()
            .map(|(cert, key)| redis::ClientTlsConfig { client_cert: cert.clone(), client_key: key.clone() }),
        root_cert: tls.ca.clone(),
    }
}

/// A client of the one node `info` names, with TLS as [`client`] says.
fn client_of(settings: &RedisSettings, info: ConnectionInfo) -> RedisResult<redis::Client> {
    match (&settings.tls, info.addr()) {
        (Some(tls), ConnectionAddr::TcpTls { .. }) => redis::Client::build_with_tls(info, certificates(tls)),
        _ => redis::Client::open(info),
    }
}

/// A client of the single node at `url` (the primary or a replica).
pub fn client(settings: &RedisSettings, url: &str) -> RedisResult<redis::Client> {
    client_of(settings, connection_info(settings, url)?)
}

/// A cluster client seeded from `redis.url`: its user and password, and
/// with a `rediss://` URL TLS to every node it finds.
pub fn cluster_builder(settings: &RedisSettings) -> RedisResult<ClusterClientBuilder> {
    let info = connection_info(settings, &settings.url)?;
    let tls = matches!(info.addr(), ConnectionAddr::TcpTls { .. });
    let builder = redis::cluster::ClusterClient::builder(vec![info]);
    Ok(match &settings.tls {
        Some(t) if tls => builder.certs(certificates(t)),
        _ => builder,
    })
}

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
            let client = cluster_builder(settings)
                .map_err(StoreError::Connect)?
                .connection_timeout(Duration::from_secs(2))
                .response_timeout(Duration::from_secs(10))
                .retries(3)
                .build()
                .map_err(StoreError::Connect)?;
            let conn = client.get_async_connection().await.map_err(StoreError::Connect)?;
            Ok(RedisConn::Cluster(conn))
        } else {
            let client = client(settings, &settings.url).map_err(StoreError::Connect)?;
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
) -> Result<Option<std::sync::Arc<crate::store::read::reads::Replicas>>, StoreError> {
    if settings.read_from != crate::config::ReadFrom::Replica {
        return Ok(None);
    }
    let conns = if settings.cluster {
        vec![cluster_replica_reads(settings, timeout).await?]
    } else {
        let mut conns = Vec::new();
        for url in &settings.replica_urls {
            let client = client(settings, url).map_err(StoreError::Connect)?;
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
    Ok(Some(std::sync::Arc::new(crate::store::read::reads::Replicas::new(conns))))
}

/// A cluster connection that routes reads to replicas. redis-rs learns a
/// cluster's replicas when it connects, and a replica appears in `CLUSTER
/// SLOTS` only once it has data: [`refresh_replicas`] connects again.
async fn cluster_replica_reads(settings: &RedisSettings, timeout: Duration) -> Result<RedisConn, StoreError> {
    let client = cluster_builder(settings)
        .map_err(StoreError::Connect)?
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
    replicas: std::sync::Arc<crate::store::read::reads::Replicas>,
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
    let client = client(settings, &settings.url).map_err(|e| format!("redis url: {e}"))?;
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
        let node = match client.get_connection_info().addr() {
            ConnectionAddr::TcpTls { insecure, .. } => {
                ConnectionAddr::TcpTls { host: host.to_string(), port, insecure: *insecure, tls_params: None }
            }
            _ => ConnectionAddr::Tcp(host.to_string(), port),
        };
        let c = client_of(settings, client.get_connection_info().clone().set_addr(node)).map_err(|e| e.to_string())?;
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
