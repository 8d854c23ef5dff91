//! The IR between validation and emission: value types, row types and typed expressions.
//!
//! A row is an ordered list of named, typed fields. The decoder produces the input row
//! (the reader schema, nested records flattened as `parent_child`); each operator maps a
//! row type to the next; the last row type is the sink's column list.

use std::collections::BTreeSet;
use std::fmt;

use crate::expr::{BinOp, Lit, UnOp};
use crate::schema::{AvroType, RecordType};

/// A value type, as seen by expressions, the encoders and the DDL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Ty {
    /// `boolean` / `Bool`
    Bool,
    /// `int` / `Int32`
    Int32,
    /// `long` / `Int64`
    Int64,
    /// `float` / `Float32`
    Float32,
    /// `double` / `Float64`
    Float64,
    /// `string` / `String`
    String,
    /// `bytes` / `String`
    Bytes,
    /// `enum` / `LowCardinality(String)`; values are symbol indexes.
    Enum {
        /// The Avro enum's name.
        name: String,
        /// Its symbols.
        symbols: Vec<String>,
    },
    /// `array` / `Array(T)`
    Array(Box<Ty>),
    /// `map` / `Map(String, T)`
    Map(Box<Ty>),
    /// `["null", T]` / `Nullable(T)`
    Nullable(Box<Ty>),
    /// A record inside an array or map / `Tuple(name T, ...)`.
    Record(Box<RecordTy>),
    /// `timestamp-millis` / `DateTime64(3, 'UTC')`
    TimestampMillis,
    /// `timestamp-micros` / `DateTime64(6, 'UTC')`
    TimestampMicros,
    /// `date` / `Date32`
    Date,
    /// `decimal(p, s)` / `Decimal(p, s)`; values are unscaled `i128`.
    Decimal {
        /// Precision.
        precision: u32,
        /// Scale.
        scale: u32,
    },
    /// `uuid` / `UUID`; values are `u128`.
    Uuid,
    /// Protobuf `uint32` / `UInt32`
    UInt32,
    /// Protobuf `uint64` / `UInt64`
    UInt64,
    /// `google.protobuf.Timestamp` / `DateTime64(9, 'UTC')`
    TimestampNanos,
}

/// A record type nested inside an array or map.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct RecordTy {
    /// The Avro record's full name.
    pub name: String,
    /// Its fields (nested records flattened).
    pub fields: Vec<Column>,
}

/// A named, typed field of a row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Column {
    /// The field (and column) name.
    pub name: String,
    /// Its type.
    pub ty: Ty,
}

impl Ty {
    /// The fewest bytes a value takes in RowBinary (an empty string or array, a null).
    pub(crate) fn min_rowbinary_bytes(&self) -> u64 {
        match self {
            Ty::Bool => 1,
            Ty::Int32 | Ty::UInt32 | Ty::Float32 | Ty::Date => 4,
            Ty::Int64 | Ty::UInt64 | Ty::Float64 | Ty::TimestampMillis | Ty::TimestampMicros | Ty::TimestampNanos => 8,
            Ty::String | Ty::Bytes | Ty::Enum { .. } | Ty::Array(_) | Ty::Map(_) | Ty::Nullable(_) => 1,
            Ty::Record(r) => r.fields.iter().map(|f| f.ty.min_rowbinary_bytes()).sum(),
            Ty::Decimal { precision, .. } => match precision {
                0..=9 => 4,
                10..=18 => 8,
                19..=38 => 16,
                _ => 32,
            },
            Ty::Uuid => 16,
        }
    }

    /// The ClickHouse column type.
    pub(crate) fn clickhouse(&self) -> String {
        match self {
            Ty::Bool => "Bool".into(),
            Ty::Int32 => "Int32".into(),
            Ty::Int64 => "Int64".into(),
            Ty::UInt32 => "UInt32".into(),
            Ty::UInt64 => "UInt64".into(),
            Ty::Float32 => "Float32".into(),
            Ty::Float64 => "Float64".into(),
            Ty::String | Ty::Bytes => "String".into(),
            Ty::Enum { .. } => "LowCardinality(String)".into(),
            Ty::Array(t) => format!("Array({})", t.clickhouse()),
            Ty::Map(t) => format!("Map(String, {})", t.clickhouse()),
            Ty::Nullable(t) => match t.as_ref() {
                // ClickHouse spells a nullable enum column LowCardinality(Nullable(String)).
                Ty::Enum { .. } => "LowCardinality(Nullable(String))".into(),
                inner => format!("Nullable({})", inner.clickhouse()),
            },
            Ty::Record(r) => {
                let fields: Vec<String> =
                    r.fields.iter().map(|c| format!("{} {}", c.name, c.ty.clickhouse())).collect();
                format!("Tuple({})", fields.join(", "))
            }
            Ty::TimestampMillis => "DateTime64(3, 'UTC')".into(),
            Ty::TimestampMicros => "DateTime64(6, 'UTC')".into(),
            Ty::TimestampNanos => "DateTime64(9, 'UTC')".into(),
            Ty::Date => "Date32".into(),
            Ty::Decimal { precision, scale } => format!("Decimal({precision}, {scale})"),
            Ty::Uuid => "UUID".into(),
        }
    }

