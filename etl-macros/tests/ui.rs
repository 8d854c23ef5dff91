//! `pipeline!` fails compilation with the generator's diagnostics, and expands a valid
//! pipeline into a program that runs.

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/fail_*.rs");
    t.pass("tests/ui/pass_*.rs");
}
