//! The IR between the readers and emission: value types, the reader schema as a record of
//! them, row types and typed expressions.
//!
//! Each format's reader (`readers::{avro, json, protobuf}`) turns its schema into a [`RecordTy`]
//! whose fields keep their nesting; [`input_row`] flattens it into the input row (nested records
//! as `parent_child`). Each operator maps a row type to the next; the last row type is the sink's
//! column list. Nothing here knows which format a value came from.

use std::collections::BTreeSet;
use std::fmt;

use crate::expr::{BinOp, Lit, UnOp};

/// A value type, as seen by expressions, the encoders and the DDL: what ClickHouse and the
/// chain need to know, whichever format the value was read from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Ty {
    /// `Bool`
    Bool,
    /// `Int32`
    Int32,
    /// `Int64`
    Int64,
    /// `UInt32`
    UInt32,
    /// `UInt64`
    UInt64,
    /// `Float32`
    Float32,
    /// `Float64`
    Float64,
    /// Text / `String`
    String,
    /// Bytes / `String`
    Bytes,
    /// A closed set of symbols / `LowCardinality(String)` or `Enum8|16('a' = 0, ...)`, as
    /// `sink.clickhouse.enum` chooses; values are symbol indexes.
    Enum {
        /// The enum's name in its schema.
        name: String,
        /// Its symbols.
        symbols: Vec<String>,
        /// The column type it is written as.
        column: EnumColumn,
    },
    /// `Array(T)`
    Array(Box<Ty>),
    /// `Map(K, V)`: keys (a string, an integer or a bool) and values. Values are the entries in
    /// order, the last of a repeated key kept.
    Map(Box<Ty>, Box<Ty>),
    /// `Nullable(T)`. In a reader's [`RecordTy`], a nullable record is flattened by
    /// [`input_row`] into Nullable columns (ClickHouse has no `Nullable(Tuple)`).
    Nullable(Box<Ty>),
    /// A record: flattened into the row at the top level, `Tuple(name T, ...)` inside an array
    /// or map.
    Record(Box<RecordTy>),
    /// A UTC instant counted in `unit`s since the epoch / `DateTime64(digits, 'UTC')`.
    Timestamp(TimeUnit),
    /// Days since the epoch / `Date32`
    Date,
    /// `Decimal(p, s)`; values are unscaled `i128`.
    Decimal {
        /// Precision.
        precision: u32,
        /// Scale.
        scale: u32,
    },
    /// `UUID`; values are `u128`.
    Uuid,
    /// A time of day counted in `unit`s since midnight / `Time64(digits)`; values are `i64`.
    Time(TimeUnit),
    /// `IPv4`; values are the address as a `u32` (`1.2.3.4` is `0x01020304`).
    Ipv4,
    /// `IPv6`; values are the address's 16 bytes as a big-endian `u128`.
    Ipv6,
    /// `JSON`: an object kept whole; values are its text as it arrived (checked, not rebuilt).
    Json,
    /// `Variant(T1, T2, ...)`: a value of one of the members, or NULL (ClickHouse has no
    /// `Nullable(Variant)`: NULL is the variant's own). Members are scalars, in ClickHouse's
    /// order (sorted by type name), which numbers them on the wire; see [`variant`]. Values are
    /// an `Option` of the generated enum of the members.
    Variant(Vec<Ty>),
}

/// A `Variant` of `members`, in ClickHouse's order; why not, when two members are one ClickHouse
/// type or share the name expressions read them by, or a member is not a scalar.
pub(crate) fn variant(members: Vec<Ty>) -> Result<Ty, String> {
    let mut members = members;
    for m in &members {
        if matches!(
            m,
            Ty::Nullable(_) | Ty::Array(_) | Ty::Map(..) | Ty::Record(_) | Ty::Variant(_) | Ty::Enum { .. } | Ty::Json
        ) {
            return Err(format!("a {m} cannot be a member of a Variant (members are scalars)"));
        }
    }
    members.sort_by_key(Ty::clickhouse);
    for pair in members.windows(2) {
        if pair[0].clickhouse() == pair[1].clickhouse() {
            return Err(format!("two members are both ClickHouse {}", pair[0].clickhouse()));
        }
        if pair[0].member_name() == pair[1].member_name() {
            return Err(format!("two members are both read as `.{}`", pair[0].member_name()));
        }
    }
    Ok(Ty::Variant(members))
}

