//! Planning the operator chain: each operator checked against the row type before it,
//! expressions parsed and typed, the output row (the sink's columns) derived.
//!
//! Everything a user can get wrong in `transform:` is reported here, pointing at the YAML
//! line, so that generated code always compiles.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use crate::diag::Diagnostic;
use crate::expr::{self, BinOp, Expr, Lit, UnOp};
use crate::ir::{Column, DecodeNode, Ty, input_row, metadata_columns};
use crate::model::{Operator, PipelineFile, Sink};
use crate::rules::transform as rules;
use crate::schema::RecordType;

/// The planned chain.
#[derive(Clone, Debug)]
pub(crate) struct Plan {
    /// The decoded row: the reader schema with nested records flattened.
    pub input: Vec<Column>,
    /// How the decoder reads it.
    pub decode: Vec<DecodeNode>,
    /// The operators, typed.
    pub steps: Vec<Step>,
    /// The row after the last operator: the sink's columns, in order.
    pub output: Vec<Column>,
    /// The output column rows are sharded by, if any.
    pub shard_key: Option<String>,
}

/// One typed operator. Each carries the row type it receives.
#[derive(Clone, Debug)]
pub(crate) enum Step {
    /// Keep rows for which the expression is true.
    Filter {
        /// The condition (type bool).
        cond: TExpr,
    },
    /// Compute fields from the incoming row (every expression sees the row before the map).
    Map {
        /// `(field, expression)`; a field that exists is replaced.
        assigns: Vec<(String, TExpr)>,
    },
    /// One row per element of an array field.
    FlatMap {
        /// The array field.
        field: String,
        /// The element type.
        elem: Ty,
    },
    /// A user function `fn(&mut Row) -> bool`.
    Rust {
        /// The function.
        function: String,
        /// The row type the function sees.
        row: Vec<Column>,
        /// The step's position, naming its row type (`Row{index}`).
        index: usize,
    },
    /// Rename, drop and select change only names and order; they are kept so that the
    /// emitted code can say where it is.
    Reshape {
        /// The row after the step: `(new name, old name)` for each field kept.
        fields: Vec<(String, String)>,
    },
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

impl Plan {
    /// The input fields the chain needs: those that reach an output column or that an
    /// operator reads (every expression of a `filter` or `map`, whatever its result feeds,
    /// so that a record error an expression raises is never skipped; every field a `rust`
    /// function sees). The decoder reads past the others without building their values.
    pub(crate) fn live_inputs(&self) -> BTreeSet<String> {
        let mut live: BTreeSet<String> = self.output.iter().map(|c| c.name.clone()).collect();
        for step in self.steps.iter().rev() {
            match step {
                Step::Filter { cond } => cond.fields(&mut live),
                Step::Map { assigns } => {
                    for (name, _) in assigns {
                        live.remove(name);
                    }
                    for (_, expr) in assigns {
                        expr.fields(&mut live);
                    }
                }
                Step::FlatMap { field, .. } => {
                    live.insert(field.clone());
                }
                Step::Rust { row, .. } => live.extend(row.iter().map(|c| c.name.clone())),
                Step::Reshape { fields } => {
                    live = fields.iter().filter(|(new, _)| live.contains(new)).map(|(_, old)| old.clone()).collect();
                }
            }
        }
        live
    }
}

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

/// A `rust` operator's file as the loader read it.
#[derive(Debug)]
pub(crate) struct RustSource {
    /// The file, canonical.
    pub(crate) path: PathBuf,
    /// Its text.
    pub(crate) text: String,
}

/// Plans the chain of a validated model; diagnostics name `transform[i]...` paths.
/// `sources` holds, by position in `transform`, the file of each `rust` operator.
pub(crate) fn plan(
    model: &PipelineFile,
    schema: &RecordType,
    sources: &BTreeMap<usize, std::io::Result<RustSource>>,
) -> Result<Plan, Vec<Diagnostic>> {
    let (input, decode) = input_row(schema);
    let mut row = input.clone();
    let mut steps = Vec::new();
    let mut errors = Vec::new();
    for (i, op) in model.transform.iter().enumerate() {
        let at = format!("transform[{i}]");
        match plan_step(op, &at, i, &mut row, sources.get(&i)) {
            Ok(step) => steps.push(step),
            Err(mut e) => {
                errors.append(&mut e);
                // Later steps are checked against what the row would be; when a step is
                // broken, stop rather than report consequences.
                break;
            }
        }
    }
    let shard_key = match &model.sink {
        Sink::Clickhouse(c) => c.shard_key.clone(),
        Sink::File(_) => None,
    };
    if errors.is_empty() {
        if row.is_empty() {
            errors.push(
                Diagnostic::error(&rules::NO_COLUMNS, "transform", "the chain leaves no field to write")
                    .help("keep at least one field (check `select` and `drop`)"),
            );
        }
        if let Some(key) = &shard_key {
            match row.iter().find(|c| &c.name == key) {
                None => errors.push(
                    Diagnostic::error(
                        &rules::SHARD_KEY,
                        "sink.clickhouse.shard_key",
                        format!("shard key `{key}` is not an output field"),
                    )
                    .on_value()
                    .note(format!("output fields: {}", names(&row)))
                    .help("name one of the output fields (the shard key is read after the transform)"),
                ),
                Some(c) if !hashable(&c.ty) => errors.push(
                    Diagnostic::error(
                        &rules::SHARD_KEY,
                        "sink.clickhouse.shard_key",
                        format!("shard key `{key}` has type {}, which cannot be hashed", c.ty),
                    )
                    .on_value()
                    .help("shard by an integer, string, enum, uuid, date or timestamp field"),
                ),
                Some(_) => {}
            }
        }
    }
    if errors.is_empty() { Ok(Plan { input, decode, steps, output: row, shard_key }) } else { Err(errors) }
}

/// Types the shard key may have.
fn hashable(ty: &Ty) -> bool {
    matches!(
        ty.non_null(),
        Ty::Int32
            | Ty::Int64
            | Ty::String
            | Ty::Bytes
            | Ty::Enum { .. }
            | Ty::Uuid
            | Ty::Date
            | Ty::TimestampMillis
            | Ty::TimestampMicros
            | Ty::Bool
    )
}

fn names(row: &[Column]) -> String {
    row.iter().map(|c| c.name.as_str()).collect::<Vec<_>>().join(", ")
}

fn plan_step(
    op: &Operator,
    at: &str,
    index: usize,
    row: &mut Vec<Column>,
    source: Option<&std::io::Result<RustSource>>,
) -> Result<Step, Vec<Diagnostic>> {
    match op {
        Operator::Filter(text) => {
            let path = format!("{at}.filter");
            let cond = typed(text, &path, row)?;
            if cond.ty.non_null() != &Ty::Bool {
                return Err(vec![
                    Diagnostic::error(
                        &rules::TYPE_MISMATCH,
                        &path,
                        format!("a filter must be a condition, but `{text}` is {}", cond.ty),
                    )
                    .on_value()
                    .help("compare it, e.g. `x > 0` or `x != ''`"),
                ]);
            }
            Ok(Step::Filter { cond })
        }
        Operator::Map(assigns) => {
            let mut typed_assigns = Vec::new();
            let mut errors = Vec::new();
            for (field, text) in assigns {
                let path = format!("{at}.map.{field}");
                if !is_field_name(field) {
                    errors.push(bad_name(&path, field));
                    continue;
                }
                match typed(text, &path, row) {
                    Ok(e) => typed_assigns.push((field.clone(), e)),
                    Err(mut e) => errors.append(&mut e),
                }
            }
            if !errors.is_empty() {
                return Err(errors);
            }
            for (field, e) in &typed_assigns {
                match row.iter_mut().find(|c| &c.name == field) {
                    Some(c) => c.ty = e.ty.clone(),
                    None => row.push(Column { name: field.clone(), ty: e.ty.clone() }),
                }
            }
            Ok(Step::Map { assigns: typed_assigns })
        }
        Operator::Rename(pairs) => {
            let mut fields: Vec<(String, String)> = row.iter().map(|c| (c.name.clone(), c.name.clone())).collect();
            let mut errors = Vec::new();
            for (old, new) in pairs {
                let path = format!("{at}.rename.{old}");
                if !is_field_name(new) {
                    errors.push(bad_name(&path, new));
                    continue;
                }
                match fields.iter().position(|(_, o)| o == old) {
                    None => errors.push(unknown_field(&path, old, row)),
                    Some(pos) => fields[pos].0 = new.clone(),
                }
            }
            check_unique(&fields, &format!("{at}.rename"), &mut errors);
            if !errors.is_empty() {
                return Err(errors);
            }
            reshape(row, &fields);
            Ok(Step::Reshape { fields })
        }
        Operator::Drop(list) => {
            let mut errors = Vec::new();
            for (i, name) in list.iter().enumerate() {
                if !row.iter().any(|c| &c.name == name) {
                    errors.push(unknown_field(&format!("{at}.drop[{i}]"), name, row));
                }
            }
            if !errors.is_empty() {
                return Err(errors);
            }
            let fields: Vec<(String, String)> =
                row.iter().filter(|c| !list.contains(&c.name)).map(|c| (c.name.clone(), c.name.clone())).collect();
            reshape(row, &fields);
            Ok(Step::Reshape { fields })
        }
        Operator::Select(list) => {
            let mut errors = Vec::new();
            let mut fields = Vec::new();
            for (i, name) in list.iter().enumerate() {
                if !row.iter().any(|c| &c.name == name) {
                    errors.push(unknown_field(&format!("{at}.select[{i}]"), name, row));
                } else {
                    fields.push((name.clone(), name.clone()));
                }
            }
            check_unique(&fields, &format!("{at}.select"), &mut errors);
            if !errors.is_empty() {
                return Err(errors);
            }
            reshape(row, &fields);
            Ok(Step::Reshape { fields })
        }
        Operator::FlatMap(field) => {
            let path = format!("{at}.flat_map");
            let Some(pos) = row.iter().position(|c| &c.name == field) else {
                return Err(vec![unknown_field(&path, field, row).on_value()]);
            };
            let Ty::Array(elem) = row[pos].ty.clone() else {
                return Err(vec![
                    Diagnostic::error(&rules::FLAT_MAP, &path, format!("`{field}` is {}, not an array", row[pos].ty))
                        .on_value()
                        .help("flat_map takes an array field"),
                ]);
            };
            let elem = *elem;
            // The field then holds the element; a record element is flattened as
            // `field_sub` like any nested record.
            let replacement: Vec<Column> = match &elem {
                Ty::Record(r) => {
                    r.fields.iter().map(|c| Column { name: format!("{field}_{}", c.name), ty: c.ty.clone() }).collect()
                }
                other => vec![Column { name: field.clone(), ty: other.clone() }],
            };
            row.splice(pos..=pos, replacement);
            let fields: Vec<(String, String)> = row.iter().map(|c| (c.name.clone(), c.name.clone())).collect();
            let mut errors = Vec::new();
            check_unique(&fields, &path, &mut errors);
            if !errors.is_empty() {
                return Err(errors);
            }
            Ok(Step::FlatMap { field: field.clone(), elem })
        }
        Operator::Rust(r) => {
            let path = format!("{at}.rust");
            let mut errors = Vec::new();
            if !is_field_name(&r.function) {
                errors.push(
                    Diagnostic::error(
                        &rules::RUST_OPERATOR,
                        format!("{path}.fn"),
                        format!("`{}` is not a Rust function name", r.function),
                    )
                    .on_value()
                    .help("name a function defined in the file"),
                );
            }
            let source = source.expect("the loader reads every rust operator's file");
            match source {
                Err(e) => errors.push(
                    Diagnostic::error(
                        &rules::RUST_OPERATOR,
                        format!("{path}.file"),
                        format!("cannot read `{}`: {e}", r.file),
                    )
                    .on_value()
                    .help("the path is relative to the directory of pipeline.yaml"),
                ),
                Ok(source) if !source.text.contains(&format!("fn {}", r.function)) => errors.push(
                    Diagnostic::error(
                        &rules::RUST_OPERATOR,
                        format!("{path}.fn"),
                        format!("`{}` does not define `fn {}`", r.file, r.function),
                    )
                    .on_value()
                    .help(format!("define `pub fn {}(row: &mut Row) -> bool` in {}", r.function, r.file)),
                ),
                Ok(_) => {}
            }
                        if !errors.is_empty() {
                return Err(errors);
            }
            Ok(Step::Rust { function: r.function.clone(), row: row.clone(), index })
        }
    }
}

fn reshape(row: &mut Vec<Column>, fields: &[(String, String)]) {
    let old = std::mem::take(row);
    for (new, from) in fields {
        let ty = old.iter().find(|c| &c.name == from).map(|c| c.ty.clone()).expect("checked above");
        row.push(Column { name: new.clone(), ty });
    }
}

fn check_unique(fields: &[(String, String)], path: &str, errors: &mut Vec<Diagnostic>) {
    for (i, (name, _)) in fields.iter().enumerate() {
        if fields[..i].iter().any(|(n, _)| n == name) {
            errors.push(
                Diagnostic::error(&rules::DUPLICATE_FIELD, path, format!("this step leaves two fields named `{name}`"))
                    .help("rename or drop one of them"),
            );
        }
    }
}

fn is_field_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn bad_name(path: &str, name: &str) -> Diagnostic {
    Diagnostic::error(&rules::DUPLICATE_FIELD, path, format!("`{name}` is not a valid field name"))
        .help("use letters, digits and `_`, not starting with a digit")
}

fn unknown_field(path: &str, name: &str, row: &[Column]) -> Diagnostic {
    let near = crate::diag::nearest(name, row.iter().map(|c| c.name.as_str()));
    let d = Diagnostic::error(&rules::UNKNOWN_FIELD, path, format!("unknown field `{name}`"))
        .note(format!("fields here: {}", names(row)));
    match near {
        Some(n) => d.help(format!("did you mean `{n}`?")),
        None => d.help("use a field of the row at this point of the chain"),
    }
}

/// Parses and types `text` against `row`.
fn typed(text: &str, path: &str, row: &[Column]) -> Result<TExpr, Vec<Diagnostic>> {
    let parsed = expr::parse(text).map_err(|e| {
        vec![
            Diagnostic::error(&rules::SYNTAX, path, format!("in `{text}`: {}", e.message))
                .on_value()
                .note(format!("at: {}", caret(text, &e.span)))
                .help("see docs/configuration.md for the expression language"),
        ]
    })?;
    let mut cx = Typer { text, path, row, errors: Vec::new() };
    let e = cx.check(&parsed);
    match e {
        Some(e) if cx.errors.is_empty() => Ok(e),
        _ => Err(cx.errors),
    }
}

/// The expression with a marker under `span`, on one line.
fn caret(text: &str, span: &std::ops::Range<usize>) -> String {
    let start = span.start.min(text.len());
    let end = span.end.clamp(start, text.len());
    format!("{}»{}«{}", &text[..start], &text[start..end], &text[end..])
}

struct Typer<'a> {
    text: &'a str,
    path: &'a str,
    row: &'a [Column],
    errors: Vec<Diagnostic>,
}

