// An unknown field in an expression is a compile error at the macro call, not a rustc
// error inside generated code.
etl_macros::pipeline!("fail_unknown_field.yaml");
