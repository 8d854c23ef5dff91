//! The type checker of the expression language: a parsed `filter` or `map` expression
//! ([`crate::expr`]) checked against the row at its place in the chain and turned into a
//! typed expression ([`crate::ir::TExpr`]) with explicit numeric conversions. Each error is a
//! diagnostic on the expression, with a marker under the offending part.
//!
//! It is part of planning: the planner (`plan/mod.rs`) calls [`typed`] for each expression with
//! the row at that step, and the rules it reports (E0701–E0704) are the chain's
//! (`plan/chain_rules.rs`).

use super::chain_rules::{self as rules, unknown_field};
use crate::diag::Diagnostic;
use crate::expr::{self, BinOp, Expr, Lit, UnOp};
use crate::ir::{Column, FUNCTIONS, Func, TExpr, TKind, Ty, metadata_columns};

/// Parses and types `text` against `row`.
pub(crate) fn typed(text: &str, path: &str, row: &[Column]) -> Result<TExpr, Vec<Diagnostic>> {
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

/// The checker of one expression: its text and path for diagnostics, the row it reads, and the
/// errors found so far (both operands of an operator and every argument of a call are checked
/// before giving up, so that independent errors are reported together).
struct Typer<'a> {
    text: &'a str,
    path: &'a str,
    row: &'a [Column],
    errors: Vec<Diagnostic>,
}

/// `ty`, made Nullable when `nullable` (and it is not already).
fn nullable_if(ty: Ty, nullable: bool) -> Ty {
    if nullable && !ty.is_nullable() { Ty::Nullable(Box::new(ty)) } else { ty }
}

