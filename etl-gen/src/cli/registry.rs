//! `gen --check --registry URL [--subject S]`: fetches every registered version of the subject
//! from a Confluent-API schema registry (with the schemas a Protobuf version references) and
//! fails when the reader schema cannot read one (the rules per format: `crate::compat`).

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::time::Duration;

use apache_avro::Schema;

use crate::compat::{self, WriterVersion};
use crate::contract::secret::redact_url;
use crate::load::{Input, Validated};
use crate::model::{Encoding, Source};
use crate::template::Template;

/// Time allowed for each request to the registry.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// Runs the check; exit 0 when every version is readable, 1 when one is not or the registry
/// cannot be read, 2 when the URL or subject cannot be worked out.
pub(crate) fn run(v: &Validated, url: &str, subject: Option<&str>) -> ExitCode {
    let encoding = v.model.format.get().encoding;
    let env = |name: &str| std::env::var(name).ok();
    // The URL may be written as in pipeline.yaml (`${SCHEMA_REGISTRY_URL}`); credentials ride in
    // its user info, as for the binary.
    let url = match Template::parse(url).and_then(|t| t.resolve(env).map_err(|e| e.to_string())) {
        Ok(url) if url.starts_with("http://") || url.starts_with("https://") => url.trim_end_matches('/').to_owned(),
        Ok(url) => {
            eprintln!("error: --registry `{}` is not an http:// or https:// URL", redact_url(&url));
            return ExitCode::from(2);
        }
        Err(e) => {
            eprintln!("error: --registry: {e}");
            return ExitCode::from(2);
        }
    };
    let shown = redact_url(&url);
    let subject = match subject {
        Some(s) => s.to_owned(),
        None => match &v.model.source {
            Source::Kafka(k) => match k
                .topic
                .as_ref()
                .or(k.topics.first().filter(|_| k.topics.len() == 1))
                .map(|topic| topic.resolve(env))
            {
                Some(Ok(topic)) => format!("{topic}-value"),
                Some(Err(e)) => {
                    eprintln!(
                        "error: the subject is `<topic>-value`, and the topic needs {e}; set it or pass --subject"
                    );
                    return ExitCode::from(2);
                }
                // Each topic has a subject of its own; which one to check is the user's choice.
                None => {
                    eprintln!(
                        "error: the source reads several topics, each with a `<topic>-value` subject; pass \
                         --subject with the one to check"
                    );
                    return ExitCode::from(2);
                }
            },
            Source::Datagen(_) => {
                eprintln!("error: a datagen pipeline has no topic to name the subject after; pass --subject");
                return ExitCode::from(2);
            }
        },
    };
    let versions = match fetch(&url, &subject, encoding) {
        Ok(versions) => versions,
        Err(e) => {
            eprintln!("error: schema registry {shown}: subject `{subject}`: {e}");
            return ExitCode::from(1);
        }
    };
    let broken = match &v.input {
        Input::Avro(_) => match Schema::parse_str(&v.schema_text) {
            Ok(reader) => compat::check(&reader, &versions),
            Err(e) => {
                eprintln!("error: the reader schema {}: {e}", v.schema_path.display());
                return ExitCode::from(1);
            }
        },
        Input::Json(reader) => compat::json::check(reader, &versions),
        Input::Protobuf(reader) => compat::protobuf::check(reader, &versions),
    };
    for b in &broken {
        eprintln!("error: subject `{subject}`: {}\n  help: {}", b.message, b.help);
    }
    if broken.is_empty() {
        println!(
            "ok: the reader schema {} reads all {} version(s) of subject `{subject}` at {shown}",
            v.schema_path.display(),
            versions.len()
        );
        if encoding != Encoding::Avro {
            // Without `registry`, the binary decodes exactly the ids listed; with it, it asks the
            // registry about the others (and judges them by the same rules as this check).
            let ids: Vec<String> = versions.iter().map(|w| w.id.to_string()).collect();
            let listed = v.model.format.get().schema_ids();
            let unlisted: Vec<String> =
                versions.iter().filter(|w| !listed.contains(&w.id)).map(|w| w.id.to_string()).collect();
            println!("their schema ids: {}", ids.join(", "));
            if !unlisted.is_empty() && !listed.is_empty() {
                let consequence = if v.model.format.get().uses_registry() {
                    "the binary asks the registry about them, once per id, and decodes their messages as this check \
                     judged them"
                } else {
                    "the binary refuses their messages as record errors until it does"
                };
                println!(
                    "note: format.{}.schema_id does not list {}: {consequence}",
                    encoding.key(),
                    unlisted.join(", ")
                );
            }
        }
        ExitCode::SUCCESS
    } else {
        let failed: std::collections::BTreeSet<u32> = broken.iter().map(|b| b.version).collect();
        eprintln!(
            "{} of {} version(s) of subject `{subject}` cannot be read by {}",
            failed.len(),
            versions.len(),
            v.schema_path.display()
        );
        ExitCode::from(1)
    }
}

