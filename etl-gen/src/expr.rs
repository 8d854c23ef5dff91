//! The expression language of `filter` and `map`: a lexer and a precedence-climbing parser.
//!
//! ```text
//! expr    = or
//! or      = and ("||" and)*
//! and     = cmp ("&&" cmp)*
//! cmp     = sum (("==" | "!=" | "<" | "<=" | ">" | ">=") sum)?
//! sum     = product (("+" | "-") product)*
//! product = unary (("*" | "/" | "%") unary)*
//! unary   = ("!" | "-") unary | primary
//! primary = integer | float | 'string' | true | false | null
//!         | name | name "(" (expr ("," expr)*)? ")" | "(" expr ")"
//! ```
//! Spans are byte ranges within the expression text, for diagnostics.

use std::fmt;
use std::ops::Range;

/// A parsed expression.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Expr {
    /// A literal.
    Lit(Lit, Range<usize>),
    /// A field of the row (or a metadata field such as `_offset`).
    Field(String, Range<usize>),
    /// A function call; `m[k]` is the call `[]` of `m` and `k` (no function can be named so).
    Call(String, Vec<Expr>, Range<usize>),
    /// `!e` or `-e`.
    Unary(UnOp, Box<Expr>, Range<usize>),
    /// `l op r`.
    Binary(BinOp, Box<Expr>, Box<Expr>, Range<usize>),
}

/// A literal value.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Lit {
    /// An integer.
    Int(i64),
    /// A decimal number (becomes a double).
    Float(f64),
    /// A 'string'.
    Str(String),
    /// `true` / `false`.
    Bool(bool),
    /// `null`.
    Null,
}

/// Unary operators.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum UnOp {
    /// `!`
    Not,
    /// `-`
    Neg,
}

/// Binary operators.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BinOp {
    /// `||`
    Or,
    /// `&&`
    And,
    /// `==`
    Eq,
    /// `!=`
    Ne,
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `>`
    Gt,
    /// `>=`
    Ge,
    /// `+`
    Add,
    /// `-`
    Sub,
    /// `*`
    Mul,
    /// `/`
    Div,
    /// `%`
    Rem,
}

impl BinOp {
    /// Whether the operator compares.
    pub(crate) fn is_comparison(self) -> bool {
        matches!(self, BinOp::Eq | BinOp::Ne | BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge)
    }
}

impl fmt::Display for BinOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BinOp::Or => "||",
            BinOp::And => "&&",
            BinOp::Eq => "==",
            BinOp::Ne => "!=",
            BinOp::Lt => "<",
            BinOp::Le => "<=",
            BinOp::Gt => ">",
            BinOp::Ge => ">=",
            BinOp::Add => "+",
            BinOp::Sub => "-",
            BinOp::Mul => "*",
            BinOp::Div => "/",
            BinOp::Rem => "%",
        })
    }
}

impl Expr {
    /// The expression's byte range in its text.
    pub(crate) fn span(&self) -> Range<usize> {
        match self {
            Expr::Lit(_, s)
            | Expr::Field(_, s)
            | Expr::Call(_, _, s)
            | Expr::Unary(_, _, s)
            | Expr::Binary(_, _, _, s) => s.clone(),
        }
    }
}

/// A syntax error at a byte range of the expression.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ParseError {
    /// What is wrong.
    pub message: String,
    /// Where.
    pub span: Range<usize>,
}

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Int(i64),
    Float(f64),
    Str(String),
    Ident(String),
    Op(&'static str),
    LParen,
    RParen,
    LBracket,
    RBracket,
    Comma,
    End,
}

