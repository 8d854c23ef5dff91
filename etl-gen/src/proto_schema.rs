//! Protobuf as the generator sees it: one message of a `.proto` file, compiled by `protox` (no
//! `protoc`, Google's well-known types built in), read into [`PField`]s (what the generated
//! decoder dispatches on) and reduced to the column view every format shares ([`RecordType`]).
//!
//! Supported: every scalar, enums, nested messages (flattened), `repeated` (packed or not),
//! `map<K, V>`, `oneof`, proto3 `optional` and proto2 `optional`/`required`,
//! `google.protobuf.Timestamp` and the wrapper types (`Int64Value`, ...). Not supported, each
//! reported with its path: proto2 groups, messages with extension ranges, recursive messages, the
//! other well-known types (`Any`, `Struct`, `Value`, `Duration`, ...), and a repeated wrapper.

use std::path::Path;

use prost_reflect::{DescriptorPool, FieldDescriptor, Kind, MessageDescriptor};

use crate::schema::{AvroType, Field, RecordType, Unsupported};

/// A Protobuf scalar, by its wire form (which is what the decoder must know).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Scalar {
    /// `int32`: varint, two's complement (a negative value takes ten bytes)
    Int32,
    /// `sint32`: zig-zag varint
    Sint32,
    /// `sfixed32`: four bytes
    Sfixed32,
    /// `int64`: varint
    Int64,
    /// `sint64`: zig-zag varint
    Sint64,
    /// `sfixed64`: eight bytes
    Sfixed64,
    /// `uint32`: varint
    Uint32,
    /// `fixed32`: four bytes
    Fixed32,
    /// `uint64`: varint
    Uint64,
    /// `fixed64`: eight bytes
    Fixed64,
    /// `bool`: varint
    Bool,
    /// `float`: four bytes
    Float,
    /// `double`: eight bytes
    Double,
    /// `string`: length-delimited UTF-8
    String,
    /// `bytes`: length-delimited
    Bytes,
}

impl Scalar {
    /// The name in a `.proto` file (and the reader's method).
    pub(crate) fn name(self) -> &'static str {
        match self {
            Scalar::Int32 => "int32",
            Scalar::Sint32 => "sint32",
            Scalar::Sfixed32 => "sfixed32",
            Scalar::Int64 => "int64",
            Scalar::Sint64 => "sint64",
            Scalar::Sfixed64 => "sfixed64",
            Scalar::Uint32 => "uint32",
            Scalar::Fixed32 => "fixed32",
            Scalar::Uint64 => "uint64",
            Scalar::Fixed64 => "fixed64",
            Scalar::Bool => "bool",
            Scalar::Float => "float",
            Scalar::Double => "double",
            Scalar::String => "string",
            Scalar::Bytes => "bytes",
        }
    }

    /// The column type.
    pub(crate) fn column(self) -> AvroType {
        match self {
            Scalar::Int32 | Scalar::Sint32 | Scalar::Sfixed32 => AvroType::Int,
            Scalar::Int64 | Scalar::Sint64 | Scalar::Sfixed64 => AvroType::Long,
            Scalar::Uint32 | Scalar::Fixed32 => AvroType::UInt32,
            Scalar::Uint64 | Scalar::Fixed64 => AvroType::UInt64,
            Scalar::Bool => AvroType::Boolean,
            Scalar::Float => AvroType::Float,
            Scalar::Double => AvroType::Double,
            Scalar::String => AvroType::String,
            Scalar::Bytes => AvroType::Bytes,
        }
    }

    /// Whether `repeated` fields of it may be packed (every scalar but the length-delimited).
    pub(crate) fn packable(self) -> bool {
        !matches!(self, Scalar::String | Scalar::Bytes)
    }

    fn of(kind: &Kind) -> Option<Scalar> {
        Some(match kind {
            Kind::Double => Scalar::Double,
            Kind::Float => Scalar::Float,
            Kind::Int32 => Scalar::Int32,
            Kind::Int64 => Scalar::Int64,
            Kind::Uint32 => Scalar::Uint32,
            Kind::Uint64 => Scalar::Uint64,
            Kind::Sint32 => Scalar::Sint32,
            Kind::Sint64 => Scalar::Sint64,
            Kind::Fixed32 => Scalar::Fixed32,
            Kind::Fixed64 => Scalar::Fixed64,
            Kind::Sfixed32 => Scalar::Sfixed32,
            Kind::Sfixed64 => Scalar::Sfixed64,
            Kind::Bool => Scalar::Bool,
            Kind::String => Scalar::String,
            Kind::Bytes => Scalar::Bytes,
            Kind::Message(_) | Kind::Enum(_) => return None,
        })
    }
}

