//! `init SCHEMA --topic T --table X [--shards N]`: a first pipeline.yaml for a schema, every key
//! at its default (the ones a team usually changes written out, the others commented), the
//! sizing rule worked out beside its knobs, and validated before it is printed, so what `init`
//! writes passes `gen --check` as it is.

use std::fmt::Write as _;
use std::path::Path;

use crate::load::validate_str;
use crate::model::{Backpressure, Batch, Checkpoint, Chunk, Inflight, Queue};
use crate::rules::Options;
use crate::rules::sizing::Sizing;
use crate::units::ByteSize;

/// What `init` was asked for.
#[derive(Debug, Clone)]
pub(crate) struct InitRequest<'a> {
    /// The schema file as the user named it; the pipeline refers to it by that path, so the
    /// pipeline is meant to be saved in the directory `init` ran in.
    pub(crate) schema: &'a str,
    pub(crate) topic: &'a str,
    pub(crate) table: &'a str,
    pub(crate) shards: u32,
    /// The Protobuf message, when the `.proto` file declares more than one.
    pub(crate) message: Option<&'a str>,
    /// The directory the schema path is relative to (the working directory).
    pub(crate) base_dir: &'a Path,
}

/// Why `init` wrote nothing.
#[derive(Debug, thiserror::Error)]
pub(crate) enum InitError {
    #[error("{0}: the format is chosen by the extension: .avsc (Avro), .json (JSON Schema) or .proto (Protobuf)")]
    UnknownExtension(String),
    #[error("{path}: {source}")]
    Read { path: String, source: std::io::Error },
    #[error("{0}: no message is declared; name it with --message")]
    NoMessage(String),
    #[error("{path} declares several messages ({}); name the one each Kafka message holds with --message", .names.join(", "))]
    SeveralMessages { path: String, names: Vec<String> },
    #[error("--shards {0}: a pipeline writes to at least one shard")]
    NoShards(u32),
    #[error(
        "`{0}` cannot be turned into a pipeline name ([a-z][a-z0-9-]*); pick a table name that starts with a letter"
    )]
    Name(String),
    /// The candidate did not validate: the schema has something the defaults cannot carry.
    #[error(
        "the pipeline for this schema does not pass `gen --check` as it is; the diagnostics below say what to add \
         (a transform, say), starting from this text:\n\n{text}\n{report}"
    )]
    Invalid { text: String, report: String },
}

/// The schema formats, by extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Avro,
    Json,
    Protobuf,
}

/// The pipeline.yaml for `request`, validated.
pub(crate) fn init(request: &InitRequest<'_>) -> Result<String, InitError> {
    let kind = match Path::new(request.schema).extension().and_then(|e| e.to_str()) {
        Some("avsc") => Kind::Avro,
        Some("json") => Kind::Json,
        Some("proto") => Kind::Protobuf,
        _ => return Err(InitError::UnknownExtension(request.schema.to_owned())),
    };
    if request.shards == 0 {
        return Err(InitError::NoShards(request.shards));
    }
    let name = pipeline_name(request.table).ok_or_else(|| InitError::Name(request.table.to_owned()))?;
    let message = match kind {
        Kind::Protobuf => Some(match request.message {
            Some(message) => message.to_owned(),
            None => only_message(request)?,
        }),
        _ => None,
    };
    let text = render(request, kind, &name, message.as_deref());
    let outcome = validate_str("pipeline.yaml", &text, request.base_dir, &Options::default());
    if outcome.pipeline.is_none() {
        return Err(InitError::Invalid { text, report: outcome.report.render() });
    }
    Ok(text)
}

/// `table` as a pipeline name (E0201's suggestion), without trailing `-`s.
fn pipeline_name(table: &str) -> Option<String> {
    let name = crate::rules::pipeline_name::suggest(table).trim_end_matches('-').to_owned();
    crate::rules::pipeline_name::is_valid(&name).then_some(name)
}

/// The one top-level message of a `.proto` file, fully qualified with its package.
fn only_message(request: &InitRequest<'_>) -> Result<String, InitError> {
    let path = request.base_dir.join(request.schema);
    let text =
        std::fs::read_to_string(&path).map_err(|source| InitError::Read { path: request.schema.to_owned(), source })?;
    let names = top_level_messages(&text);
    match &names[..] {
        [] => Err(InitError::NoMessage(request.schema.to_owned())),
        [one] => Ok(one.clone()),
        _ => Err(InitError::SeveralMessages { path: request.schema.to_owned(), names }),
    }
}