fn lex(text: &str) -> Result<Vec<(Tok, Range<usize>)>, ParseError> {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        let start = i;
        match c {
            b' ' | b'\t' | b'\n' | b'\r' => i += 1,
            b'(' => {
                out.push((Tok::LParen, i..i + 1));
                i += 1;
            }
            b')' => {
                out.push((Tok::RParen, i..i + 1));
                i += 1;
            }
            b',' => {
                out.push((Tok::Comma, i..i + 1));
                i += 1;
            }
            b'[' => {
                out.push((Tok::LBracket, i..i + 1));
                i += 1;
            }
            b']' => {
                out.push((Tok::RBracket, i..i + 1));
                i += 1;
            }
            b'\'' => {
                let mut s = String::new();
                i += 1;
                loop {
                    match bytes.get(i) {
                        None => {
                            return Err(ParseError { message: "unterminated string".into(), span: start..text.len() });
                        }
                        Some(b'\'') if bytes.get(i + 1) == Some(&b'\'') => {
                            s.push('\'');
                            i += 2;
                        }
                        Some(b'\'') => {
                            i += 1;
                            break;
                        }
                        Some(_) => {
                            let ch = text[i..].chars().next().expect("in bounds");
                            s.push(ch);
                            i += ch.len_utf8();
                        }
                    }
                }
                out.push((Tok::Str(s), start..i));
            }
            b'0'..=b'9' => {
                while i < bytes.len() && bytes[i].is_ascii_digit() {
                    i += 1;
                }
                let is_float = bytes.get(i) == Some(&b'.') && bytes.get(i + 1).is_some_and(u8::is_ascii_digit);
                if is_float {
                    i += 1;
                    while i < bytes.len() && bytes[i].is_ascii_digit() {
                        i += 1;
                    }
                    let v: f64 = text[start..i]
                        .parse()
                        .map_err(|_| ParseError { message: "bad number".into(), span: start..i })?;
                    out.push((Tok::Float(v), start..i));
                } else {
                    let v: i64 = text[start..i]
                        .parse()
                        .map_err(|_| ParseError { message: "integer literal out of range".into(), span: start..i })?;
                    out.push((Tok::Int(v), start..i));
                }
            }
            c if c.is_ascii_alphabetic() || c == b'_' => {
                // A nested field is `parent.child` (one name with dots).
                let name_char = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
                while i < bytes.len()
                    && (name_char(bytes[i])
                        || (bytes[i] == b'.'
                            && bytes.get(i + 1).is_some_and(|&n| n.is_ascii_alphabetic() || n == b'_')))
                {
                    i += 1;
                }
                out.push((Tok::Ident(text[start..i].to_owned()), start..i));
            }
            _ => {
                const OPS: [&str; 15] =
                    ["||", "&&", "==", "!=", "<=", ">=", "<", ">", "+", "-", "*", "/", "%", "!", "="];
                let op = OPS.iter().find(|op| text[i..].starts_with(**op));
                match op {
                    Some(&"=") => {
                        return Err(ParseError {
                            message: "`=` is not an operator; compare with `==`".into(),
                            span: i..i + 1,
                        });
                    }
                    Some(op) => {
                        out.push((Tok::Op(op), i..i + op.len()));
                        i += op.len();
                    }
                    None => {
                        let ch = text[i..].chars().next().expect("in bounds");
                        return Err(ParseError {
                            message: format!("unexpected character `{ch}`"),
                            span: i..i + ch.len_utf8(),
                        });
                    }
                }
            }
        }
    }
    out.push((Tok::End, text.len()..text.len()));
    Ok(out)
}

/// Parses an expression.
pub(crate) fn parse(text: &str) -> Result<Expr, ParseError> {
    let tokens = lex(text)?;
    let mut p = Parser { tokens, pos: 0 };
    let e = p.expr(0)?;
    match p.peek() {
        (Tok::End, _) => Ok(e),
        (_, span) => Err(ParseError { message: "unexpected text after the expression".into(), span: span.clone() }),
    }
}

struct Parser {
    tokens: Vec<(Tok, Range<usize>)>,
    pos: usize,
}

