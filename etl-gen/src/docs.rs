//! Reference documents generated from the model and the rule catalogue.
//!
//! `cargo xtask codegen` writes them into docs/; a test regenerates them and fails when
//! the checked-in copies are stale, so the docs cannot drift from the code.

use serde_json::{Map, Value};

use crate::model::PipelineFile;

/// docs/configuration.md.
pub fn configuration_markdown() -> String {
    let schema = serde_json::to_value(schemars::schema_for!(PipelineFile)).expect("a JSON schema serializes");
    let defs = schema.get("$defs").and_then(Value::as_object).cloned().unwrap_or_default();
    let mut rows = Vec::new();
    collect(&schema, "", &defs, &mut rows, 0);
    let mut md = String::from(INTRO);
    let mut section = String::new();
    for row in rows {
        let top = row.path.split(['.', '[']).next().unwrap_or_default().to_owned();
        if top != section {
            md.push_str(&format!("\n## `{top}`\n\n| key | type | default | meaning |\n|---|---|---|---|\n"));
            section = top;
        }
        md.push_str(&format!("| `{}` | {} | {} | {} |\n", row.path, row.ty, row.default, row.doc.replace('\n', " ")));
    }
    md.push_str(OUTRO);
    md.push_str(EXPRESSIONS);
    for (name, signature, meaning) in crate::ir::FUNCTIONS {
        md.push_str(&format!("| `{name}` | `{signature}` | {meaning} |\n"));
    }
    md.push_str(&types_markdown());
    md
}

/// docs/pipeline.schema.json: a JSON Schema of pipeline.yaml for editors.
pub fn json_schema() -> String {
    let schema = schemars::schema_for!(PipelineFile);
    let mut text = serde_json::to_string_pretty(&schema).expect("a JSON schema serializes");
    text.push('\n');
    text
}

/// docs/diagnostics.md.
pub fn diagnostics_markdown() -> String {
    crate::rules::catalogue_markdown(&[crate::rules::RULES, crate::plan::CHAIN_RULES])
}

struct Row {
    path: String,
    ty: String,
    default: String,
    doc: String,
}

fn resolve<'a>(schema: &'a Value, defs: &'a Map<String, Value>) -> &'a Value {
    match schema.get("$ref").and_then(Value::as_str).and_then(|r| r.strip_prefix("#/$defs/")) {
        Some(name) => defs.get(name).map(|d| resolve(d, defs)).unwrap_or(schema),
        None => schema,
    }
}

fn ref_name(schema: &Value) -> Option<&str> {
    schema.get("$ref").and_then(Value::as_str).and_then(|r| r.strip_prefix("#/$defs/"))
}

/// The non-null branch of an `Option<T>`.
fn unwrap_option(schema: &Value) -> &Value {
    if let Some(any) = schema.get("anyOf").and_then(Value::as_array) {
        let non_null: Vec<&Value> = any.iter().filter(|s| s.get("type") != Some(&Value::from("null"))).collect();
        if non_null.len() == 1 && any.len() == 2 {
            return non_null[0];
        }
    }
    schema
}

fn type_name(schema: &Value, defs: &Map<String, Value>) -> String {
    let schema = unwrap_option(schema);
    if let Some(name) = ref_name(schema) {
        match name {
            "Duration" => return "duration".into(),
            "Attempts" => return "integer or `unlimited`".into(),
            "ByteSize" => return "size".into(),
            "Ratio" => return "ratio".into(),
            "Template" => return "string, `${VAR}` allowed".into(),
            "ScalarValue" => return "string, number or bool".into(),
            _ => {}
        }
    }
    let resolved = resolve(schema, defs);
    if let Some(one_of) = resolved.get("oneOf").and_then(Value::as_array) {
        let consts: Vec<String> = one_of
            .iter()
            .filter_map(|v| v.get("const").or_else(|| v.get("enum").and_then(|e| e.get(0))).and_then(Value::as_str))
            .map(|c| format!("`{c}`"))
            .collect();
        if consts.len() == one_of.len() {
            return consts.join(" \\| ");
        }
    }
    match resolved.get("type") {
        Some(Value::String(t)) if t == "array" => {
            let items = resolved.get("items").map(|i| type_name(i, defs)).unwrap_or_default();
            format!("list of {items}")
        }
        Some(Value::String(t)) if t == "object" && resolved.get("properties").is_none() => {
            let values = resolved.get("additionalProperties").map(|i| type_name(i, defs)).unwrap_or_default();
            format!("map of {values}")
        }
        Some(Value::String(t)) => match t.as_str() {
            "integer" => "integer".into(),
            other => other.into(),
        },
        Some(Value::Array(ts)) => {
            ts.iter().filter_map(Value::as_str).filter(|t| *t != "null").collect::<Vec<_>>().join(" or ")
        }
        _ => "see below".into(),
    }
}

