//! `${VAR}` and `${VAR:-default}` strings: values the binary reads from its environment.
//!
//! The generator parses a template once and emits its parts, so the running binary only
//! concatenates; it never parses configuration text.

use std::fmt;

use serde::de::{Deserialize, Deserializer, Error as _};
use serde::{Serialize, Serializer};

/// One piece of a template.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Part {
    /// Literal text.
    Lit(String),
    /// `${name}` (no default: the variable must be set) or `${name:-default}` (used when
    /// the variable is unset or empty, as in the shell).
    Var { name: String, default: Option<String> },
}

/// A string value that may refer to environment variables.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Template {
    text: String,
    parts: Vec<Part>,
}

impl Template {
    /// Parses `text`; `$$` stands for a literal `$`.
    pub(crate) fn parse(text: &str) -> Result<Self, String> {
        let mut parts = Vec::new();
        let mut lit = String::new();
        let mut rest = text;
        while let Some(pos) = rest.find('$') {
            lit.push_str(&rest[..pos]);
            let after = &rest[pos + 1..];
            if let Some(tail) = after.strip_prefix('$') {
                lit.push('$');
                rest = tail;
            } else if let Some(body) = after.strip_prefix('{') {
                let end = body.find('}').ok_or_else(|| format!("`{text}`: `${{` is not closed by `}}`"))?;
                let inner = &body[..end];
                let (name, default) = match inner.split_once(":-") {
                    Some((name, default)) => (name, Some(default.to_owned())),
                    None => (inner, None),
                };
                if !is_var_name(name) {
                    return Err(format!(
                        "`{text}`: `{name}` is not an environment variable name (letters, digits and `_`, not starting with a digit)"
                    ));
                }
                if !lit.is_empty() {
                    parts.push(Part::Lit(std::mem::take(&mut lit)));
                }
                parts.push(Part::Var { name: name.to_owned(), default });
                rest = &body[end + 1..];
            } else {
                lit.push('$');
                rest = after;
            }
        }
        lit.push_str(rest);
        if !lit.is_empty() {
            parts.push(Part::Lit(lit));
        }
        Ok(Self { text: text.to_owned(), parts })
    }

    /// The text as written in pipeline.yaml.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The parsed pieces.
    pub fn parts(&self) -> &[Part] {
        &self.parts
    }

    /// True when the value does not depend on the environment.
    pub fn is_literal(&self) -> bool {
        self.parts.iter().all(|p| matches!(p, Part::Lit(_)))
    }

    /// The names of the variables it reads.
    pub fn vars(&self) -> impl Iterator<Item = &str> {
        self.parts.iter().filter_map(|p| match p {
            Part::Var { name, .. } => Some(name.as_str()),
            Part::Lit(_) => None,
        })
    }

    /// The value with variables taken from `env`; the error names a required variable
    /// that is unset.
    pub fn resolve(&self, env: impl Fn(&str) -> Option<String>) -> Result<String, UnsetVariable> {
        let mut out = String::new();
        for part in &self.parts {
            match part {
                Part::Lit(s) => out.push_str(s),
                // Shell semantics: `${VAR:-d}` uses d when VAR is unset or empty; `${VAR}` only
                // needs VAR to be set.
                Part::Var { name, default } => match (env(name), default) {
                    (Some(v), Some(d)) if v.is_empty() => out.push_str(d),
                    (Some(v), _) => out.push_str(&v),
                    (None, Some(d)) => out.push_str(d),
                    (None, None) => return Err(UnsetVariable { name: name.clone() }),
                },
            }
        }
        Ok(out)
    }
}

/// A variable without default that the environment does not set.
#[derive(Debug, thiserror::Error)]
#[error("environment variable `{name}` is not set")]
pub struct UnsetVariable {
    /// The variable.
    pub name: String,
}

/// Whether `s` is a valid environment variable name.
pub(crate) fn is_var_name(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

impl fmt::Display for Template {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl<'de> Deserialize<'de> for Template {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        Template::parse(&text).map_err(D::Error::custom)
    }
}

impl Serialize for Template {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.text)
    }
}

impl schemars::JsonSchema for Template {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Template".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "string",
            "description": "A string; `${VAR}` and `${VAR:-default}` are read from the environment at run time."
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        match name {
            "HOST" => Some("kafka:9092".into()),
            "EMPTY" => Some(String::new()),
            _ => None,
        }
    }

    #[test]
    fn parses_and_resolves() {
        let t = Template::parse("${HOST:-localhost:9092}").unwrap();
        assert_eq!(t.resolve(env).unwrap(), "kafka:9092");
        let t = Template::parse("${NOPE:-localhost:9092}").unwrap();
        assert_eq!(t.resolve(env).unwrap(), "localhost:9092");
        let t = Template::parse("${EMPTY:-fallback}").unwrap();
        assert_eq!(t.resolve(env).unwrap(), "fallback");
        let t = Template::parse("http://${HOST}/x?p=$$1").unwrap();
        assert_eq!(t.resolve(env).unwrap(), "http://kafka:9092/x?p=$1");
        assert!(!t.is_literal());
        assert_eq!(t.vars().collect::<Vec<_>>(), ["HOST"]);
        let err = Template::parse("${NOPE}").unwrap().resolve(env).unwrap_err();
        assert!(err.to_string().contains("`NOPE` is not set"), "{err}");
        assert!(Template::parse("plain").unwrap().is_literal());
        assert_eq!(Template::parse("${EMPTY:-}").unwrap().resolve(env).unwrap(), "");
    }

    #[test]
    fn rejects_malformed() {
        assert!(Template::parse("${HOST").unwrap_err().contains("not closed"));
        assert!(Template::parse("${1X}").unwrap_err().contains("not an environment variable name"));
        assert!(Template::parse("${}").is_err());
    }
}
