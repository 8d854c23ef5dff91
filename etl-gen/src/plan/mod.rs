//! Planning the operator chain: each operator checked against the row type before it,
//! its expressions typed (`typeck`), the output row (the sink's columns) derived.
//!
//! Everything a user can get wrong in `transform:` is reported here, pointing at the YAML
//! line, so that generated code always compiles. The rules it reports (E0701–E0709) live in
//! `chain_rules.rs` beside it, not in `crate::rules`: that stage runs before planning and cannot
//! see the chain's rows.

mod chain_rules;
mod typeck;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use crate::diag::Diagnostic;
use crate::ir::{Column, RecordTy, TExpr, Ty, input_row};
use crate::model::{Operator, PipelineFile, Sink};

pub(crate) use self::chain_rules::CHAIN_RULES;
use self::chain_rules::{names, unknown_field};
use self::typeck::typed;

/// The planned chain.
#[derive(Clone, Debug)]
pub(crate) struct Plan {
    /// The row the operators start from: the decoded row, or under `nested: tuple` its
    /// top-level records as tuple columns.
    pub input: Vec<Column>,
    /// The decoded row: the reader schema with nested records flattened (`parent_child`), one
    /// local per column the chain reads.
    pub decoded: Vec<Column>,
    /// The shared operators (`transform`), typed: they run once per record.
    pub steps: Vec<Step>,
    /// The outputs, in `outputs` order; one, unnamed, without `outputs`.
    pub outputs: Vec<OutputPlan>,
}

/// One output's part of the chain: its condition, its operators and its table's columns.
#[derive(Clone, Debug)]
pub(crate) struct OutputPlan {
    /// `when`, typed (bool).
    pub when: Option<TExpr>,
    /// The output's own operators, typed.
    pub steps: Vec<Step>,
    /// The row after the last operator: the table's columns, in order.
    pub output: Vec<Column>,
    /// The output column rows are sharded by, if any.
    pub shard_key: Option<String>,
}

impl OutputPlan {
    /// The fields of the shared row this output reads: its condition's and what its operators
    /// and columns need (by the rules of [`Plan::live_inputs`]).
    pub(crate) fn live_in(&self) -> BTreeSet<String> {
        let mut live = self.live_before(0);
        if let Some(when) = &self.when {
            when.fields(&mut live);
        }
        live
    }

    /// The fields the output's steps from `step` on (and its columns) read.
    pub(crate) fn live_before(&self, step: usize) -> BTreeSet<String> {
        live_through(&self.steps[step.min(self.steps.len())..], self.output.iter().map(|c| c.name.clone()).collect())
    }
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

impl Plan {
    /// The input fields the chain needs: those that reach an output column or that an
    /// operator reads (every expression of a `filter` or `map`, whatever its result feeds,
    /// so that a record error an expression raises is never skipped; every field a `rust`
    /// function sees). The decoder reads past the others without building their values.
    pub(crate) fn live_inputs(&self) -> BTreeSet<String> {
        self.live_before(0)
    }

    /// The decoded columns the chain needs: [`Plan::live_inputs`] with each tuple column
    /// replaced by its leaves.
    pub(crate) fn live_decoded(&self) -> BTreeSet<String> {
        let mut live = BTreeSet::new();
        for name in self.live_inputs() {
            match self.tuple(&name) {
                Some(record) => {
                    let mut leaves = Vec::new();
                    crate::ir::tuple_leaves(&name, record, &mut leaves);
                    live.extend(leaves);
                }
                None => {
                    live.insert(name);
                }
            }
        }
        live
    }

    /// The record of input column `name` when it is a tuple column made of decoded leaves.
    pub(crate) fn tuple(&self, name: &str) -> Option<&RecordTy> {
        if self.decoded.iter().any(|c| c.name == name) {
            return None;
        }
        match &self.input.iter().find(|c| c.name == name)?.ty {
            Ty::Record(r) => Some(r),
            _ => None,
        }
    }

    /// The fields the steps from `step` on (and the output) read, by the rules of
    /// [`Plan::live_inputs`]: what must be bound before `step`. Emission binds nothing else, so
    /// that no local is left unread (a `rust` step's row fields that a later `select` drops).
    pub(crate) fn live_before(&self, step: usize) -> BTreeSet<String> {
        let after: BTreeSet<String> = self.outputs.iter().flat_map(OutputPlan::live_in).collect();
        live_through(&self.steps[step.min(self.steps.len())..], after)
    }