/// How an enum is written (`sink.clickhouse.enum`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub(crate) enum EnumColumn {
    /// `LowCardinality(String)`: the symbol's text; the table accepts any string later.
    #[default]
    LowCardinality,
    /// `Enum8` (up to 128 symbols) or `Enum16`, each symbol its index: one or two bytes a value,
    /// and the table refuses a symbol it does not know.
    Enum,
}

impl EnumColumn {
    /// The ClickHouse type of an enum of `symbols` written this way (not Nullable).
    pub(crate) fn clickhouse(self, symbols: &[String]) -> String {
        match self {
            EnumColumn::LowCardinality => "LowCardinality(String)".into(),
            EnumColumn::Enum => {
                let values: Vec<String> = symbols
                    .iter()
                    .enumerate()
                    .map(|(i, s)| format!("'{}' = {i}", s.replace('\\', "\\\\").replace('\'', "\\'")))
                    .collect();
                format!("Enum{}({})", enum_bits(symbols.len()), values.join(", "))
            }
        }
    }
}

/// `record` with every enum in it (nested in records and containers too) written as `column`.
pub(crate) fn with_enum_column(record: &mut RecordTy, column: EnumColumn) {
    fn ty(t: &mut Ty, column: EnumColumn) {
        match t {
            Ty::Enum { column: c, .. } => *c = column,
            Ty::Array(t) | Ty::Map(_, t) | Ty::Nullable(t) => ty(t, column),
            Ty::Variant(members) => members.iter_mut().for_each(|m| ty(m, column)),
            Ty::Record(r) => with_enum_column(r, column),
            _ => {}
        }
    }
    for field in &mut record.fields {
        ty(&mut field.ty, column);
    }
}

/// The width of an `Enum` of `n` symbols numbered from 0: `Enum8` holds 0..=127.
pub(crate) fn enum_bits(n: usize) -> u32 {
    if n <= 128 { 8 } else { 16 }
}

/// The tick of a timestamp.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TimeUnit {
    /// Milliseconds: `DateTime64(3)`.
    Millis,
    /// Microseconds: `DateTime64(6)`.
    Micros,
    /// Nanoseconds: `DateTime64(9)`.
    Nanos,
}

impl TimeUnit {
    /// Digits after the second: the `DateTime64` precision.
    pub(crate) fn digits(self) -> u32 {
        match self {
            TimeUnit::Millis => 3,
            TimeUnit::Micros => 6,
            TimeUnit::Nanos => 9,
        }
    }
}