fn default_text(schema: &Value, required: bool) -> String {
    match schema.get("default") {
        Some(Value::Null) => "none".into(),
        Some(Value::String(s)) if s.is_empty() => "`\"\"`".into(),
        Some(Value::String(s)) => format!("`{s}`"),
        Some(Value::Array(a)) if a.is_empty() => "`[]`".into(),
        Some(Value::Object(o)) if o.is_empty() => "`{}`".into(),
        Some(v @ (Value::Array(_) | Value::Object(_))) => {
            let compact = v.to_string().replace('"', "");
            if compact.len() <= 80 { format!("`{compact}`") } else { "see the example below".into() }
        }
        Some(v) => format!("`{v}`"),
        None if required => "**required**".into(),
        None => "none".into(),
    }
}

fn collect(schema: &Value, path: &str, defs: &Map<String, Value>, rows: &mut Vec<Row>, depth: usize) {
    let resolved = resolve(unwrap_option(schema), defs);
    // Externally tagged enums (`source`, `sink`, operators): one sub-tree per variant.
    if let Some(one_of) = resolved.get("oneOf").and_then(Value::as_array) {
        for variant in one_of {
            let Some(props) = variant.get("properties").and_then(Value::as_object) else { continue };
            for (name, sub) in props {
                let sub_path = if path.is_empty() { name.clone() } else { format!("{path}.{name}") };
                let doc = variant.get("description").and_then(Value::as_str).unwrap_or_default();
                let sub_resolved = resolve(unwrap_option(sub), defs);
                if sub_resolved.get("properties").is_some() && depth < 8 {
                    rows.push(Row {
                        path: sub_path.clone(),
                        ty: "section".into(),
                        default: "one of these".into(),
                        doc: doc.into(),
                    });
                    collect(sub, &sub_path, defs, rows, depth + 1);
                } else {
                    rows.push(Row {
                        path: sub_path,
                        ty: type_name(sub, defs),
                        default: "one of these".into(),
                        doc: doc.into(),
                    });
                }
            }
        }
        return;
    }
    let Some(props) = resolved.get("properties").and_then(Value::as_object) else { return };
    let required: Vec<&str> = resolved
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    for (name, sub) in props {
        let sub_path = if path.is_empty() { name.clone() } else { format!("{path}.{name}") };
        let doc = sub.get("description").and_then(Value::as_str).unwrap_or_default().to_owned();
        let target = resolve(unwrap_option(sub), defs);
        let is_section = target.get("properties").is_some()
            || target
                .get("oneOf")
                .is_some_and(|o| o.as_array().is_some_and(|a| a.iter().any(|v| v.get("properties").is_some())));
        if is_section && depth < 8 {
            if !path.is_empty() {
                rows.push(Row {
                    path: sub_path.clone(),
                    ty: "section".into(),
                    default: default_text(sub, required.contains(&name.as_str())),
                    doc,
                });
            }
            collect(sub, &sub_path, defs, rows, depth + 1);
        } else if target.get("type") == Some(&Value::from("array"))
            && target.get("items").is_some_and(|i| {
                resolve(i, defs).get("properties").is_some() || resolve(i, defs).get("oneOf").is_some()
            })
        {
            rows.push(Row {
                path: sub_path.clone(),
                ty: "list".into(),
                default: default_text(sub, required.contains(&name.as_str())),
                doc,
            });
            collect(&target["items"], &format!("{sub_path}[]"), defs, rows, depth + 1);
        } else if let Some(values) =
            target.get("additionalProperties").filter(|v| resolve(v, defs).get("properties").is_some())
        {
            // A map of sections (`outputs`): each entry's keys, under `<name>`.
            rows.push(Row {
                path: sub_path.clone(),
                ty: "map of sections".into(),
                default: default_text(sub, required.contains(&name.as_str())),
                doc,
            });
            collect(values, &format!("{sub_path}.<name>"), defs, rows, depth + 1);
        } else {
            rows.push(Row {
                path: sub_path,
                ty: type_name(sub, defs),
                default: default_text(sub, required.contains(&name.as_str())),
                doc,
            });
        }
    }
}