/// The messages declared at the top level of a `.proto` text, with the package prefix. Comments
/// and strings are skipped; nested messages are not listed (a Kafka topic carries a top-level one
/// far more often; `--message` names any).
fn top_level_messages(text: &str) -> Vec<String> {
    let mut tokens = Vec::new();
    let mut chars = text.chars().peekable();
    let mut word = String::new();
    let flush = |word: &mut String, tokens: &mut Vec<String>| {
        if !word.is_empty() {
            tokens.push(std::mem::take(word));
        }
    };
    while let Some(c) = chars.next() {
        match c {
            '/' if chars.peek() == Some(&'/') => {
                flush(&mut word, &mut tokens);
                for c in chars.by_ref() {
                    if c == '\n' {
                        break;
                    }
                }
            }
            '/' if chars.peek() == Some(&'*') => {
                flush(&mut word, &mut tokens);
                chars.next();
                let mut last = ' ';
                for c in chars.by_ref() {
                    if last == '*' && c == '/' {
                        break;
                    }
                    last = c;
                }
            }
            '"' | '\'' => {
                flush(&mut word, &mut tokens);
                let mut escaped = false;
                for d in chars.by_ref() {
                    match d {
                        _ if escaped => escaped = false,
                        '\\' => escaped = true,
                        _ if d == c => break,
                        _ => {}
                    }
                }
                tokens.push("\"\"".to_owned());
            }
            '{' | '}' | ';' | '=' => {
                flush(&mut word, &mut tokens);
                tokens.push(c.to_string());
            }
            c if c.is_whitespace() => flush(&mut word, &mut tokens),
            c => word.push(c),
        }
    }
    flush(&mut word, &mut tokens);
    let (mut package, mut names, mut depth) = (String::new(), Vec::new(), 0usize);
    for (i, token) in tokens.iter().enumerate() {
        match token.as_str() {
            "{" => depth += 1,
            "}" => depth = depth.saturating_sub(1),
            "package" if depth == 0 => package = tokens.get(i + 1).cloned().unwrap_or_default(),
            "message" if depth == 0 => {
                if let Some(name) = tokens.get(i + 1).filter(|_| tokens.get(i + 2).is_some_and(|b| b == "{")) {
                    names.push(name.clone());
                }
            }
            _ => {}
        }
    }
    names.into_iter().map(|n| if package.is_empty() { n } else { format!("{package}.{n}") }).collect()
}