fn binary_op(tok: &Tok) -> Option<(BinOp, u8)> {
    let Tok::Op(op) = tok else { return None };
    Some(match *op {
        "||" => (BinOp::Or, 1),
        "&&" => (BinOp::And, 2),
        "==" => (BinOp::Eq, 3),
        "!=" => (BinOp::Ne, 3),
        "<" => (BinOp::Lt, 3),
        "<=" => (BinOp::Le, 3),
        ">" => (BinOp::Gt, 3),
        ">=" => (BinOp::Ge, 3),
        "+" => (BinOp::Add, 4),
        "-" => (BinOp::Sub, 4),
        "*" => (BinOp::Mul, 5),
        "/" => (BinOp::Div, 5),
        "%" => (BinOp::Rem, 5),
        _ => return None,
    })
}

impl Parser {
    fn peek(&self) -> &(Tok, Range<usize>) {
        &self.tokens[self.pos]
    }

    fn bump(&mut self) -> (Tok, Range<usize>) {
        let t = self.tokens[self.pos].clone();
        if self.pos + 1 < self.tokens.len() {
            self.pos += 1;
        }
        t
    }

    fn expr(&mut self, min_prec: u8) -> Result<Expr, ParseError> {
        let mut lhs = self.unary()?;
        while let Some((op, prec)) = binary_op(&self.peek().0) {
            if prec < min_prec {
                break;
            }
            self.bump();
            // Comparisons do not chain: `a < b < c` is an error, not `(a < b) < c`.
            let rhs = self.expr(prec + 1)?;
            if op.is_comparison()
                && let Some((next, _)) = binary_op(&self.peek().0)
                && next.is_comparison()
            {
                let span = self.peek().1.clone();
                return Err(ParseError { message: "comparisons do not chain; join them with `&&`".into(), span });
            }
            let span = lhs.span().start..rhs.span().end;
            lhs = Expr::Binary(op, Box::new(lhs), Box::new(rhs), span);
        }
        Ok(lhs)
    }

    fn unary(&mut self) -> Result<Expr, ParseError> {
        match self.peek().clone() {
            (Tok::Op("!"), span) => {
                self.bump();
                let e = self.unary()?;
                let full = span.start..e.span().end;
                Ok(Expr::Unary(UnOp::Not, Box::new(e), full))
            }
            (Tok::Op("-"), span) => {
                self.bump();
                let e = self.unary()?;
                let full = span.start..e.span().end;
                Ok(match e {
                    Expr::Lit(Lit::Int(v), _) => Expr::Lit(Lit::Int(-v), full),
                    Expr::Lit(Lit::Float(v), _) => Expr::Lit(Lit::Float(-v), full),
                    e => Expr::Unary(UnOp::Neg, Box::new(e), full),
                })
            }
            _ => self.postfix(),
        }
    }

    /// A primary followed by any number of `[key]` lookups (`m['a']`).
    fn postfix(&mut self) -> Result<Expr, ParseError> {
        let mut e = self.primary()?;
        while self.peek().0 == Tok::LBracket {
            self.bump();
            let key = self.expr(0)?;
            match self.bump() {
                (Tok::RBracket, end) => {
                    let span = e.span().start..end.end;
                    e = Expr::Call(INDEX.to_owned(), vec![e, key], span);
                }
                (_, s) => return Err(ParseError { message: "expected `]`".into(), span: s }),
            }
        }
        Ok(e)
    }

