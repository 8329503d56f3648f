//! `redis-server` processes of our own: a single server, and a local Redis
//! Cluster with replicas that a test can fail over.

use std::collections::HashMap;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use std::sync::Arc;

use super::keys::board_keys;
use super::tls::{Pki, REDIS_ADMIN, REDIS_ADMIN_PASSWORD, REDIS_USER};
use super::{end, free_port, log_tail, start_retrying, temp_dir, wait_listening};

/// A `redis-server` of our own.
pub struct Redis {
    child: Option<Child>,
    pub port: u16,
    dir: tempfile::TempDir,
    extra: Vec<String>,
    /// The port was given ([`Redis::start_on`]): never move to another.
    fixed_port: bool,
    /// Reached only over mutual TLS, with ACL users ([`Redis::start_secured`]).
    pki: Option<Arc<Pki>>,
}

impl Redis {
    pub fn start() -> Redis {
        Redis::start_with(&[])
    }

    /// Freezes the server (SIGSTOP): connections stay open, nothing is answered.
    pub fn pause(&self) {
        self.signal("-STOP");
    }

    /// Thaws a server [`Redis::pause`] froze.
    pub fn resume(&self) {
        self.signal("-CONT");
    }

    fn signal(&self, sig: &str) {
        if let Some(c) = &self.child {
            let _ = Command::new("kill").args([sig, &c.id().to_string()]).status();
        }
    }

    /// A Redis on `port`, for a test that points a worker at the port first.
    pub fn start_on(port: u16) -> Redis {
        let mut r = Redis { child: None, port, dir: temp_dir(), extra: Vec::new(), fixed_port: true, pki: None };
        r.spawn();
        r
    }

    /// Extra `redis-server` arguments, e.g. `["--appendonly", "yes"]`.
    pub fn start_with(extra: &[&str]) -> Redis {
        Redis::start_secured_with(None, extra)
    }

    /// A Redis reached only over TLS with a client certificate signed by
    /// `pki`'s CA, whose default user is off: the harness connects as its
    /// admin user, a worker as the restricted `rankflow` user (see `tls`).
    pub fn start_secured(pki: Arc<Pki>) -> Redis {
        Redis::start_secured_with(Some(pki), &[])
    }

    fn start_secured_with(pki: Option<Arc<Pki>>, extra: &[&str]) -> Redis {
        let extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        let mut r = Redis { child: None, port: pick_port(&extra), dir: temp_dir(), extra, fixed_port: false, pki };
        r.spawn();
        r
    }

    /// Starts the server, and if it exits before it listens (its port, or
    /// a cluster node's bus port at port + 10000, taken by another process
    /// between our pick and its bind), starts it again: on a new port when
    /// the port was ours to pick, on the same one otherwise.
    fn spawn(&mut self) {
        let started = start_retrying("redis-server", 5, |n| {
            if n > 1 && !self.fixed_port {
                self.port = pick_port(&self.extra);
                // A cluster node's config names the port it had.
                let _ = std::fs::remove_file(self.dir.path().join("nodes.conf"));
            }
            self.try_spawn()
        });
        if let Err(why) = started {
            panic!("redis-server: {why}\n{}", log_tail(&self.dir.path().join("redis.log"), 10));
        }
    }

    fn try_spawn(&mut self) -> Result<(), String> {
        let listen = match &self.pki {
            Some(pki) => pki.redis_server_args(self.port),
            None => vec!["--port".into(), self.port.to_string()],
        };
        let child = Command::new("redis-server")
            .args(listen)
            .args(["--bind", "127.0.0.1", "--save", "", "--protected-mode", "no"])
            .args(["--maxmemory-policy", "noeviction", "--dir"])
            .arg(self.dir.path())
            .arg("--logfile")
            .arg(self.dir.path().join("redis.log"))
            .args(&self.extra)
            .stdout(Stdio::null())
            .spawn()
            .expect("redis-server is installed (scripts/setup.sh)");
        self.child = Some(child);
        wait_listening(&mut self.child, self.port, Duration::from_secs(10))
    }

    pub fn url(&self) -> String {
        match self.pki {
            Some(_) => format!("rediss://127.0.0.1:{}", self.port),
            None => format!("redis://127.0.0.1:{}", self.port),
        }
    }

    /// The URL a worker is given: on a secured Redis, as the restricted
    /// user (its password given apart, see `Pki::redis_worker_section`).
    pub fn worker_url(&self) -> String {
        match self.pki {
            Some(_) => format!("rediss://{REDIS_USER}@127.0.0.1:{}", self.port),
            None => self.url(),
        }
    }

