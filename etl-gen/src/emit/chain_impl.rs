//! The chain of the generated `src/main.rs`: record types, enum tables, the row types of
//! `rust` operators, and `Chain::process` (decoding, the operators and the encoding inlined
//! into one function), plus the fuzz test of the chain. `main` is in `main_fn`.

use std::collections::BTreeSet;

use indexmap::IndexMap;
use proc_macro2::{Literal, TokenStream};
use quote::{format_ident, quote};

use super::Error;
use super::encode::{Val, json, rowbinary};
use super::expr::{Scope, condition, value};
use super::rust_types::{borrows, field_ident, local_ty, nested_records, record_ident, rust_ty};
use crate::ir::{Column, Ty, metadata_columns};
use crate::ir::{TExpr, TKind};
use crate::load::Validated;
use crate::model::{FileFormat, Operator, Sink, Wire};
use crate::plan::Step;

/// What the emitted `main.rs` needs besides the plan.
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

/// The chain's items and its test module (unformatted tokens).
pub(super) struct ChainItems {
    /// Everything `main` uses: constants, types, `Chain`.
    pub(super) items: TokenStream,
    /// The `#[cfg(test)]` module, placed last in the file.
    pub(super) tests: TokenStream,
}

/// Emits the chain of `src/main.rs`.
pub(super) fn emit(inputs: &MainInputs<'_>) -> Result<ChainItems, Error> {
    let v = inputs.pipeline;
    let plan = &v.plan;
    let mut enums: Vec<Vec<String>> = Vec::new();
    let mut scope = Scope::new();
    let mut counter = 0usize;
    let mut fresh = |name: &str| {
        counter += 1;
        format_ident!("f_{}_{}", local_name(name), counter)
    };

    // Decoding: one local per input field the chain reads. The locals are numbered in the order
    // they are made (decoder, metadata, operators, the benchmark's decoder): the order below.
    let format = v.model.format.get();
    let mut decode_stmts = super::format::decode(v, &plan.live_decoded(), &mut scope, &mut fresh, &mut enums);
    decode_stmts.extend(compose_tuples(plan, &mut scope, &mut fresh));
    let exprs = chain_exprs(plan);
    let meta_stmts = metadata_locals(&exprs, &mut scope, &mut fresh);
    let record_defs = record_structs(plan);
    let variant_defs = variant_enums(plan);

    // The operators, innermost last: flat_map opens a loop that the rest runs inside.
    let mut row: Vec<Column> = plan.input.clone();
    let mut row_types = Vec::new();
    let head = Part::head(v);
    let tail = steps(
        &head,
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

    let symbol_consts = symbol_consts(&exprs);
    let (framing, bench_framing) = super::format::framing(v);
    let chain_struct = chain_struct(format.uses_registry());
    let max_message = Literal::usize_unsuffixed(v.model.format.max_message_bytes.bytes() as usize);
    let schema_ids_const = schema_ids_const(&format);
    let user_mods = user_modules(inputs.user_files, &row_types);
    let rows_mod = rows_module(&plan.steps);
    let bench_decode =
        if inputs.bench { bench_decode(v, bench_framing, &mut fresh, &mut enums) } else { TokenStream::new() };
    let fuzz_test = fuzz_test(v);
    let rest = quote! {
        #symbol_consts
        #(#record_defs)*
        #(#variant_defs)*
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
                #(#meta_stmts)*
                #tail
                Ok(())
            }
        }

        #bench_decode
    };
    // A decoder registers its enums' tables for the encoders; a table no code reads (an enum
    // only tested, never written) is left out.
    let enum_tables = enum_tables(&enums, &rest.to_string());
    let items = quote! {
        use etl_runtime::__private as rt;

        const MAX_MESSAGE_BYTES: usize = #max_message;
        #schema_ids_const

        #(#enum_tables)*
        #rest
    };
    Ok(ChainItems { items, tests: fuzz_test })
}

