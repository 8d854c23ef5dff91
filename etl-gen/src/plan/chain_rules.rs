//! E0701–E0709: the rules of the operator chain, which the planner (`plan/mod.rs`) and the
//! type checker (`plan/typeck.rs`) check against the row type at each step; [`CHAIN_RULES`] lists
//! them for the catalogue (docs/diagnostics.md), beside `rules::RULES`.
//!
//! They live here rather than in `rules/` because only the planning stage can check them, and
//! `rules/` runs before it: a rule's definition stays next to the code that reports it.

use crate::diag::{Diagnostic, Rule};
use crate::ir::Column;

/// The chain's rules, in code order.
pub(crate) static CHAIN_RULES: &[&Rule] = &[
    &SYNTAX,
    &UNKNOWN_FIELD,
    &TYPE_MISMATCH,
    &UNKNOWN_FUNCTION,
    &FLAT_MAP,
    &DUPLICATE_FIELD,
    &RUST_OPERATOR,
    &SHARD_KEY,
    &NO_COLUMNS,
];

/// An expression that does not parse.
pub(crate) static SYNTAX: Rule = Rule {
    code: "E0701",
    name: "expression-syntax",
    summary: "a `filter` or `map` expression that does not parse",
    doc: "Expressions use field names, the Kafka metadata fields `_key`, `_topic`, `_partition`, \
`_offset`, `_timestamp` and `_headers`, literals (integers, decimals, 'strings' with `''` for a quote, true, false, \
null), `+ - * / %`, `== != < <= > >=`, `&& || !`, parentheses and the functions of \
docs/configuration.md. Comparisons do not chain (`a < b < c`); `=` is not an operator.",
};

/// A name that is not a field at that point of the chain.
pub(crate) static UNKNOWN_FIELD: Rule = Rule {
    code: "E0702",
    name: "unknown-field",
    summary: "a field that does not exist at that point of the chain",
    doc: "Each operator sees the row as the operators before it left it: after `rename` the old \
name is gone, after `select` only the selected fields remain, and after `flat_map` over an \
array of records the element's fields are named `array_field`. Nested record fields of the \
schema are flattened as `parent_child`. The message lists the fields available there.",
};

/// An operation on values of the wrong type.
pub(crate) static TYPE_MISMATCH: Rule = Rule {
    code: "E0703",
    name: "type-mismatch",
    summary: "an operator or function applied to values of the wrong type",
    doc: "Arithmetic works on numbers (dates and timestamps count as their ticks; decimals \
become doubles); comparisons need two numbers, two texts or two bools; an enum compares \
with a string literal that must be one of its symbols; `filter` needs a condition. \
Nullable values propagate: arithmetic with null is null and a comparison with null is \
false, so `x == null` is rejected in favour of `is_null(x)`.",
};

/// A function that does not exist or the wrong number of arguments.
pub(crate) static UNKNOWN_FUNCTION: Rule = Rule {
    code: "E0704",
    name: "unknown-function",
    summary: "an unknown function, or a function called with the wrong number of arguments",
    doc: "The functions are lower, upper, length, coalesce, is_null, concat and abs; \
docs/configuration.md gives their signatures.",
};

/// `flat_map` of something that is not an array.
pub(crate) static FLAT_MAP: Rule = Rule {
    code: "E0705",
    name: "flat-map-not-array",
    summary: "`flat_map` over a field that is not an array",
    doc: "`flat_map: field` emits one row per element of the array field `field`; the field \
then holds the element (a record element is flattened as `field_sub`). Other types have no \
elements.",
};

/// Two fields with one name, or an invalid name.
pub(crate) static DUPLICATE_FIELD: Rule = Rule {
    code: "E0706",
    name: "field-name",
    summary: "a step that leaves two fields with one name, or an invalid field name",
    doc: "Field names become column names: letters, digits and `_`, not starting with a digit, \
unique within the row. `rename` to an existing name, `select` listing a field twice, or a \
flattened name that collides all leave duplicates.",
};

/// A `rust` operator whose file or function is missing.
pub(crate) static RUST_OPERATOR: Rule = Rule {
    code: "E0707",
    name: "rust-operator",
    summary: "a `rust` operator whose file cannot be read or does not define the function",
    doc: "`rust: { file: ops.rs, fn: enrich }` includes ops.rs (relative to pipeline.yaml) in \
the generated crate and calls `enrich(row: &mut Row) -> bool` for each row; `false` drops the \
row. Inside the file, `Row` is the row type at that point of the chain; the generated crate's \
README lists its fields.",
};

/// A shard key that is not an output field or cannot be hashed.
pub(crate) static SHARD_KEY: Rule = Rule {
    code: "E0708",
    name: "shard-key",
    summary: "`shard_key` that is not an output field, or of a type that cannot be hashed",
    doc: "Rows are routed to shards by `xxHash64(shard_key) % shards`, computed on the output \
row (after the transform). The key must be one of the output fields, of an integer, string, \
enum, uuid, bool, date or timestamp type.",
};

/// A chain that leaves nothing to write.
pub(crate) static NO_COLUMNS: Rule = Rule {
    code: "E0709",
    name: "no-columns",
    summary: "a chain whose output row has no field",
    doc: "The output row is the sink's column list; it cannot be empty.",
};

/// The names of a row's fields, for notes.
pub(crate) fn names(row: &[Column]) -> String {
    row.iter().map(|c| c.name.as_str()).collect::<Vec<_>>().join(", ")
}

/// An unknown field, with the nearest name of the row as a suggestion. Both checkers report
/// it: the planner for the fields an operator names, the type checker for those an expression
/// reads.
pub(crate) fn unknown_field(path: &str, name: &str, row: &[Column]) -> Diagnostic {
    let near = crate::diag::nearest(name, row.iter().map(|c| c.name.as_str()));
    let d = Diagnostic::error(&UNKNOWN_FIELD, path, format!("unknown field `{name}`"))
        .note(format!("fields here: {}", names(row)));
    match near {
        Some(n) => d.help(format!("did you mean `{n}`?")),
        None => d.help("use a field of the row at this point of the chain"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The catalogue merges this list with `rules::RULES` by code, so no code or name may be in
    // both; like that list, this one is kept in code order, as the catalogue shows it.
    #[test]
    fn codes_and_names_are_ordered_and_apart_from_the_other_rules() {
        let codes: Vec<&str> = CHAIN_RULES.iter().map(|r| r.code).collect();
        let mut sorted = codes.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(codes, sorted, "codes must be unique and listed in order");
        for (i, rule) in CHAIN_RULES.iter().enumerate() {
            assert!(CHAIN_RULES[..i].iter().all(|r| r.name != rule.name), "{} is named twice", rule.name);
            assert!(
                !crate::rules::RULES.iter().any(|r| r.code == rule.code || r.name == rule.name),
                "{} ({}) is also in rules::RULES",
                rule.code,
                rule.name
            );
        }
    }
}