/// A record: the reader schema (fields nested as the schema nests them), or a record inside an
/// array or map after [`input_row`] (fields flattened).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct RecordTy {
    /// The record's name in its schema (its full name, for formats with namespaces).
    pub name: String,
    /// Its fields, in schema order.
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
            Ty::Int32 | Ty::UInt32 | Ty::Float32 | Ty::Date | Ty::Ipv4 => 4,
            Ty::Int64 | Ty::UInt64 | Ty::Float64 | Ty::Timestamp(_) | Ty::Time(_) => 8,
            Ty::Enum { column: EnumColumn::Enum, symbols, .. } => u64::from(enum_bits(symbols.len()) / 8),
            Ty::String
            | Ty::Bytes
            | Ty::Json
            | Ty::Enum { .. }
            | Ty::Array(_)
            | Ty::Map(..)
            | Ty::Nullable(_)
            | Ty::Variant(_) => 1,
            Ty::Record(r) => r.fields.iter().map(|f| f.ty.min_rowbinary_bytes()).sum(),
            Ty::Decimal { precision, .. } => match precision {
                0..=9 => 4,
                10..=18 => 8,
                19..=38 => 16,
                _ => 32,
            },
            Ty::Uuid | Ty::Ipv6 => 16,
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
            Ty::Enum { symbols, column, .. } => column.clickhouse(symbols),
            Ty::Array(t) => format!("Array({})", t.clickhouse()),
            Ty::Map(k, v) => format!("Map({}, {})", k.clickhouse(), v.clickhouse()),
            Ty::Nullable(t) => match t.as_ref() {
                // ClickHouse spells a nullable enum column LowCardinality(Nullable(String)).
                Ty::Enum { column: EnumColumn::LowCardinality, .. } => "LowCardinality(Nullable(String))".into(),
                inner => format!("Nullable({})", inner.clickhouse()),
            },
            Ty::Record(r) => {
                let fields: Vec<String> =
                    r.fields.iter().map(|c| format!("{} {}", c.name, c.ty.clickhouse())).collect();
                format!("Tuple({})", fields.join(", "))
            }
            Ty::Timestamp(unit) => format!("DateTime64({}, 'UTC')", unit.digits()),
            Ty::Date => "Date32".into(),
            Ty::Decimal { precision, scale } => format!("Decimal({precision}, {scale})"),
            Ty::Uuid => "UUID".into(),
            Ty::Time(unit) => format!("Time64({})", unit.digits()),
            Ty::Ipv4 => "IPv4".into(),
            Ty::Ipv6 => "IPv6".into(),
            Ty::Json => "JSON".into(),
            Ty::Variant(members) => {
                let members: Vec<String> = members.iter().map(Ty::clickhouse).collect();
                format!("Variant({})", members.join(", "))
            }
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

    /// The name an expression reads a variant member by (`v.Int64`, `v.DateTime64`): its
    /// ClickHouse type's name without arguments.
    pub(crate) fn member_name(&self) -> String {
        let full = self.clickhouse();
        full.split('(').next().unwrap_or_default().to_owned()
    }

    /// `Nullable(self)`, unless values already may be null or the type has no Nullable form in
    /// ClickHouse (arrays and maps: an absent one reads as empty; a variant: NULL is its own).
    pub(crate) fn or_null(self) -> Ty {
        match self {
            Ty::Nullable(_) | Ty::Array(_) | Ty::Map(..) | Ty::Variant(_) => self,
            ty => Ty::Nullable(Box::new(ty)),
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
                | Ty::Timestamp(_)
                | Ty::Time(_)
                | Ty::Date
        )
    }

    /// Whether it is an integer in expressions (timestamps and dates count as their ticks).
    /// `UInt64` is not: no signed type holds all of it, so expressions do not read it.
    pub(crate) fn is_integer(&self) -> bool {
        matches!(self.non_null(), Ty::Int32 | Ty::Int64 | Ty::UInt32 | Ty::Timestamp(_) | Ty::Time(_) | Ty::Date)
    }

    /// Whether it is text in expressions.
    pub(crate) fn is_text(&self) -> bool {
        matches!(self.non_null(), Ty::String | Ty::Bytes | Ty::Enum { .. })
    }
}