/// The shape of one (non-repeated) value.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum PType {
    /// A scalar → its ClickHouse twin.
    Scalar(Scalar),
    /// An enum → LowCardinality(String), by symbol name.
    Enum {
        /// A name for the enum, unique in the schema (its full name).
        name: String,
        /// Its symbols, in declaration order.
        symbols: Vec<String>,
        /// Their numbers, in the same order.
        numbers: Vec<i32>,
    },
    /// `google.protobuf.Timestamp` → DateTime64(9, 'UTC').
    Timestamp,
    /// A wrapper (`google.protobuf.Int64Value`, ...) → Nullable(T).
    Wrapper(Scalar),
    /// A message: flattened as `parent_child` in a row, a Tuple in a container.
    Message {
        /// Its full name, which also names its struct (dots as `_`).
        name: String,
        /// Its fields, in declaration order.
        fields: Vec<PField>,
    },
    /// `map<K, V>` → Map(String, V); keys that are not strings become their decimal text.
    Map {
        /// The key's scalar type.
        key: Scalar,
        /// The value.
        value: Box<PType>,
    },
}

impl PType {
    /// The enum's symbol index of number 0, proto3's default (the first symbol in proto2).
    pub(crate) fn enum_default(numbers: &[i32]) -> u32 {
        numbers.iter().position(|n| *n == 0).unwrap_or(0) as u32
    }
}

/// One field of a message.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct PField {
    /// The field number the decoder dispatches on.
    pub number: u32,
    /// The field (column part) name.
    pub name: String,
    /// Its shape.
    pub ty: PType,
    /// `repeated` (a map is not: its type says so).
    pub repeated: bool,
    /// Whether absence is told apart from the default: a scalar or enum with proto3 or proto2
    /// `optional`, any `oneof` member. Such a scalar is Nullable; such a message's fields are.
    pub presence: bool,
    /// The `oneof` it belongs to (not the synthetic one of proto3 `optional`): its index in
    /// the message, so the decoder can clear the other members when one arrives.
    pub oneof: Option<usize>,
}

/// What the decoder needs besides the fields.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Message {
    /// The message's full name.
    pub name: String,
    /// Its fields.
    pub fields: Vec<PField>,
    /// Its message-index path in the file (Confluent's framing names the message by it):
    /// `[0]` for the first top-level message, `[1, 0]` for the first nested in the second.
    pub indexes: Vec<i32>,
    /// The compiled file and its imports (a `FileDescriptorSet`), for the benchmark's generic
    /// decoders.
    pub descriptor_set: Vec<u8>,
}

/// Why the file cannot be used at all: it does not compile, or the message is not in it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Invalid {
    /// protox's message (with the file and line).
    Compile(String),
    /// The message is not defined; the messages the file does define.
    UnknownMessage(Vec<String>),
}

/// Compiles the `.proto` at `path` (imports resolved relative to its directory) and reads
/// `message` from it, listing every unsupported construct rather than the first.
pub(crate) fn parse(path: &Path, message: &str) -> Result<Result<Message, Vec<Unsupported>>, Invalid> {
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let file = path.file_name().map(Path::new).unwrap_or(path);
    let mut compiler = protox::Compiler::new([dir]).map_err(|e| Invalid::Compile(e.to_string()))?;
    compiler.include_imports(true);
    compiler.open_file(file).map_err(|e| Invalid::Compile(format!("{e:?}").replace('\n', " ")))?;
    read(&compiler, &file.to_string_lossy().replace('\\', "/"), message)
}