    /// Every column of every output, in output order (for the record structs they need).
    pub(crate) fn output_columns(&self) -> impl Iterator<Item = &Column> {
        self.outputs.iter().flat_map(|o| o.output.iter())
    }
}

/// The fields `steps` read, given that `live` is read after them: walked backwards.
fn live_through(steps: &[Step], mut live: BTreeSet<String>) -> BTreeSet<String> {
    for step in steps.iter().rev() {
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
    schema: &RecordTy,
    sources: &BTreeMap<usize, std::io::Result<RustSource>>,
) -> Result<Plan, Vec<Diagnostic>> {
    let decoded = input_row(schema);
    let tuples = matches!(&model.sink, Sink::Clickhouse(c) if c.nested == crate::model::NestedMode::Tuple);
    let input = if tuples { crate::ir::tuple_row(schema) } else { decoded.clone() };
    let mut row = input.clone();
    let mut errors = Vec::new();
    // Nested fields are flattened as `parent_child`, which a field of the parent may already be
    // called: two columns with one name, one of them silently lost. (The decoder keys its
    // locals by these names under `nested: tuple` too.)
    for (i, c) in decoded.iter().enumerate() {
        if decoded[..i].iter().any(|d| d.name == c.name) {
            errors.push(
                Diagnostic::error(
                    &chain_rules::DUPLICATE_FIELD,
                    "format",
                    format!("the schema flattens two fields into the column `{}`", c.name),
                )
                .help("a nested field `a.b` becomes the column `a_b`: rename one of the two in the schema"),
            );
        }
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    let steps = plan_steps(&model.transform, "transform", &mut row, Some(sources))?;
    // The row the shared operators leave: every output starts from it.
    let head = row;
    let mut outputs = Vec::new();
    if model.outputs.is_empty() {
        let shard_key = match &model.sink {
            Sink::Clickhouse(c) => c.shard_key.clone(),
            Sink::File(_) => None,
        };
        let output = OutputPlan { when: None, steps: Vec::new(), output: head.clone(), shard_key };
        check_output(&output, "transform", "sink.clickhouse.shard_key", &mut errors);
        outputs.push(output);
    }
    for (name, o) in &model.outputs {
        match plan_output(name, o, &head) {
            Ok(output) => outputs.push(output),
            Err(mut e) => errors.append(&mut e),
        }
    }
    if errors.is_empty() { Ok(Plan { input, decoded, steps, outputs }) } else { Err(errors) }
}

/// Plans the operators `ops` (at `at[i]`) over `row`, leaving `row` as the last leaves it.
/// `sources` holds the files of the shared `transform`'s `rust` operators; an output's operators
/// have none, and a `rust` operator among them is refused (its row type is named by its place in
/// the shared `transform`). Later steps are checked against what the row would be, so planning
/// stops at the first broken step rather than report its consequences.
fn plan_steps(
    ops: &[Operator],
    at: &str,
    row: &mut Vec<Column>,
    sources: Option<&BTreeMap<usize, std::io::Result<RustSource>>>,
) -> Result<Vec<Step>, Vec<Diagnostic>> {
    let mut steps = Vec::new();
    for (i, op) in ops.iter().enumerate() {
        let step_at = format!("{at}[{i}]");
        let source = match (op, sources) {
            (_, Some(sources)) => sources.get(&i),
            (Operator::Rust(_), None) => {
                return Err(vec![
                    Diagnostic::error(
                        &chain_rules::RUST_OPERATOR,
                        format!("{step_at}.rust"),
                        "a `rust` operator cannot run in one output's transform",
                    )
                    .help("put it in the shared `transform`, and keep the field it sets in this output with `select`"),
                ]);
            }
            (_, None) => None,
        };
        steps.push(plan_step(op, &step_at, i, row, source)?);
    }
    Ok(steps)
}

/// Plans the output `name` over the shared row `head`: its `when`, its operators, its key.
fn plan_output(name: &str, o: &crate::model::Output, head: &[Column]) -> Result<OutputPlan, Vec<Diagnostic>> {
    let at = format!("outputs.{name}");
    let mut row = head.to_vec();
    let mut errors = Vec::new();
    let when = match &o.when {
        None => None,
        Some(text) => {
            let path = format!("{at}.when");
            match typed(text, &path, &row) {
                Ok(cond) if cond.ty.non_null() == &Ty::Bool => Some(cond),
                Ok(cond) => {
                    errors.push(
                        Diagnostic::error(
                            &chain_rules::TYPE_MISMATCH,
                            &path,
                            format!("`when` must be a condition, but `{text}` is {}", cond.ty),
                        )
                        .on_value()
                        .help("compare it, e.g. `kind == 'order'`"),
                    );
                    None
                }
                Err(mut e) => {
                    errors.append(&mut e);
                    None
                }
            }
        }
    };
    let steps = plan_steps(&o.transform, &format!("{at}.transform"), &mut row, None).unwrap_or_else(|mut e| {
        errors.append(&mut e);
        Vec::new()
    });
    if !errors.is_empty() {
        return Err(errors);
    }
    let output = OutputPlan { when, steps, output: row, shard_key: o.shard_key.clone() };
    check_output(&output, &format!("{at}.transform"), &format!("{at}.shard_key"), &mut errors);
    if errors.is_empty() { Ok(output) } else { Err(errors) }
}

/// The checks of an output's final row: it has a column, and its shard key is one of them and
/// can be hashed. `transform` and `key_path` are where to point.
fn check_output(output: &OutputPlan, transform: &str, key_path: &str, errors: &mut Vec<Diagnostic>) {
    let row = &output.output;
    if row.is_empty() {
        errors.push(
            Diagnostic::error(&chain_rules::NO_COLUMNS, transform, "the chain leaves no field to write")
                .help("keep at least one field (check `select` and `drop`)"),
        );
    }
    if let Some(key) = &output.shard_key {
        match row.iter().find(|c| &c.name == key) {
            None => errors.push(
                Diagnostic::error(
                    &chain_rules::SHARD_KEY,
                    key_path,
                    format!("shard key `{key}` is not an output field"),
                )
                .on_value()
                .note(format!("output fields: {}", names(row)))
                .help("name one of the output fields (the shard key is read after the transform)"),
            ),
            Some(c) if !hashable(&c.ty) => errors.push(
                Diagnostic::error(
                    &chain_rules::SHARD_KEY,
                    key_path,
                    format!("shard key `{key}` has type {}, which cannot be hashed", c.ty),
                )
                .on_value()
                .help("shard by an integer, string, enum, uuid, date or timestamp field"),
            ),
            Some(_) => {}
        }
    }
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
            | Ty::Timestamp(_)
            | Ty::UInt32
            | Ty::UInt64
            | Ty::Bool
    )
}

/// Checks the operator `op` (at `at`, position `index` in `transform`) against `row`, and
/// leaves `row` as the step leaves it. `source` is the file of a `rust` operator.
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
                        &chain_rules::TYPE_MISMATCH,
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
                    Diagnostic::error(
                        &chain_rules::FLAT_MAP,
                        &path,
                        format!("`{field}` is {}, not an array", row[pos].ty),
                    )
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
                        &chain_rules::RUST_OPERATOR,
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
                        &chain_rules::RUST_OPERATOR,
                        format!("{path}.file"),
                        format!("cannot read `{}`: {e}", r.file),
                    )
                    .on_value()
                    .help("the path is relative to the directory of pipeline.yaml"),
                ),
                Ok(source) if !source.text.contains(&format!("fn {}", r.function)) => errors.push(
                    Diagnostic::error(
                        &chain_rules::RUST_OPERATOR,
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

/// Rebuilds `row` as `fields` list it: `(new name, old name)`, in the new order.
fn reshape(row: &mut Vec<Column>, fields: &[(String, String)]) {
    let old = std::mem::take(row);
    for (new, from) in fields {
        let ty = old.iter().find(|c| &c.name == from).map(|c| c.ty.clone()).expect("checked above");
        row.push(Column { name: new.clone(), ty });
    }
}

/// Reports each name of `fields` that an earlier one already has.
fn check_unique(fields: &[(String, String)], path: &str, errors: &mut Vec<Diagnostic>) {
    for (i, (name, _)) in fields.iter().enumerate() {
        if fields[..i].iter().any(|(n, _)| n == name) {
            errors.push(
                Diagnostic::error(
                    &chain_rules::DUPLICATE_FIELD,
                    path,
                    format!("this step leaves two fields named `{name}`"),
                )
                .help("rename or drop one of them"),
            );
        }
    }
}

/// Whether `name` can be a column and a Rust identifier: letters, digits and `_`, not starting
/// with a digit.
fn is_field_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// The diagnostic for `name`, which [`is_field_name`] refuses.
fn bad_name(path: &str, name: &str) -> Diagnostic {
    Diagnostic::error(&chain_rules::DUPLICATE_FIELD, path, format!("`{name}` is not a valid field name"))
        .help("use letters, digits and `_`, not starting with a digit")
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