/// Every version of `subject`, oldest first, with the schemas they reference.
fn fetch(url: &str, subject: &str, encoding: Encoding) -> Result<Vec<WriterVersion>, String> {
    let agent = ureq::Agent::config_builder()
        .timeout_global(Some(REQUEST_TIMEOUT))
        .http_status_as_error(false)
        .build()
        .new_agent();
    let get = |path: &str| -> Result<serde_json::Value, String> {
        let mut response = agent.get(format!("{url}{path}")).call().map_err(|e| redact_url(&e.to_string()))?;
        let status = response.status().as_u16();
        let body = response.body_mut().read_to_string().map_err(|e| e.to_string())?;
        match status {
            200 => serde_json::from_str(&body).map_err(|e| format!("GET {path}: not JSON ({e})")),
            404 => Err(format!("GET {path}: not found (is the subject registered? name it with --subject)")),
            other => Err(format!("GET {path}: HTTP {other}: {}", body.trim())),
        }
    };
    let subject_path = format!("/subjects/{}", etl_schema::path_segment(subject));
    let list = get(&format!("{subject_path}/versions"))?;
    let numbers: Vec<u32> = list
        .as_array()
        .ok_or("the versions are not a JSON array")?
        .iter()
        .map(|n| n.as_u64().and_then(|n| u32::try_from(n).ok()).ok_or("a version is not a number"))
        .collect::<Result<_, _>>()?;
    if numbers.is_empty() {
        return Err("the subject has no version".into());
    }
    let expected = match encoding {
        Encoding::Avro => "AVRO",
        Encoding::Json => "JSON",
        Encoding::Protobuf => "PROTOBUF",
    };
    let mut versions = Vec::new();
    for version in numbers {
        let body = get(&format!("{subject_path}/versions/{version}"))?;
        // The registry leaves `schemaType` out for Avro.
        let kind = body.get("schemaType").and_then(|t| t.as_str()).unwrap_or("AVRO");
        if kind != expected {
            return Err(format!("version {version} has schemaType {kind}; this pipeline reads {expected}"));
        }
        let schema = body.get("schema").and_then(|s| s.as_str()).ok_or(format!("version {version} has no schema"))?;
        let id = body.get("id").and_then(|i| i.as_u64()).and_then(|i| u32::try_from(i).ok()).unwrap_or_default();
        let mut imports = BTreeMap::new();
        etl_schema::protobuf::fetch_references(&body, &mut |path| get(path), &mut imports).map_err(|e| {
            let (etl_schema::protobuf::ReferenceError::Fetch(e) | etl_schema::protobuf::ReferenceError::Malformed(e)) =
                e;
            format!("version {version}: {e}")
        })?;
        versions.push(WriterVersion { version, id, schema: schema.to_owned(), imports });
    }
    Ok(versions)
}
