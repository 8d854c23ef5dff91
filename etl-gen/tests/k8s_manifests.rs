//! examples/k8s/orders.yaml agrees with the flagship's pipeline.yaml: the memory limit
//! covers `gen --memory --partitions N` for the N it states, the grace period outlasts
//! `checkpoint.drain_timeout`, the probes hit /healthz and /readyz on admin.listen's port,
//! secrets come from the Secret, the autoscaler scales on lag, capped at the partitions, one
//! replica per step and no faster than a drain, and disruptions take one replica at a time.

use std::path::{Path, PathBuf};

use serde::Deserialize as _;
use serde_yaml::Value;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("etl-gen lives in the workspace").to_owned()
}

fn documents() -> Vec<Value> {
    let text = std::fs::read_to_string(root().join("examples/k8s/orders.yaml")).unwrap();
    serde_yaml::Deserializer::from_str(&text).map(|d| Value::deserialize(d).unwrap()).collect()
}

fn kind<'a>(docs: &'a [Value], kind: &str) -> &'a Value {
    let found: Vec<&Value> = docs.iter().filter(|d| d["kind"] == kind).collect();
    assert_eq!(found.len(), 1, "one {kind}");
    found[0]
}

/// A Kubernetes memory quantity in bytes (the suffixes these manifests use).
fn bytes(quantity: &str) -> u64 {
    let units =
        [("Ki", 1u64 << 10), ("Mi", 1 << 20), ("Gi", 1 << 30), ("k", 1000), ("M", 1_000_000), ("G", 1_000_000_000)];
    for (suffix, factor) in units {
        if let Some(n) = quantity.strip_suffix(suffix) {
            return n.parse::<u64>().unwrap() * factor;
        }
    }
    quantity.parse().unwrap()
}

fn annotation(doc: &Value, key: &str) -> u64 {
    doc["metadata"]["annotations"][key].as_str().unwrap_or_else(|| panic!("annotation {key}")).parse().unwrap()
}

fn flagship() -> etl_gen::Validated {
    let path = root().join("examples/kafka_avro_to_clickhouse/pipeline.yaml");
    etl_gen::validate_file(&path, &etl_gen::Options::default()).unwrap().pipeline.expect("the flagship is valid")
}