/// [`parse`] for a file held in memory: `main` is its name among `sources` (name → text), which
/// also hold what it imports by those names; Google's well-known types are built in. For writer
/// schemas from a registry, whose references name the imported schemas.
#[cfg(feature = "cli")]
pub(crate) fn parse_sources(
    main: &str,
    sources: &std::collections::BTreeMap<String, String>,
    message: &str,
) -> Result<Result<Message, Vec<Unsupported>>, Invalid> {
    /// Files by name, from memory.
    struct Sources(std::collections::BTreeMap<String, String>);
    impl protox::file::FileResolver for Sources {
        fn open_file(&self, name: &str) -> Result<protox::file::File, protox::Error> {
            match self.0.get(name) {
                Some(text) => protox::file::File::from_source(name, text),
                None => Err(protox::Error::file_not_found(name)),
            }
        }
    }
    let mut resolver = protox::file::ChainFileResolver::new();
    resolver.add(Sources(sources.clone()));
    resolver.add(protox::file::GoogleFileResolver::new());
    let mut compiler = protox::Compiler::with_file_resolver(resolver);
    compiler.include_imports(true);
    compiler.open_file(main).map_err(|e| Invalid::Compile(format!("{e:?}").replace('\n', " ")))?;
    read(&compiler, main, message)
}

/// Reads `message` from what `compiler` compiled, `file_name` being the opened file.
fn read(
    compiler: &protox::Compiler,
    file_name: &str,
    message: &str,
) -> Result<Result<Message, Vec<Unsupported>>, Invalid> {
    let pool: DescriptorPool = compiler.descriptor_pool();
    let Some(descriptor) = pool.get_message_by_name(message.trim_start_matches('.')) else {
        // The messages of the file itself (not of its imports), which is what `message` may name.
        let defined = pool
            .all_messages()
            .filter(|m| m.parent_file().name() == file_name && !m.is_map_entry())
            .map(|m| m.full_name().to_owned())
            .collect();
        return Err(Invalid::UnknownMessage(defined));
    };
    let mut cx = Walker { errors: Vec::new(), stack: Vec::new(), names: std::collections::HashMap::new() };
    // The top message names the datagen schema's record: another type may not take its name.
    cx.names.insert(record_name(descriptor.full_name()), descriptor.full_name().to_owned());
    let fields = cx.message(&descriptor, "");
    let indexes = descriptor.path().iter().skip(1).step_by(2).copied().collect();
    Ok(if cx.errors.is_empty() {
        Ok(Message {
            name: descriptor.full_name().to_owned(),
            fields: fields.unwrap_or_default(),
            indexes,
            descriptor_set: compiler.encode_file_descriptor_set(),
        })
    } else {
        Err(cx.errors)
    })
}

struct Walker {
    errors: Vec<Unsupported>,
    /// The messages being read, outermost first: a message met again is recursive.
    stack: Vec<String>,
    /// The generated name of each message and enum met (see [`record_name`]), and whose it is.
    names: std::collections::HashMap<String, String>,
}

impl Walker {
    fn unsupported(&mut self, path: &str, what: impl Into<String>, fix: &str) {
        self.errors.push(Unsupported { path: path.to_owned(), what: what.into(), fix: fix.to_owned() });
    }

    /// Two types whose generated names meet (`Foo.Bar` and `FooBar`), or a name the generated
    /// code uses itself, cannot both be structs of the generated crate.
    fn claim(&mut self, full_name: &str, path: &str) {
        let name = record_name(full_name);
        if name == "Chain" {
            self.unsupported(
                path,
                format!("`{full_name}` would be named `Chain`, which the generated code uses"),
                "give the type a package or another name",
            );
            return;
        }
        match self.names.get(&name) {
            Some(other) if other != full_name => {
                let other = other.clone();
                self.unsupported(
                    path,
                    format!("`{full_name}` and `{other}` would both be named `{name}` in the generated code"),
                    "rename one of them",
                );
            }
            _ => {
                self.names.insert(name, full_name.to_owned());
            }
        }
    }

