//! The live table's columns against the pipeline's: what the sink's start-up check refuses and
//! what `gen --migrate` turns into ALTER statements, from one comparison (std only; etl-gen
//! compiles this file too).

use std::fmt;

/// One column of the live table, from `system.columns`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LiveColumn {
    pub(crate) name: String,
    pub(crate) ty: String,
    /// `DEFAULT`, `MATERIALIZED`, `ALIAS`, `EPHEMERAL` or empty.
    pub(crate) default_kind: String,
}

/// One way the live table differs from the columns the pipeline writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Difference {
    /// The pipeline writes `name` as `ty`; the table has no such column (an `ADD COLUMN` fixes it).
    Missing { name: String, ty: String },
    /// The column exists but is computed (`MATERIALIZED`, `ALIAS`, `EPHEMERAL`): no insert can
    /// name it.
    NotInsertable { name: String, kind: String },
    /// The column has another type than the one the pipeline encodes.
    TypeDiffers { name: String, live: String, written: String },
    /// The table has a column without a default that the pipeline does not write.
    Unwritten { name: String, ty: String },
}

impl fmt::Display for Difference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Missing { name, ty } => write!(f, "column `{name}` is missing (the pipeline writes it as {ty})"),
            Self::NotInsertable { name, kind } => {
                write!(f, "column `{name}` is {kind} in the table and cannot be inserted into")
            }
            Self::TypeDiffers { name, live, written } => {
                write!(f, "column `{name}` has type {live} in the table, the pipeline writes {written}")
            }
            Self::Unwritten { name, ty } => {
                write!(f, "column `{name}` ({ty}) is in the table but the pipeline does not write it")
            }
        }
    }
}

/// Compares the live table with the pipeline's `(name, type)` columns by name; the order does not
/// matter because every INSERT names its columns. Empty when they agree.
///
/// A table column the pipeline does not write is a difference unless it has a default expression
/// (`DEFAULT`, `MATERIALIZED`, `ALIAS`, `EPHEMERAL`): such columns (an `inserted_at DEFAULT now()`)
/// are the table's own business, and [`defaulted`] lists them.
pub(crate) fn differences(expected: &[(String, String)], live: &[LiveColumn]) -> Vec<Difference> {
    let mut out = Vec::new();
    for (name, ty) in expected {
        match live.iter().find(|c| &c.name == name) {
            None => out.push(Difference::Missing { name: name.clone(), ty: ty.clone() }),
            Some(column) if !column.default_kind.is_empty() && column.default_kind != "DEFAULT" => {
                out.push(Difference::NotInsertable { name: name.clone(), kind: column.default_kind.clone() });
            }
            Some(column) if normalize(&column.ty) != normalize(ty) => {
                out.push(Difference::TypeDiffers { name: name.clone(), live: column.ty.clone(), written: ty.clone() })
            }
            Some(_) => {}
        }
    }
    for column in live {
        if column.default_kind.is_empty() && !expected.iter().any(|(name, _)| name == &column.name) {
            out.push(Difference::Unwritten { name: column.name.clone(), ty: column.ty.clone() });
        }
    }
    out
}

/// [`differences`], one line each, as the start-up check reports them.
pub(crate) fn compare(expected: &[(String, String)], live: &[LiveColumn]) -> Vec<String> {
    differences(expected, live).iter().map(ToString::to_string).collect()
}

/// The table's columns that the pipeline does not write and that have a default expression: they
/// take it on every insert.
#[allow(dead_code)]
pub(crate) fn defaulted<'a>(expected: &[(String, String)], live: &'a [LiveColumn]) -> Vec<&'a LiveColumn> {
    live.iter().filter(|c| !c.default_kind.is_empty() && !expected.iter().any(|(name, _)| name == &c.name)).collect()
}

/// A type name with the spacing ClickHouse's own rendering may differ in removed, for comparison:
/// `DateTime64(3,'UTC')` and `DateTime64(3, 'UTC')` are the same type.
fn normalize(ty: &str) -> String {
    let mut out = String::with_capacity(ty.len());
    let mut quoted = false;
    let mut chars = ty.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if quoted => {
                out.push(c);
                if let Some(next) = chars.next() {
                    out.push(next);
                }
            }
            '\'' => {
                quoted = !quoted;
                out.push(c);
            }
            c if c.is_whitespace() && !quoted => {
                // Keep one space between two words (`Tuple(a Int32)`), drop it elsewhere.
                let before = out.chars().last().is_some_and(|p| p.is_alphanumeric() || p == '_');
                let after = chars.peek().is_some_and(|n| n.is_alphanumeric() || *n == '_');
                if before && after {
                    out.push(' ');
                }
            }
            c => out.push(c),
        }
    }
    out
}