    /// Whether values may be null.
    pub(crate) fn is_nullable(&self) -> bool {
        matches!(self, Ty::Nullable(_))
    }

    /// The type without `Nullable`.
    pub(crate) fn non_null(&self) -> &Ty {
        match self {
            Ty::Nullable(t) => t,
            t => t,
        }
    }

    /// Whether expressions can do arithmetic with it.
    pub(crate) fn is_numeric(&self) -> bool {
        matches!(
            self.non_null(),
            Ty::Int32
                | Ty::Int64
                | Ty::UInt32
                | Ty::Float32
                | Ty::Float64
                | Ty::Decimal { .. }
                | Ty::TimestampMillis
                | Ty::TimestampMicros
                | Ty::TimestampNanos
                | Ty::Date
        )
    }

    /// Whether it is an integer in expressions (timestamps and dates count as their ticks).
    /// `UInt64` is not: no signed type holds all of it, so expressions do not read it.
    pub(crate) fn is_integer(&self) -> bool {
        matches!(
            self.non_null(),
            Ty::Int32
                | Ty::Int64
                | Ty::UInt32
                | Ty::TimestampMillis
                | Ty::TimestampMicros
                | Ty::TimestampNanos
                | Ty::Date
        )
    }

    /// Whether it is text in expressions.
    pub(crate) fn is_text(&self) -> bool {
        matches!(self.non_null(), Ty::String | Ty::Bytes | Ty::Enum { .. })
    }
}

impl fmt::Display for Ty {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Ty::Enum { name, .. } => write!(f, "enum {name}"),
            Ty::Record(r) => write!(f, "record {}", r.name),
            Ty::Nullable(t) => write!(f, "nullable {t}"),
            Ty::Array(t) => write!(f, "array of {t}"),
            Ty::Map(t) => write!(f, "map of {t}"),
            Ty::Decimal { precision, scale } => write!(f, "decimal({precision}, {scale})"),
            other => f.write_str(match other {
                Ty::Bool => "bool",
                Ty::Int32 => "int",
                Ty::Int64 => "long",
                Ty::Float32 => "float",
                Ty::Float64 => "double",
                Ty::String => "string",
                Ty::Bytes => "bytes",
                Ty::TimestampMillis => "timestamp-millis",
                Ty::TimestampMicros => "timestamp-micros",
                Ty::TimestampNanos => "timestamp-nanos",
                Ty::UInt32 => "uint32",
                Ty::UInt64 => "uint64",
                Ty::Date => "date",
                Ty::Uuid => "uuid",
                _ => unreachable!("handled above"),
            }),
        }
    }
}

/// How a decoded Avro value reaches a row: a leaf field (with its flattened name) or a
/// nested record whose fields are flattened into the row.
#[derive(Clone, Debug)]
pub(crate) enum DecodeNode {
    /// A field that becomes one row field.
    Leaf {
        /// The row field name (`parent_child` for nested fields).
        column: String,
        /// The Avro type, which decides how bytes are read.
        avro: AvroType,
        /// Whether it lies below a nullable record, which makes its column Nullable (its value
        /// is wrapped in `Some` when the record is there).
        below_null: bool,
    },
    /// A nested record: its fields are read in order and flattened.
    Nested {
        /// Its fields.
        children: Vec<DecodeNode>,
        /// For `["null", record]`, the null branch's index: the union index is read first, and
        /// when it is null every column below is NULL (arrays and maps empty).
        null_index: Option<u8>,
    },
}

/// The input row of a schema and the read plan that produces it.
pub(crate) fn input_row(schema: &RecordType) -> (Vec<Column>, Vec<DecodeNode>) {
    let mut columns = Vec::new();
    let nodes = flatten(&schema.fields, "", false, &mut columns);
    (columns, nodes)
}

/// The columns and read plan of `fields`; `below_null` says a nullable record lies above them.
///
/// A nullable record (`["null", record]`) is flattened like any record, its columns Nullable, as
/// JSON's optional objects and Protobuf's optional messages are: ClickHouse has no
/// `Nullable(Tuple)`.
fn flatten(
    fields: &[crate::schema::Field],
    prefix: &str,
    below_null: bool,
    columns: &mut Vec<Column>,
) -> Vec<DecodeNode> {
    fields
        .iter()
        .map(|f| {
            let name = if prefix.is_empty() { f.name.clone() } else { format!("{prefix}_{}", f.name) };
            match &f.ty {
                AvroType::Record(r) => {
                    DecodeNode::Nested { children: flatten(&r.fields, &name, below_null, columns), null_index: None }
                }
                AvroType::Nullable { inner, null_index } if matches!(**inner, AvroType::Record(_)) => {
                    let AvroType::Record(r) = &**inner else { unreachable!("matched a record") };
                    DecodeNode::Nested {
                        children: flatten(&r.fields, &name, true, columns),
                        null_index: Some(*null_index),
                    }
                }
                other => {
                    let ty = ty_of(other);
                    let ty = match ty {
                        Ty::Nullable(_) | Ty::Array(_) | Ty::Map(_) => ty,
                        ty if below_null => Ty::Nullable(Box::new(ty)),
                        ty => ty,
                    };
                    columns.push(Column { name: name.clone(), ty });
                    DecodeNode::Leaf { column: name, avro: other.clone(), below_null }
                }
            }
        })
        .collect()
}