    fn message(&mut self, m: &MessageDescriptor, path: &str) -> Option<Vec<PField>> {
        let here = if path.is_empty() { m.full_name().to_owned() } else { path.to_owned() };
        if self.stack.iter().any(|s| s == m.full_name()) {
            self.unsupported(
                &here,
                format!("message `{}` contains itself", m.full_name()),
                "a recursive message has no fixed set of columns: cut the cycle, or carry the nested part as `bytes`",
            );
            return None;
        }
        if m.extension_ranges().len() > 0 {
            self.unsupported(
                &here,
                format!("message `{}` declares extension ranges (proto2 extensions)", m.full_name()),
                "extensions are not part of the message's schema: declare the fields in the message itself",
            );
        }
        self.stack.push(m.full_name().to_owned());
        let mut fields = Vec::new();
        for f in m.fields() {
            let field_path = if path.is_empty() { f.name().to_owned() } else { format!("{path}.{}", f.name()) };
            if let Some(field) = self.field(&f, &field_path) {
                fields.push(field);
            }
        }
        self.stack.pop();
        Some(fields)
    }

    fn field(&mut self, f: &FieldDescriptor, path: &str) -> Option<PField> {
        if f.is_group() {
            self.unsupported(path, "a proto2 group", "declare a nested message and a field of that type instead");
            return None;
        }
        let oneof = f
            .containing_oneof()
            .filter(|o| !o.is_synthetic())
            .and_then(|o| f.parent_message().oneofs().position(|x| x.name() == o.name()));
        // A message field always has presence on the wire, but only a oneof member's counts here:
        // an absent plain message reads as its fields' defaults, as proto3 readers see it.
        let presence = !f.is_list()
            && !f.is_map()
            && match f.kind() {
                Kind::Message(_) => oneof.is_some(),
                _ => f.supports_presence(),
            };
        let ty = if f.is_map() {
            let Kind::Message(entry) = f.kind() else { unreachable!("a map field's type is its entry message") };
            let key = Scalar::of(&entry.map_entry_key_field().kind()).expect("map keys are scalars");
            let value = self.value(&entry.map_entry_value_field(), &format!("{path}{{}}"))?;
            if let PType::Wrapper(_) = value {
                self.unsupported(path, "a map of wrapper values", "use the wrapped scalar as the value type");
                return None;
            }
            PType::Map { key, value: Box::new(value) }
        } else {
            let ty = self.value(f, path)?;
            if f.is_list() && matches!(ty, PType::Wrapper(_)) {
                self.unsupported(path, "a repeated wrapper type", "repeat the wrapped scalar itself");
                return None;
            }
            ty
        };
        Some(PField { number: f.number(), name: f.name().to_owned(), ty, repeated: f.is_list(), presence, oneof })
    }

    /// The shape of one value of the field's type (its cardinality aside).
    fn value(&mut self, f: &FieldDescriptor, path: &str) -> Option<PType> {
        match f.kind() {
            Kind::Enum(e) => Some({
                self.claim(e.full_name(), path);
                PType::Enum {
                    name: e.full_name().to_owned(),
                    symbols: e.values().map(|v| v.name().to_owned()).collect(),
                    numbers: e.values().map(|v| v.number()).collect(),
                }
            }),
            Kind::Message(m) => match m.full_name() {
                "google.protobuf.Timestamp" => Some(PType::Timestamp),
                "google.protobuf.DoubleValue" => Some(PType::Wrapper(Scalar::Double)),
                "google.protobuf.FloatValue" => Some(PType::Wrapper(Scalar::Float)),
                "google.protobuf.Int64Value" => Some(PType::Wrapper(Scalar::Int64)),
                "google.protobuf.UInt64Value" => Some(PType::Wrapper(Scalar::Uint64)),
                "google.protobuf.Int32Value" => Some(PType::Wrapper(Scalar::Int32)),
                "google.protobuf.UInt32Value" => Some(PType::Wrapper(Scalar::Uint32)),
                "google.protobuf.BoolValue" => Some(PType::Wrapper(Scalar::Bool)),
                "google.protobuf.StringValue" => Some(PType::Wrapper(Scalar::String)),
                "google.protobuf.BytesValue" => Some(PType::Wrapper(Scalar::Bytes)),
                other if other.starts_with("google.protobuf.") => {
                    self.unsupported(
                        path,
                        format!("`{other}` has no column mapping"),
                        "of the well-known types only Timestamp and the wrappers (Int64Value, ...) are supported: \
                         carry the value as a scalar or a message of your own",
                    );
                    None
                }
                _ => {
                    self.claim(m.full_name(), path);
                    let fields = self.message(&m, path)?;
                    Some(PType::Message { name: m.full_name().to_owned(), fields })
                }
            },
            kind => Some(PType::Scalar(Scalar::of(&kind).expect("every other kind is a scalar"))),
        }
    }
}

