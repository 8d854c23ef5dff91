//! `gen --migrate [--against URL] [--cluster NAME]`: reads the live table of each shard (or of
//! one server) over ClickHouse's HTTP interface and prints what brings it to the pipeline.

use std::process::ExitCode;
use std::time::Duration;

use crate::contract::columns::LiveColumn;
use crate::contract::secret::redact_url as redact;
use crate::load::Validated;
use crate::migrate::{LiveTable, Migration, plan};
use crate::model::{ClickhouseSink, Sink};

/// Time allowed for each query; the servers are asked for two small system-table reads.
const QUERY_TIMEOUT: Duration = Duration::from_secs(10);

/// One server to compare, as the output names it.
struct Target {
    label: String,
    urls: Vec<String>,
}

/// Runs `--migrate`: statements on stdout (nothing when every table fits), notes and refusals on
/// stderr. Exit 0 when there is nothing unsafe, 1 when a column cannot be changed safely or a
/// server cannot be read, 2 when the servers cannot be named.
pub(crate) fn run(v: &Validated, against: Option<&str>, cluster: Option<&str>) -> ExitCode {
    let Sink::Clickhouse(c) = &v.model.sink else {
        eprintln!("error: --migrate compares a ClickHouse table; this pipeline writes to `sink.file`");
        return ExitCode::from(1);
    };
    let env = |name: &str| std::env::var(name).ok();
    let targets = match against {
        Some(url) => vec![Target { label: redact(url), urls: vec![url.to_owned()] }],
        None => match shard_targets(c, &env) {
            Ok(targets) => targets,
            Err(message) => {
                eprintln!("error: {message}");
                return ExitCode::from(2);
            }
        },
    };
    let (user, password) = match (c.user.resolve(env), c.password.resolve(env)) {
        (Ok(user), Ok(password)) => (user, password),
        (Err(e), _) | (_, Err(e)) => {
            eprintln!("error: the ClickHouse credentials need {e}; set it in the environment, as for the binary");
            return ExitCode::from(2);
        }
    };
    let tls = match tls_config(c, &env) {
        Ok(tls) => tls,
        Err(message) => {
            eprintln!("error: {message}");
            return ExitCode::from(2);
        }
    };
    let agent = ureq::Agent::config_builder()
        .timeout_global(Some(QUERY_TIMEOUT))
        .http_status_as_error(false)
        .tls_config(tls)
        .build()
        .new_agent();
    let client = Client { agent, user, password };
    // The plans, each with the servers it is for: shards whose tables agree share one. With
    // several outputs each table is compared on its own, and named.
    let tables = v.model.output_tables();
    let mut plans: Vec<(Migration, Vec<String>)> = Vec::new();
    let mut failed = false;
    for (output, table) in tables.iter().enumerate() {
        for target in &targets {
            let label = match table.name {
                Some(_) => format!("{}.{} on {}", table.database, table.table, target.label),
                None => target.label.clone(),
            };
            let live = match read_first(&client, &target.urls, table.database, table.table) {
                Ok(live) => live,
                Err(message) => {
                    eprintln!("error: {label}: {message}");
                    failed = true;
                    continue;
                }
            };
            let migration = match plan(v, output, &live, cluster) {
                Ok(m) => m,
                Err(e) => {
                    eprintln!("error: {e}");
                    return ExitCode::from(1);
                }
            };
            match plans.iter_mut().find(|(m, _)| *m == migration) {
                Some((_, labels)) => labels.push(label),
                None => plans.push((migration, vec![label])),
            }
        }
    }
    let refused = plans.iter().any(|(m, _)| !m.refused.is_empty());
    for (migration, labels) in &plans {
        let on = labels.join(", ");
        for (name, ty, kind) in &migration.defaulted {
            eprintln!("note: {on}: column `{name}` ({ty} {kind}) is not written by the pipeline and takes its default");
        }
        for refusal in &migration.refused {
            eprintln!("error: {on}: {}\n  help: {}", refusal.difference, refusal.help);
        }
    }
    if refused || failed {
        if refused {
            eprintln!("--migrate printed no statement: a table has changes it cannot make safely (above)");
        }
        return ExitCode::from(1);
    }
    let to_run: Vec<&(Migration, Vec<String>)> = plans.iter().filter(|(m, _)| !m.statements.is_empty()).collect();
    for (migration, labels) in &to_run {
        // With ON CLUSTER one run reaches every replica; otherwise each statement is run on the
        // servers it names.
        if to_run.len() > 1 || targets.len() > 1 || tables.len() > 1 {
            println!("-- on {}", labels.join(", "));
        }
        for statement in &migration.statements {
            println!("{statement};");
        }
    }
    ExitCode::SUCCESS
}

