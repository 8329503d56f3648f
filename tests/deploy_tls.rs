//! The TLS variants of the deployments: `deploy/compose.tls.yml` with the
//! files `deploy/tls/make-certs.sh` makes, and the Kubernetes overlay
//! `deploy/kubernetes/tls/`. Offline where Docker and a cluster are needed
//! (`docker-compose config`, `kubernetes-validate` on the merged
//! Deployment), and for real where they are not: the overlay's own Redis
//! command and ACL file run in a `redis-server`, and every setting the
//! overlays give rankflow passes `check-config` with the files in place.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{json, Value};
use support::*;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `deploy/tls/make-certs.sh` run into a temp dir.
fn make_certs() -> tempfile::TempDir {
    let dir = temp_dir();
    let out = Command::new(root().join("deploy/tls/make-certs.sh")).arg(dir.path()).output().unwrap();
    assert!(out.status.success(), "make-certs.sh: {}", String::from_utf8_lossy(&out.stderr));
    dir
}

/// `rankflow check-config FILE` with `env`; its output when it fails.
fn check_config(file: &Path, env: &[(String, String)]) -> Result<(), String> {
    let out = Command::new(env!("CARGO_BIN_EXE_rankflow"))
        .arg("check-config")
        .arg(file)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .output()
        .unwrap();
    out.status.success().then_some(()).ok_or_else(|| String::from_utf8_lossy(&out.stderr).into_owned())
}

fn redis_cli(certs: &Path, port: u16, user: &str, password: &str, args: &[&str]) -> String {
    let p = |f: &str| certs.join(f).display().to_string();
    let out = Command::new("redis-cli")
        .args(["--tls", "--cacert", &p("ca.crt"), "--cert", &p("client.crt"), "--key", &p("client.key")])
        .args(["--user", user, "--pass", password, "--no-auth-warning", "-p", &port.to_string()])
        .args(args)
        .output()
        .unwrap();
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)).trim().to_string()
}