/// The column view of the fields: what `ir::input_row` flattens into the input row, and what
/// datagen synthesizes values from.
///
/// A field with presence (proto3 or proto2 `optional`, a `oneof` member) and a wrapper are
/// Nullable; every field below a message with presence is too (an absent message has absent
/// fields). A field without presence reads as its type's default when absent, and a message
/// without presence as its fields' defaults. Repeated fields and maps are never Nullable.
pub(crate) fn record(name: &str, fields: &[PField]) -> RecordType {
    RecordType { name: name.to_owned(), fields: columns(fields, false) }
}

fn columns(fields: &[PField], optional_above: bool) -> Vec<Field> {
    fields
        .iter()
        .map(|f| {
            let optional = optional_above || f.presence;
            let ty = match &f.ty {
                _ if f.repeated => AvroType::Array(Box::new(column_type(&f.ty))),
                PType::Map { .. } => column_type(&f.ty),
                PType::Message { name, fields } => {
                    AvroType::Record(RecordType { name: record_name(name), fields: columns(fields, optional) })
                }
                PType::Wrapper(_) => column_type(&f.ty),
                t if optional => AvroType::Nullable { inner: Box::new(column_type(t)), null_index: 0 },
                t => column_type(t),
            };
            Field { name: f.name.clone(), ty }
        })
        .collect()
}

/// The column type of a value inside a container, or of a field without presence.
fn column_type(t: &PType) -> AvroType {
    match t {
        PType::Scalar(s) => s.column(),
        PType::Enum { name, symbols, .. } => AvroType::Enum { name: name.clone(), symbols: symbols.clone() },
        PType::Timestamp => AvroType::TimestampNanos,
        PType::Wrapper(s) => AvroType::Nullable { inner: Box::new(s.column()), null_index: 0 },
        PType::Message { name, fields } => {
            AvroType::Record(RecordType { name: record_name(name), fields: columns(fields, false) })
        }
        PType::Map { value, .. } => AvroType::Map(Box::new(column_type(value))),
    }
}

/// The record (and struct) name of a message: its full name's parts, each capitalized, joined
/// (`web.Click.Item` → `WebClickItem`), so messages of the same short name in different packages
/// do not meet.
pub(crate) fn record_name(full_name: &str) -> String {
    full_name
        .split('.')
        .map(|part| {
            let mut chars = part.chars();
            chars.next().map(|c| c.to_ascii_uppercase().to_string() + chars.as_str()).unwrap_or_default()
        })
        .collect()
}

