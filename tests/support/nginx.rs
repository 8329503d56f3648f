//! nginx from Debian in front of a rankflow, with the repository's own
//! example (`deploy/nginx/rankflow-cache.conf`) as its `server`: only the
//! upstream address, the port and the cache's folder are the test's.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::{end, free_port, start_retrying, temp_dir, wait_listening};

pub struct Nginx {
    child: Option<Child>,
    pub port: u16,
    dir: tempfile::TempDir,
}

fn nginx_bin() -> PathBuf {
    ["/usr/sbin/nginx", "/usr/local/sbin/nginx", "/usr/bin/nginx"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
        .expect("nginx is installed (scripts/setup.sh --test)")
}

/// The example with rankflow at `upstream`, nginx on `port` and its cache in `cache`.
fn example(upstream: u16, port: u16, cache: &str) -> String {
    let path = crate::repo_path("deploy/nginx/rankflow-cache.conf");
    let text = std::fs::read_to_string(path).unwrap();
    let mut out = text.clone();
    for (from, to) in [
        ("server 127.0.0.1:9898;", format!("server 127.0.0.1:{upstream};")),
        ("listen 8080;", format!("listen 127.0.0.1:{port};")),
        ("/var/cache/nginx/rankflow", cache.to_string()),
    ] {
        assert!(out.contains(from), "the example no longer says {from:?}");
        out = out.replace(from, &to);
    }
    out
}

impl Nginx {
    /// nginx caching in front of the rankflow whose HTTP port is `upstream`.
    pub fn start(upstream: u16) -> Nginx {
        let dir = temp_dir();
        let d = dir.path().display().to_string();
        let mut port = free_port();
        let mut child = None;
        start_retrying("nginx", 3, |n| {
            if n > 1 {
                port = free_port();
            }
            std::fs::write(dir.path().join("rankflow-cache.conf"), example(upstream, port, &format!("{d}/cache")))
                .unwrap();
            // Workers run as root when the test does: the folders are root's.
            let user = if is_root() { "user root;" } else { "" };
            let main = format!(
                "{user}\ndaemon off;\nworker_processes 1;\npid {d}/nginx.pid;\nerror_log {d}/error.log info;\n\
                 events {{ worker_connections 1024; }}\n\
                 http {{\n  access_log {d}/access.log;\n  client_body_temp_path {d}/body;\n  proxy_temp_path {d}/proxy;\n  \
                 fastcgi_temp_path {d}/fastcgi;\n  uwsgi_temp_path {d}/uwsgi;\n  scgi_temp_path {d}/scgi;\n  \
                 include {d}/rankflow-cache.conf;\n}}\n"
            );
            std::fs::write(dir.path().join("nginx.conf"), main).unwrap();
            let spawned = Command::new(nginx_bin())
                .args(["-p", &d, "-e", &format!("{d}/error.log"), "-c", &format!("{d}/nginx.conf")])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("spawn nginx");
            child = Some(spawned);
            wait_listening(&mut child, port, Duration::from_secs(10)).map_err(|e| {
                let log = std::fs::read_to_string(dir.path().join("error.log")).unwrap_or_default();
                format!("{e}\n{log}")
            })
        })
        .expect("nginx starts");
        Nginx { child, port, dir }
    }

    /// nginx's access log: one line per request it answered.
    pub fn access_log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("access.log")).unwrap_or_default()
    }
}

fn is_root() -> bool {
    Command::new("id").arg("-u").output().is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

impl Drop for Nginx {
    /// SIGTERM, so the master stops its workers (a SIGKILLed master leaves them serving); SIGKILL after 5 s.
    fn drop(&mut self) {
        if let Some(c) = self.child.as_mut() {
            let _ = Command::new("kill").args(["-TERM", &c.id().to_string()]).status();
            for _ in 0..100 {
                if matches!(c.try_wait(), Ok(Some(_))) {
                    self.child = None;
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        end(&mut self.child);
    }
}
