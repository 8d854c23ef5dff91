//! The generated crate's `src/main.rs`: record types, the chain as one inlined function,
//! and `main`, which reaches the runtime only through `etl_runtime::__private`.

use std::collections::BTreeSet;

use proc_macro2::{Literal, TokenStream};
use quote::{format_ident, quote};

use super::expr::{Scope, condition, value};
use super::types::{Val, decode, field_ident, json, local_ty, nested_records, record_ident, rowbinary, rust_ty, skip};
use crate::ir::{Column, DecodeNode, Ty, metadata_columns};
use crate::load::Validated;
use crate::model::{ErrorPolicy, FileFormat, Sink, Source, TombstonePolicy, Wire};
use crate::plan::Step;
use crate::template::{Part, Template};

/// What the emitted `main` needs besides the plan.
pub(super) struct MainInputs<'a> {
    /// The validated pipeline.
    pub(super) pipeline: &'a Validated,
    /// The first 16 hex digits of the config hash.
    pub(super) config_hash: &'a str,
    /// The etl-rs version.
    pub(super) version: &'a str,
    /// How `main.rs` reaches the schema text (an `include_str!` path, relative to main.rs).
    pub(super) schema_include: &'a str,
    /// `(module name, include path)` of each user Rust file.
    pub(super) user_files: &'a [(String, String)],
    /// Also emit `bench_decode`, the decoder alone, for `cargo xtask bench-chain`.
    pub(super) bench: bool,
}