impl Typer<'_> {
    /// Records an error of `rule` under `span` of the expression.
    fn error(&mut self, rule: &'static crate::diag::Rule, span: &std::ops::Range<usize>, message: String, help: &str) {
        self.errors.push(
            Diagnostic::error(rule, self.path, format!("in `{}`: {message}", self.text))
                .on_value()
                .note(format!("at: {}", caret(self.text, span)))
                .help(help.to_owned()),
        );
    }

    /// The type of the field `name`: of the row, else of the Kafka metadata.
    fn field(&self, name: &str) -> Option<Ty> {
        self.row
            .iter()
            .find(|c| c.name == name)
            .map(|c| c.ty.clone())
            .or_else(|| metadata_columns().into_iter().find(|c| c.name == name).map(|c| c.ty))
    }

    /// Types `e`; `None` when it (or a part of it) has an error, which is recorded.
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
            Expr::Field(name, span) if name.contains('.') && self.field(name).is_none() => self.nested(name, span),
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

    /// `e` converted to `target` (keeping its nullability), or `e` when it already has it.
    fn convert(&self, e: TExpr, target: Ty) -> TExpr {
        if e.ty.non_null() == &target {
            return e;
        }
        let ty = nullable_if(target, e.ty.is_nullable());
        TExpr { kind: TKind::Convert(Box::new(e)), ty }
    }

    /// Types a binary operation: logic on conditions, arithmetic on numbers, comparisons.
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
                    || (ln == rn
                        && matches!(ln, Ty::Uuid | Ty::Ipv4 | Ty::Ipv6)
                        && matches!(op, BinOp::Eq | BinOp::Ne));
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

    /// Types a call of a built-in function: its name, its number of arguments, their types.
    fn call(&mut self, name: &str, args: &[Expr], span: &std::ops::Range<usize>) -> Option<TExpr> {
        if name == crate::expr::INDEX {
            return self.index(&args[0], &args[1], span);
        }
        let func = match name {
            "lower" => Func::Lower,
            "upper" => Func::Upper,
            "length" => Func::Length,
            "coalesce" => Func::Coalesce,
            "is_null" => Func::IsNull,
            "concat" => Func::Concat,
            "abs" => Func::Abs,
            "header" => Func::Header,
            "header_str" => Func::HeaderStr,
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
        if matches!(func, Func::Header | Func::HeaderStr) {
            return self.header(func, name, args, span);
        }
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
            Func::Header | Func::HeaderStr | Func::MapGet => unreachable!("typed by `header` and `index` above"),
            Func::Lower | Func::Upper => {
                if !typed[0].ty.is_text() {
                    bad(self, &typed[0]);
                    return None;
                }
                nullable_if(Ty::String, typed[0].ty.is_nullable())
            }
            Func::Length => {
                if !(typed[0].ty.is_text() || matches!(typed[0].ty.non_null(), Ty::Array(_) | Ty::Map(..))) {
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

    /// `header('name')` / `header_str('name')`: the name must be a string literal, so that the
    /// generated code looks it up by a constant and `gen` can tell what a pipeline reads.
    /// Types `parent.child`: a member of a tuple column (`nested: tuple`), or the flattened
    /// column `parent_child` (`nested: flatten`).
    fn nested(&mut self, name: &str, span: &std::ops::Range<usize>) -> Option<TExpr> {
        let mut parts = name.split('.');
        let head = parts.next().unwrap_or_default();
        if let Some(Ty::Record(_) | Ty::Variant(_)) = self.field(head) {
            let mut e = TExpr { kind: TKind::Field(head.to_owned()), ty: self.field(head)? };
            for part in parts {
                if let Ty::Variant(members) = &e.ty {
                    let Some(m) = members.iter().find(|m| m.member_name() == part) else {
                        let known: Vec<String> = members.iter().map(Ty::member_name).collect();
                        self.error(
                            &rules::TYPE_MISMATCH,
                            span,
                            format!("`{name}`: the variant has no member `{part}`"),
                            &format!("its members are {}", known.join(", ")),
                        );
                        return None;
                    };
                    // Null unless the variant holds this member.
                    let ty = m.clone().or_null();
                    e = TExpr { kind: TKind::Member(Box::new(e), part.to_owned()), ty };
                    continue;
                }
                let Ty::Record(r) = e.ty.clone() else {
                    self.error(
                        &rules::TYPE_MISMATCH,
                        span,
                        format!("`{name}`: {} is not a record, so it has no field `{part}`", e.ty),
                        "read a field of a record",
                    );
                    return None;
                };
                let Some(f) = r.fields.iter().find(|f| f.name == part) else {
                    let known: Vec<&str> = r.fields.iter().map(|f| f.name.as_str()).collect();
                    self.error(
                        &rules::TYPE_MISMATCH,
                        span,
                        format!("`{name}`: the record has no field `{part}`"),
                        &format!("its fields are {}", known.join(", ")),
                    );
                    return None;
                };
                e = TExpr { kind: TKind::Member(Box::new(e), part.to_owned()), ty: f.ty.clone() };
            }
            return Some(e);
        }
        let flat = name.replace('.', "_");
        match self.field(&flat) {
            Some(ty) => Some(TExpr { kind: TKind::Field(flat), ty }),
            None => {
                let d = unknown_field(self.path, name, self.row);
                self.errors.push(Diagnostic {
                    message: format!("in `{}`: unknown field `{name}`", self.text),
                    ..d.on_value().note(format!("at: {}", caret(self.text, span)))
                });
                None
            }
        }
    }

    /// Types `map[key]`: the map's value type, nullable (a key may be absent); the key of the
    /// map's key type (an integer literal takes any integer key type it fits).
    fn index(&mut self, map: &Expr, key: &Expr, span: &std::ops::Range<usize>) -> Option<TExpr> {
        let (m, k) = (self.check(map), self.check(key));
        let (m, k) = (m?, k?);
        let Ty::Map(key_ty, value_ty) = m.ty.non_null().clone() else {
            self.error(
                &rules::TYPE_MISMATCH,
                span,
                format!("`[...]` reads a map, not {}", m.ty),
                "index a map field, e.g. attrs['color']",
            );
            return None;
        };
        let fits = |v: i64| match *key_ty {
            Ty::Int32 => i32::try_from(v).is_ok(),
            Ty::UInt32 => u32::try_from(v).is_ok(),
            Ty::Int64 => true,
            Ty::UInt64 => v >= 0,
            _ => false,
        };
        let k = match &k.kind {
            TKind::Lit(Lit::Int(v)) if fits(*v) => TExpr { kind: k.kind.clone(), ty: (*key_ty).clone() },
            _ if k.ty.non_null() == &*key_ty => k,
            _ => {
                self.error(
                    &rules::TYPE_MISMATCH,
                    span,
                    format!("the keys of this map are {key_ty}, not {}", k.ty),
                    &format!("look up a {key_ty} key"),
                );
                return None;
            }
        };
        if matches!(*value_ty, Ty::Record(_)) {
            self.error(
                &rules::TYPE_MISMATCH,
                span,
                format!("`[...]` cannot read a map of {value_ty}: ClickHouse has no nullable tuple"),
                "read the map whole, or map a field of it in a `rust` operator",
            );
            return None;
        }
        let ty = value_ty.or_null();
        Some(TExpr { kind: TKind::Call(Func::MapGet, vec![m, k]), ty })
    }

    fn header(&mut self, func: Func, name: &str, args: &[Expr], span: &std::ops::Range<usize>) -> Option<TExpr> {
        let header = match args {
            [Expr::Lit(Lit::Str(header), _)] if !header.is_empty() => header.clone(),
            _ => {
                self.error(
                    &rules::TYPE_MISMATCH,
                    span,
                    format!("`{name}` takes one header name as a string literal"),
                    &format!("write {name}('trace-id'); the name cannot be computed"),
                );
                return None;
            }
        };
        let ty = if func == Func::Header { Ty::Bytes } else { Ty::String };
        let arg = TExpr { kind: TKind::Lit(Lit::Str(header)), ty: Ty::String };
        Some(TExpr { kind: TKind::Call(func, vec![arg]), ty: Ty::Nullable(Box::new(ty)) })
    }
}