#[test]
fn the_manifests_parse_and_agree_with_the_flagship_config() {
    let docs = documents();
    let kinds: Vec<&str> = docs.iter().map(|d| d["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["Secret", "Deployment", "Service", "PodDisruptionBudget", "ScaledObject"]);
    let pipeline = flagship();
    let deployment = kind(&docs, "Deployment");
    let pod = &deployment["spec"]["template"]["spec"];
    let containers = pod["containers"].as_sequence().unwrap();
    assert_eq!(containers.len(), 1);
    let c = &containers[0];

    // Memory: at least the bound for the partitions the annotation states.
    let n = annotation(deployment, "etl-rs.io/memory-partitions");
    let partitions = annotation(deployment, "etl-rs.io/topic-partitions");
    assert_eq!(n, partitions, "sized for one replica owning every partition");
    let bound = etl_gen::memory::total(&pipeline, n);
    let limit = bytes(c["resources"]["limits"]["memory"].as_str().unwrap());
    let request = bytes(c["resources"]["requests"]["memory"].as_str().unwrap());
    assert!(limit >= bound, "memory limit {limit} < the bound {bound} for {n} partitions");
    assert_eq!(request, limit, "Guaranteed QoS");
    // The comment quotes the command's total; keep it in step with the config.
    let text = std::fs::read_to_string(root().join("examples/k8s/orders.yaml")).unwrap();
    assert!(text.contains(&format!("--memory --partitions {n}")), "the comment names the command");
    assert!(text.contains(&format!("total: {bound} bytes")), "the comment quotes the current total ({bound})");

    // Grace period above the drain timeout.
    let grace = pod["terminationGracePeriodSeconds"].as_u64().unwrap();
    let drain = pipeline.model.checkpoint.drain_timeout.to_std().as_secs();
    assert!(grace > drain, "terminationGracePeriodSeconds {grace} must exceed drain_timeout {drain}s");

    // Probes on the admin port, which is admin.listen's.
    let env: Vec<(&str, &Value)> =
        c["env"].as_sequence().unwrap().iter().map(|e| (e["name"].as_str().unwrap(), e)).collect();
    let value = |name: &str| env.iter().find(|(n, _)| *n == name).map(|(_, e)| e["value"].as_str().unwrap().to_owned());
    // admin.listen as the Deployment's environment resolves it.
    let listen = pipeline.model.admin.listen.resolve(value).unwrap();
    let port: u64 = listen.rsplit(':').next().unwrap().parse().unwrap();
    assert!(listen.starts_with("0.0.0.0:"), "the admin server must listen beyond loopback: {listen}");
    let ports = c["ports"].as_sequence().unwrap();
    assert_eq!(ports[0]["containerPort"].as_u64(), Some(port));
    let port_name = ports[0]["name"].as_str().unwrap();
    for (probe, path) in [("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")] {
        assert_eq!(c[probe]["httpGet"]["path"].as_str(), Some(path), "{probe}");
        assert_eq!(c[probe]["httpGet"]["port"].as_str(), Some(port_name), "{probe}");
    }

    // Every variable the config reads is set; the secret ones come from the Secret.
    let secret = kind(&docs, "Secret");
    for var in ["KAFKA_BROKERS", "ORDERS_TOPIC", "ORDERS_GROUP", "CLICKHOUSE_URL", "CLICKHOUSE_URL_2"] {
        assert!(value(var).is_some(), "{var} is set");
    }
    for var in ["CLICKHOUSE_USER", "CLICKHOUSE_PASSWORD"] {
        let (_, e) = env.iter().find(|(n, _)| *n == var).unwrap_or_else(|| panic!("{var} is set"));
        let key = &e["valueFrom"]["secretKeyRef"];
        assert_eq!(key["name"], secret["metadata"]["name"], "{var} from the Secret");
        assert!(secret["stringData"][key["key"].as_str().unwrap()].is_string(), "{var} is in the Secret");
    }

    // The container runs as the image's non-root user, read-only, no capabilities.
    assert_eq!(pod["securityContext"]["runAsUser"].as_u64(), Some(65532));
    assert_eq!(c["securityContext"]["readOnlyRootFilesystem"].as_bool(), Some(true));

    // Scale on lag, never past the partitions, for this Deployment and group.
    let scaler = kind(&docs, "ScaledObject");
    assert_eq!(scaler["spec"]["scaleTargetRef"]["name"], deployment["metadata"]["name"]);
    assert!(scaler["spec"]["maxReplicaCount"].as_u64().unwrap() <= partitions);
    let trigger = &scaler["spec"]["triggers"][0];
    assert_eq!(trigger["type"], "kafka", "lag, not CPU");
    assert_eq!(trigger["metadata"]["consumerGroup"].as_str().map(str::to_owned), value("ORDERS_GROUP"));
    assert_eq!(trigger["metadata"]["topic"].as_str().map(str::to_owned), value("ORDERS_TOPIC"));
    assert_eq!(trigger["metadata"]["allowIdleConsumers"], "false");

    // Each scaling step is one eager rebalance: one replica per step, and steps further apart
    // than a revocation's drain, so that one step's drain ends before the next rebalance.
    let behavior = &scaler["spec"]["advanced"]["horizontalPodAutoscalerConfig"]["behavior"];
    for direction in ["scaleUp", "scaleDown"] {
        let policies = behavior[direction]["policies"].as_sequence().unwrap_or_else(|| panic!("{direction} policies"));
        for policy in policies {
            assert_eq!(policy["type"], "Pods", "{direction}");
            assert_eq!(policy["value"].as_u64(), Some(1), "{direction}: one replica per step");
            let period = policy["periodSeconds"].as_u64().unwrap();
            assert!(period > drain, "{direction}: a step every {period}s, not longer than drain_timeout {drain}s");
        }
    }

    // Voluntary disruptions: one replica of this Deployment at a time.
    let budget = kind(&docs, "PodDisruptionBudget");
    assert_eq!(budget["spec"]["maxUnavailable"].as_u64(), Some(1));
    assert_eq!(budget["spec"]["selector"]["matchLabels"], deployment["spec"]["selector"]["matchLabels"]);
}