/// Every expression of the chain: the shared operators', then each output's `when` and
/// operators'.
fn chain_exprs(plan: &crate::plan::Plan) -> Vec<&TExpr> {
    fn of_steps<'a>(steps: &'a [Step], exprs: &mut Vec<&'a TExpr>) {
        for step in steps {
            match step {
                Step::Filter { cond } => exprs.push(cond),
                Step::Map { assigns } => exprs.extend(assigns.iter().map(|(_, e)| e)),
                _ => {}
            }
        }
    }
    let mut exprs = Vec::new();
    of_steps(&plan.steps, &mut exprs);
    for output in &plan.outputs {
        exprs.extend(output.when.iter());
        of_steps(&output.steps, &mut exprs);
    }
    exprs
}

/// The locals of the Kafka metadata fields, made only where an expression reads them.
fn metadata_locals(
    exprs: &[&TExpr],
    scope: &mut Scope,
    fresh: &mut impl FnMut(&str) -> proc_macro2::Ident,
) -> Vec<TokenStream> {
    let mut read = BTreeSet::new();
    for e in exprs {
        e.fields(&mut read);
    }
    let mut meta_stmts = Vec::new();
    for c in metadata_columns().into_iter().filter(|c| read.contains(&c.name)) {
        let id = fresh(&c.name);
        let init = match c.name.as_str() {
            "_key" => quote!(record.key.map(::std::borrow::Cow::Borrowed)),
            "_partition" => quote!(record.partition),
            "_offset" => quote!(record.offset),
            "_topic" => quote!(::std::borrow::Cow::Borrowed(record.topic)),
            "_headers" => quote!(record.headers.to_map()),
            _ => quote!(record.timestamp_ms),
        };
        meta_stmts.push(quote!(let #id = #init;));
        scope.insert(c.name.clone(), id);
    }
    meta_stmts
}

/// The structs of the records nested in containers, in the input and the output rows.
/// Under `nested: tuple`, each tuple column the chain reads built from its decoded leaves (which
/// it moves): `let f_address_7 = TupleAddress { city: f_address_city_3, ... };`.
fn compose_tuples(
    plan: &crate::plan::Plan,
    scope: &mut Scope,
    fresh: &mut impl FnMut(&str) -> proc_macro2::Ident,
) -> Vec<TokenStream> {
    fn build(name: &str, record: &crate::ir::RecordTy, scope: &mut Scope) -> TokenStream {
        let ident = record_ident(record);
        let fields = record.fields.iter().map(|f| {
            let id = field_ident(&f.name);
            let leaf = crate::ir::flat_name(name, &f.name);
            let value = match &f.ty {
                Ty::Record(inner) => build(&leaf, inner, scope),
                _ => {
                    let local = scope.remove(&leaf).expect("the decoder binds every live leaf");
                    quote!(#local)
                }
            };
            quote!(#id: #value)
        });
        let fields: Vec<TokenStream> = fields.collect();
        quote!(#ident { #(#fields,)* })
    }
    let mut out = Vec::new();
    for name in plan.live_inputs() {
        let Some(record) = plan.tuple(&name) else { continue };
        let value = build(&name, record, scope);
        let id = fresh(&name);
        out.push(quote!(let #id = #value;));
        scope.insert(name, id);
    }
    out
}

/// The enum of each variant type a column holds: one enum variant per member.
fn variant_enums(plan: &crate::plan::Plan) -> Vec<TokenStream> {
    let mut variants = Vec::new();
    for c in plan.decoded.iter().chain(&plan.input).chain(plan.output_columns()) {
        super::rust_types::nested_variants(&c.ty, &mut variants);
    }
    variants
        .iter()
        .map(|v| {
            let Ty::Variant(members) = v else { unreachable!("variants") };
            let name = super::rust_types::variant_ident(v);
            let arms = members.iter().map(|m| {
                let id = super::rust_types::member_ident(m);
                let ty = rust_ty(m);
                quote!(#id(#ty))
            });
            let doc = format!("A value of ClickHouse `{}` (NULL is `None` around it).", v.clickhouse());
            let generics = if borrows(v) { quote!(<'a>) } else { TokenStream::new() };
            quote!(#[doc = #doc] #[derive(Clone, Debug, PartialEq)] pub enum #name #generics { #(#arms,)* })
        })
        .collect()
}

fn record_structs(plan: &crate::plan::Plan) -> Vec<TokenStream> {
    let mut records = Vec::new();
    for c in plan.input.iter().chain(plan.output_columns()) {
        nested_records(&c.ty, &mut records);
    }
    records
        .iter()
        .map(|r| {
            let name = record_ident(r);
            let fields = r.fields.iter().map(|c| {
                let id = field_ident(&c.name);
                let ty = rust_ty(&c.ty);
                let doc = format!("`{}`: {} (ClickHouse `{}`)", c.name, c.ty, c.ty.clickhouse());
                quote!(#[doc = #doc] pub #id: #ty)
            });
            let doc = format!("The record `{}`.", r.name);
            // Field names are the schema's (`userId` stays `userId`).
            let generics = if borrows(&Ty::Record(Box::new(r.clone()))) { quote!(<'a>) } else { TokenStream::new() };
            quote!(#[doc = #doc] #[derive(Clone, Debug, PartialEq)] #[allow(non_snake_case)] pub struct #name #generics { #(#fields,)* })
        })
        .collect()
}

/// `Chain`: with the registry client when the format may ask one.
fn chain_struct(uses_registry: bool) -> TokenStream {
    if uses_registry {
        quote!(
            #[derive(Default)]
            pub(crate) struct Chain {
                /// The schema registry, when the format's `registry` resolves to a URL.
                registry: ::std::option::Option<rt::Registry>,
            }
        )
    } else {
        quote!(
            #[derive(Default)]
            pub(crate) struct Chain;
        )
    }
}

/// `SCHEMA_IDS`, the reader schema's own registry ids, for the Confluent wire.
fn schema_ids_const(format: &crate::model::Selected<'_>) -> TokenStream {
    let schema_ids = format.schema_ids().into_iter().map(Literal::u32_unsuffixed);
    let schema_ids_doc =
        format!("`{}`: the registry ids of the reader schema, decoded directly.", format.path("schema_id"));
    match format.wire {
        Wire::Confluent => quote!(
            #[doc = #schema_ids_doc]
            const SCHEMA_IDS: &[u32] = &[#(#schema_ids),*];
        ),
        Wire::Raw => TokenStream::new(),
    }
}

/// The modules that include the user Rust files, each with `Row`, the row type its operator
/// receives.
fn user_modules(user_files: &[(String, String)], row_types: &[(usize, proc_macro2::Ident)]) -> Vec<TokenStream> {
    user_files
        .iter()
        .enumerate()
        .map(|(i, (module, path))| {
            let m = format_ident!("{}", module);
            let row_ty = row_types.iter().find(|(idx, _)| *idx == i).map(|(_, name)| name.clone());
            let alias = row_ty.map(|name| quote!(#[allow(unused_imports)] use super::rows::#name as Row;));
            quote!(#[allow(dead_code)] mod #m { #alias include!(#path); })
        })
        .collect()
}

/// `bench_decode`: the decoder alone, every field built as a generic decoder (its comparison)
/// builds them.
fn bench_decode(
    v: &Validated,
    bench_framing: TokenStream,
    fresh: &mut impl FnMut(&str) -> proc_macro2::Ident,
    enums: &mut Vec<Vec<String>>,
) -> TokenStream {
    let plan = &v.plan;
    let all: BTreeSet<String> = plan.decoded.iter().map(|c| c.name.clone()).collect();
    let mut bench_scope = Scope::new();
    let stmts = super::format::decode(v, &all, &mut bench_scope, fresh, enums);
    let locals: Vec<proc_macro2::Ident> = plan.decoded.iter().map(|c| bench_scope[&c.name].clone()).collect();
    quote!(
        /// The decoder alone (framing, every field built, the end check), for benchmarks.
        pub(crate) fn bench_decode(payload: &[u8]) -> ::std::result::Result<(), rt::RecordError> {
            #bench_framing
            #(#stmts)*
            #(::std::hint::black_box(&#locals);)*
            Ok(())
        }
    )
}

/// The chain's test module: random and damaged payloads never panic it.
fn fuzz_test(v: &Validated) -> TokenStream {
    let m = &v.model;
    let fuzz_wire = datagen_wire(m);
    let fuzz_encoding = super::format::datagen_encoding(v);
    // Confluent framing without the reader schema's own id: datagen's records carry an id only
    // the registry knows.
    let fuzz_need_registry = {
        let format = m.format.get();
        format.wire == Wire::Confluent && format.schema_ids().is_empty()
    };
    quote!(
        #[cfg(test)]
        mod tests {
            use super::rt;

            /// Random and damaged payloads are record errors (or rows), never a panic.
            #[test]
            fn random_payloads_never_panic() {
                let schema = rt::apache_avro::Schema::parse_str(super::SCHEMA).expect("the schema was validated by gen");
                rt::fuzz_chain(super::Chain::default, &schema, #fuzz_encoding, #fuzz_wire, #fuzz_need_registry, 4000, 7);
            }
        }
    )
}

/// The static tables of the enums' symbols, `ENUM_0`..., those that `code` names.
fn enum_tables(enums: &[Vec<String>], code: &str) -> Vec<TokenStream> {
    enums
        .iter()
        .enumerate()
        .filter(|(i, _)| code.contains(&format!("ENUM_{i} ")))
        .map(|(i, symbols)| {
            let id = format_ident!("ENUM_{}", i);
            let n = Literal::usize_unsuffixed(symbols.len());
            quote!(static #id: [&str; #n] = [#(#symbols),*];)
        })
        .collect()
}

/// A field name as part of a local's name: snake case (lowercase, no doubled or edge
/// underscores), whatever the schema calls the field (`userId`, `say "hi"` → `say__hi_`).
fn local_name(name: &str) -> String {
    let lower = name.to_ascii_lowercase();
    lower.split('_').filter(|part| !part.is_empty()).collect::<Vec<_>>().join("_")
}

/// How synthesized records are framed: as the pipeline's wire says, with the reader schema's own
/// id, so the chain decodes them directly.
pub(super) fn datagen_wire(m: &crate::model::PipelineFile) -> TokenStream {
    let format = m.format.get();
    match format.wire {
        Wire::Raw => quote!(rt::Wire::Raw),
        Wire::Confluent => {
            let id = format.schema_ids().first().copied().unwrap_or(1);
            quote!(rt::Wire::Confluent { schema_id: #id })
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
                Some(quote!(#[doc = #doc] #[derive(Clone, Debug, PartialEq)] #[allow(non_snake_case)] pub struct #name<'a> { #(#fields,)* }))
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

/// The part of the chain `steps` emits: the shared operators, or one output's.
struct Part<'a> {
    /// All the part's steps.
    steps: &'a [Step],
    /// The part's operators as the YAML writes them, for the comments.
    ops: &'a [Operator],
    /// The output, by index into the plan's outputs; `None` for the shared operators.
    output: Option<usize>,
    /// The label of the output's block, which a dropped row breaks out of.
    label: Option<syn::Lifetime>,
    /// Whether the emitted code breaks out of the label (an unused label is a warning).
    label_used: std::cell::Cell<bool>,
}

impl<'a> Part<'a> {
    /// The shared operators.
    fn head(v: &'a Validated) -> Self {
        Part { steps: &v.plan.steps, ops: &v.model.transform, output: None, label: None, label_used: false.into() }
    }

    /// Output `k`'s operators.
    fn output(v: &'a Validated, k: usize) -> Self {
        let (name, model) = v.model.outputs.get_index(k).expect("one plan per output");
        let label = syn::Lifetime::new(&format!("'{name}"), proc_macro2::Span::call_site());
        Part {
            steps: &v.plan.outputs[k].steps,
            ops: &model.transform,
            output: Some(k),
            label: Some(label),
            label_used: false.into(),
        }
    }

    /// The fields read from step `at` on.
    fn live_before(&self, v: &Validated, at: usize) -> BTreeSet<String> {
        match self.output {
            None => v.plan.live_before(at),
            Some(k) => v.plan.outputs[k].live_before(at),
        }
    }

    /// How a step drops the row outside a loop: the record is done, or this output is.
    fn skip(&self) -> TokenStream {
        match &self.label {
            None => quote!(return Ok(())),
            Some(label) => {
                self.label_used.set(true);
                quote!(break #label)
            }
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn steps(
    part: &Part<'_>,
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
) -> Result<TokenStream, Error> {
    let Some((step, rest)) = steps_left.split_first() else {
        return match part.output {
            Some(k) => Ok(output(row, scope, enums, v, k)),
            None if v.model.outputs.is_empty() => Ok(output(row, scope, enums, v, 0)),
            None => outputs(row, scope, fresh, user_files, enums, v),
        };
    };
    let skip = if in_loop { quote!(continue) } else { part.skip() };
    // Each operator's code starts with its YAML step, as a comment (see `super::comments`).
    let at = part.steps.len() - steps_left.len();
    let mut out = part.ops.get(at).map(|op| super::comments::marker(&yaml_step(op))).unwrap_or_default();
    let mut rust_index = rust_index;
    match step {
        Step::Filter { cond } => {
            // A named condition reads as the YAML does and keeps clippy's boolean rewrites away.
            let c = unparen(condition(cond, scope));
            out.extend(quote!(
                let keep: bool = #c;
                if !keep { #skip; }
            ));
        }
        Step::Map { assigns } => out.extend(map_step(part, assigns, at, row, scope, fresh, v)),
        Step::Reshape { fields } => reshape(fields, row, scope),
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
            let inner = steps(part, rest, rust_index, row, scope, fresh, true, row_types, user_files, enums, v)?;
            // An output's operators must leave the shared row whole for the outputs after it.
            let list = if part.output.is_some() { quote!(#list.clone()) } else { quote!(#list) };
            out.extend(quote!(for #item in #list { #binds #inner }));
            return Ok(out);
        }
        Step::Rust { function, index, row: row_ty, .. } => {
            let struct_name = format_ident!("Row{}", index);
            row_types.push((rust_index, struct_name.clone()));
            let (module, _) = user_files.get(rust_index).ok_or(Error::MissingUserFile(*index))?;
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
            // Only what a later step or the output reads is taken back out of the row; a field the
            // row leaves unread must not be read from its stale local either.
            let live = part.live_before(v, at + 1);
            for c in row_ty {
                if !live.contains(&c.name) {
                    scope.remove(&c.name);
                    continue;
                }
                let id = fresh(&c.name);
                let member = field_ident(&c.name);
                out.extend(quote!(let #id = #r.#member;));
                scope.insert(c.name.clone(), id);
            }
            rust_index += 1;
        }
    }
    out.extend(steps(part, rest, rust_index, row, scope, fresh, in_loop, row_types, user_files, enums, v)?);
    Ok(out)
}

/// After the shared operators, each output in turn: a block that tests its `when`, runs its
/// operators on its own copy of the row's bindings, and pushes its rows to its slots. A row an
/// output drops breaks out of its block, so the outputs after it still see the record.
fn outputs(
    row: &[Column],
    scope: &Scope,
    fresh: &mut impl FnMut(&str) -> proc_macro2::Ident,
    user_files: &[(String, String)],
    enums: &mut Vec<Vec<String>>,
    v: &Validated,
) -> Result<TokenStream, Error> {
    let mut out = TokenStream::new();
    for (k, (name, model)) in v.model.outputs.iter().enumerate() {
        let part = Part::output(v, k);
        let mut body = TokenStream::new();
        if let Some(when) = &v.plan.outputs[k].when {
            let c = unparen(condition(when, scope));
            let skip = part.skip();
            let text = model.when.as_deref().unwrap_or_default();
            body.extend(super::comments::marker(&format!("when: {}", quoted_text(text))));
            body.extend(quote!(
                let take: bool = #c;
                if !take { #skip; }
            ));
        }
        let (mut row, mut scope) = (row.to_vec(), scope.clone());
        let mut no_rows = Vec::new();
        body.extend(steps(
            &part,
            part.steps,
            0,
            &mut row,
            &mut scope,
            fresh,
            false,
            &mut no_rows,
            user_files,
            enums,
            v,
        )?);
        out.extend(super::comments::marker(&format!("outputs.{name}")));
        let label = part.label.as_ref().expect("an output's part has a label");
        if part.label_used.get() {
            out.extend(quote!(#label: { #body }));
        } else {
            out.extend(quote!({ #body }));
        }
    }
    Ok(out)
}

/// `map`: each expression into a local (every one sees the row before the map), then the row
/// and the scope updated.
fn map_step(
    part: &Part<'_>,
    assigns: &[(String, TExpr)],
    at: usize,
    row: &mut Vec<Column>,
    scope: &mut Scope,
    fresh: &mut impl FnMut(&str) -> proc_macro2::Ident,
    v: &Validated,
) -> TokenStream {
    let mut out = TokenStream::new();
    let mut temps = Vec::new();
    // A value nothing reads later is still computed (its record errors count), into `_`.
    let live = part.live_before(v, at + 1);
    let texts = match part.ops.get(at) {
        Some(Operator::Map(texts)) => Some(texts),
        _ => None,
    };
    for (field, e) in assigns {
        // One comment per assignment: `total: "total_cents / 100.0"`.
        if let Some(text) = texts.and_then(|t| t.get(field)) {
            out.extend(super::comments::marker(&format!("{field}: {}", quoted_text(text))));
        }
        let val = value(e, scope);
        let ty = local_ty(&e.ty);
        let val = unparen(val);
        if !live.contains(field) {
            out.extend(quote!(let _: #ty = #val;));
            continue;
        }
        let t = fresh(field);
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
    out
}

/// `rename`, `drop` and `select`: the row rebuilt from the fields it keeps, no code.
fn reshape(fields: &[(String, String)], row: &mut Vec<Column>, scope: &mut Scope) {
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

/// `e` without the parentheses around it, if it is one parenthesized expression: a `let`
/// initializer needs none.
fn unparen(e: TokenStream) -> TokenStream {
    let mut trees = e.clone().into_iter();
    match (trees.next(), trees.next()) {
        (Some(proc_macro2::TokenTree::Group(g)), None) if g.delimiter() == proc_macro2::Delimiter::Parenthesis => {
            g.stream()
        }
        _ => e,
    }
}

/// An operator as written in pipeline.yaml's `transform:`, on one line.
fn yaml_step(op: &Operator) -> String {
    let list = |names: &[String]| names.join(", ");
    let map = |pairs: &IndexMap<String, String>| {
        let pairs: Vec<String> = pairs.iter().map(|(k, v)| format!("{k}: {v}")).collect();
        pairs.join(", ")
    };
    match op {
        Operator::Filter(text) => format!("filter: {}", quoted_text(text)),
        // Each assignment gets its own comment (see `steps`).
        Operator::Map(_) => "map:".to_owned(),
        Operator::Rename(pairs) => format!("rename: {{ {} }}", map(pairs)),
        Operator::Drop(names) => format!("drop: [{}]", list(names)),
        Operator::Select(names) => format!("select: [{}]", list(names)),
        Operator::FlatMap(field) => format!("flat_map: {field}"),
        Operator::Rust(r) => format!("rust: {{ file: {}, fn: {} }}", r.file, r.function),
    }
}

/// An expression in double quotes, on one line.
fn quoted_text(text: &str) -> String {
    let one_line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    format!("\"{}\"", one_line.replace('\\', "\\\\").replace('"', "\\\""))
}

/// The named constants of the enum symbols the operators compare with: `REGION_APAC` for the
/// symbol `APAC` of the enum `Region`, so a comparison reads as the YAML does.
fn symbol_consts(exprs: &[&TExpr]) -> TokenStream {
    let mut found = std::collections::BTreeMap::new();
    for e in exprs {
        symbols_of(e, &mut found);
    }
    let consts = found.into_iter().map(|(name, (index, doc))| {
        let id = format_ident!("{}", name);
        let index = Literal::u32_unsuffixed(index);
        quote!(#[doc = #doc] const #id: u32 = #index;)
    });
    quote!(#(#consts)*)
}

fn symbols_of(e: &TExpr, out: &mut std::collections::BTreeMap<String, (u32, String)>) {
    match &e.kind {
        TKind::Symbol(i) => {
            if let Ty::Enum { name, symbols, .. } = e.ty.non_null() {
                let doc = format!(" The symbol `{}` of the enum `{name}`.", symbols[*i as usize]);
                out.insert(super::expr::symbol_const(name, symbols, *i).to_string(), (*i, doc));
            }
        }
        TKind::Call(_, args) => args.iter().for_each(|a| symbols_of(a, out)),
        TKind::Unary(_, inner) | TKind::Convert(inner) | TKind::Member(inner, _) => symbols_of(inner, out),
        TKind::Binary(_, l, r) => {
            symbols_of(l, out);
            symbols_of(r, out);
        }
        TKind::Lit(_) | TKind::Field(_) => {}
    }
}

/// Chooses the shard (the sink slot, with several outputs) and appends the encoded row of
/// output `k`.
fn output(row: &[Column], scope: &Scope, enums: &mut Vec<Vec<String>>, v: &Validated, k: usize) -> TokenStream {
    let plan = &v.plan.outputs[k];
    let key_hash = |enums: &mut Vec<Vec<String>>, key: &String| {
        let col = row.iter().find(|c| &c.name == key).expect("planned shard key");
        let bytes = hash_bytes(&col.ty, quote!(x), enums);
        (col.ty.is_nullable(), scope[key].clone(), bytes)
    };
    let shard = match &v.model.sink {
        // Without `outputs`: as it always was.
        Sink::Clickhouse(c) if c.shards.len() > 1 && v.model.outputs.is_empty() => match &plan.shard_key {
            Some(key) => {
                let (nullable, local, bytes) = key_hash(enums, key);
                if nullable {
                    // A null key goes to shard 0 (ClickHouse's xxHash64(NULL) is NULL).
                    quote!(match &#local { Some(x) => out.shard_for_key_hash(rt::shard_hash(#bytes)), None => 0 })
                } else {
                    quote!({ let x = &#local; out.shard_for_key_hash(rt::shard_hash(#bytes)) })
                }
            }
            None => quote!(out.round_robin()),
        },
        // Output k's shards are the slots k × shards .. (k + 1) × shards.
        Sink::Clickhouse(c) if c.shards.len() > 1 => {
            let first = Literal::usize_unsuffixed(k * c.shards.len());
            let (k, shards) = (Literal::usize_unsuffixed(k), Literal::usize_unsuffixed(c.shards.len()));
            match &plan.shard_key {
                Some(key) => {
                    let (nullable, local, bytes) = key_hash(enums, key);
                    if nullable {
                        quote!(match &#local {
                            Some(x) => out.output_slot_for_key_hash(#k, #shards, rt::shard_hash(#bytes)),
                            None => #first,
                        })
                    } else {
                        quote!({ let x = &#local; out.output_slot_for_key_hash(#k, #shards, rt::shard_hash(#bytes)) })
                    }
                }
                None => quote!(out.output_round_robin(#k, #shards)),
            }
        }
        _ => {
            let k = Literal::usize_unsuffixed(k);
            quote!(#k)
        }
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
            let table = super::rust_types::enum_table(symbols, enums);
            quote!(#table[*#x as usize].as_bytes())
        }
        Ty::Bool => quote!(&[u8::from(*#x)]),
        _ => quote!(&#x.to_le_bytes()),
    }
}
