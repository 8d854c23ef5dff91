//! Where the services of the scenarios are: `cargo xtask infra up --durable`'s brokers and
//! ClickHouse servers (or the environment's), and which broker the helpers' Kafka clients talk to.

use std::collections::BTreeMap;
use std::sync::{Mutex, OnceLock};

use rdkafka::ClientConfig;

use super::xtask;

/// Where the services are.
#[derive(Debug, Clone)]
pub struct Infra {
    pub brokers: String,
    pub clickhouse: [String; 2],
    /// The TLS services (`KAFKA_TLS_BROKERS`, `CLICKHOUSE_HTTPS_URL`, `CLICKHOUSE_MTLS_URL`,
    /// `ETL_INFRA_CA_FILE`, `ETL_INFRA_CLIENT_CERT`, `ETL_INFRA_CLIENT_KEY`), as `infra up` prints
    /// them; empty when the services came from the environment.
    pub tls: Vec<(String, String)>,
    /// The durable brokers (`KAFKA_DURABLE_BROKERS`, `KAFKA_DURABLE_BROKERS_2`): two Tansu
    /// brokers over one S3 bucket; empty when the services came from the environment without them.
    pub durable: Vec<String>,
}

/// `$KAFKA_BROKERS`, `$CLICKHOUSE_URL` and `$CLICKHOUSE_URL_2` if all are set (and
/// `$KAFKA_DURABLE_BROKERS{,_2}` if set); otherwise what `cargo xtask infra up --durable`
/// (idempotent) prints. Once per test binary.
pub fn infra() -> &'static Infra {
    static INFRA: OnceLock<Infra> = OnceLock::new();
    INFRA.get_or_init(|| {
        let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        if let (Some(b), Some(c1), Some(c2)) = (env("KAFKA_BROKERS"), env("CLICKHOUSE_URL"), env("CLICKHOUSE_URL_2")) {
            let durable = ["KAFKA_DURABLE_BROKERS", "KAFKA_DURABLE_BROKERS_2"].into_iter().filter_map(env).collect();
            return Infra { brokers: b, clickhouse: [c1, c2], tls: Vec::new(), durable };
        }
        let output = xtask().args(["infra", "up", "--durable"]).output().expect("running cargo xtask infra up");
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success(),
            "cargo xtask infra up failed:\n{stdout}\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
        let value = |key: &str| {
            stdout
                .lines()
                .find_map(|l| l.trim_start_matches("export ").strip_prefix(key)?.strip_prefix('='))
                .unwrap_or_else(|| panic!("no {key}= in the output of infra up:\n{stdout}"))
                .to_owned()
        };
        let tls = [
            "KAFKA_TLS_BROKERS",
            "CLICKHOUSE_HTTPS_URL",
            "CLICKHOUSE_MTLS_URL",
            "ETL_INFRA_CA_FILE",
            "ETL_INFRA_CLIENT_CERT",
            "ETL_INFRA_CLIENT_KEY",
        ]
        .into_iter()
        .map(|key| (key.to_owned(), value(key)))
        .collect();
        Infra {
            brokers: value("KAFKA_BROKERS"),
            clickhouse: [value("CLICKHOUSE_URL"), value("CLICKHOUSE_URL_2")],
            tls,
            durable: vec![value("KAFKA_DURABLE_BROKERS"), value("KAFKA_DURABLE_BROKERS_2")],
        }
    })
}

impl Infra {
    fn tls_value(&self, key: &str) -> &str {
        let found = self.tls.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str());
        found.unwrap_or_else(|| panic!("the TLS scenario needs the services of `cargo xtask infra up` ({key})"))
    }
}

/// Where the helpers' Kafka clients reach a topic other than on the main broker.
#[derive(Debug, Clone)]
pub enum Route {
    /// The broker behind the TLS front (a broker of its own).
    Tls,
    /// These bootstrap servers (the durable brokers).
    Brokers(String),
}

/// The topics routed elsewhere than the main broker. Topics are unique per scenario, so
/// scenarios running at once never see each other's routes.
static ROUTES: Mutex<BTreeMap<String, Route>> = Mutex::new(BTreeMap::new());

/// From now on, the helpers' clients reach `topic` (to create it, produce to it, read it or
/// its group's commits) through `route`.
pub fn route_topic(topic: &str, route: Route) {
    ROUTES.lock().unwrap_or_else(|e| e.into_inner()).insert(topic.to_owned(), route);
}

/// A client configuration for the broker `topic` lives on.
pub(super) fn kafka_config(topic: &str) -> ClientConfig {
    let infra = infra();
    let mut config = ClientConfig::new();
    match ROUTES.lock().unwrap_or_else(|e| e.into_inner()).get(topic).cloned() {
        Some(Route::Brokers(brokers)) => {
            config.set("bootstrap.servers", brokers);
        }
        Some(Route::Tls) => {
            config
                .set("bootstrap.servers", infra.tls_value("KAFKA_TLS_BROKERS"))
                .set("security.protocol", "ssl")
                .set("ssl.ca.location", infra.tls_value("ETL_INFRA_CA_FILE"));
        }
        None => {
            config.set("bootstrap.servers", &infra.brokers);
        }
    }
    config
}
