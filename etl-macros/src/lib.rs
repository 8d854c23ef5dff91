//! etl-macros: proc macros, a thin shell over etl-gen.
