//! The Kubernetes manifests in `deploy/kubernetes/` validate offline against
//! the Kubernetes schemas (`kubernetes-validate --strict`, from PyPI,
//! installed by `scripts/setup.sh --test`), their ConfigMap holds a config
//! rankflow accepts, and the Deployment's probes and grace period fit it.

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("deploy/kubernetes")
}

/// The Kubernetes resources of the manifests.
fn resources() -> Vec<Value> {
    ["configmap.yaml", "deployment.yaml", "service.yaml", "pdb.yaml"]
        .iter()
        .flat_map(|f| support::yaml_documents(&dir().join(f)))
        .collect()
}

#[test]
fn the_manifests_validate_against_the_kubernetes_schemas_and_hold_a_config_rankflow_accepts() {
    let files: Vec<PathBuf> = std::fs::read_dir(dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml") && !p.ends_with("kustomization.yaml"))
        .collect();
    assert_eq!(files.len(), 4, "{files:?}");
    let o = Command::new("kubernetes-validate")
        .arg("--strict")
        .args(&files)
        .output()
        .expect("kubernetes-validate (PyPI; scripts/setup.sh --test installs it)");
    let text = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert!(o.status.success() && !text.contains("WARN") && !text.contains("ERROR"), "{text}");
    assert_eq!(text.matches("passed").count(), 5, "every resource validated: {text}");

    let docs = resources();
    let of = |kind: &str| docs.iter().find(|d| d["kind"] == kind).unwrap_or_else(|| panic!("no {kind}"));
    let config = of("ConfigMap")["data"]["rankflow.toml"].as_str().unwrap().to_string();
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("rankflow.toml");
    std::fs::write(&path, &config).unwrap();
    let check = Command::new(env!("CARGO_BIN_EXE_rankflow")).args(["check-config"]).arg(&path).output().unwrap();
    assert!(check.status.success(), "{}", String::from_utf8_lossy(&check.stderr));

    let spec = &of("Deployment")["spec"]["template"]["spec"];
    let c = &spec["containers"][0];
    assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert_eq!(c["args"], serde_json::json!(["run", "--config", "/config/rankflow.toml"]));
    // Kubernetes waits longer than rankflow's own shutdown takes.
    let settings = rankflow::config::load(&path).unwrap();
    let grace = spec["terminationGracePeriodSeconds"].as_u64().unwrap();
    assert!(settings.worker.shutdown_timeout.as_secs() + 5 <= grace, "grace {grace}s");
    let labels = &of("PodDisruptionBudget")["spec"]["selector"]["matchLabels"];
    assert_eq!(labels, &of("Deployment")["spec"]["selector"]["matchLabels"]);
    assert_eq!(of("Deployment")["spec"]["template"]["metadata"]["annotations"]["prometheus.io/scrape"], "true");
}