fn nullable_if(ty: Ty, nullable: bool) -> Ty {
    if nullable && !ty.is_nullable() { Ty::Nullable(Box::new(ty)) } else { ty }
}

impl Typer<'_> {
    fn error(&mut self, rule: &'static crate::diag::Rule, span: &std::ops::Range<usize>, message: String, help: &str) {
        self.errors.push(
            Diagnostic::error(rule, self.path, format!("in `{}`: {message}", self.text))
                .on_value()
                .note(format!("at: {}", caret(self.text, span)))
                .help(help.to_owned()),
        );
    }

    fn field(&self, name: &str) -> Option<Ty> {
        self.row
            .iter()
            .find(|c| c.name == name)
            .map(|c| c.ty.clone())
            .or_else(|| metadata_columns().into_iter().find(|c| c.name == name).map(|c| c.ty))
    }

    fn check(&mut self, e: &Expr) -> Option<TExpr> {
        match e {
            Expr::Lit(lit, span) => Some(TExpr {
                ty: match lit {
                    Lit::Int(_) => Ty::Int64,
                    Lit::Float(_) => Ty::Float64,
                    Lit::Str(_) => Ty::String,
                    Lit::Bool(_) => Ty::Bool,
                    Lit::Null => {
                        self.error(
                            &rules::TYPE_MISMATCH,
                            span,
                            "`null` has no type here".into(),
                            "test for null with is_null(x); supply a default with coalesce(x, default)",
                        );
                        return None;
                    }
                },
                kind: TKind::Lit(lit.clone()),
            }),
            Expr::Field(name, span) => match self.field(name) {
                Some(ty) => Some(TExpr { kind: TKind::Field(name.clone()), ty }),
                None => {
                    let d = unknown_field(self.path, name, self.row);
                    self.errors.push(Diagnostic {
                        message: format!("in `{}`: unknown field `{name}`", self.text),
                        ..d.on_value().note(format!("at: {}", caret(self.text, span)))
                    });
                    None
                }
            },
            Expr::Unary(op, inner, span) => {
                let inner = self.check(inner)?;
                match op {
                    UnOp::Not => {
                        if inner.ty.non_null() != &Ty::Bool {
                            self.error(
                                &rules::TYPE_MISMATCH,
                                span,
                                format!("`!` needs a bool, not {}", inner.ty),
                                "negate a condition",
                            );
                            return None;
                        }
                        Some(TExpr { kind: TKind::Unary(UnOp::Not, Box::new(inner)), ty: Ty::Bool })
                    }
                    UnOp::Neg => {
                        if !inner.ty.is_numeric() {
                            self.error(
                                &rules::TYPE_MISMATCH,
                                span,
                                format!("`-` needs a number, not {}", inner.ty),
                                "negate a number",
                            );
                            return None;
                        }
                        let nullable = inner.ty.is_nullable();
                        let inner = self.to_arith(inner);
                        let ty = nullable_if(inner.ty.non_null().clone(), nullable);
                        Some(TExpr { kind: TKind::Unary(UnOp::Neg, Box::new(inner)), ty })
                    }
                }
            }
            Expr::Binary(op, l, r, span) => self.binary(*op, l, r, span),
            Expr::Call(name, args, span) => self.call(name, args, span),
        }
    }

    /// Converts a numeric operand to the arithmetic type: Int64 for integers (timestamps
    /// and dates count as their ticks), Float64 for floats and decimals.
    fn to_arith(&self, e: TExpr) -> TExpr {
        let target = if e.ty.is_integer() { Ty::Int64 } else { Ty::Float64 };
        self.convert(e, target)
    }

    fn convert(&self, e: TExpr, target: Ty) -> TExpr {
        if e.ty.non_null() == &target {
            return e;
        }
        let ty = nullable_if(target, e.ty.is_nullable());
        TExpr { kind: TKind::Convert(Box::new(e)), ty }
    }

    fn binary(&mut self, op: BinOp, l: &Expr, r: &Expr, span: &std::ops::Range<usize>) -> Option<TExpr> {
        // `x == null` is always false by the language's rules; say so instead of compiling it.
        if op.is_comparison() && (matches!(l, Expr::Lit(Lit::Null, _)) || matches!(r, Expr::Lit(Lit::Null, _))) {
            self.error(
                &rules::TYPE_MISMATCH,
                span,
                "a comparison with null is always false".into(),
                "use is_null(x) or !is_null(x)",
            );
            return None;
        }
        let (lt, rt) = (self.check(l), self.check(r));
        let (lt, rt) = (lt?, rt?);
        match op {
            BinOp::And | BinOp::Or => {
                for side in [&lt, &rt] {
                    if side.ty.non_null() != &Ty::Bool {
                        self.error(
                            &rules::TYPE_MISMATCH,
                            span,
                            format!("`{op}` needs conditions, not {}", side.ty),
                            "compare values first, e.g. `x > 0`",
                        );
                        return None;
                    }
                }
                Some(TExpr { kind: TKind::Binary(op, Box::new(lt), Box::new(rt)), ty: Ty::Bool })
            }
            BinOp::Add | BinOp::Sub | BinOp::Mul | BinOp::Div | BinOp::Rem => {
                if !lt.ty.is_numeric() || !rt.ty.is_numeric() {
                    self.error(
                        &rules::TYPE_MISMATCH,
                        span,
                        format!("`{op}` needs numbers, not {} and {}", lt.ty, rt.ty),
                        "use concat() to join texts; arithmetic works on numbers, dates and timestamps",
                    );
                    return None;
                }
                let nullable = lt.ty.is_nullable() || rt.ty.is_nullable();
                let float = !lt.ty.is_integer() || !rt.ty.is_integer();
                let target = if float { Ty::Float64 } else { Ty::Int64 };
                let (lt, rt) = (self.convert(lt, target.clone()), self.convert(rt, target.clone()));
                Some(TExpr { kind: TKind::Binary(op, Box::new(lt), Box::new(rt)), ty: nullable_if(target, nullable) })
            }
            _ => {
                // Comparisons.
                let (ln, rn) = (lt.ty.non_null().clone(), rt.ty.non_null().clone());
                if lt.ty.is_numeric() && rt.ty.is_numeric() {
                    let float = !lt.ty.is_integer() || !rt.ty.is_integer();
                    let target = if float { Ty::Float64 } else { Ty::Int64 };
                    let (lt, rt) = (self.convert(lt, target.clone()), self.convert(rt, target));
                    return Some(TExpr { kind: TKind::Binary(op, Box::new(lt), Box::new(rt)), ty: Ty::Bool });
                }
                // An enum against a string literal compares symbols; `==`/`!=` by index.
                let (lt, rt, ln) = if matches!(lt.kind, TKind::Lit(Lit::Str(_))) && matches!(rn, Ty::Enum { .. }) {
                    (rt, lt, rn.clone())
                } else {
                    (lt, rt, ln)
                };
                if let (Ty::Enum { symbols, .. }, TKind::Lit(Lit::Str(s))) = (&ln, &rt.kind)
                    && matches!(op, BinOp::Eq | BinOp::Ne)
                {
                    match symbols.iter().position(|x| x == s) {
                        Some(i) => {
                            let sym = TExpr { kind: TKind::Symbol(i as u32), ty: ln.clone() };
                            return Some(TExpr { kind: TKind::Binary(op, Box::new(lt), Box::new(sym)), ty: Ty::Bool });
                        }
                        None => {
                            let message =
                                format!("'{s}' is not a symbol of the enum (symbols: {})", symbols.join(", "));
                            self.error(&rules::TYPE_MISMATCH, span, message, "compare with one of the enum's symbols");
                            return None;
                        }
                    }
                }
                let rn = rt.ty.non_null().clone();
                let comparable = (lt.ty.is_text() && rt.ty.is_text())
                    || (ln == Ty::Bool && rn == Ty::Bool && matches!(op, BinOp::Eq | BinOp::Ne))
                    || (ln == rn && matches!(ln, Ty::Uuid) && matches!(op, BinOp::Eq | BinOp::Ne));
                if !comparable {
                    self.error(
                        &rules::TYPE_MISMATCH,
                        span,
                        format!("cannot compare {} with {}", lt.ty, rt.ty),
                        "compare values of the same kind",
                    );
                    return None;
                }
                Some(TExpr { kind: TKind::Binary(op, Box::new(lt), Box::new(rt)), ty: Ty::Bool })
            }
        }
    }

    fn call(&mut self, name: &str, args: &[Expr], span: &std::ops::Range<usize>) -> Option<TExpr> {
        let func = match name {
            "lower" => Func::Lower,
            "upper" => Func::Upper,
            "length" => Func::Length,
            "coalesce" => Func::Coalesce,
            "is_null" => Func::IsNull,
            "concat" => Func::Concat,
            "abs" => Func::Abs,
            _ => {
                let list: Vec<&str> = FUNCTIONS.iter().map(|f| f.0).collect();
                self.error(
                    &rules::UNKNOWN_FUNCTION,
                    span,
                    format!("unknown function `{name}`"),
                    &format!("the functions are {}", list.join(", ")),
                );
                return None;
            }
        };
        let typed: Vec<Option<TExpr>> = args.iter().map(|a| self.check(a)).collect();
        let typed: Vec<TExpr> = typed.into_iter().collect::<Option<_>>()?;
        let signature = FUNCTIONS.iter().find(|f| f.0 == name).map(|f| f.1).unwrap_or_default();
        let arity_ok = match func {
            Func::Coalesce => typed.len() >= 2,
            Func::Concat => !typed.is_empty(),
            _ => typed.len() == 1,
        };
        if !arity_ok {
            self.error(
                &rules::UNKNOWN_FUNCTION,
                span,
                format!("wrong number of arguments to `{name}`"),
                &format!("the signature is {signature}"),
            );
            return None;
        }
        let bad = |this: &mut Self, t: &TExpr| {
            this.error(
                &rules::TYPE_MISMATCH,
                span,
                format!("`{name}` does not take {}", t.ty),
                &format!("the signature is {signature}"),
            );
        };
        let ty = match func {
            Func::Lower | Func::Upper => {
                if !typed[0].ty.is_text() {
                    bad(self, &typed[0]);
                    return None;
                }
                nullable_if(Ty::String, typed[0].ty.is_nullable())
            }
            Func::Length => {
                if !(typed[0].ty.is_text() || matches!(typed[0].ty.non_null(), Ty::Array(_) | Ty::Map(_))) {
                    bad(self, &typed[0]);
                    return None;
                }
                nullable_if(Ty::Int64, typed[0].ty.is_nullable())
            }
            Func::IsNull => {
                if !typed[0].ty.is_nullable() {
                    self.error(
                        &rules::TYPE_MISMATCH,
                        span,
                        format!("`{}` is never null ({})", &self.text[args[0].span()], typed[0].ty),
                        "remove the test",
                    );
                    return None;
                }
                Ty::Bool
            }
            Func::Concat => {
                for t in &typed {
                    if !t.ty.is_text() {
                        bad(self, t);
                        return None;
                    }
                }
                Ty::String
            }
            Func::Abs => {
                if !typed[0].ty.is_numeric() {
                    bad(self, &typed[0]);
                    return None;
                }
                let nullable = typed[0].ty.is_nullable();
                let arg = self.to_arith(typed.into_iter().next().expect("arity checked"));
                let ty = nullable_if(arg.ty.non_null().clone(), nullable);
                return Some(TExpr { kind: TKind::Call(func, vec![arg]), ty });
            }
            Func::Coalesce => {
                let numeric = typed.iter().all(|t| t.ty.is_numeric());
                let first = typed[0].ty.non_null().clone();
                let all_same = typed.iter().all(|t| t.ty.non_null() == &first);
                let all_text = typed.iter().all(|t| matches!(t.ty.non_null(), Ty::String));
                let last_nullable = typed.last().is_some_and(|t| t.ty.is_nullable());
                if all_same || all_text {
                    nullable_if(first, last_nullable)
                } else if numeric {
                    let float = typed.iter().any(|t| !t.ty.is_integer());
                    let target = if float { Ty::Float64 } else { Ty::Int64 };
                    let args: Vec<TExpr> = typed.into_iter().map(|t| self.convert(t, target.clone())).collect();
                    return Some(TExpr { kind: TKind::Call(func, args), ty: nullable_if(target, last_nullable) });
                } else {
                    let kinds: Vec<String> = typed.iter().map(|t| t.ty.to_string()).collect();
                    self.error(
                        &rules::TYPE_MISMATCH,
                        span,
                        format!("`coalesce` needs arguments of one type, not {}", kinds.join(", ")),
                        "make the arguments the same type",
                    );
                    return None;
                }
            }
        };
        Some(TExpr { kind: TKind::Call(func, typed), ty })
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    fn live_of(file: &str) -> BTreeSet<String> {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(file);
        let outcome = crate::validate_file(&path, &crate::Options::default()).unwrap();
        outcome.pipeline.expect("valid").plan.live_inputs()
    }

    fn set(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|n| (*n).to_owned()).collect()
    }

    // The flagship reads `total_cents` and `region` in its filter, computes `total` from
    // `total_cents` and selects the rest: `coupon` is never read, so it is skipped, not decoded.
    #[test]
    fn the_flagship_never_reads_coupon() {
        let live = live_of("examples/kafka_avro_to_clickhouse/pipeline.yaml");
        assert_eq!(live, set(&["created_at", "customer_id", "order_id", "region", "total_cents"]));
    }

    // A renamed field is live under its old name; a dropped one is not; every field a `map`
    // expression reads is live even when the result is dropped later (its errors still count).
    #[test]
    fn renames_drops_and_maps_are_followed_backwards() {
        let live = live_of("etl-gen/tests/pipelines/kitchen_sink/pipeline.yaml");
        assert!(live.contains("nested_a"), "renamed to na and kept: {live:?}");
        assert!(!live.contains("blob"), "dropped: {live:?}");
        for read_by_map in ["id", "small", "ratio", "name", "tags", "maybe", "maybe_n", "price", "ts", "flag"] {
            assert!(live.contains(read_by_map), "{read_by_map} is read by a map: {live:?}");
        }
    }
}