const INTRO: &str = "<!-- generated by `cargo xtask codegen` from etl-gen/src/model.rs and the readers (etl-gen/src/readers); do not edit -->
# Configuration reference

A pipeline is one `pipeline.yaml`. `cargo xtask gen pipeline.yaml --check` validates it;
every rule and its code is in [diagnostics.md](diagnostics.md). Unknown keys are errors at
every depth. An editor can check files against [pipeline.schema.json](pipeline.schema.json).

- **Durations**: `250ms`, `5s`, `2m`, `1h`.
- **Sizes**: `512KiB`, `16MiB`, `1GiB` (binary), `16MB` (decimal), or plain bytes.
- **Ratios**: decimals such as `0.9`, compared exactly.
- **Environment**: `${VAR}` and `${VAR:-default}` are read when the binary starts, in the
  keys marked \"`${VAR}` allowed\" only. Every other key is compiled into the binary and
  checked at gen time, so it must be a literal (rule E0105).
- **Exactly one** of `source.kafka` / `source.datagen`, of `source.kafka.topic` / `topics` / `topic_pattern`, and of `sink.clickhouse` / `sink.file`.

## The sizing rule

```text
max_inflight_bytes × low_ratio ≥ 2 × ( shards × inflight.max_per_shard × batch.max_bytes
                                     + shards × queue.capacity × chunk.target_bytes )
```

`shards` is the number of entries in `sink.clickhouse.shards` (1 for `sink.file`). With the
defaults the right side is 68 MiB per shard against a 256 MiB low watermark, so they pass for
1 to 3 shards; with more, `gen` prints the smallest passing `max_inflight_bytes` and the
largest passing `batch.max_bytes` (rule E0401). Also checked: `0 < low_ratio < high_ratio <= 1`
and `chunk.target_bytes <= batch.max_bytes`.

With `outputs`, each (output, shard) has its own queue, batches and in-flight inserts, so both
terms count them all; with O outputs the rule reads

```text
max_inflight_bytes × low_ratio ≥ 2 × ( O × shards × inflight.max_per_shard × batch.max_bytes
                                     + O × shards × queue.capacity × chunk.target_bytes )
```

and its two fixes (the smallest budget, the largest `batch.max_bytes`) are computed with
O × shards. `gen --memory` counts open buffers and insert frames per (output, shard) the same
way. The in-flight budget is one, shared by every output.
";

const EXPRESSIONS: &str = "
## Expressions (`filter`, `map`)