#[test]
fn the_compose_overlay_validates_and_its_redis_admits_rankflow_only_over_tls_to_its_own_keys() {
    let out = Command::new("docker-compose")
        .current_dir(root())
        .args(["-f", "docker-compose.yml", "-f", "deploy/compose.tls.yml", "config", "-q"])
        .output()
        .expect("docker-compose (scripts/setup.sh)");
    assert!(out.status.success(), "docker-compose config: {}", String::from_utf8_lossy(&out.stderr));

    let certs = make_certs();
    let certs = certs.path();
    let overlay = &yaml_documents(&root().join("deploy/compose.tls.yml"))[0]["services"];
    // The overlay's Redis command, its files where make-certs.sh put them, on a free port.
    let port = free_port();
    let command: Vec<String> = overlay["redis"]["command"].as_array().unwrap()[1..]
        .iter()
        .map(|a| a.as_str().unwrap().replace("/tls/", &format!("{}/", certs.display())))
        .map(|a| if a == "6379" { port.to_string() } else { a })
        .collect();
    let data = temp_dir();
    let mut server = Command::new("redis-server")
        .args(&command)
        .args(["--bind", "127.0.0.1", "--dir"])
        .arg(data.path())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let password = std::fs::read_to_string(certs.join("redis-password")).unwrap().trim().to_string();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while redis_cli(certs, port, "rankflow", &password, &["PING"]) != "PONG" {
        assert!(std::time::Instant::now() < deadline, "the overlay's Redis never answered rankflow");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert_eq!(redis_cli(certs, port, "rankflow", &password, &["SET", "lb:{t}:x", "1"]), "OK");
    assert!(redis_cli(certs, port, "rankflow", &password, &["SET", "other", "1"]).contains("NOPERM"));
    assert!(redis_cli(certs, port, "rankflow", &password, &["FLUSHALL"]).contains("NOPERM"));
    assert!(!redis_cli(certs, port, "default", "", &["PING"]).contains("PONG"), "the default user is off");
    let _ = server.kill();
    let _ = server.wait();

    // rankflow's settings in the overlay, with its mounts where the files are.
    let env: Vec<(String, String)> = overlay["rankflow"]["environment"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| {
            let v = v.as_str().unwrap();
            let v = v.replace("/run/secrets/", &format!("{}/", certs.display()));
            (k.clone(), v.replace("/tls/", &format!("{}/", certs.display())))
        })
        .collect();
    check_config(&root().join("deploy/compose.toml"), &env).unwrap();
}

/// The base Deployment with the overlay's strategic merge patch applied
/// (containers merged by name, their env, mounts and the pod's volumes
/// appended, the pod's securityContext merged).
fn merged_deployment(base: &Value, patch: &Value) -> Value {
    let mut d = base.clone();
    let (pod, extra) = (&mut d["spec"]["template"]["spec"], &patch["spec"]["template"]["spec"]);
    for (k, v) in extra["securityContext"].as_object().unwrap() {
        pod["securityContext"][k] = v.clone();
    }
    pod["volumes"].as_array_mut().unwrap().extend(extra["volumes"].as_array().unwrap().iter().cloned());
    let c = &mut pod["containers"][0];
    let p = &extra["containers"][0];
    assert_eq!(c["name"], p["name"]);
    c["env"].as_array_mut().unwrap().extend(p["env"].as_array().unwrap().iter().cloned());
    c["volumeMounts"].as_array_mut().unwrap().extend(p["volumeMounts"].as_array().unwrap().iter().cloned());
    d
}

#[test]
fn the_kubernetes_overlay_merges_into_a_valid_deployment_whose_settings_rankflow_accepts() {
    let base_dir = root().join("deploy/kubernetes");
    let docs: Vec<Value> =
        ["deployment.yaml", "configmap.yaml"].iter().flat_map(|f| yaml_documents(&base_dir.join(f))).collect();
    let of = |kind: &str| docs.iter().find(|d| d["kind"] == kind).unwrap().clone();
    let patch = &yaml_documents(&base_dir.join("tls/deployment-tls.yaml"))[0];
    let secret = &yaml_documents(&base_dir.join("tls/secret.yaml"))[0];
    let merged = merged_deployment(&of("Deployment"), patch);
    let tmp = temp_dir();
    let files = [tmp.path().join("deployment.json"), base_dir.join("tls/secret.yaml")];
    std::fs::write(&files[0], merged.to_string()).unwrap();
    let o = Command::new("kubernetes-validate").arg("--strict").args(&files).output().expect("kubernetes-validate");
    let text = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert!(o.status.success() && !text.contains("WARN") && !text.contains("ERROR"), "{text}");

    // Every file the settings name is a key of the mounted Secret, and
    // every Secret key they read exists.
    let mount = patch["spec"]["template"]["spec"]["containers"][0]["volumeMounts"][0]["mountPath"].as_str().unwrap();
    let keys = secret["stringData"].as_object().unwrap();
    let certs = make_certs();
    let mut env = vec![("RANKFLOW_REDIS__URL".to_string(), "rediss://rankflow@redis.redis.svc:6380".to_string())];
    for e in patch["spec"]["template"]["spec"]["containers"][0]["env"].as_array().unwrap() {
        let name = e["name"].as_str().unwrap().to_string();
        if let Some(key) = e["valueFrom"]["secretKeyRef"]["key"].as_str() {
            assert!(keys.contains_key(key), "{name} reads {key}, which the Secret lacks");
            env.push((name, "a-password".into()));
            continue;
        }
        let value = e["value"].as_str().unwrap();
        let value = match value.strip_prefix(&format!("{mount}/")) {
            Some(file) => {
                assert!(keys.contains_key(file), "{name} names {file}, which the Secret lacks");
                let made = match file {
                    "tls.crt" => "client.crt",
                    "tls.key" => "client.key",
                    other => other,
                };
                certs.path().join(made).display().to_string()
            }
            None => value.to_string(),
        };
        env.push((name, value));
    }
    let config = of("ConfigMap")["data"]["rankflow.toml"].as_str().unwrap().to_string();
    let path = tmp.path().join("rankflow.toml");
    std::fs::write(&path, config).unwrap();
    check_config(&path, &env).unwrap();
    assert_eq!(merged["spec"]["template"]["spec"]["securityContext"]["fsGroup"], json!(10001));
}
