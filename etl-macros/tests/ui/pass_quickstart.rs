// A valid pipeline expands into a whole program, `fn main` included, that runs to the
// end of its finite datagen source and exits 0.
etl_macros::pipeline!("pass_quickstart.yaml");