- **Names**: the fields of the row at that point of the chain (nested record fields are
  flattened as `parent_child`, or are fields of a tuple column under `sink.clickhouse.nested:
  tuple`; either way `parent.child` reads one, so an expression need not change with the mode;
  after `flat_map` over an array of records, the element's fields are `array_field`), and the Kafka metadata `_key` (nullable bytes), `_topic`
  (string: the record's topic; `datagen` under `source.datagen`), `_partition`, `_offset`,
  `_timestamp` (nullable timestamp-millis) and `_headers` (the record's Kafka headers as a
  map of bytes: each name once, with its last value; a null value is empty; a name that is
  not UTF-8 has U+FFFD for its invalid bytes). Metadata fields are read in expressions; `map`
  copies one into the row (`map: { part: \"_partition\", headers: \"_headers\" }`: a
  `Map(String, String)` column).
- **Headers**: `header('name')` is the value of the record's last header called `name`, as
  nullable bytes (null when there is none or its value is null); `header_str('name')` is the
  same as a nullable string, and a value that is not UTF-8 is a record error. The name is a
  literal. The last one wins because a producer that adds a header again means to replace it.
- **Variants**: `v.Int64` is the member of that ClickHouse type (its name without arguments:
  `v.String`, `v.Float64`, `v.DateTime64`) when the variant holds it, else null; so
  `!is_null(v.String)` tests which member a value is. A variant column is copied whole by
  `map` and `select`.
- **Maps**: `m[key]` is the value of the map's entry with that key, nullable (null when the
  key is absent; an absent array or map value reads as empty), and `length(m)` its number of
  entries. The key is an expression of the map's key type (`attrs['color']`,
  `_headers[header_str('tenant')]`), or an integer literal that fits an integer key type
  (`names[7]`); a null key reads null. A map of records cannot be indexed (ClickHouse has no
  nullable tuple).
- **Literals**: integers, decimals (doubles), `'strings'` (`''` for a quote), `true`,
  `false`, `null`.
- **Operators**: `+ - * / %`, `== != < <= > >=`, `&& || !`, parentheses. Comparisons do not
  chain.
- **Numbers**: integers (and dates and timestamps, as their ticks) compute as 64-bit
  integers; an overflow or an integer division by zero is a record error (handled by
  `errors.policy`). Any double or decimal operand makes the result a double.
- **Null**: arithmetic with null is null; a comparison with null is false (so `x == null`
  is rejected: use `is_null(x)`); in a condition null counts as false.
- **Enums** compare with string literals that must be one of their symbols; `lower` and
  `upper` give their symbol.
- Types are checked by `gen`: an unknown field, an unknown function or a type error is a
  diagnostic pointing at the YAML line (rules E0701 to E0709).

| function | signature | meaning |
|---|---|---|
";

/// One format's section: its heading and what comes before its type table, the table's first
/// column, the reader's `MAPPING`, and what comes after (how its input is read).
struct TypesSection {
    before: &'static str,
    column: &'static str,
    mapping: &'static [(&'static str, &'static str)],
    after: &'static str,
}

/// The three formats' sections, each table from its reader's `MAPPING`.
const TYPES: [TypesSection; 3] = [
    TypesSection { before: AVRO_BEFORE, column: "Avro", mapping: crate::readers::avro::MAPPING, after: AVRO_AFTER },
    TypesSection {
        before: JSON_BEFORE,
        column: "JSON Schema",
        mapping: crate::readers::json::MAPPING,
        after: JSON_AFTER,
    },
    TypesSection {
        before: PROTOBUF_BEFORE,
        column: "Protobuf",
        mapping: crate::readers::protobuf::MAPPING,
        after: PROTOBUF_AFTER,
    },
];

/// The type sections, then what holds for every format (DDL, sharding).
fn types_markdown() -> String {
    let mut md = String::new();
    for section in &TYPES {
        md.push_str(section.before);
        md.push_str(&format!("| {} | ClickHouse |\n|---|---|\n", section.column));
        for (from, to) in section.mapping {
            md.push_str(&format!("| {from} | {to} |\n"));
        }
        md.push_str(section.after);
    }
    md.push_str(TYPES_END);
    md
}

const AVRO_BEFORE: &str = "
## Avro to ClickHouse types

";

const AVRO_AFTER: &str = "
How datums are read (checked against apache-avro on random schemas: docs/INVARIANTS.md,
Invariant 10):

- Valid input, read as apache-avro reads it: an array or map in any number of blocks, a block's
  count negative and followed by its byte size; a map key written twice keeps its last value;
  a union's branch chosen by its index; fields the chain never reads are skipped by their framing
  (lengths, indexes and varints checked) without being built.
