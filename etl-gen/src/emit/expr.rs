//! Typed expressions to Rust.
//!
//! Each expression becomes a Rust expression of its type's carrier (see
//! `rust_types::rust_ty`): nullable values are `Option`s, integer arithmetic is checked and
//! propagates a record error with `?`, a comparison with null is false, and in a
//! condition null counts as false.

use std::collections::HashMap;

use proc_macro2::{Literal, TokenStream};
use quote::quote;

use crate::expr::{BinOp, Lit, UnOp};
use crate::ir::Ty;
use crate::ir::{Func, TExpr, TKind};

/// Field name → the local variable holding it, at one point of the chain.
pub(super) type Scope = HashMap<String, proc_macro2::Ident>;

/// A Rust expression evaluating to `e`'s value (owned, of `e.ty`'s carrier type).
pub(super) fn value(e: &TExpr, scope: &Scope) -> TokenStream {
    match &e.kind {
        TKind::Lit(lit) => match lit {
            Lit::Int(v) => {
                let v = Literal::i64_suffixed(*v);
                quote!(#v)
            }
            Lit::Float(v) => {
                let v = Literal::f64_suffixed(*v);
                quote!(#v)
            }
            Lit::Str(s) => quote!(::std::borrow::Cow::Borrowed(#s)),
            Lit::Bool(b) => quote!(#b),
            Lit::Null => quote!(None),
        },
        TKind::Symbol(i) => match e.ty.non_null() {
            Ty::Enum { name, symbols, .. } => {
                let id = symbol_const(name, symbols, *i);
                quote!(#id)
            }
            _ => {
                let i = Literal::u32_unsuffixed(*i);
                quote!(#i)
            }
        },
        TKind::Field(name) => {
            let id = &scope[name];
            // Copy types are copied; texts and containers are cloned (a borrowed Cow only
            // copies its pointer).
            if is_copy(&e.ty) { quote!(#id) } else { quote!(#id.clone()) }
        }
        // A variant's member: the value when the variant holds that member, else null.
        TKind::Member(base, member) if matches!(base.ty, Ty::Variant(_)) => {
            let place = place(base, scope);
            let name = super::rust_types::variant_ident(&base.ty);
            let id = quote::format_ident!("{}", member);
            let pick = if is_copy(&e.ty) { quote!(*x) } else { quote!(x.clone()) };
            quote!(match &#place { Some(#name::#id(x)) => Some(#pick), _ => None })
        }
        TKind::Member(..) => {
            let place = place(e, scope);
            if is_copy(&e.ty) { place } else { quote!(#place.clone()) }
        }
        // An integer literal where a float is wanted is written as a float.
        TKind::Convert(inner) if matches!(inner.kind, TKind::Lit(Lit::Int(_))) && e.ty == Ty::Float64 => {
            let TKind::Lit(Lit::Int(v)) = inner.kind else { unreachable!("matched above") };
            let v = Literal::f64_suffixed(v as f64);
            quote!(#v)
        }
        TKind::Convert(inner) => {
            let from = inner.ty.non_null().clone();
            let to = e.ty.non_null().clone();
            let x = value(inner, scope);
            let conv = convert(&from, &to, quote!(x));
            if conv.to_string() == "x" {
                // Already of the target's Rust type: no conversion to write.
                x
            } else if inner.ty.is_nullable() {
                quote!(#x.map(|x| #conv))
            } else if is_atom(&x) {
                // A local or a literal is converted in place.
                convert(&from, &to, x)
            } else {
                // A block's value needs no parentheses (rustc warns about them).
                let conv = match (&from, &to) {
                    (Ty::Float64, _) | (_, Ty::Int64) => conv,
                    (_, Ty::Float64) if conv.to_string().starts_with('(') => quote!(x as f64),
                    _ => conv,
                };
                quote!({ let x = #x; #conv })
            }
        }
        // `!is_null(x)` reads as `x.is_some()`.
        TKind::Unary(UnOp::Not, inner) if matches!(&inner.kind, TKind::Call(Func::IsNull, _)) => {
            let TKind::Call(_, args) = &inner.kind else { unreachable!("matched above") };
            let v = value(&args[0], scope);
            quote!(#v.is_some())
        }
        TKind::Unary(UnOp::Not, inner) => {
            let c = condition(inner, scope);
            quote!(!(#c))
        }
        TKind::Unary(UnOp::Neg, inner) => {
            let x = value(inner, scope);
            let neg = if inner.ty.non_null() == &Ty::Int64 { quote!(rt::ops::neg(x)?) } else { quote!(-x) };
            if inner.ty.is_nullable() {
                quote!(match #x { Some(x) => Some(#neg), None => None })
            } else if is_simple(&x) {
                if inner.ty.non_null() == &Ty::Int64 { quote!(rt::ops::neg(#x)?) } else { quote!((-#x)) }
            } else {
                quote!({ let x = #x; #neg })
            }
        }
        TKind::Binary(op, l, r) => binary(*op, l, r, &e.ty, scope),
        TKind::Call(func, args) => call(*func, args, &e.ty, scope),
    }
}

/// The place a field or a chain of members names (`f_address_3.geo.lat`), not copied.
fn place(e: &TExpr, scope: &Scope) -> TokenStream {
    match &e.kind {
        TKind::Field(name) => {
            let id = &scope[name];
            quote!(#id)
        }
        TKind::Member(base, field) => {
            let base = place(base, scope);
            let field = super::rust_types::field_ident(field);
            quote!(#base.#field)
        }
        _ => unreachable!("typeck makes members of fields and members only"),
    }
}

/// The constant naming symbol `index` of the enum `name` (`REGION_APAC`); `chain` defines it.
pub(super) fn symbol_const(name: &str, symbols: &[String], index: u32) -> proc_macro2::Ident {
    let symbol = symbols.get(index as usize).map(String::as_str).unwrap_or_default();
    let mut id = String::new();
    for c in format!("{name}_{symbol}").chars() {
        id.push(if c.is_ascii_alphanumeric() { c.to_ascii_uppercase() } else { '_' });
    }
    quote::format_ident!("{}", id)
}

/// A single identifier or literal: safe to use twice and to convert without a `let`.
fn is_atom(x: &TokenStream) -> bool {
    let mut trees = x.clone().into_iter();
    matches!(
        (trees.next(), trees.next()),
        (Some(proc_macro2::TokenTree::Ident(_) | proc_macro2::TokenTree::Literal(_)), None)
    )
}

/// A Rust `bool` expression: null counts as false.
pub(super) fn condition(e: &TExpr, scope: &Scope) -> TokenStream {
    let v = value(e, scope);
    if e.ty.is_nullable() { quote!((#v == Some(true))) } else { v }
}

pub(super) fn is_copy(ty: &Ty) -> bool {
    match ty {
        Ty::Nullable(t) => is_copy(t),
        Ty::String | Ty::Bytes | Ty::Json | Ty::Array(_) | Ty::Map(..) | Ty::Record(_) | Ty::Variant(_) => false,
        _ => true,
    }
}

/// Numeric conversion of `x` (a non-null value of `from`) to `to` (Int64 or Float64).
fn convert(from: &Ty, to: &Ty, x: TokenStream) -> TokenStream {
    match (from, to) {
        (Ty::Decimal { scale, .. }, Ty::Float64) => {
            let s = Literal::u32_unsuffixed(*scale);
            quote!(rt::ops::decimal_to_f64(#x, #s))
        }
        // Already of the target's Rust type (timestamps are `i64`s).
        (Ty::Float64, Ty::Float64) | (Ty::Int64 | Ty::Timestamp(_), Ty::Int64) => x,
        // Lossless: `f64::from` says so; a 64-bit integer needs `as`.
        (Ty::Float32 | Ty::Int32 | Ty::UInt32 | Ty::Date, Ty::Float64) => quote!(f64::from(#x)),
        (_, Ty::Float64) => quote!((#x as f64)),
        (_, Ty::Int64) => quote!(i64::from(#x)),
        _ => x,
    }
}

/// A borrowed `&str`/`&[u8]` view of a text value, for comparisons and functions.
fn text_ref(e: &TExpr, scope: &Scope, enums_as_symbols: bool) -> TokenStream {
    let _ = enums_as_symbols;
    match (&e.kind, e.ty.non_null()) {
        (TKind::Lit(Lit::Str(s)), _) => quote!(#s.as_bytes()),
        (TKind::Field(name), Ty::String) => {
            let id = &scope[name];
            quote!(#id.as_bytes())
        }
        (TKind::Field(name), Ty::Bytes) => {
            let id = &scope[name];
            quote!(&#id[..])
        }
        (_, Ty::Enum { symbols, .. }) => {
            let table = enum_symbols(symbols);
            let v = value(e, scope);
            quote!(#table[#v as usize].as_bytes())
        }
        _ => {
            let v = value(e, scope);
            quote!(rt::text_bytes(&#v))
        }
    }
}

fn enum_symbols(symbols: &[String]) -> TokenStream {
    quote!([#(#symbols),*])
}

fn binary(op: BinOp, l: &TExpr, r: &TExpr, ty: &Ty, scope: &Scope) -> TokenStream {
    match op {
        BinOp::And => {
            let (a, b) = (condition(l, scope), condition(r, scope));
            quote!((#a && #b))
        }
        BinOp::Or => {
            let (a, b) = (condition(l, scope), condition(r, scope));
            quote!((#a || #b))
        }
        BinOp::Add | BinOp::Sub | BinOp::Mul | BinOp::Div | BinOp::Rem => {
            let (a, b) = (value(l, scope), value(r, scope));
            let int = ty.non_null() == &Ty::Int64;
            let apply = match (op, int) {
                (BinOp::Add, true) => quote!(rt::ops::add(a, b)?),
                (BinOp::Sub, true) => quote!(rt::ops::sub(a, b)?),
                (BinOp::Mul, true) => quote!(rt::ops::mul(a, b)?),
                (BinOp::Div, true) => quote!(rt::ops::div(a, b)?),
                (BinOp::Rem, true) => quote!(rt::ops::rem(a, b)?),
                (BinOp::Add, false) => quote!(a + b),
                (BinOp::Sub, false) => quote!(a - b),
                (BinOp::Mul, false) => quote!(a * b),
                (BinOp::Div, false) => quote!(a / b),
                (BinOp::Rem, false) => quote!(a % b),
                _ => unreachable!("arithmetic operators only"),
            };
            match (l.ty.is_nullable(), r.ty.is_nullable()) {
                // Operands that are locals, literals or conversions of them go in place.
                (false, false) if is_simple(&a) && is_simple(&b) => arithmetic(op, int, a, b),
                (false, false) => quote!({ let (a, b) = (#a, #b); #apply }),
                (true, false) => quote!(match (#a, #b) { (Some(a), b) => Some(#apply), _ => None }),
                (false, true) => quote!(match (#a, #b) { (a, Some(b)) => Some(#apply), _ => None }),
                (true, true) => quote!(match (#a, #b) { (Some(a), Some(b)) => Some(#apply), _ => None }),
            }
        }
        _ => comparison(op, l, r, scope),
    }
}

/// `a op b` for operands that can be written in place.
fn arithmetic(op: BinOp, int: bool, a: TokenStream, b: TokenStream) -> TokenStream {
    match (op, int) {
        (BinOp::Add, true) => quote!(rt::ops::add(#a, #b)?),
        (BinOp::Sub, true) => quote!(rt::ops::sub(#a, #b)?),
        (BinOp::Mul, true) => quote!(rt::ops::mul(#a, #b)?),
        (BinOp::Div, true) => quote!(rt::ops::div(#a, #b)?),
        (BinOp::Rem, true) => quote!(rt::ops::rem(#a, #b)?),
        (BinOp::Add, false) => quote!((#a + #b)),
        (BinOp::Sub, false) => quote!((#a - #b)),
        (BinOp::Mul, false) => quote!((#a * #b)),
        (BinOp::Div, false) => quote!((#a / #b)),
        (BinOp::Rem, false) => quote!((#a % #b)),
        _ => unreachable!("arithmetic operators only"),
    }
}

/// A local, a literal, or a conversion of one (`i64::from(x)`, `(x as f64)`): an operand that needs no
/// `let` of its own.
fn is_simple(x: &TokenStream) -> bool {
    use proc_macro2::{Delimiter, TokenTree};
    if is_atom(x) {
        return true;
    }
    let trees: Vec<TokenTree> = x.clone().into_iter().collect();
    match trees.as_slice() {
        [TokenTree::Ident(_), TokenTree::Punct(c1), TokenTree::Punct(c2), TokenTree::Ident(_), TokenTree::Group(g)] => {
            c1.as_char() == ':'
                && c2.as_char() == ':'
                && g.delimiter() == Delimiter::Parenthesis
                && is_atom(&g.stream())
        }
        // `(x as f64)`
        [TokenTree::Group(g)] if g.delimiter() == Delimiter::Parenthesis => {
            let inner: Vec<TokenTree> = g.stream().into_iter().collect();
            matches!(inner.as_slice(), [TokenTree::Ident(_) | TokenTree::Literal(_), TokenTree::Ident(as_), TokenTree::Ident(_)] if as_ == "as")
        }
        _ => false,
    }
}

fn comparison(op: BinOp, l: &TExpr, r: &TExpr, scope: &Scope) -> TokenStream {
    let cmp = match op {
        BinOp::Eq => quote!(==),
        BinOp::Ne => quote!(!=),
        BinOp::Lt => quote!(<),
        BinOp::Le => quote!(<=),
        BinOp::Gt => quote!(>),
        BinOp::Ge => quote!(>=),
        _ => unreachable!("comparison operators only"),
    };
    // Enums against a symbol (`==`/`!=`) compare indexes; other texts compare bytes.
    let by_index = matches!(r.kind, TKind::Symbol(_))
        || matches!((l.ty.non_null(), r.ty.non_null()), (Ty::Enum { .. }, Ty::Enum { .. }) if matches!(op, BinOp::Eq | BinOp::Ne) && l.ty.non_null() == r.ty.non_null());
    let textual = !by_index && l.ty.is_text() && r.ty.is_text();
    let (a, b) = if textual {
        // Text views borrow from locals, so nullable texts are matched by reference.
        return text_comparison(cmp, l, r, scope);
    } else {
        (value(l, scope), value(r, scope))
    };
    match (l.ty.is_nullable(), r.ty.is_nullable()) {
        (false, false) => quote!((#a #cmp #b)),
        (true, false) => quote!(matches!((#a, #b), (Some(a), b) if a #cmp b)),
        (false, true) => quote!(matches!((#a, #b), (a, Some(b)) if a #cmp b)),
        (true, true) => quote!(matches!((#a, #b), (Some(a), Some(b)) if a #cmp b)),
    }
}

fn text_comparison(cmp: TokenStream, l: &TExpr, r: &TExpr, scope: &Scope) -> TokenStream {
    let view = |e: &TExpr, binding: proc_macro2::Ident| -> (TokenStream, TokenStream) {
        if e.ty.is_nullable() {
            let v = value(e, scope);
            let inner = TExpr { kind: TKind::Field("__x".into()), ty: e.ty.non_null().clone() };
            let mut inner_scope = scope.clone();
            inner_scope.insert("__x".into(), binding.clone());
            let r = text_ref(&inner, &inner_scope, true);
            (quote!(#v), r)
        } else {
            (TokenStream::new(), text_ref(e, scope, true))
        }
    };
    let (la, lr) = view(l, quote::format_ident!("la"));
    let (rb, rr) = view(r, quote::format_ident!("rb"));
    match (l.ty.is_nullable(), r.ty.is_nullable()) {
        (false, false) => quote!((#lr #cmp #rr)),
        (true, false) => quote!(match #la { Some(la) => #lr #cmp #rr, None => false }),
        (false, true) => quote!(match #rb { Some(rb) => #lr #cmp #rr, None => false }),
        (true, true) => quote!(match (#la, #rb) { (Some(la), Some(rb)) => #lr #cmp #rr, _ => false }),
    }
}

fn call(func: Func, args: &[TExpr], ty: &Ty, scope: &Scope) -> TokenStream {
    match func {
        // The chain function's `record` is in scope wherever an expression is.
        Func::Header | Func::HeaderStr => {
            let TKind::Lit(Lit::Str(name)) = &args[0].kind else { unreachable!("typeck takes a literal name") };
            if func == Func::Header {
                quote!(record.headers.last(#name).map(::std::borrow::Cow::Borrowed))
            } else {
                quote!(record.headers.last_str(#name)?)
            }
        }
        Func::IsNull => {
            let v = value(&args[0], scope);
            quote!(#v.is_none())
        }
        Func::MapGet => map_get(&args[0], &args[1], scope),
        Func::Lower | Func::Upper => {
            let method = if func == Func::Lower { quote!(to_lowercase) } else { quote!(to_uppercase) };
            let a = &args[0];
            let inner = TExpr { kind: TKind::Field("__x".into()), ty: a.ty.non_null().clone() };
            let mut inner_scope = scope.clone();
            inner_scope.insert("__x".into(), quote::format_ident!("x"));
            let bytes = text_ref(&inner, &inner_scope, true);
            let apply =
                quote!(::std::borrow::Cow::<str>::Owned(::std::string::String::from_utf8_lossy(#bytes).#method()));
            let v = value(a, scope);
            if a.ty.is_nullable() { quote!(#v.map(|x| #apply)) } else { quote!({ let x = #v; #apply }) }
        }
        Func::Length => {
            let a = &args[0];
            let v = value(a, scope);
            let len = match a.ty.non_null() {
                Ty::String => quote!(x.chars().count() as i64),
                Ty::Enum { symbols, .. } => {
                    let table = enum_symbols(symbols);
                    quote!(#table[x as usize].chars().count() as i64)
                }
                _ => quote!(x.len() as i64),
            };
            if a.ty.is_nullable() { quote!(#v.map(|x| #len)) } else { quote!({ let x = #v; #len }) }
        }
        Func::Abs => {
            let a = &args[0];
            let v = value(a, scope);
            let abs = if a.ty.non_null() == &Ty::Int64 { quote!(rt::ops::abs(x)?) } else { quote!(x.abs()) };
            if a.ty.is_nullable() {
                quote!(match #v { Some(x) => Some(#abs), None => None })
            } else if is_simple(&v) {
                if a.ty.non_null() == &Ty::Int64 { quote!(rt::ops::abs(#v)?) } else { quote!(#v.abs()) }
            } else {
                quote!({ let x = #v; #abs })
            }
        }
        Func::Concat => {
            let parts = args.iter().map(|a| {
                let inner = TExpr { kind: TKind::Field("__x".into()), ty: a.ty.non_null().clone() };
                let mut inner_scope = scope.clone();
                inner_scope.insert("__x".into(), quote::format_ident!("x"));
                let bytes = text_ref(&inner, &inner_scope, true);
                let v = value(a, scope);
                if a.ty.is_nullable() {
                    quote!(if let Some(x) = #v { s.push_str(&::std::string::String::from_utf8_lossy(#bytes)); })
                } else {
                    quote!({ let x = #v; s.push_str(&::std::string::String::from_utf8_lossy(#bytes)); })
                }
            });
            quote!({
                let mut s = ::std::string::String::new();
                #(#parts)*
                ::std::borrow::Cow::<str>::Owned(s)
            })
        }
        Func::Coalesce => coalesce(args, ty, scope),
    }
}

/// `m[key]`: the last entry of `key` in the map, as ClickHouse and the decoders keep it.
fn map_get(map: &TExpr, key: &TExpr, scope: &Scope) -> TokenStream {
    // A field is read in place; anything else is evaluated first.
    let entries = match &map.kind {
        TKind::Field(name) => {
            let id = &scope[name];
            quote!(#id)
        }
        _ => {
            let v = value(map, scope);
            quote!((#v))
        }
    };
    let key_value = match &key.kind {
        // Typed by the map's key (typeck checked that it fits).
        TKind::Lit(Lit::Int(v)) => {
            let v = Literal::i64_unsuffixed(*v);
            quote!(#v)
        }
        _ => value(key, scope),
    };
    let Ty::Map(_, value_ty) = map.ty.non_null() else { unreachable!("typeck takes a map") };
    let pick = match value_ty.as_ref() {
        Ty::Nullable(inner) if is_copy(inner) => quote!(.and_then(|(_, v)| *v)),
        Ty::Nullable(_) => quote!(.and_then(|(_, v)| v.clone())),
        // No Nullable(Array) or Nullable(Map): an absent key reads as empty.
        Ty::Array(_) | Ty::Map(..) => quote!(.map(|(_, v)| v.clone()).unwrap_or_default()),
        t if is_copy(t) => quote!(.map(|(_, v)| *v)),
        _ => quote!(.map(|(_, v)| v.clone())),
    };
    // The last entry of a key is its value, as ClickHouse and the decoders keep it.
    let find = quote!(#entries.iter().rev().find(|(k, _)| *k == key) #pick);
    if key.ty.is_nullable() {
        let absent = if matches!(value_ty.as_ref(), Ty::Array(_) | Ty::Map(..)) {
            quote!(::std::default::Default::default())
        } else {
            quote!(None)
        };
        quote!(match #key_value { Some(key) => #find, None => #absent })
    } else {
        quote!({ let key = #key_value; #find })
    }
}

/// The first non-null argument; the last one is the fallback.
fn coalesce(args: &[TExpr], ty: &Ty, scope: &Scope) -> TokenStream {
    let last = args.len() - 1;
    let mut out = {
        let v = value(&args[last], scope);
        if ty.is_nullable() || !args[last].ty.is_nullable() { v } else { quote!(#v) }
    };
    // A literal fallback has no effects and no `?`: `unwrap_or` says it plainly (and is
    // what clippy asks for).
    let literal = |e: &TExpr| match &e.kind {
        TKind::Lit(_) => true,
        TKind::Convert(inner) => matches!(inner.kind, TKind::Lit(_)),
        _ => false,
    };
    for (i, a) in args[..last].iter().enumerate().rev() {
        let v = value(a, scope);
        let wrap = if ty.is_nullable() { quote!(Some(x)) } else { quote!(x) };
        out = if a.ty.is_nullable() && !ty.is_nullable() && i + 1 == last && literal(&args[last]) {
            quote!(#v.unwrap_or(#out))
        } else if a.ty.is_nullable() {
            quote!(match #v { Some(x) => #wrap, None => #out })
        } else {
            quote!({ let x = #v; #wrap })
        };
    }
    out
}
