//! Protobuf as etl-rs reads it: one message of a `.proto` file, compiled by `protox` (no
//! `protoc`, Google's well-known types built in) and read into [`PField`]s (what the generated
//! decoder dispatches on, and what the registry check compares).
//!
//! Supported: every scalar, enums, nested messages, `repeated` (packed or not), `map<K, V>`,
//! `oneof`, proto3 `optional` and proto2 `optional`/`required`, `google.protobuf.Timestamp` and
//! the wrapper types (`Int64Value`, ...). Not supported, each reported with its path: proto2
//! groups, messages with extension ranges, recursive messages, the other well-known types (`Any`,
//! `Struct`, `Value`, `Duration`, ...), and a repeated wrapper.

pub mod compat;

use std::collections::BTreeMap;
use std::path::Path;

use prost_reflect::{Cardinality, DescriptorPool, FieldDescriptor, Kind, MessageDescriptor, Syntax};

use crate::Unsupported;

/// A Protobuf scalar, by its wire form (which is what the decoder must know).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scalar {
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
    pub fn name(self) -> &'static str {
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

    /// Whether `repeated` fields of it may be packed (every scalar but the length-delimited).
    pub fn packable(self) -> bool {
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
pub enum PType {
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
    /// `google.protobuf.Struct` → JSON (the object).
    Struct,
    /// `google.protobuf.Value` → Nullable(JSON): a struct value, or null.
    JsonValue,
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
    pub fn enum_default(numbers: &[i32]) -> u32 {
        numbers.iter().position(|n| *n == 0).unwrap_or(0) as u32
    }
}

/// One field of a message.
#[derive(Clone, Debug, PartialEq)]
pub struct PField {
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
pub struct Message {
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
pub enum Invalid {
    /// protox's message (with the file and line).
    Compile(String),
    /// The message is not defined; the messages the file does define.
    UnknownMessage(Vec<String>),
}

/// Compiles the `.proto` at `path` (imports resolved relative to its directory) and reads
/// `message` from it, listing every unsupported construct rather than the first.
pub fn parse(path: &Path, message: &str) -> Result<Result<Message, Vec<Unsupported>>, Invalid> {
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let file = path.file_name().map(Path::new).unwrap_or(path);
    let mut compiler = protox::Compiler::new([dir]).map_err(|e| Invalid::Compile(e.to_string()))?;
    compiler.include_imports(true);
    compiler.open_file(file).map_err(|e| Invalid::Compile(format!("{e:?}").replace('\n', " ")))?;
    read(
        &compiler.descriptor_pool(),
        compiler.encode_file_descriptor_set(),
        &file.to_string_lossy().replace('\\', "/"),
        message,
    )
}

/// [`parse`] for a file held in memory: `main` is its name among `sources` (name → text), which
/// also hold what it imports by those names; Google's well-known types are built in. For writer
/// schemas from a registry, whose references name the imported schemas.
pub fn parse_sources(
    main: &str,
    sources: &BTreeMap<String, String>,
    message: &str,
) -> Result<Result<Message, Vec<Unsupported>>, Invalid> {
    /// Files by name, from memory.
    struct Sources(BTreeMap<String, String>);
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
    read(&compiler.descriptor_pool(), compiler.encode_file_descriptor_set(), main, message)
}

/// [`parse`] for a compiled `FileDescriptorSet` (what [`Message::descriptor_set`] holds, with
/// every import): how a binary gets its reader message back without the `.proto` files.
pub fn from_descriptor_set(
    descriptor_set: &[u8],
    file_name: &str,
    message: &str,
) -> Result<Result<Message, Vec<Unsupported>>, Invalid> {
    let pool = DescriptorPool::decode(descriptor_set).map_err(|e| Invalid::Compile(e.to_string()))?;
    read(&pool, descriptor_set.to_vec(), file_name, message)
}

/// Reads `message` from the compiled `pool` (encoded as `descriptor_set`), `file_name` being the
/// file the message may be defined in.
fn read(
    pool: &DescriptorPool,
    descriptor_set: Vec<u8>,
    file_name: &str,
    message: &str,
) -> Result<Result<Message, Vec<Unsupported>>, Invalid> {
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
            descriptor_set,
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
        // A message field always has presence on the wire, but only one the schema marks counts
        // here: a oneof member, or one declared `optional` (proto3's synthetic oneof, proto2's
        // label). Its columns are Nullable, NULL when it is absent, as `optional T` is for every
        // other T. An unmarked message (proto3's plain field, proto2's `required`) reads as its
        // fields' defaults when absent, as proto3's generated accessors show it.
        let presence = !f.is_list()
            && !f.is_map()
            && match f.kind() {
                Kind::Message(_) => oneof.is_some() || declared_optional(f),
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
                "google.protobuf.Struct" => Some(PType::Struct),
                "google.protobuf.Value" => Some(PType::JsonValue),
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
                        "of the well-known types only Timestamp, Struct, Value and the wrappers (Int64Value, ...) are supported: \
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

/// The record (and struct) name of a message: its full name's parts, each capitalized, joined
/// (`web.Click.Item` → `WebClickItem`), so messages of the same short name in different packages
/// do not meet.
pub fn record_name(full_name: &str) -> String {
    full_name
        .split('.')
        .map(|part| {
            let mut chars = part.chars();
            chars.next().map(|c| c.to_ascii_uppercase().to_string() + chars.as_str()).unwrap_or_default()
        })
        .collect()
}

/// Why [`fetch_references`] stopped: `get` failed, or an answer is not what the registry API
/// says it is.
#[derive(Debug)]
pub enum ReferenceError<E> {
    /// `get`'s own error.
    Fetch(E),
    /// A reference without name, subject or version, a loop deeper than [`MAX_REFERENCE_DEPTH`],
    /// or a referenced version without a schema.
    Malformed(String),
}

/// How deep references may nest: deep enough for any real import chain, and a bound on a
/// registry whose references loop.
pub const MAX_REFERENCE_DEPTH: usize = 16;

/// Fetches the schemas a registry answer's `references` name (`{"name", "subject", "version"}`),
/// and theirs, into `imports` by name, which is what the `.proto` imports them under. `get`
/// answers a registry path (`/subjects/{subject}/versions/{version}`) with its JSON.
pub fn fetch_references<E>(
    answer: &serde_json::Value,
    get: &mut dyn FnMut(&str) -> Result<serde_json::Value, E>,
    imports: &mut BTreeMap<String, String>,
) -> Result<(), ReferenceError<E>> {
    references(answer, get, imports, 0)
}

fn references<E>(
    answer: &serde_json::Value,
    get: &mut dyn FnMut(&str) -> Result<serde_json::Value, E>,
    imports: &mut BTreeMap<String, String>,
    depth: usize,
) -> Result<(), ReferenceError<E>> {
    let malformed = |what: String| ReferenceError::Malformed(what);
    let Some(list) = answer.get("references").and_then(|r| r.as_array()) else { return Ok(()) };
    for reference in list {
        let field =
            |key: &str| reference.get(key).ok_or_else(|| malformed(format!("a reference has no `{key}`: {reference}")));
        let name =
            field("name")?.as_str().ok_or_else(|| malformed("a reference's name is not text".into()))?.to_owned();
        if imports.contains_key(&name) {
            continue;
        }
        if depth >= MAX_REFERENCE_DEPTH {
            return Err(malformed(format!("references nest deeper than {MAX_REFERENCE_DEPTH} (at `{name}`)")));
        }
        let subject =
            field("subject")?.as_str().ok_or_else(|| malformed("a reference's subject is not text".into()))?;
        let version =
            field("version")?.as_u64().ok_or_else(|| malformed("a reference's version is not a number".into()))?;
        let referenced = get(&format!("/subjects/{}/versions/{version}", crate::path_segment(subject)))
            .map_err(ReferenceError::Fetch)?;
        let text = referenced.get("schema").and_then(|s| s.as_str()).ok_or_else(|| {
            malformed(format!("the reference `{name}` (subject `{subject}` version {version}) has no schema"))
        })?;
        imports.insert(name, text.to_owned());
        references(&referenced, get, imports, depth + 1)?;
    }
    Ok(())
}

/// Whether a singular field is declared `optional`: proto3's `optional` (which protoc records
/// as a one-member synthetic oneof) or proto2's `optional` label.
fn declared_optional(f: &FieldDescriptor) -> bool {
    f.containing_oneof().is_some_and(|o| o.is_synthetic())
        || (f.parent_file().syntax() == Syntax::Proto2 && f.cardinality() == Cardinality::Optional)
}
