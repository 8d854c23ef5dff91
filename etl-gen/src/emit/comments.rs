//! Comments in generated code. prettyplease drops comments, so where one belongs the emitter
//! writes a marker statement, `__etl_comment!("text");`. After formatting, [`restore`] turns
//! each marker into the line `// text`; the proc macro's expansion, which is never formatted,
//! has the markers removed by [`strip`].

use proc_macro2::{Group, TokenStream, TokenTree};
use quote::quote;

const MARKER: &str = "__etl_comment";

/// A marker statement for the comment `text` (one line).
pub(super) fn marker(text: &str) -> TokenStream {
    let name = quote::format_ident!("{}", MARKER);
    quote!(#name!(#text);)
}

/// Formatted source with every marker statement replaced by a `//` comment at its indentation.
pub(super) fn restore(source: &str) -> String {
    let mut out = String::with_capacity(source.len());
    let mut lines = source.lines();
    while let Some(line) = lines.next() {
        let trimmed = line.trim_start();
        let Some(rest) = trimmed.strip_prefix(MARKER).and_then(|r| r.strip_prefix("!(")) else {
            out.push_str(line);
            out.push('\n');
            continue;
        };
        // prettyplease keeps a lone literal argument on the marker's line; join if it did not.
        let mut call = rest.to_owned();
        while !call.trim_end().ends_with(");") {
            match lines.next() {
                Some(next) => call.push_str(next.trim()),
                None => break,
            }
        }
        let literal = call.trim_end().trim_end_matches(");").trim();
        let text = syn::parse_str::<syn::LitStr>(literal).map(|l| l.value()).unwrap_or_else(|_| literal.to_owned());
        let indent = &line[..line.len() - trimmed.len()];
        out.push_str(&format!("{indent}// {text}\n"));
    }
    out
}

/// `tokens` without the marker statements.
pub(super) fn strip(tokens: TokenStream) -> TokenStream {
    let trees: Vec<TokenTree> = tokens.into_iter().collect();
    let mut out = Vec::with_capacity(trees.len());
    let mut i = 0;
    while i < trees.len() {
        if let TokenTree::Ident(id) = &trees[i]
            && id == MARKER
            && matches!(trees.get(i + 1), Some(TokenTree::Punct(p)) if p.as_char() == '!')
        {
            // `name ! (text) ;`
            i += if matches!(trees.get(i + 3), Some(TokenTree::Punct(p)) if p.as_char() == ';') { 4 } else { 3 };
            continue;
        }
        out.push(match &trees[i] {
            TokenTree::Group(g) => {
                let mut group = Group::new(g.delimiter(), strip(g.stream()));
                group.set_span(g.span());
                TokenTree::Group(group)
            }
            other => other.clone(),
        });
        i += 1;
    }
    out.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers_become_comments_or_disappear() {
        let m = marker("filter: \"a > 0\"");
        let tokens = quote!(fn f() { #m let x = 1; });
        let file = syn::parse2::<syn::File>(tokens.clone()).unwrap();
        let formatted = restore(&prettyplease::unparse(&file));
        assert!(formatted.contains("    // filter: \"a > 0\"\n    let x = 1;"), "{formatted}");
        assert_eq!(
            strip(tokens).to_string(),
            quote!(
                fn f() {
                    let x = 1;
                }
            )
            .to_string()
        );
    }
}