    fn primary(&mut self) -> Result<Expr, ParseError> {
        let (tok, span) = self.bump();
        Ok(match tok {
            Tok::Int(v) => Expr::Lit(Lit::Int(v), span),
            Tok::Float(v) => Expr::Lit(Lit::Float(v), span),
            Tok::Str(s) => Expr::Lit(Lit::Str(s), span),
            Tok::Ident(name) => match name.as_str() {
                "true" => Expr::Lit(Lit::Bool(true), span),
                "false" => Expr::Lit(Lit::Bool(false), span),
                "null" => Expr::Lit(Lit::Null, span),
                _ if self.peek().0 == Tok::LParen => {
                    self.bump();
                    let mut args = Vec::new();
                    if self.peek().0 != Tok::RParen {
                        loop {
                            args.push(self.expr(0)?);
                            match self.bump() {
                                (Tok::Comma, _) => continue,
                                (Tok::RParen, end) => {
                                    return Ok(Expr::Call(name, args, span.start..end.end));
                                }
                                (_, s) => return Err(ParseError { message: "expected `,` or `)`".into(), span: s }),
                            }
                        }
                    }
                    let (_, end) = self.bump();
                    Expr::Call(name, args, span.start..end.end)
                }
                _ => Expr::Field(name, span),
            },
            Tok::LParen => {
                let e = self.expr(0)?;
                match self.bump() {
                    (Tok::RParen, _) => e,
                    (_, s) => return Err(ParseError { message: "expected `)`".into(), span: s }),
                }
            }
            Tok::End => return Err(ParseError { message: "the expression ends too early".into(), span }),
            other => {
                return Err(ParseError { message: format!("unexpected `{}`", describe(&other)), span });
            }
        })
    }
}

/// The name of `m[k]` as a call.
pub(crate) const INDEX: &str = "[]";

fn describe(tok: &Tok) -> String {
    match tok {
        Tok::Op(op) => (*op).to_owned(),
        Tok::RParen => ")".into(),
        Tok::RBracket => "]".into(),
        Tok::LBracket => "[".into(),
        Tok::Comma => ",".into(),
        other => format!("{other:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn show(e: &Expr) -> String {
        match e {
            Expr::Lit(l, _) => format!("{l:?}"),
            Expr::Field(n, _) => n.clone(),
            Expr::Call(n, a, _) => format!("{n}({})", a.iter().map(show).collect::<Vec<_>>().join(", ")),
            Expr::Unary(op, e, _) => format!("({op:?} {})", show(e)),
            Expr::Binary(op, l, r, _) => format!("({} {op} {})", show(l), show(r)),
        }
    }

    #[test]
    fn precedence_and_associativity() {
        assert_eq!(show(&parse("a + b * c - d").unwrap()), "((a + (b * c)) - d)");
        assert_eq!(
            show(&parse("a > 0 && b != 'x' || !c").unwrap()),
            "(((a > Int(0)) && (b != Str(\"x\"))) || (Not c))"
        );
        assert_eq!(show(&parse("-(a + 1) / 2.5").unwrap()), "((Neg (a + Int(1))) / Float(2.5))");
        assert_eq!(show(&parse("coalesce(x, lower(y), 'it''s')").unwrap()), "coalesce(x, lower(y), Str(\"it's\"))");
        assert_eq!(show(&parse("f()").unwrap()), "f()");
        assert_eq!(parse("total_cents / 100.0").unwrap().span(), 0..19);
        assert_eq!(show(&parse("-m['a'][k] + 1").unwrap()), r#"((Neg []([](m, Str("a")), k)) + Int(1))"#);
        assert_eq!(parse("length(m[1])").unwrap().span(), 0..12);
        assert_eq!(show(&parse("address.geo.lat > 1.5").unwrap()), "(address.geo.lat > Float(1.5))");
    }

    #[test]
    fn errors_point_at_the_problem() {
        assert_eq!(parse("a = 1").unwrap_err().span, 2..3);
        assert!(parse("a < b < c").unwrap_err().message.contains("do not chain"));
        assert!(parse("'open").unwrap_err().message.contains("unterminated"));
        assert!(parse("a +").unwrap_err().message.contains("ends too early"));
        assert!(parse("(a").is_err());
        assert!(parse("a b").is_err());
        assert!(parse("a # b").unwrap_err().message.contains("unexpected character"));
        assert!(parse("m['a'").unwrap_err().message.contains("expected `]`"));
    }
}