/// How types read in diagnostics (the words the documentation uses for them).
impl fmt::Display for Ty {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Ty::Enum { name, .. } => write!(f, "enum {name}"),
            Ty::Record(r) => write!(f, "record {}", r.name),
            Ty::Nullable(t) => write!(f, "nullable {t}"),
            Ty::Array(t) => write!(f, "array of {t}"),
            Ty::Map(k, v) if **k == Ty::String => write!(f, "map of {v}"),
            Ty::Map(k, v) => write!(f, "map of {k} to {v}"),
            Ty::Variant(members) => {
                let members: Vec<String> = members.iter().map(ToString::to_string).collect();
                write!(f, "variant of {}", members.join(", "))
            }
            Ty::Decimal { precision, scale } => write!(f, "decimal({precision}, {scale})"),
            other => f.write_str(match other {
                Ty::Bool => "bool",
                Ty::Int32 => "int",
                Ty::Int64 => "long",
                Ty::Float32 => "float",
                Ty::Float64 => "double",
                Ty::String => "string",
                Ty::Bytes => "bytes",
                Ty::Timestamp(TimeUnit::Millis) => "timestamp-millis",
                Ty::Timestamp(TimeUnit::Micros) => "timestamp-micros",
                Ty::Timestamp(TimeUnit::Nanos) => "timestamp-nanos",
                Ty::UInt32 => "uint32",
                Ty::UInt64 => "uint64",
                Ty::Date => "date",
                Ty::Uuid => "uuid",
                Ty::Time(TimeUnit::Millis) => "time-millis",
                Ty::Time(TimeUnit::Micros) => "time-micros",
                Ty::Time(TimeUnit::Nanos) => "time-nanos",
                Ty::Ipv4 => "ipv4",
                Ty::Ipv6 => "ipv6",
                Ty::Json => "json",
                _ => unreachable!("handled above"),
            }),
        }
    }
}

/// The input row of a reader schema: its fields in order, nested records flattened as
/// `parent_child`, the fields below a nullable record Nullable (arrays and maps stay plain).
/// Records inside arrays and maps become tuples of their own flattened fields.
pub(crate) fn input_row(schema: &RecordTy) -> Vec<Column> {
    let mut columns = Vec::new();
    flatten(&schema.fields, "", false, &mut columns);
    columns
}

/// The column name of `field` inside a record flattened under `prefix`.
pub(crate) fn flat_name(prefix: &str, field: &str) -> String {
    if prefix.is_empty() { field.to_owned() } else { format!("{prefix}_{field}") }
}

/// If `ty` is a record or a nullable record, the record and whether it is nullable.
pub(crate) fn as_record(ty: &Ty) -> Option<(&RecordTy, bool)> {
    match ty {
        Ty::Record(r) => Some((r, false)),
        Ty::Nullable(inner) => match inner.as_ref() {
            Ty::Record(r) => Some((r, true)),
            _ => None,
        },
        _ => None,
    }
}

fn flatten(fields: &[Column], prefix: &str, below_null: bool, columns: &mut Vec<Column>) {
    for f in fields {
        let name = flat_name(prefix, &f.name);
        match as_record(&f.ty) {
            Some((r, nullable)) => flatten(&r.fields, &name, below_null || nullable, columns),
            None => {
                let ty = value_ty(&f.ty);
                let ty = if below_null { ty.or_null() } else { ty };
                columns.push(Column { name, ty });
            }
        }
    }
}

/// The input row under `sink.clickhouse.nested: tuple`: a top-level record field is one
/// `Record` column (a `Tuple`) whose nested records stay records, named by their path
/// (`TupleAddressGeo`) so that they never meet a container's record struct; below a nullable
/// record every leaf is Nullable (ClickHouse has no `Nullable(Tuple)`). Other fields are as in
/// [`input_row`]. Each leaf of a tuple column is the [`input_row`] column `parent_child`, with
/// the same type: [`tuple_leaves`] lists them, for the decoder.
pub(crate) fn tuple_row(schema: &RecordTy) -> Vec<Column> {
    schema
        .fields
        .iter()
        .map(|f| match as_record(&f.ty) {
            Some((r, nullable)) => {
                Column { name: f.name.clone(), ty: Ty::Record(Box::new(tuple_record(r, &f.name, nullable))) }
            }
            None => Column { name: f.name.clone(), ty: value_ty(&f.ty) },
        })
        .collect()
}