/// The pipeline's text.
fn render(request: &InitRequest<'_>, kind: Kind, name: &str, message: Option<&str>) -> String {
    let (batch, inflight, chunk, queue, backpressure) =
        (Batch::default(), Inflight::default(), Chunk::default(), Queue::default(), Backpressure::default());
    let shards = u64::from(request.shards);
    let mut sizing = Sizing {
        max_inflight_bytes: backpressure.max_inflight_bytes.bytes(),
        low_ratio: backpressure.low_ratio,
        shards,
        max_per_shard: inflight.max_per_shard,
        batch_max_bytes: batch.max_bytes.bytes(),
        queue_capacity: queue.capacity,
        chunk_target_bytes: chunk.target_bytes.bytes(),
        queued_are_batches: false,
    };
    // More shards than the defaults are sized for: the smallest budget the rule allows, rounded
    // up to a whole 64 MiB.
    let budget_set = !sizing.evaluate().passes(sizing.low_ratio);
    if budget_set {
        let min = u64::try_from(sizing.evaluate().min_inflight_bytes).unwrap_or(u64::MAX);
        sizing.max_inflight_bytes = min.div_ceil(64 << 20) * (64 << 20);
    }
    let verdict = sizing.evaluate();
    let bytes = |n: u64| ByteSize::b(n).to_string();
    let left = bytes(u64::try_from(verdict.left_scaled / u128::from(sizing.low_ratio.denominator())).unwrap_or(0));
    let right = u64::try_from(verdict.right).unwrap_or(u64::MAX);
    let right = if right.is_multiple_of(1 << 10) { bytes(right) } else { format!("{right} bytes") };
    let env = |suffix: &str| format!("{}_{suffix}", name.to_ascii_uppercase().replace('-', "_"));
    let schema = request.schema;

    let mut out = String::new();
    let w = &mut out;
    let _ = writeln!(w, "# A first pipeline for {schema}, written by `cargo xtask init`. Save it in the");
    let _ = writeln!(w, "# directory `init` ran in (the schema path is relative to it), then:");
    let _ = writeln!(w, "#");
    let _ = writeln!(w, "#   cargo xtask gen pipeline.yaml --check    # validate");
    let _ = writeln!(w, "#   cargo xtask gen pipeline.yaml --ddl      # the CREATE TABLE to run on every shard");
    let _ = writeln!(w, "#   cargo xtask build pipeline.yaml          # the binary");
    let _ = writeln!(w, "#");
    let _ = writeln!(w, "# Every key is at its default; commented keys show the others (docs/configuration.md).");
    let _ = writeln!(w, "# `${{VAR:-default}}` values are read from the environment at start-up.");
    let _ = writeln!(w, "pipeline:");
    let _ = writeln!(w, "  name: {name}");
    let _ = writeln!(w, "  # threads: 2                  # pipeline threads; lanes are spread over them");
    let _ = writeln!(w, "source:");
    let _ = writeln!(w, "  kafka:");
    let _ = writeln!(w, "    brokers: ${{KAFKA_BROKERS:-localhost:9092}}");
    let _ = writeln!(w, "    topic: ${{{}:-{}}}", env("TOPIC"), request.topic);
    let _ = writeln!(w, "    group_id: ${{{}:-{name}-etl}}", env("GROUP"));
    let _ = writeln!(w, "    # commit_interval: 5s");
    let _ = writeln!(w, "    # startup_timeout: 90s");
    let _ = writeln!(w, "    # max_message_bytes: 1MiB");
    let _ = writeln!(w, "    # rdkafka:                   # librdkafka properties (TLS, SASL, ...)");
    let _ = writeln!(w, "    #   security.protocol: ssl");
    let _ = writeln!(w, "format:");
    match kind {
        Kind::Avro => {
            let _ = writeln!(w, "  avro:");
            let _ = writeln!(w, "    schema: {schema}");
            let _ = writeln!(
                w,
                "    # wire: confluent            # magic byte + schema id before each datum; `raw`: bare datums"
            );
            let _ =
                writeln!(w, "    # Writer schemas by id; or `schema_id: <the reader schema's id>` without a registry.");
            let _ = writeln!(w, "    registry: ${{SCHEMA_REGISTRY_URL:-http://localhost:8081}}");
            let _ = writeln!(w, "    # registry_timeout: 1m");
        }
        Kind::Json => {
            let _ = writeln!(w, "  json:");
            let _ = writeln!(w, "    schema: {schema}");
            let _ =
                writeln!(w, "    # wire: raw                  # one JSON document per message; `confluent`: framed");
        }
        Kind::Protobuf => {
            let _ = writeln!(w, "  protobuf:");
            let _ = writeln!(w, "    schema: {schema}");
            let _ = writeln!(w, "    message: {}", message.unwrap_or_default());
            let _ = writeln!(w, "    # wire: raw                  # bare messages; `confluent`: framed");
        }
    }
    let _ = writeln!(w, "# transform:                     # filter, map, select (docs/configuration.md)");
    let _ = writeln!(w, "#   - filter: \"...\"");
    let _ = writeln!(w, "sink:");
    let _ = writeln!(w, "  clickhouse:");
    let _ = writeln!(w, "    # database: default");
    let _ = writeln!(w, "    table: {}", request.table);
    let _ = writeln!(w, "    # shard_key: <field>         # shards by a hash of this field; without it, round-robin");
    let _ = writeln!(w, "    # format: native             # or rowbinary");
    let _ = writeln!(w, "    # compression: lz4           # or zstd, none");
    let _ = writeln!(w, "    # enum: low_cardinality      # or enum: Enum8/Enum16 columns");
    let _ = writeln!(w, "    # exactly_once: false        # true: ledger + deduplicated replays (see --ddl)");
    let _ = writeln!(w, "    shards:");
    for shard in 0..request.shards {
        let var = if shard == 0 { "CLICKHOUSE_URL".to_owned() } else { format!("CLICKHOUSE_URL_{}", shard + 1) };
        let _ = writeln!(w, "      - replicas: [\"${{{var}:-http://localhost:{}}}\"]", 8123 + shard);
    }
    let _ = writeln!(w, "    user: ${{CLICKHOUSE_USER:-default}}");
    let _ = writeln!(w, "    password: ${{CLICKHOUSE_PASSWORD:-}}");
    let _ = writeln!(w, "    # The sizing rule (checked by `gen`):");
    let _ =
        writeln!(w, "    #   max_inflight_bytes × low_ratio ≥ 2 × (shards × inflight.max_per_shard × batch.max_bytes");
    let _ =
        writeln!(w, "    #                                         + shards × queue.capacity × chunk.target_bytes)");
    let _ = writeln!(
        w,
        "    #   {} × {} = {left}  ≥  2 × ({shards} × {} × {} + {shards} × {} × {}) = {right}",
        bytes(sizing.max_inflight_bytes),
        sizing.low_ratio,
        sizing.max_per_shard,
        bytes(sizing.batch_max_bytes),
        sizing.queue_capacity,
        bytes(sizing.chunk_target_bytes),
    );
    let _ = writeln!(w, "    # Raising a knob on the right means raising the budget (backpressure) too.");
    let _ = writeln!(
        w,
        "    # batch: {{ max_rows: {}, max_bytes: {}, linger: {} }}",
        batch.max_rows, batch.max_bytes, batch.linger
    );
    let _ = writeln!(w, "    # inflight: {{ max_per_shard: {} }}", inflight.max_per_shard);
    let _ = writeln!(w, "    # chunk: {{ target_bytes: {} }}", chunk.target_bytes);
    let _ = writeln!(w, "    # queue: {{ capacity: {} }}", queue.capacity);
    let _ = writeln!(w, "backpressure:");
    if budget_set {
        let _ = writeln!(
            w,
            "  max_inflight_bytes: {}       # the default ({}) is too small for {shards} shards",
            bytes(sizing.max_inflight_bytes),
            backpressure.max_inflight_bytes
        );
    } else {
        let _ = writeln!(w, "  # max_inflight_bytes: {}", backpressure.max_inflight_bytes);
    }
    let _ = writeln!(w, "  # high_ratio: {}", backpressure.high_ratio);
    let _ = writeln!(w, "  # low_ratio: {}", backpressure.low_ratio);
    let _ = writeln!(w, "  # min_pause: {}", backpressure.min_pause);
    let _ = writeln!(w, "  # Memory: `cargo xtask gen pipeline.yaml --memory --partitions N` bounds one instance.");
    let _ = writeln!(w, "# checkpoint:");
    let _ = writeln!(w, "#   drain_timeout: {}", Checkpoint::default().drain_timeout);
    let _ = writeln!(w, "# errors:");
    let _ = writeln!(w, "#   policy: skip                  # or fail, dlq (with dlq_topic)");
    let _ = writeln!(w, "#   tombstones: skip");
    let _ = writeln!(w, "admin:");
    let _ = writeln!(w, "  listen: ${{ADMIN_LISTEN:-0.0.0.0:9464}}   # /metrics, /healthz, /readyz");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn top_level_messages_skip_comments_strings_and_nesting() {
        let proto = r#"
            syntax = "proto3";
            // message Commented {}
            package shop.v1;
            /* message Block { } */
            message Order { message Line { string sku = 1; } repeated Line lines = 1; string note = 2 [default = "message X {"]; }
            enum Kind { A = 0; }
            message Refund { int64 id = 1; }
        "#;
        assert_eq!(top_level_messages(proto), ["shop.v1.Order", "shop.v1.Refund"]);
        assert_eq!(top_level_messages("message A {}"), ["A"]);
    }

    #[test]
    fn pipeline_names_come_from_the_table() {
        assert_eq!(pipeline_name("Order_Items").as_deref(), Some("order-items"));
        assert_eq!(pipeline_name("2024_clicks").as_deref(), Some("clicks"));
        assert_eq!(pipeline_name("___"), None);
    }
}