    /// `redis-cli` arguments that reach this server as the harness (TLS,
    /// the admin user, on a secured one).
    pub fn cli_args(&self) -> Vec<String> {
        let mut args = self.pki.as_ref().map(|p| p.redis_cli_args()).unwrap_or_default();
        args.extend(["-p".to_string(), self.port.to_string()]);
        args
    }

    /// A client of this server as the harness (on a secured one: TLS with
    /// the client certificate, as the admin user).
    pub fn client(&self) -> redis::Client {
        match &self.pki {
            Some(pki) => {
                let url = format!("rediss://{REDIS_ADMIN}:{REDIS_ADMIN_PASSWORD}@127.0.0.1:{}", self.port);
                redis::Client::build_with_tls(url, pki.redis_certificates()).unwrap()
            }
            None => redis::Client::open(self.url()).unwrap(),
        }
    }

    pub async fn conn(&self) -> redis::aio::MultiplexedConnection {
        // Checks read every key of a loaded server: no response timeout.
        let config = redis::AsyncConnectionConfig::new().set_response_timeout(None);
        self.client().get_multiplexed_async_connection_with_config(&config).await.expect("connect to test redis")
    }

    pub fn stop(&mut self) {
        end(&mut self.child);
    }

    /// Starts the server again on the same port (workers point at it).
    pub fn restart(&mut self) {
        self.stop();
        self.fixed_port = true;
        self.spawn();
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A free port; for a cluster node, one whose bus port (port + 10000) is
/// free too.
fn pick_port(extra: &[String]) -> u16 {
    let cluster = extra.iter().any(|a| a == "--cluster-enabled");
    loop {
        let port = free_port();
        if !cluster || std::net::TcpListener::bind(("127.0.0.1", port + 10000)).is_ok() {
            return port;
        }
    }
}

/// What one [`RedisCluster::fail_over`] did.
#[derive(Debug)]
pub struct Failover {
    /// From the kill to a replica serving the slot with the cluster ok.
    pub outage: Duration,
    /// Replication-stream bytes the dead primary had that its replica had
    /// not acknowledged at the kill (> 0: the failover lost writes that
    /// were not waited for).
    pub unreplicated_bytes: i64,
}

/// A local Redis Cluster of `redis-server` processes, joined with
/// `redis-cli --cluster create` (with replicas: `--cluster-replicas`, and a
/// short `cluster-node-timeout`, so that a dead primary's replica takes over
/// within about two seconds).
pub struct RedisCluster {
    nodes: Vec<Redis>,
}

impl RedisCluster {
    pub fn start(masters: usize) -> RedisCluster {
        RedisCluster::start_with_replicas(masters, 0)
    }

    pub fn start_with_replicas(masters: usize, replicas: usize) -> RedisCluster {
        RedisCluster::start_secured(masters, replicas, None)
    }

    /// A cluster whose nodes are [`Redis::start_secured`] (TLS between
    /// peers and replicas too) when `pki` is given.
    pub fn start_secured(masters: usize, replicas: usize, pki: Option<Arc<Pki>>) -> RedisCluster {
        let nodes: Vec<Redis> = (0..masters * (1 + replicas))
            .map(|_| {
                Redis::start_secured_with(
                    pki.clone(),
                    &[
                        "--cluster-enabled",
                        "yes",
                        "--cluster-config-file",
                        "nodes.conf",
                        "--cluster-node-timeout",
                        "1000",
                        "--appendonly",
                        "no",
                    ],
                )
            })
            .collect();
        let addrs: Vec<String> = nodes.iter().map(|n| format!("127.0.0.1:{}", n.port)).collect();
        let out = Command::new("redis-cli")
            .args(pki.as_ref().map(|p| p.redis_cli_args()).unwrap_or_default())
            .arg("--cluster")
            .arg("create")
            .args(&addrs)
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .output()
            .expect("redis-cli is installed (scripts/setup.sh)");
        assert!(out.status.success(), "cluster create: {}", String::from_utf8_lossy(&out.stdout));
        let cluster = RedisCluster { nodes };
        cluster.wait_ok();
        if replicas > 0 {
            for i in 0..cluster.nodes.len() {
                if cluster.role(i).as_deref() == Some("slave") {
                    cluster.wait_replica_synced(i);
                }
            }
        }
        cluster
    }

    fn cli(&self, node: usize, args: &[&str]) -> Option<String> {
        let out = Command::new("redis-cli").args(self.nodes[node].cli_args()).args(args).output().ok()?;
        out.status.success().then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    }

    fn alive(&self, node: usize) -> bool {
        self.nodes[node].child.is_some()
    }

    /// `master` or `slave`, as the node says (`None`: not answering).
    fn role(&self, node: usize) -> Option<String> {
        self.cli(node, &["ROLE"])?.lines().next().map(str::to_string).filter(|r| !r.is_empty())
    }

    /// Every live node reports `cluster_state:ok`.
    pub fn wait_ok(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        for n in (0..self.nodes.len()).filter(|&n| self.alive(n)) {
            while !self.cli(n, &["CLUSTER", "INFO"]).is_some_and(|i| i.contains("cluster_state:ok")) {
                assert!(Instant::now() < deadline, "the cluster did not reach state ok");
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }

    /// The node serving `key`'s slot, as the live nodes see it.
    pub fn master_of(&self, key: &str) -> usize {
        self.try_master_of(key).unwrap_or_else(|| panic!("no primary serves the slot of {key}"))
    }

    /// The node serving `key`'s slot; `None` while none does (a failover).
    fn try_master_of(&self, key: &str) -> Option<usize> {
        let any = (0..self.nodes.len()).find(|&n| self.alive(n)).expect("a live node");
        let slot: u16 = self.cli(any, &["CLUSTER", "KEYSLOT", key])?.trim().parse().ok()?;
        let nodes = self.cli(any, &["CLUSTER", "NODES"])?;
        for line in nodes.lines() {
            let f: Vec<&str> = line.split_whitespace().collect();
            if !f[2].contains("master") || f[2].contains("fail") {
                continue;
            }
            let serves = f[8..].iter().any(|range| match range.split_once('-') {
                Some((a, b)) => (a.parse::<u16>().unwrap()..=b.parse::<u16>().unwrap()).contains(&slot),
                None => range.parse::<u16>().ok() == Some(slot),
            });
            if serves {
                let port: u16 = f[1].split('@').next().unwrap().rsplit_once(':').unwrap().1.parse().unwrap();
                return self.nodes.iter().position(|n| n.port == port);
            }
        }
        None
    }

    /// `kill -9` of `key`'s primary; returns once its replica serves the
    /// slot and the cluster is ok again, then restarts the dead node (empty,
    /// it rejoins as the new primary's replica) and waits for it to sync.
    ///
    /// `lag`: that long before the kill, the replica is frozen (SIGSTOP)
    /// and the primary drops its link, as with a replica cut off by the
    /// network; it is thawed right after the kill. The primary's writes of
    /// that time are on no replica when it dies.
    pub fn fail_over(&mut self, key: &str, lag: Duration) -> Failover {
        let old = self.master_of(key);
        let port = self.nodes[old].port.to_string();
        let replica = (0..self.nodes.len())
            .filter(|&n| n != old && self.alive(n))
            .find_map(|n| {
                let role = self.cli(n, &["ROLE"])?;
                let f: Vec<&str> = role.lines().collect();
                (f.first() == Some(&"slave") && f.get(2) == Some(&port.as_str())).then_some(n)
            })
            .expect("the primary has a replica");
        // The replica's own offset, then (after the lag) the primary's: the
        // bytes between are the writes the replica lacks at the kill.
        let offset_of = |info: Option<String>, field: &str| -> i64 {
            info.unwrap_or_default()
                .lines()
                .find_map(|l| l.strip_prefix(field))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0)
        };
        let lagging = !lag.is_zero();
        if lagging {
            // Frozen, it cannot reconnect once the primary drops the link;
            // what the primary writes from then on reaches no replica.
            self.nodes[replica].pause();
            self.cli(old, &["CLIENT", "KILL", "TYPE", "replica"]).expect("drop the replica link");
            std::thread::sleep(lag);
        }
        let primary = offset_of(self.cli(old, &["INFO", "replication"]), "master_repl_offset:");
        let replica_at =
            (!lagging).then(|| offset_of(self.cli(replica, &["INFO", "replication"]), "slave_repl_offset:"));
        let started = Instant::now();
        self.nodes[old].stop();
        if lagging {
            self.nodes[replica].resume();
        }
        let replica_at =
            replica_at.unwrap_or_else(|| offset_of(self.cli(replica, &["INFO", "replication"]), "slave_repl_offset:"));
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            std::thread::sleep(Duration::from_millis(100));
            let any = (0..self.nodes.len()).find(|&n| self.alive(n)).unwrap();
            let ok = self.cli(any, &["CLUSTER", "INFO"]).is_some_and(|i| i.contains("cluster_state:ok"));
            if ok && self.try_master_of(key).is_some_and(|m| m != old) {
                break;
            }
            assert!(Instant::now() < deadline, "no replica took over within 30 s");
        }
        let outage = started.elapsed();
        self.nodes[old].restart();
        self.wait_ok();
        self.wait_replica_synced(old);
        Failover { outage, unreplicated_bytes: (primary - replica_at).max(0) }
    }

    /// Restarts node `node` without its data (no persistence): it comes
    /// back empty with its cluster identity and slots (`nodes.conf`), as a
    /// primary without a replica does after a crash. Returns once the
    /// cluster is ok again.
    pub fn restart_empty(&mut self, node: usize) {
        self.nodes[node].restart();
        self.wait_ok();
    }

    /// A connection to node `node` alone.
    pub async fn node_conn(&self, node: usize) -> redis::aio::MultiplexedConnection {
        self.nodes[node].conn().await
    }

    fn wait_replica_synced(&self, node: usize) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let info = self.cli(node, &["INFO", "replication"]).unwrap_or_default();
            if info.contains("role:slave") && info.contains("master_link_status:up") {
                return;
            }
            assert!(Instant::now() < deadline, "node {node} did not sync as a replica: {info}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// A seed node's URL.
    pub fn url(&self) -> String {
        self.nodes[0].url()
    }

    /// A seed node's URL for a worker (as the restricted user, on a secured cluster).
    pub fn worker_url(&self) -> String {
        self.nodes[0].worker_url()
    }

    /// The live nodes that are primaries.
    pub fn primaries(&self) -> Vec<usize> {
        (0..self.nodes.len()).filter(|&i| self.alive(i) && self.role(i).as_deref() == Some("master")).collect()
    }

    /// The live nodes that are replicas.
    pub fn replicas(&self) -> Vec<usize> {
        (0..self.nodes.len()).filter(|&i| self.alive(i) && self.role(i).as_deref() == Some("slave")).collect()
    }

    /// A number in node `node`'s `INFO section` line `field:...` (its
    /// `calls=` for a command's stats); 0 where absent.
    pub fn info_field(&self, node: usize, section: &str, field: &str) -> i64 {
        super::info_number(&self.cli(node, &["INFO", section]).unwrap_or_default(), field)
    }

    /// Every node's URL (a client seeds from all, so that any may be down).
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(Redis::url).collect()
    }

    /// The live primaries' URLs.
    pub fn primary_urls(&self) -> Vec<String> {
        (0..self.nodes.len())
            .filter(|&i| self.alive(i) && self.role(i).as_deref() == Some("master"))
            .map(|i| self.nodes[i].url())
            .collect()
    }

    /// Waits until every live replica has every write its primary has.
    pub fn wait_replicas_synced(&self) {
        let field = |info: &str, name: &str| -> Option<i64> {
            info.lines().find_map(|l| l.strip_prefix(&format!("{name}:"))).and_then(|v| v.trim().parse().ok())
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        for i in (0..self.nodes.len()).filter(|&i| self.alive(i) && self.role(i).as_deref() == Some("slave")) {
            loop {
                let info = self.cli(i, &["INFO", "replication"]).unwrap_or_default();
                let port = field(&info, "master_port").unwrap_or(0);
                let primary = self.nodes.iter().position(|n| i64::from(n.port) == port);
                let theirs = primary.and_then(|m| field(&self.cli(m, &["INFO", "replication"])?, "master_repl_offset"));
                if theirs.is_some() && theirs == field(&info, "slave_repl_offset") {
                    break;
                }
                assert!(Instant::now() < deadline, "replica {i} stays behind its primary");
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }

    /// The board keys of every primary, merged, and how many primaries hold any.
    pub async fn board_keys(&self, prefix: &str) -> (HashMap<String, HashMap<String, f64>>, usize) {
        let mut all = HashMap::new();
        let mut holding = 0;
        for (i, n) in self.nodes.iter().enumerate() {
            if !self.alive(i) || self.role(i).as_deref() != Some("master") {
                continue;
            }
            let mut conn = n.conn().await;
            let keys = board_keys(&mut conn, prefix).await;
            if !keys.is_empty() {
                holding += 1;
            }
            all.extend(keys);
        }
        (all, holding)
    }
}