/// An Avro schema (JSON text) of the messages, for datagen, `produce` and the fuzz test. Each
/// field carries a `proto` attribute (its number and wire type; for an enum its numbers, for a map
/// its key type and its value's) from which datagen writes Protobuf bytes, and the record carries
/// `proto_indexes`, the message-index path of the Confluent framing. Presence is a union with
/// null; a repeated field is an array; a map is a map.
pub(crate) fn datagen_schema(message: &Message) -> String {
    use std::collections::HashSet;

    use serde_json::{Value, json};
    /// A named type is defined where it first appears and referred to by name after.
    fn shape(t: &PType, defined: &mut HashSet<String>) -> Value {
        match t {
            PType::Scalar(s) => json!(match s.column() {
                AvroType::Int => "int",
                AvroType::Long | AvroType::UInt32 | AvroType::UInt64 => "long",
                AvroType::Boolean => "boolean",
                AvroType::Float => "float",
                AvroType::Double => "double",
                AvroType::String => "string",
                _ => "bytes",
            }),
            PType::Enum { name, symbols, .. } => {
                let name = record_name(name);
                if defined.insert(name.clone()) {
                    json!({"type": "enum", "name": name, "symbols": symbols})
                } else {
                    json!(name)
                }
            }
            PType::Timestamp => json!({"type": "long", "logicalType": "timestamp-nanos"}),
            PType::Wrapper(s) => json!(["null", shape(&PType::Scalar(*s), defined)]),
            PType::Message { name, fields } => {
                let name = record_name(name);
                if defined.insert(name.clone()) { record(&name, fields, defined) } else { json!(name) }
            }
            PType::Map { value, .. } => json!({"type": "map", "values": shape(value, defined)}),
        }
    }
    fn wire(t: &PType) -> Value {
        match t {
            PType::Scalar(s) => json!({"type": s.name()}),
            PType::Enum { numbers, .. } => json!({"type": "enum", "numbers": numbers}),
            PType::Timestamp => json!({"type": "timestamp"}),
            PType::Wrapper(s) => json!({"type": "wrapper", "of": s.name()}),
            PType::Message { .. } => json!({"type": "message"}),
            PType::Map { key, value } => json!({"type": "map", "key": key.name(), "value": wire(value)}),
        }
    }
    fn record(name: &str, fields: &[PField], defined: &mut HashSet<String>) -> Value {
        let fields: Vec<Value> = fields
            .iter()
            .map(|f| {
                let t = shape(&f.ty, defined);
                let t = if f.repeated {
                    json!({"type": "array", "items": t})
                } else if f.presence && !matches!(f.ty, PType::Wrapper(_)) {
                    json!(["null", t])
                } else {
                    t
                };
                let mut proto = wire(&f.ty);
                proto["number"] = json!(f.number);
                if f.repeated {
                    proto["repeated"] = json!(true);
                }
                json!({"name": f.name, "type": t, "proto": proto})
            })
            .collect();
        json!({"type": "record", "name": name, "fields": fields})
    }
    let top_name = record_name(&message.name);
    let mut defined = HashSet::from([top_name.clone()]);
    let mut top = record(&top_name, &message.fields, &mut defined);
    top["proto_indexes"] = json!(message.indexes);
    serde_json::to_string_pretty(&top).expect("a JSON value prints")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(files: &[(&str, &str)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for (name, text) in files {
            let path = dir.path().join(name);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
        dir
    }

    const CLICK: &str = r#"
        syntax = "proto3";
        package web;
        import "google/protobuf/timestamp.proto";
        import "google/protobuf/wrappers.proto";
        import "common.proto";
        message Other { int32 x = 1; }
        message Click {
          enum Kind { KIND_UNSPECIFIED = 0; VIEW = 1; BUY = 5; }
          message Item { string sku = 1; uint32 qty = 2; }
          int64 id = 1;
          sint32 delta = 2;
          uint64 big = 3;
          fixed32 f32 = 4;
          Kind kind = 5;
          google.protobuf.Timestamp at = 6;
          google.protobuf.Int64Value maybe = 7;
          optional string note = 8;
          repeated Item items = 9;
          repeated int64 tags = 10;
          map<string, double> attrs = 11;
          map<int32, Kind> kinds = 12;
          common.Geo geo = 13;
          oneof target { string url = 14; common.Geo place = 15; }
          bytes raw = 16;
        }"#;
    const COMMON: &str = r#"
        syntax = "proto3";
        package common;
        message Geo { double lat = 1; double lon = 2; }"#;

    fn click() -> Message {
        let dir = write(&[("click.proto", CLICK), ("common.proto", COMMON)]);
        parse(&dir.path().join("click.proto"), "web.Click").unwrap().unwrap()
    }

    #[test]
    fn maps_every_supported_type_to_its_column() {
        let m = click();
        assert_eq!(m.indexes, vec![1]);
        let columns: Vec<(String, String)> = {
            let (cols, _) = crate::ir::input_row(&record("Click", &m.fields));
            cols.into_iter().map(|c| (c.name, c.ty.clickhouse())).collect()
        };
        let expected = [
            ("id", "Int64"),
            ("delta", "Int32"),
            ("big", "UInt64"),
            ("f32", "UInt32"),
            ("kind", "LowCardinality(String)"),
            ("at", "DateTime64(9, 'UTC')"),
            ("maybe", "Nullable(Int64)"),
            ("note", "Nullable(String)"),
            ("items", "Array(Tuple(sku String, qty UInt32))"),
            ("tags", "Array(Int64)"),
            ("attrs", "Map(String, Float64)"),
            ("kinds", "Map(String, LowCardinality(String))"),
            ("geo_lat", "Float64"),
            ("geo_lon", "Float64"),
            ("url", "Nullable(String)"),
            ("place_lat", "Nullable(Float64)"),
            ("place_lon", "Nullable(Float64)"),
            ("raw", "String"),
        ];
        let expected: Vec<(String, String)> = expected.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect();
        assert_eq!(columns, expected);
        let url = m.fields.iter().find(|f| f.name == "url").unwrap();
        let place = m.fields.iter().find(|f| f.name == "place").unwrap();
        assert!(url.presence && url.oneof.is_some() && url.oneof == place.oneof);
        let note = m.fields.iter().find(|f| f.name == "note").unwrap();
        assert!(note.presence && note.oneof.is_none(), "proto3 optional is no oneof of its own");
    }

    #[test]
    fn an_unknown_message_lists_the_file_s_messages() {
        let dir = write(&[("click.proto", CLICK), ("common.proto", COMMON)]);
        let Err(Invalid::UnknownMessage(defined)) = parse(&dir.path().join("click.proto"), "web.Clik") else {
            panic!("an unknown message is reported")
        };
        assert_eq!(defined, vec!["web.Other", "web.Click", "web.Click.Item"]);
    }

    #[test]
    fn a_file_that_does_not_compile_says_where() {
        let dir = write(&[("bad.proto", "syntax = \"proto3\";\nmessage A { int32 x = ; }")]);
        let Err(Invalid::Compile(why)) = parse(&dir.path().join("bad.proto"), "A") else { panic!("not compiled") };
        assert!(why.contains("bad.proto"), "{why}");
    }

    #[test]
    fn lists_every_unsupported_construct_with_its_path() {
        let text = r#"
            syntax = "proto2";
            import "google/protobuf/any.proto";
            message Node { optional Node next = 1; }
            message Ext { extensions 100 to 200; optional int32 a = 1; }
            message Top {
              optional group G = 1 { optional int32 x = 2; }
              optional google.protobuf.Any any = 3;
              optional Node node = 4;
              optional Ext ext = 5;
            }"#;
        let dir = write(&[("top.proto", text)]);
        let errors = parse(&dir.path().join("top.proto"), "Top").unwrap().unwrap_err();
        let paths: Vec<&str> = errors.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(paths, vec!["g", "any", "node.next", "ext"], "{errors:#?}");
    }

    #[test]
    fn types_whose_generated_names_meet_are_reported() {
        let text = r#"
            syntax = "proto3";
            message Foo { message Bar { int32 x = 1; } }
            message FooBar { string y = 1; }
            message Chain { int32 z = 1; }
            message M { repeated Foo.Bar a = 1; repeated FooBar b = 2; Chain c = 3; Foo.Bar d = 4; }"#;
        let dir = write(&[("m.proto", text)]);
        let errors = parse(&dir.path().join("m.proto"), "M").unwrap().unwrap_err();
        let paths: Vec<&str> = errors.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(paths, vec!["b", "c"], "{errors:#?}");
        assert!(errors[0].what.contains("`FooBar` and `Foo.Bar`"), "{errors:#?}");
    }

    #[test]
    fn the_datagen_schema_is_avro_and_carries_the_wire_types() {
        let m = click();
        let text = datagen_schema(&m);
        apache_avro::Schema::parse_str(&text).unwrap();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["proto_indexes"], serde_json::json!([1]));
        assert_eq!(v["fields"][1]["proto"], serde_json::json!({"type": "sint32", "number": 2}));
        assert_eq!(v["fields"][4]["proto"], serde_json::json!({"type": "enum", "numbers": [0, 1, 5], "number": 5}));
    }
}