- Record errors: a datum shorter than its schema says, or with bytes left after it (the writer
  used another schema); a varint longer than 10 bytes, an `int` beyond 32 bits, a negative
  length; a boolean byte other than 0 or 1; a union or enum index the schema does not have; a
  block count more items than the bytes left could hold; a string that is not UTF-8, a `uuid`
  that is not a UUID string, a decimal wider than 16 bytes, in a field the chain reads.
";

const JSON_BEFORE: &str = "
## JSON to ClickHouse types

`format.json.schema` is a JSON Schema describing one message. `gen` reads the subset below
(anything else that changes a value's shape is rule E0606, with its path in the schema) and
writes a decoder for exactly these keys.

";

const JSON_AFTER: &str = "
How documents are read:

- Keys may come in any order; keys the schema does not name, and properties the chain never
  reads, are skipped without being built (their JSON is still checked). A key that repeats
  counts once: the last one wins.
- A key that is not a column name becomes one: every character outside `[A-Za-z0-9_]` becomes
  `_` (`user-agent` → `user_agent`); two keys that meet as one column are rule E0606.
- A required property that is absent is a record error naming it (``field `geo.lat`: a required
  property is missing``), a nullable one too (`required` is about the key: it may hold `null`),
  objects included; so is a value of the wrong type (``field `id`: expected an integer, found a
  string``), a document that is not JSON (RFC 8259: a raw control character in a string,
  invalid UTF-8 anywhere, a number beyond `Float64`), or anything after the document. A required
  property below an optional object is required only when the object is present. Properties the
  chain never reads are not checked for presence or type, but their JSON is checked as the rest
  is. These statements are checked against serde_json on random schemas (docs/INVARIANTS.md,
  Invariant 10).
- Strings are borrowed from the message unless they contain escapes.
- `wire: raw` (the default for JSON) is one document per message; `wire: confluent` is a magic
  byte and a 4-byte schema id before the document, and then `schema_id` lists the ids whose
  documents the reader schema reads. Any other id is a record error, unless `registry` is set:
  then the writer schema under that id is fetched once (retried for `registry_timeout`, the
  record's lane paused meanwhile), and its documents are decoded when the reader schema reads
  them by the rules of `gen --check --registry`, record errors when it does not. Before a
  deployment, `gen --check --registry` checks the subject's registered versions
  (docs/operations.md, section JSON documents and schema changes).
";

const PROTOBUF_BEFORE: &str = "
## Protobuf to ClickHouse types

`format.protobuf.schema` is a `.proto` file (proto3 or proto2) and `format.protobuf.message` the
fully qualified name of the message each Kafka message holds. `gen` compiles the file itself
(with `protox`: no `protoc`, nothing downloaded; imports resolved relative to the file's
directory; Google's well-known types built in) and writes a decoder for exactly this message.
A file that does not compile, or a message it does not define, is rule E0608 (which lists the
messages the file defines); a construct without a mapping is rule E0609, with its field path.

";

const PROTOBUF_AFTER: &str = "
How messages are read:

- A field without presence (proto3's plain fields, proto2 `required`) that is absent reads as its
  default: 0, `\"\"`, `false`, the enum's number 0 (proto2: its first value). An absent plain
  message field (not `optional`, not in a oneof) reads as its fields' defaults, as proto3's
  accessors show it; an absent `optional` or oneof message reads as NULL in every field.
- Fields may come in any order; a field that repeats counts as Protobuf says (the last scalar
  wins, a message, Timestamp or wrapper is merged, a repeated field appends; a oneof member
  unsets the others, also one the chain does not read). A message that is a map's value and
  comes twice within one entry is replaced, not merged.
- Valid input, read as Google's parsers read it: unknown fields of every wire type are skipped,
  groups (wire types 3 and 4, nested up to 100 deep) included; a known field number that
  arrives with a wire type its type cannot have is an unknown field too (the field keeps its
  value, a oneof its member); a repeated scalar may come packed, unpacked or both; fields the
  chain never reads are skipped by their wire type without being read.
- Record errors, each naming the field (``field `items[].sku`: a string that is not UTF-8``):
  a length or fixed-size value beyond the end of its message, a varint that is truncated or
  longer than 64 bits, field number 0 or above 2^29 - 1, wire type 6 or 7, an end-group tag
  with no group open or closing another field's group, a group that never ends or nests more
  than 100 deep, a string that is not UTF-8 in a field the chain reads (one it never reads is
  skipped unchecked, where Google's parsers refuse the message under proto3), an enum
  number the enum does not define (proto3 keeps it as a number, which a symbol column cannot
  hold), a Timestamp outside 1677..2262 or with nanos outside 0..10^9.
- Strings and bytes are borrowed from the message.
- `wire: raw` (the default for Protobuf) is the bare message; `wire: confluent` is a magic byte,
  a 4-byte schema id and Confluent's message-index path (zig-zag varints; the single byte `0` for
  the first message of the file) before it. `schema_id` lists the ids whose messages the reader
  schema reads, and the path must name `format.protobuf.message`. Any other id is a record
  error, unless `registry` is set: then the writer `.proto` under that id (and its references)
  is fetched once and compiled, and its messages are decoded when the reader schema reads them
  by the rules of `gen --check --registry`, record errors when it does not. Before a
  deployment, `gen --check --registry` checks the subject's registered versions
  (docs/operations.md, section Protobuf messages and schema changes).
- Not supported (rule E0609): proto2 groups and extensions, recursive messages, the other
  well-known types (`Any`, `ListValue`, `Duration`, `Empty`, `FieldMask`), repeated
  wrappers and maps of wrappers, and two types whose generated struct names meet (`Foo.Bar`
  and `FooBar`, or a type named `Chain` without a package).
";

const TYPES_END: &str = "
### The JSON type

A `JSON` column holds an object as the message carried it: the decoder checks its JSON (structure,
escapes, UTF-8) and keeps its text, without building it; ClickHouse parses it into its typed paths
on insert. From JSON Schema: an `object` with no `properties` and no `additionalProperties` schema
(`{\"type\": \"object\"}`, `additionalProperties: true`), or any property marked
`\"x-clickhouse-type\": \"JSON\"` (its other keywords are then not enforced); a value that is not
an object (`null` aside, when the property allows it) is a record error naming the field. From
Protobuf: `google.protobuf.Struct` (the object, its map's last entry of a key kept, a field that
comes twice merged) and `google.protobuf.Value` (`Nullable(JSON)`: a `struct_value`, or NULL for
`null_value`; any other kind is a record error); their text is built from the message.
Expressions can copy a JSON value (`map`, `select`) but not compare or compute with it.

On the wire, a Native insert sends the column as `String` (the server converts it to the table's
`JSON`), and a RowBinary insert sets `input_format_binary_read_json_as_string=1`, which the sink
adds itself when a column is `JSON`. Tested against ClickHouse 26.7 (the local server); the
`JSON` type needs 24.8 or later (where it is experimental: `allow_experimental_json_type=1`
on the table's server), and the RowBinary setting a release that has it (Native does not need
it). From Avro: a `string` with `\"logicalType\": \"json\"`, a logical type of etl-rs's own (the
Avro specification has none for JSON; other readers see a plain string, so producers need no
change): the string must be a JSON object, else a record error; datagen writes objects there.

`cargo xtask gen pipeline.yaml --ddl` prints the CREATE TABLE for a pipeline's output row;
`--ddl --replicated` prints it as a ReplicatedMergeTree created once `ON CLUSTER`
([operations.md](operations.md#replicated-tables)).
Rows are routed to shards by `xxHash64(shard_key) % shards` over the key's little-endian
bytes (integers) or bytes (texts), as a Distributed table with sharding key
`xxHash64(shard_key)` and equal weights would; without a shard key, round-robin.
";

const OUTRO: &str = "
## `transform` operators

Each entry of `transform:` is a one-key mapping, applied in order:

```yaml
transform:
  - filter: \"total_cents > 0 && region != 'APAC'\"
  - map: { total: \"total_cents / 100.0\", region_lc: \"lower(region)\" }
  - rename: { customer_id: customer }
  - drop: [coupon]
  - flat_map: items
  - select: [order_id, customer, total, items]
  - rust: { file: ops.rs, fn: enrich }
```
";
