//! etl-macros: `pipeline!("pipeline.yaml")`, the generated pipeline expanded in place.
//!
//! A thin shell over etl-gen: read the path, validate, emit. Every diagnostic becomes a
//! `compile_error!` at the macro call, so a plain `cargo build` fails on an invalid
//! pipeline (a broken sizing rule included) exactly as `cargo xtask gen` does.

use std::path::PathBuf;

use proc_macro::TokenStream;
use quote::quote;

/// Expands a whole pipeline program (record types, the chain, `fn main`) from a
/// pipeline.yaml. The path is resolved like `include_str!`: relative to the file that
/// invokes the macro. The crate must depend on `etl-runtime`.
///
/// ```text
/// etl_macros::pipeline!("../pipeline.yaml");
/// ```
#[proc_macro]
pub fn pipeline(input: TokenStream) -> TokenStream {
    let lit = syn::parse_macro_input!(input as syn::LitStr);
    expand(&lit).unwrap_or_else(|errors| errors).into()
}

fn expand(lit: &syn::LitStr) -> Result<proc_macro2::TokenStream, proc_macro2::TokenStream> {
    let error = |message: String| {
        let e = syn::Error::new(lit.span(), message).to_compile_error();
        // A `main` stub keeps rustc from adding "main function not found" to the real error.
        quote!(#e fn main() {})
    };
    let path = resolve(&lit.value());
    let outcome = etl_gen::validate_file(&path, &etl_gen::Options::default()).map_err(|e| error(e.to_string()))?;
    let Some(pipeline) = outcome.pipeline else {
        let errors = outcome.report.errors().map(|d| {
            let message = format!("{}: {} [{}]\n{}", d.path, d.message, d.rule.code, d.help.join("\n"));
            syn::Error::new(lit.span(), message).to_compile_error()
        });
        // The full rendering, with file:line:column, as one more error.
        let rendered = syn::Error::new(lit.span(), outcome.report.render()).to_compile_error();
        return Err(quote!(#(#errors)* #rendered fn main() {}));
    };
    let body = etl_gen::emit::main_rs_tokens(&pipeline).map_err(|e| error(e.to_string()))?;
    let yaml = path.display().to_string();
    Ok(quote! {
        // Rebuild when pipeline.yaml changes.
        const _: &[u8] = include_bytes!(#yaml);
        #body
    })
}

/// Resolves `path` against the directory of the invoking source file, as `include_str!`
/// does; falls back to the crate root.
fn resolve(path: &str) -> PathBuf {
    let path = PathBuf::from(path);
    if path.is_absolute() {
        return path;
    }
    let file = proc_macro::Span::call_site().local_file();
    let base = match file {
        Some(f) => {
            let f = if f.is_absolute() { f } else { std::env::current_dir().unwrap_or_default().join(f) };
            f.parent().map(PathBuf::from).unwrap_or_default()
        }
        None => PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap_or_default()),
    };
    base.join(path)
}