/// The TLS of `https://` servers as the binary has it: `ca_file`'s CAs trusted (instead of
/// Mozilla's roots: ureq takes one root set), and `client_cert` with `client_key` shown to servers
/// that require a client certificate. Paths resolve from the environment like the binary's.
fn tls_config(c: &ClickhouseSink, env: &dyn Fn(&str) -> Option<String>) -> Result<ureq::tls::TlsConfig, String> {
    use ureq::tls::{Certificate, ClientCert, PemItem, PrivateKey, RootCerts, TlsConfig};
    let path = |key: &str, template: &crate::template::Template| {
        template.resolve(env).map_err(|e| format!("sink.clickhouse.{key} needs {e}; set it, as for the binary"))
    };
    let read = |key: &str, file: &str| std::fs::read(file).map_err(|e| format!("sink.clickhouse.{key} `{file}`: {e}"));
    let certificates = |key: &str, file: &str| -> Result<Vec<Certificate<'static>>, String> {
        let pem = read(key, file)?;
        let certs: Vec<Certificate<'static>> = ureq::tls::parse_pem(&pem)
            .filter_map(|item| match item {
                Ok(PemItem::Certificate(cert)) => Some(cert),
                _ => None,
            })
            .collect();
        if certs.is_empty() {
            return Err(format!("sink.clickhouse.{key} `{file}` holds no PEM certificate"));
        }
        Ok(certs)
    };
    let mut tls = TlsConfig::builder();
    if let Some(ca_file) = &c.ca_file {
        let file = path("ca_file", ca_file)?;
        tls = tls.root_certs(RootCerts::new_with_certs(&certificates("ca_file", &file)?));
    }
    match (&c.client_cert, &c.client_key) {
        (Some(cert), Some(key)) => {
            let (cert, key) = (path("client_cert", cert)?, path("client_key", key)?);
            let chain = certificates("client_cert", &cert)?;
            // Never quoted: only the file is named.
            let key = PrivateKey::from_pem(&read("client_key", &key)?)
                .map_err(|_| format!("sink.clickhouse.client_key `{key}` holds no PEM private key"))?;
            tls = tls.client_cert(Some(ClientCert::new_with_certs(&chain, key)));
        }
        (None, None) => {}
        // E0206 refuses one without the other before this runs.
        _ => return Err("sink.clickhouse.client_cert and client_key go together".into()),
    }
    Ok(tls.build())
}

/// Each shard of the config, its replica URLs resolved from the environment.
fn shard_targets(c: &ClickhouseSink, env: &dyn Fn(&str) -> Option<String>) -> Result<Vec<Target>, String> {
    let mut targets = Vec::new();
    for (i, shard) in c.shards.iter().enumerate() {
        let mut urls = Vec::new();
        for replica in &shard.replicas {
            let url = replica.resolve(env).map_err(|e| {
                format!(
                    "shard {i}: replica `{}` needs {e}; set it, or name one server with --against URL",
                    replica.as_str()
                )
            })?;
            urls.push(url);
        }
        let shown: Vec<String> = urls.iter().map(|u| redact(u)).collect();
        targets.push(Target { label: format!("shard {i} ({})", shown.join(" | ")), urls });
    }
    Ok(targets)
}

struct Client {
    agent: ureq::Agent,
    user: String,
    password: String,
}

impl Client {
    /// Runs `sql` (with `{db:String}` and `{table:String}` bound) and returns the body.
    fn query(&self, url: &str, sql: &str, db: &str, table: &str) -> Result<String, String> {
        let mut response = self
            .agent
            .post(url.trim_end_matches('/'))
            .query("param_db", db)
            .query("param_table", table)
            .header("X-ClickHouse-User", &self.user)
            .header("X-ClickHouse-Key", &self.password)
            .send(sql)
            .map_err(|e| e.to_string())?;
        let status = response.status().as_u16();
        let body = response.body_mut().read_to_string().map_err(|e| e.to_string())?;
        if status != 200 {
            return Err(format!("HTTP {status}: {}", body.trim()));
        }
        Ok(body)
    }
}

/// The live tables of the first replica of `urls` that answers.
fn read_first(client: &Client, urls: &[String], database: &str, table: &str) -> Result<LiveTable, String> {
    let mut last = String::from("no replica");
    for url in urls {
        match read(client, url, database, table) {
            Ok(live) => return Ok(live),
            Err(e) => last = format!("{}: {e}", redact(url)),
        }
    }
    Err(last)
}

fn read(client: &Client, url: &str, database: &str, table: &str) -> Result<LiveTable, String> {
    let body = client.query(
        url,
        "SELECT name, type, default_kind FROM system.columns WHERE database = {db:String} AND table = {table:String} \
         ORDER BY position FORMAT JSONEachRow",
        database,
        table,
    )?;
    let mut columns = Vec::new();
    for line in body.lines().filter(|l| !l.trim().is_empty()) {
        let row: serde_json::Value = serde_json::from_str(line).map_err(|e| format!("unreadable column row: {e}"))?;
        let text = |key: &str| row.get(key).and_then(|v| v.as_str()).unwrap_or_default().to_owned();
        columns.push(LiveColumn { name: text("name"), ty: text("type"), default_kind: text("default_kind") });
    }
    let ledger = format!("{table}_etl_batches");
    let count = client.query(
        url,
        "SELECT count() FROM system.tables WHERE database = {db:String} AND name = {table:String}",
        database,
        &ledger,
    )?;
    Ok(LiveTable { columns, ledger: count.trim() != "0" })
}