/// Emits `src/main.rs` (unformatted tokens).
pub(super) fn emit(inputs: &MainInputs<'_>) -> Result<TokenStream, String> {
    let v = inputs.pipeline;
    let plan = &v.plan;
    let mut enums: Vec<Vec<String>> = Vec::new();
    let mut scope = Scope::new();
    let mut counter = 0usize;
    let mut fresh = |name: &str| {
        counter += 1;
        format_ident!("f_{}_{}", name.trim_start_matches('_'), counter)
    };

    // Decoding: one local per input field, in schema order.
    let mut decode_stmts = Vec::new();
    let live = plan.live_inputs();
    decode_nodes(&plan.decode, &plan.input, &live, &mut decode_stmts, &mut scope, &mut fresh);
    let mut meta_stmts = Vec::new();
    for c in metadata_columns() {
        let id = fresh(&c.name);
        let init = match c.name.as_str() {
            "_key" => quote!(record.key.map(::std::borrow::Cow::Borrowed)),
            "_partition" => quote!(record.partition),
            "_offset" => quote!(record.offset),
            _ => quote!(record.timestamp_ms),
        };
        meta_stmts.push(quote!(let #id = #init;));
        scope.insert(c.name.clone(), id);
    }

    // Records nested in containers become structs.
    let mut records = Vec::new();
    for c in plan.input.iter().chain(plan.output.iter()) {
        nested_records(&c.ty, &mut records);
    }
    let record_defs = records.iter().map(|r| {
        let name = record_ident(r);
        let fields = r.fields.iter().map(|c| {
            let id = field_ident(&c.name);
            let ty = rust_ty(&c.ty);
            let doc = format!("`{}`: {} (ClickHouse `{}`)", c.name, c.ty, c.ty.clickhouse());
            quote!(#[doc = #doc] pub #id: #ty)
        });
        let doc = format!("The Avro record `{}`.", r.name);
        quote!(#[doc = #doc] #[derive(Clone, Debug, PartialEq)] pub struct #name<'a> { #(#fields,)* })
    });

    // The operators, innermost last: flat_map opens a loop that the rest runs inside.
    let mut row: Vec<Column> = plan.input.clone();
    let mut row_types = Vec::new();
    let tail = steps(
        &plan.steps,
        0,
        &mut row,
        &mut scope,
        &mut fresh,
        false,
        &mut row_types,
        inputs.user_files,
        &mut enums,
        v,
    )?;

    let enum_tables = enums.iter().enumerate().map(|(i, symbols)| {
        let id = format_ident!("ENUM_{}", i);
        let n = symbols.len();
        quote!(static #id: [&str; #n] = [#(#symbols),*];)
    });

    let uses_registry = v.model.format.avro.registry.is_some() && v.model.format.avro.wire == Wire::Confluent;
    // The decoder alone, for benchmarks: the writer schema is taken to be the reader's.
    let bench_framing = match v.model.format.avro.wire {
        Wire::Confluent => quote!(let (_schema_id, mut buf) = rt::avro::confluent(payload)?;),
        Wire::Raw => quote!(let mut buf = payload;),
    };
    let framing = match v.model.format.avro.wire {
        // With a registry (its URL may resolve to empty at run time: then none), a writer
        // schema that differs from the reader schema is resolved and re-encoded first.
        Wire::Confluent if uses_registry => quote!(
            let (schema_id, datum) = rt::avro::confluent(payload)?;
            let resolved;
            let mut buf = match &self.registry {
                Some(registry) => {
                    resolved = registry.resolve(schema_id, datum)?;
                    resolved.bytes()
                }
                None => {
                    rt::avro::reader_schema_id(schema_id, SCHEMA_IDS)?;
                    datum
                }
            };
        ),
        // Without a registry only the reader schema's own ids can be decoded.
        Wire::Confluent => quote!(
            let (schema_id, mut buf) = rt::avro::confluent(payload)?;
            rt::avro::reader_schema_id(schema_id, SCHEMA_IDS)?;
        ),
        Wire::Raw => bench_framing.clone(),
    };
    let chain_struct = if uses_registry {
        quote!(
            #[derive(Default)]
            pub(crate) struct Chain {
                /// The schema registry, when `format.avro.registry` resolves to a URL.
                registry: ::std::option::Option<rt::Registry>,
            }
        )
    } else {
        quote!(
            #[derive(Default)]
            pub(crate) struct Chain;
        )
    };
    let max_message = Literal::usize_unsuffixed(v.model.format.max_message_bytes.bytes() as usize);
    let schema_ids = v.model.format.avro.schema_ids();
    let schema_ids_const = match v.model.format.avro.wire {
        Wire::Confluent => quote!(
            /// `format.avro.schema_id`: the registry ids of the reader schema, decoded directly.
            const SCHEMA_IDS: &[u32] = &[#(#schema_ids),*];
        ),
        Wire::Raw => TokenStream::new(),
    };
    let user_mods = inputs.user_files.iter().enumerate().map(|(i, (module, path))| {
        let m = format_ident!("{}", module);
        let row_ty = row_types.iter().find(|(idx, _)| *idx == i).map(|(_, name)| name.clone());
        let alias = row_ty.map(|name| quote!(#[allow(unused_imports)] use super::rows::#name as Row;));
        quote!(#[allow(dead_code)] mod #m { #alias include!(#path); })
    });
    let row_structs = row_types.iter().map(|(_, name)| {
        let _ = name;
        quote!()
    });
    let rows_mod = rows_module(&plan.steps);
    let bench_decode = if inputs.bench {
        // Every field built, as apache-avro's generic path (its comparison) does.
        let all: BTreeSet<String> = plan.input.iter().map(|c| c.name.clone()).collect();
        let (mut stmts, mut bench_scope) = (Vec::new(), Scope::new());
        decode_nodes(&plan.decode, &plan.input, &all, &mut stmts, &mut bench_scope, &mut fresh);
        let locals: Vec<proc_macro2::Ident> = plan.input.iter().map(|c| bench_scope[&c.name].clone()).collect();
        quote!(
            /// The decoder alone (framing, every field built, the end check), for benchmarks.
            pub(crate) fn bench_decode(payload: &[u8]) -> ::std::result::Result<(), rt::RecordError> {
                #bench_framing
                #(#stmts)*
                rt::avro::end(buf)?;
                #(::std::hint::black_box(&#locals);)*
                Ok(())
            }
        )
    } else {
        TokenStream::new()
    };
    let main_fn = main_fn(inputs)?;
    let _ = row_structs;
    let fuzz_wire = datagen_wire(&v.model);
    let fuzz_test = quote!(
        #[cfg(test)]
        mod tests {
            use super::rt;

            /// Random and damaged payloads are record errors (or rows), never a panic.
            #[test]
            fn random_payloads_never_panic() {
                let schema = rt::apache_avro::Schema::parse_str(super::SCHEMA).expect("the schema was validated by gen");
                rt::fuzz_chain(super::Chain::default, &schema, #fuzz_wire, 4000, 7);
            }
        }
    );

    Ok(quote! {
        use etl_runtime::__private as rt;

        const MAX_MESSAGE_BYTES: usize = #max_message;
        #schema_ids_const

        #(#enum_tables)*
        #(#record_defs)*
        #rows_mod
        #(#user_mods)*

        /// The chain: decode, operators and encoding, inlined into one function.
        #chain_struct

        impl rt::Chain for Chain {
            #[inline]
            fn process(&mut self, record: &rt::Record<'_>, out: &mut rt::RowOut<'_>) -> ::std::result::Result<(), rt::RecordError> {
                // Tombstones never reach the chain; the runtime applies `errors.tombstones`.
                let payload = record.payload.unwrap_or_default();
                if payload.len() > MAX_MESSAGE_BYTES {
                    return Err(rt::RecordError::new(
                        rt::RecordErrorKind::Oversize,
                        format!("message of {} bytes exceeds format.max_message_bytes ({})", payload.len(), MAX_MESSAGE_BYTES),
                    ));
                }
                #framing
                #(#decode_stmts)*
                rt::avro::end(buf)?;
                #(#meta_stmts)*
                #tail
                Ok(())
            }
        }

        #bench_decode

        #main_fn

        #fuzz_test
    })
}

/// How synthesized records are framed: as the pipeline's wire says, with the reader schema's own
/// id, so the chain decodes them directly.
pub(super) fn datagen_wire(m: &crate::model::PipelineFile) -> TokenStream {
    match m.format.avro.wire {
        Wire::Raw => quote!(rt::Wire::Raw),
        Wire::Confluent => {
            let id = m.format.avro.schema_ids().first().copied().unwrap_or(1);
            quote!(rt::Wire::Confluent { schema_id: #id })
        }
    }
}

/// The decoder's statements. A field the chain never reads (not in `live`) is read past, not
/// built: no UTF-8 check of its strings, no allocation for its containers.
fn decode_nodes(
    nodes: &[DecodeNode],
    input: &[Column],
    live: &BTreeSet<String>,
    out: &mut Vec<TokenStream>,
    scope: &mut Scope,
    fresh: &mut impl FnMut(&str) -> proc_macro2::Ident,
) {
    for node in nodes {
        match node {
            DecodeNode::Leaf { column, avro } if !live.contains(column) => out.push(skip(avro)),
            DecodeNode::Leaf { column, avro } => {
                let id = fresh(column);
                let ty = input.iter().find(|c| &c.name == column).map(|c| local_ty(&c.ty)).expect("input column");
                let d = decode(avro);
                out.push(quote!(let #id: #ty = #d;));
                scope.insert(column.clone(), id);
            }
            DecodeNode::Nested(children) => decode_nodes(children, input, live, out, scope, fresh),
        }
    }
}

/// The `rows` module: the row type each `rust` operator sees, documented field by field.
fn rows_module(steps: &[Step]) -> TokenStream {
    let structs: Vec<TokenStream> = steps
        .iter()
        .filter_map(|s| match s {
            Step::Rust { row, index, function, .. } => {
                let name = format_ident!("Row{}", index);
                let fields = row.iter().map(|c| {
                    let id = field_ident(&c.name);
                    let ty = rust_ty(&c.ty);
                    let doc = format!("`{}`: {}", c.name, c.ty);
                    quote!(#[doc = #doc] pub #id: #ty)
                });
                let doc = format!("The row `transform[{index}]` (`{function}`) receives.");
                Some(quote!(#[doc = #doc] #[derive(Clone, Debug, PartialEq)] pub struct #name<'a> { #(#fields,)* }))
            }
            _ => None,
        })
        .collect();
    if structs.is_empty() {
        return TokenStream::new();
    }
    quote!(
        /// The row types `rust` operators receive.
        pub mod rows {
            #[allow(unused_imports)]
            use super::*;
            #(#structs)*
        }
    )
}

#[allow(clippy::too_many_arguments)]
fn steps(
    steps_left: &[Step],
    rust_index: usize,
    row: &mut Vec<Column>,
    scope: &mut Scope,
    fresh: &mut impl FnMut(&str) -> proc_macro2::Ident,
    in_loop: bool,
    row_types: &mut Vec<(usize, proc_macro2::Ident)>,
    user_files: &[(String, String)],
    enums: &mut Vec<Vec<String>>,
    v: &Validated,
) -> Result<TokenStream, String> {
    let skip = if in_loop { quote!(continue) } else { quote!(return Ok(())) };
    let Some((step, rest)) = steps_left.split_first() else {
        return Ok(output(row, scope, enums, v));
    };
    let mut out = TokenStream::new();
    let mut rust_index = rust_index;
    match step {
        Step::Filter { cond } => {
            // A named condition reads as the YAML does and keeps clippy's boolean rewrites away.
            let c = condition(cond, scope);
            out.extend(quote!(
                let keep: bool = #c;
                if !keep { #skip; }
            ));
        }
        Step::Map { assigns } => {
            let mut temps = Vec::new();
            for (field, e) in assigns {
                let t = fresh(field);
                let val = value(e, scope);
                let ty = local_ty(&e.ty);
                out.extend(quote!(let #t: #ty = #val;));
                temps.push((field.clone(), t, e.ty.clone()));
            }
            for (field, t, ty) in temps {
                match row.iter_mut().find(|c| c.name == field) {
                    Some(c) => c.ty = ty,
                    None => row.push(Column { name: field.clone(), ty }),
                }
                scope.insert(field, t);
            }
        }
        Step::Reshape { fields } => {
            let old_scope = scope.clone();
            let old_row = std::mem::take(row);
            for (new, from) in fields {
                let ty = old_row.iter().find(|c| &c.name == from).map(|c| c.ty.clone()).expect("planned");
                row.push(Column { name: new.clone(), ty });
                // A field nothing reads later was never decoded (see `Plan::live_inputs`).
                if let Some(id) = old_scope.get(from) {
                    scope.insert(new.clone(), id.clone());
                }
            }
            // Names no longer in the row must not be readable by later steps.
            let keep: Vec<String> = row.iter().map(|c| c.name.clone()).collect();
            scope.retain(|k, _| keep.contains(k) || k.starts_with('_'));
        }
        Step::FlatMap { field, elem } => {
            let list = scope[field].clone();
            let item = format_ident!("item");
            let pos = row.iter().position(|c| &c.name == field).expect("planned");
            let mut binds = TokenStream::new();
            let replacement: Vec<Column> = match elem {
                Ty::Record(r) => r
                    .fields
                    .iter()
                    .map(|c| {
                        let name = format!("{field}_{}", c.name);
                        let id = fresh(&name);
                        let member = field_ident(&c.name);
                        binds.extend(quote!(let #id = #item.#member;));
                        scope.insert(name.clone(), id);
                        Column { name, ty: c.ty.clone() }
                    })
                    .collect(),
                other => {
                    let id = fresh(field);
                    binds.extend(quote!(let #id = #item;));
                    scope.insert(field.clone(), id);
                    vec![Column { name: field.clone(), ty: other.clone() }]
                }
            };
            row.splice(pos..=pos, replacement);
            let inner = steps(rest, rust_index, row, scope, fresh, true, row_types, user_files, enums, v)?;
            out.extend(quote!(for #item in #list { #binds #inner }));
            return Ok(out);
        }
        Step::Rust { function, index, row: row_ty, .. } => {
            let struct_name = format_ident!("Row{}", index);
            row_types.push((rust_index, struct_name.clone()));
            let (module, _) = user_files.get(rust_index).ok_or("a user file for each rust operator")?;
            let module = format_ident!("{}", module);
            let function = format_ident!("{}", function);
            let inits = row_ty.iter().map(|c| {
                let id = field_ident(&c.name);
                let local = &scope[&c.name];
                if super::expr::is_copy(&c.ty) { quote!(#id: #local) } else { quote!(#id: #local.clone()) }
            });
            let r = format_ident!("row_{}", index);
            out.extend(quote!(
                let mut #r = rows::#struct_name { #(#inits,)* };
                if !#module::#function(&mut #r) { #skip; }
            ));
            for c in row_ty {
                let id = fresh(&c.name);
                let member = field_ident(&c.name);
                out.extend(quote!(let #id = #r.#member;));
                scope.insert(c.name.clone(), id);
            }
            rust_index += 1;
        }
    }
    out.extend(steps(rest, rust_index, row, scope, fresh, in_loop, row_types, user_files, enums, v)?);
    Ok(out)
}

/// Chooses the shard and appends the encoded row.
fn output(row: &[Column], scope: &Scope, enums: &mut Vec<Vec<String>>, v: &Validated) -> TokenStream {
    let shard = match &v.model.sink {
        Sink::Clickhouse(c) if c.shards.len() > 1 => match &v.plan.shard_key {
            Some(key) => {
                let col = row.iter().find(|c| &c.name == key).expect("planned shard key");
                let local = &scope[key];
                let bytes = hash_bytes(&col.ty, quote!(x), enums);
                if col.ty.is_nullable() {
                    // A null key goes to shard 0 (ClickHouse's xxHash64(NULL) is NULL).
                    quote!(match &#local { Some(x) => out.shard_for_key_hash(rt::shard_hash(#bytes)), None => 0 })
                } else {
                    quote!({ let x = &#local; out.shard_for_key_hash(rt::shard_hash(#bytes)) })
                }
            }
            None => quote!(out.round_robin()),
        },
        _ => quote!(0),
    };
    let encode: Vec<TokenStream> = match &v.model.sink {
        Sink::Clickhouse(_) => row
            .iter()
            .map(|c| {
                let local = &scope[&c.name];
                rowbinary(&c.ty, &Val::Place(quote!(#local)), enums)
            })
            .collect(),
        Sink::File(f) => {
            let FileFormat::Ndjson = f.format;
            let mut parts = Vec::new();
            for (i, c) in row.iter().enumerate() {
                let local = &scope[&c.name];
                let key = Literal::byte_string(format!("{}\"{}\":", if i == 0 { "{" } else { "," }, c.name).as_bytes());
                parts.push(quote!(buf.extend_from_slice(#key);));
                parts.push(json(&c.ty, &Val::Place(quote!(#local)), enums));
            }
            parts.push(quote!(buf.extend_from_slice(b"}\n");));
            parts
        }
    };
    quote!(
        let shard = #shard;
        out.push_row(shard, |buf| { #(#encode)* });
    )
}

/// The bytes the shard hash covers: an integer's little-endian bytes, a text's bytes.
fn hash_bytes(ty: &Ty, x: TokenStream, enums: &mut Vec<Vec<String>>) -> TokenStream {
    match ty.non_null() {
        Ty::String => quote!(#x.as_bytes()),
        Ty::Bytes => quote!(&#x[..]),
        Ty::Enum { symbols, .. } => {
            let table = super::types::enum_table(symbols, enums);
            quote!(#table[*#x as usize].as_bytes())
        }
        Ty::Bool => quote!(&[u8::from(*#x)]),
        _ => quote!(&#x.to_le_bytes()),
    }
}

/// Every value the binary reads from its environment: key path, template, secret. The
/// order is the order `--check` prints them in.
pub(super) fn settings(m: &crate::model::PipelineFile) -> Result<Vec<(String, Template, bool)>, String> {
    let mut out = settings_of(m)?;
    for (key, _, secret) in &mut out {
        *secret = crate::secret::is_secret_setting(key);
    }
    Ok(out)
}

/// The settings of [`settings`], before the shared definition decides which are secret.
fn settings_of(m: &crate::model::PipelineFile) -> Result<Vec<(String, Template, bool)>, String> {
    let mut out = vec![("admin.listen".to_owned(), m.admin.listen.clone(), false)];
    if let Source::Kafka(k) = &m.source {
        out.push(("source.kafka.brokers".into(), k.brokers.clone(), false));
        out.push(("source.kafka.topic".into(), k.topic.clone(), false));
        out.push(("source.kafka.group_id".into(), k.group_id.clone(), false));
        for (name, value) in &k.rdkafka {
            let template =
                Template::parse(&value.to_text()).map_err(|e| format!("source.kafka.rdkafka.{name}: {e}"))?;
            out.push((format!("source.kafka.rdkafka.{name}"), template, false));
        }
        // The framework's default, shown by `--check` like the properties the user wrote.
        if !k.rdkafka.contains_key("auto.offset.reset") {
            let earliest = Template::parse(DEFAULT_AUTO_OFFSET_RESET).expect("a literal");
            out.push(("source.kafka.rdkafka.auto.offset.reset".into(), earliest, false));
        }
    }
    match &m.sink {
        Sink::File(f) => out.push(("sink.file.path".into(), f.path.clone(), false)),
        Sink::Clickhouse(c) => {
            for (s, shard) in c.shards.iter().enumerate() {
                for (r, replica) in shard.replicas.iter().enumerate() {
                    out.push((format!("sink.clickhouse.shards[{s}].replicas[{r}]"), replica.clone(), false));
                }
            }
            out.push(("sink.clickhouse.user".into(), c.user.clone(), false));
            out.push(("sink.clickhouse.password".into(), c.password.clone(), false));
            if let Some(ca_file) = &c.ca_file {
                out.push(("sink.clickhouse.ca_file".into(), ca_file.clone(), false));
            }
            for (name, value) in &c.settings {
                let template =
                    Template::parse(&value.to_text()).map_err(|e| format!("sink.clickhouse.settings.{name}: {e}"))?;
                out.push((format!("sink.clickhouse.settings.{name}"), template, false));
            }
        }
    }
    if let (Some(registry), Wire::Confluent) = (&m.format.avro.registry, m.format.avro.wire) {
        out.push(("format.avro.registry".into(), registry.clone(), false));
    }
    if let (ErrorPolicy::Dlq, Some(topic)) = (&m.errors.policy, &m.errors.dlq_topic) {
        out.push(("errors.dlq_topic".into(), topic.clone(), false));
    }
    Ok(out)
}

/// Where a partition without a committed offset starts unless `rdkafka:` says otherwise: the
/// beginning, so a new consumer group never skips what the topic already holds (the runtime's
/// Kafka source applies the same default to hand-written callers).
pub(crate) const DEFAULT_AUTO_OFFSET_RESET: &str = "earliest";

fn parts_tokens(t: &Template) -> TokenStream {
    let parts = t.parts().iter().map(|p| match p {
        Part::Lit(s) => quote!(rt::Part::Lit(#s)),
        Part::Var { name, default: Some(d) } => quote!(rt::Part::Var(#name, Some(#d))),
        Part::Var { name, default: None } => quote!(rt::Part::Var(#name, None)),
    });
    quote!(&[#(#parts),*])
}

fn main_fn(inputs: &MainInputs<'_>) -> Result<TokenStream, String> {
    let m = &inputs.pipeline.model;
    let name = &m.pipeline.name;
    let version = inputs.version;
    let hash = inputs.config_hash;
    let schema_include = inputs.schema_include;

    // Every value read from the environment, with its key, for `--check` and start-up.
    let settings = settings(m)?;
    let drain = m.checkpoint.drain_timeout.as_millis();
    let source = match &m.source {
        Source::Datagen(d) => {
            let (rate, count, seed, partitions) = (d.rate, d.count, d.seed, d.partitions);
            let wire = datagen_wire(m);
            quote!(
                let schema = rt::apache_avro::Schema::parse_str(SCHEMA).expect("the schema was validated by gen");
                let source = match rt::DatagenSource::new(schema, rt::DatagenConfig {
                    rate: #rate, count: #count, seed: #seed, partitions: #partitions, wire: #wire,
                }) {
                    Ok(source) => source,
                    Err(e) => return rt::startup_error(e),
                };
            )
        }
        Source::Kafka(k) => {
            let (commit, startup, stats) =
                (k.commit_interval.as_millis(), k.startup_timeout.as_millis(), k.statistics_interval.as_millis());
            quote!(
                let source = match rt::KafkaSource::new(rt::KafkaSourceConfig {
                    brokers: resolved.get("source.kafka.brokers").to_owned(),
                    topic: resolved.get("source.kafka.topic").to_owned(),
                    group_id: resolved.get("source.kafka.group_id").to_owned(),
                    commit_interval: ::std::time::Duration::from_millis(#commit),
                    startup_timeout: ::std::time::Duration::from_millis(#startup),
                    statistics_interval: ::std::time::Duration::from_millis(#stats),
                    properties: rdkafka_properties(&resolved),
                }) {
                    Ok(source) => source.with_drain_timeout(::std::time::Duration::from_millis(#drain)),
                    Err(e) => return rt::startup_error(e),
                };
            )
        }
    };
    let (sink, shard_count) = match &m.sink {
        Sink::File(_) => (
            quote!(
                let sink = match rt::FileSink::open(resolved.get("sink.file.path")) {
                    Ok(sink) => sink,
                    Err(e) => return rt::startup_error(format!("sink.file.path `{}`: {e}", resolved.get("sink.file.path"))),
                };
            ),
            1usize,
        ),
        Sink::Clickhouse(c) => {
            let mut shards = Vec::new();
            for (s, shard) in c.shards.iter().enumerate() {
                let mut replicas = Vec::new();
                for r in 0..shard.replicas.len() {
                    let key = format!("sink.clickhouse.shards[{s}].replicas[{r}]");
                    replicas.push(quote!(resolved.get(#key).to_owned()));
                }
                shards.push(quote!(vec![#(#replicas),*]));
            }
            let (database, table) = (&c.database, &c.table);
            let timeout = c.timeout.as_millis();
            let ca_file = match c.ca_file {
                Some(_) => quote!(Some(resolved.get("sink.clickhouse.ca_file").into())),
                None => quote!(None),
            };
            // The ledger's identity; E0901 made sure the source is Kafka.
            let exactly_once = if c.exactly_once {
                quote!(Some(rt::ExactlyOnceConfig {
                    pipeline: BUILD.pipeline.to_owned(),
                    topic: resolved.get("source.kafka.topic").to_owned(),
                    config_hash: BUILD.config_hash.to_owned(),
                }))
            } else {
                quote!(None)
            };
            let columns = inputs.pipeline.plan.output.iter().map(|col| {
                let (name, ty) = (&col.name, col.ty.clickhouse());
                quote!((#name.to_owned(), #ty.to_owned()))
            });
            (
                quote!(
                    let sink = match rt::ClickhouseSink::new(rt::ClickhouseSinkConfig {
                        shards: vec![#(#shards),*],
                        database: #database.to_owned(),
                        table: #table.to_owned(),
                        user: resolved.get("sink.clickhouse.user").to_owned(),
                        password: resolved.get("sink.clickhouse.password").to_owned(),
                        settings: resolved
                            .with_prefix("sink.clickhouse.settings.")
                            .map(|(k, v)| (k.to_owned(), v.to_owned()))
                            .collect(),
                        timeout: ::std::time::Duration::from_millis(#timeout),
                        columns: vec![#(#columns),*],
                        ca_file: #ca_file,
                        exactly_once: #exactly_once,
                    }) {
                        Ok(sink) => sink,
                        Err(e) => return rt::startup_error(e),
                    };
                ),
                c.shards.len(),
            )
        }
    };
    let registry_timeout = m.format.avro.registry_timeout.as_millis();
    let uses_registry = m.format.avro.registry.is_some() && m.format.avro.wire == Wire::Confluent;
    let chains = if uses_registry {
        quote!(
            let registry = match resolved.get("format.avro.registry").trim() {
                "" if SCHEMA_IDS.is_empty() => {
                    return rt::startup_error(
                        "format.avro.registry resolved to an empty URL and format.avro.schema_id is not set: \
                         Confluent-framed messages could not be told apart by writer schema; set the registry's \
                         variable, or set format.avro.schema_id to the reader schema's registry id",
                    );
                }
                "" => None,
                url => match rt::Registry::new(url, SCHEMA, SCHEMA_IDS, ::std::time::Duration::from_millis(#registry_timeout)) {
                    Ok(registry) => Some(registry),
                    Err(e) => return rt::startup_error(format!("format.avro.registry: {e}")),
                },
            };
            let chains = move || Chain { registry: registry.clone() };
        )
    } else {
        quote!(let chains = Chain::default;)
    };
    let dead_letter = match (&m.errors.policy, &m.errors.dlq_topic, &m.source) {
        (ErrorPolicy::Dlq, Some(_), Source::Kafka(_)) => {
            quote!(
                let dead_letter: ::std::option::Option<::std::sync::Arc<dyn rt::DeadLetter>> = match rt::KafkaDeadLetter::new(
                    resolved.get("source.kafka.brokers"),
                    resolved.get("errors.dlq_topic"),
                    &rdkafka_properties(&resolved),
                ) {
                    Ok(dlq) => Some(::std::sync::Arc::new(dlq.with_source_topic(resolved.get("source.kafka.topic")))),
                    Err(e) => return rt::startup_error(e),
                };
            )
        }
        _ => quote!(let dead_letter: ::std::option::Option<::std::sync::Arc<dyn rt::DeadLetter>> = None;),
    };
    let rdkafka_fn = match &m.source {
        Source::Kafka(_) => quote!(
            /// The `rdkafka:` passthrough properties, resolved.
            fn rdkafka_properties(
                resolved: &rt::Resolved,
            ) -> ::std::vec::Vec<(::std::string::String, ::std::string::String)> {
                resolved.with_prefix("source.kafka.rdkafka.").map(|(k, v)| (k.to_owned(), v.to_owned())).collect()
            }
        ),
        Source::Datagen(_) => TokenStream::new(),
    };
    let flow = m.sink.flow();
    let bp = &m.backpressure;
    let threads = match m.pipeline.threads {
        Some(t) => {
            let t = t as usize;
            quote!(#t)
        }
        None => quote!(::std::thread::available_parallelism().map_or(1, |n| n.get())),
    };
    let (max_inflight, high, low, min_pause) =
        (bp.max_inflight_bytes.bytes(), bp.high_ratio.to_f64(), bp.low_ratio.to_f64(), bp.min_pause.as_millis());
    let (max_rows, max_bytes, linger) =
        (flow.batch.max_rows, flow.batch.max_bytes.bytes(), flow.batch.linger.as_millis());
    let inflight = flow.inflight.max_per_shard as usize;
    let chunk = flow.chunk.target_bytes.bytes() as usize;
    let queue = flow.queue.capacity as usize;
    let retry = match &m.sink {
        Sink::Clickhouse(c) => {
            (c.retry.max_attempts, c.retry.initial_backoff.as_millis(), c.retry.max_backoff.as_millis())
        }
        Sink::File(_) => (10, 100, 10_000),
    };
    let (attempts, initial, max_backoff) = retry;
    let exactly_once_runtime = matches!(&m.sink, Sink::Clickhouse(c) if c.exactly_once);
    let policy = match m.errors.policy {
        ErrorPolicy::Skip => quote!(rt::ErrorPolicy::Skip),
        ErrorPolicy::Fail => quote!(rt::ErrorPolicy::Fail),
        ErrorPolicy::Dlq => quote!(rt::ErrorPolicy::DeadLetter),
    };
    let tombstones = match m.errors.tombstones {
        TombstonePolicy::Skip => quote!(rt::TombstonePolicy::Skip),
        TombstonePolicy::Fail => quote!(rt::TombstonePolicy::Fail),
    };
    let setting_items = settings.iter().map(|(key, t, _)| {
        let parts = parts_tokens(t);
        quote!(rt::Setting { key: #key, parts: #parts })
    });
    Ok(quote! {
        /// The reader schema, compiled in.
        #[allow(dead_code)]
        pub(crate) const SCHEMA: &str = include_str!(#schema_include);

        const BUILD: rt::Build = rt::Build { pipeline: #name, version: #version, config_hash: #hash };

        /// The values read from the environment at start-up.
        static SETTINGS: &[rt::Setting] = &[#(#setting_items),*];

        fn main() -> ::std::process::ExitCode {
            let resolved = match rt::start(&BUILD, SETTINGS) {
                rt::Start::Run(resolved) => resolved,
                rt::Start::Exit(code) => return code,
            };
            rt::init_logging();
            let admin_listen = match resolved.socket_addr("admin.listen") {
                Ok(addr) => addr,
                Err(e) => return rt::startup_error(e),
            };
            let config = rt::RuntimeConfig {
                pipeline: BUILD.pipeline.to_owned(),
                config_hash: BUILD.config_hash.to_owned(),
                version: BUILD.version.to_owned(),
                threads: #threads,
                shards: #shard_count,
                backpressure: rt::BackpressureConfig {
                    max_inflight_bytes: #max_inflight,
                    high_ratio: #high,
                    low_ratio: #low,
                    min_pause: ::std::time::Duration::from_millis(#min_pause),
                },
                batch: rt::BatchConfig {
                    max_rows: #max_rows,
                    max_bytes: #max_bytes,
                    linger: ::std::time::Duration::from_millis(#linger),
                },
                inflight_per_shard: #inflight,
                chunk_target_bytes: #chunk,
                queue_capacity: #queue,
                retry: rt::RetryConfig {
                    max_attempts: #attempts,
                    initial_backoff: ::std::time::Duration::from_millis(#initial),
                    max_backoff: ::std::time::Duration::from_millis(#max_backoff),
                },
                drain_timeout: ::std::time::Duration::from_millis(#drain),
                error_policy: #policy,
                tombstones: #tombstones,
                admin_listen: Some(admin_listen),
                exactly_once: #exactly_once_runtime,
                unavailable_timeout: ::std::time::Duration::from_millis(#registry_timeout),
            };
            #source
            #sink
            #dead_letter
            #chains
            rt::run(config, source, chains, sink, dead_letter).into()
        }

        #rdkafka_fn
    })
}