/// The value type of an Avro type (records inside containers keep their structure).
pub(crate) fn ty_of(avro: &AvroType) -> Ty {
    match avro {
        AvroType::Boolean => Ty::Bool,
        AvroType::Int => Ty::Int32,
        AvroType::Long => Ty::Int64,
        AvroType::Float => Ty::Float32,
        AvroType::Double => Ty::Float64,
        AvroType::Bytes => Ty::Bytes,
        AvroType::String => Ty::String,
        AvroType::Enum { name, symbols } => Ty::Enum { name: name.clone(), symbols: symbols.clone() },
        AvroType::Array(t) => Ty::Array(Box::new(ty_of(t))),
        AvroType::Map(t) => Ty::Map(Box::new(ty_of(t))),
        // ClickHouse has no Nullable(Array) or Nullable(Map): null reads as empty, as JSON's
        // null arrays do.
        AvroType::Nullable { inner, .. } if matches!(**inner, AvroType::Array(_) | AvroType::Map(_)) => ty_of(inner),
        AvroType::Nullable { inner, .. } => Ty::Nullable(Box::new(ty_of(inner))),
        AvroType::Record(r) => {
            let mut fields = Vec::new();
            flatten(&r.fields, "", false, &mut fields);
            Ty::Record(Box::new(RecordTy { name: r.name.clone(), fields }))
        }
        AvroType::TimestampMillis => Ty::TimestampMillis,
        AvroType::TimestampMicros => Ty::TimestampMicros,
        AvroType::Date => Ty::Date,
        AvroType::Decimal { precision, scale, .. } => Ty::Decimal { precision: *precision, scale: *scale },
        AvroType::Uuid => Ty::Uuid,
        AvroType::UInt32 => Ty::UInt32,
        AvroType::UInt64 => Ty::UInt64,
        AvroType::TimestampNanos => Ty::TimestampNanos,
    }
}

/// The Kafka metadata fields every expression can read.
pub(crate) fn metadata_columns() -> Vec<Column> {
    vec![
        Column { name: "_key".into(), ty: Ty::Nullable(Box::new(Ty::Bytes)) },
        Column { name: "_partition".into(), ty: Ty::Int32 },
        Column { name: "_offset".into(), ty: Ty::Int64 },
        Column { name: "_timestamp".into(), ty: Ty::Nullable(Box::new(Ty::TimestampMillis)) },
    ]
}

/// A typed expression.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct TExpr {
    /// What it computes.
    pub kind: TKind,
    /// Its type (Nullable when it can be null).
    pub ty: Ty,
}

/// Typed expression nodes.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum TKind {
    /// A literal.
    Lit(Lit),
    /// An enum symbol, by index, compared with an enum field.
    Symbol(u32),
    /// A row field or metadata field.
    Field(String),
    /// A function.
    Call(Func, Vec<TExpr>),
    /// `!e` / `-e`.
    Unary(UnOp, Box<TExpr>),
    /// `l op r`, operands converted to a common type already.
    Binary(BinOp, Box<TExpr>, Box<TExpr>),
    /// A numeric conversion to `ty`.
    Convert(Box<TExpr>),
}

/// The built-in functions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Func {
    /// `lower(text)`
    Lower,
    /// `upper(text)`
    Upper,
    /// `length(text | bytes | array | map)`: characters, bytes or elements.
    Length,
    /// `coalesce(a, b, ...)`: the first non-null argument.
    Coalesce,
    /// `is_null(x)`
    IsNull,
    /// `concat(text, ...)`
    Concat,
    /// `abs(number)`
    Abs,
}

/// The documented function set: name, signature and meaning.
pub(crate) const FUNCTIONS: &[(&str, &str, &str)] = &[
    ("lower", "lower(text) -> string", "lowercase (enums give their symbol)"),
    ("upper", "upper(text) -> string", "uppercase"),
    ("length", "length(string | bytes | array | map) -> long", "characters, bytes or elements"),
    ("coalesce", "coalesce(a, b, ...) -> T", "the first argument that is not null"),
    ("is_null", "is_null(x) -> bool", "whether a nullable value is null"),
    ("concat", "concat(text, ...) -> string", "the texts one after another (null counts as empty)"),
    ("abs", "abs(number) -> number", "the absolute value"),
];

impl TExpr {
    /// Adds the fields the expression reads to `out`.
    pub(crate) fn fields(&self, out: &mut BTreeSet<String>) {
        match &self.kind {
            TKind::Field(name) => {
                out.insert(name.clone());
            }
            TKind::Call(_, args) => args.iter().for_each(|a| a.fields(out)),
            TKind::Unary(_, e) | TKind::Convert(e) => e.fields(out),
            TKind::Binary(_, l, r) => {
                l.fields(out);
                r.fields(out);
            }
            TKind::Lit(_) | TKind::Symbol(_) => {}
        }
    }
}