fn tuple_record(r: &RecordTy, path: &str, below_null: bool) -> RecordTy {
    let fields = r
        .fields
        .iter()
        .map(|f| {
            let ty = match as_record(&f.ty) {
                Some((inner, nullable)) => {
                    Ty::Record(Box::new(tuple_record(inner, &format!("{path}_{}", f.name), below_null || nullable)))
                }
                None if below_null => value_ty(&f.ty).or_null(),
                None => value_ty(&f.ty),
            };
            Column { name: f.name.clone(), ty }
        })
        .collect();
    let name: String = std::iter::once("Tuple")
        .chain(path.split('_'))
        .flat_map(|part| {
            let mut chars = part.chars();
            chars.next().map(|c| c.to_ascii_uppercase().to_string() + chars.as_str())
        })
        .collect();
    RecordTy { name, fields }
}

/// The [`input_row`] columns (`parent_child` names) that make up a tuple column `name` of type
/// `record`, leaves in field order.
pub(crate) fn tuple_leaves(name: &str, record: &RecordTy, out: &mut Vec<String>) {
    for f in &record.fields {
        let leaf = flat_name(name, &f.name);
        match &f.ty {
            // A record directly in a tuple is a nested tuple (a container's records are inside
            // its Array or Map).
            Ty::Record(inner) => tuple_leaves(&leaf, inner, out),
            _ => out.push(leaf),
        }
    }
}

/// A value's type with the records inside its containers flattened into tuples.
fn value_ty(ty: &Ty) -> Ty {
    match ty {
        Ty::Array(t) => Ty::Array(Box::new(value_ty(t))),
        Ty::Map(k, v) => Ty::Map(k.clone(), Box::new(value_ty(v))),
        Ty::Nullable(t) => Ty::Nullable(Box::new(value_ty(t))),
        Ty::Record(r) => Ty::Record(Box::new(RecordTy { name: r.name.clone(), fields: input_row(r) })),
        other => other.clone(),
    }
}

/// The Kafka metadata fields every expression can read.
pub(crate) fn metadata_columns() -> Vec<Column> {
    vec![
        Column { name: "_key".into(), ty: Ty::Nullable(Box::new(Ty::Bytes)) },
        Column { name: "_partition".into(), ty: Ty::Int32 },
        Column { name: "_offset".into(), ty: Ty::Int64 },
        Column { name: "_timestamp".into(), ty: Ty::Nullable(Box::new(Ty::Timestamp(TimeUnit::Millis))) },
        Column { name: "_topic".into(), ty: Ty::String },
        // Each header name once, with its last value; `header()` reads one without the map.
        Column { name: "_headers".into(), ty: Ty::Map(Box::new(Ty::String), Box::new(Ty::Bytes)) },
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
    /// A field of a record value (`address.city` under `nested: tuple`).
    Member(Box<TExpr>, String),
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
    /// `header('name')`: the last header of that name, as bytes (null when absent).
    Header,
    /// `header_str('name')`: the same as text; not UTF-8 is a record error.
    HeaderStr,
    /// `m[key]`: the value of a map's last entry with that key (null when there is none).
    MapGet,
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
    ("header", "header('name') -> nullable bytes", "the value of the record's last Kafka header called `name`"),
    (
        "header_str",
        "header_str('name') -> nullable string",
        "the same as text; a value that is not UTF-8 is a record error",
    ),
];

impl TExpr {
    /// Adds the fields the expression reads to `out`.
    pub(crate) fn fields(&self, out: &mut BTreeSet<String>) {
        match &self.kind {
            TKind::Field(name) => {
                out.insert(name.clone());
            }
            TKind::Call(_, args) => args.iter().for_each(|a| a.fields(out)),
            TKind::Unary(_, e) | TKind::Convert(e) | TKind::Member(e, _) => e.fields(out),
            TKind::Binary(_, l, r) => {
                l.fields(out);
                r.fields(out);
            }
            TKind::Lit(_) | TKind::Symbol(_) => {}
        }
    }
}
