//! Lexer and parser for the small expression grammar inside spec strings.
//!
//! Grammar (loosest first):
//! ```text
//! line    := expr (assign_op expr)?            assign_op := = += -= *=
//! expr    := or ;  or := and ('||' and)* ;  and := cmp ('&&' cmp)*
//! cmp     := sum (('<'|'<='|'>'|'>='|'=='|'!=') sum)?
//! sum     := term (('+'|'-') term)* ;  term := unary (('*'|'/'|'%') unary)*
//! unary   := ('-'|'!') unary | postfix
//! postfix := NAME '(' args? ')' | NAME '[' index (',' index)* ']' | primary
//! index   := expr | expr ':' | ':'             (slices: tile dims of a copy's origin)
//! primary := INT | FLOAT | inf | true | false | NAME | '(' expr ')'
//! args    := arg (',' arg)* ;  arg := (NAME '=')? expr
//! ```
//! Requires: the string and the byte offset of its first character in the file (or none,
//! when the YAML value is not a verbatim slice of the file). Guarantees: every node's span
//! points into the file; errors carry the span of the offending token.

use crate::ast::{Arg, AssignOp, BinOp, Expr, ExprKind, Ident, UnOp};
use crate::diag::{Diagnostic, Span};
use crate::front::yaml::TextMap;

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Int(i64),
    Float(f64, String),
    Name(String),
    Punct(&'static str),
    End,
}

struct Lexer<'a> {
    text: &'a str,
    pos: usize,
}

const PUNCTS: [&str; 24] = [
    "<=", ">=", "==", "!=", "&&", "||", "+=", "-=", "*=", "(", ")", "[", "]", ",", "+", "-", "*", "/",
    "%", "<", ">", "=", "!", ":",
];

impl Lexer<'_> {
    fn next(&mut self) -> Result<(Tok, usize, usize), (usize, usize, String)> {
        let bytes = self.text.as_bytes();
        while self.pos < bytes.len() && bytes[self.pos].is_ascii_whitespace() {
            self.pos += 1;
        }
        let start = self.pos;
        if start >= bytes.len() {
            return Ok((Tok::End, start, start));
        }
        let c = bytes[start];
        if c.is_ascii_digit() || (c == b'.' && bytes.get(start + 1).is_some_and(u8::is_ascii_digit)) {
            let mut end = start;
            let mut is_float = false;
            while end < bytes.len() {
                let b = bytes[end];
                if b.is_ascii_digit() || b == b'_' {
                    end += 1;
                } else if b == b'.' && !is_float {
                    is_float = true;
                    end += 1;
                } else if (b == b'e' || b == b'E')
                    && (bytes.get(end + 1).is_some_and(u8::is_ascii_digit)
                        || (matches!(bytes.get(end + 1), Some(b'-' | b'+'))
                            && bytes.get(end + 2).is_some_and(u8::is_ascii_digit)))
                {
                    is_float = true;
                    end += 2;
                } else {
                    break;
                }
            }
            self.pos = end;
            let lit = self.text[start..end].replace('_', "");
            return if is_float {
                lit.parse::<f64>()
                    .map(|v| (Tok::Float(v, lit.clone()), start, end))
                    .map_err(|_| (start, end, format!("`{lit}` is not a number")))
            } else {
                lit.parse::<i64>()
                    .map(|v| (Tok::Int(v), start, end))
                    .map_err(|_| (start, end, format!("integer `{lit}` is out of range")))
            };
        }
        if c.is_ascii_alphabetic() || c == b'_' {
            let mut end = start;
            while end < bytes.len() && (bytes[end].is_ascii_alphanumeric() || bytes[end] == b'_') {
                end += 1;
            }
            self.pos = end;
            return Ok((Tok::Name(self.text[start..end].to_string()), start, end));
        }
        for p in PUNCTS {
            if self.text[start..].starts_with(p) {
                self.pos = start + p.len();
                return Ok((Tok::Punct(p), start, self.pos));
            }
        }
        let ch = self.text[start..].chars().next().unwrap_or(' ');
        Err((start, start + ch.len_utf8(), format!("unexpected character `{ch}`")))
    }
}

/// A parsed spec line: an expression, or an assignment `target op value`.
#[derive(Clone, Debug, PartialEq)]
pub enum Line {
    /// A bare expression (a statement call or a block header).
    Expr(Expr),
    /// `target op value`.
    Assign(Expr, AssignOp, Expr),
}

/// Parses spec strings.
pub struct ExprParser {
    toks: Vec<(Tok, usize, usize)>,
    pos: usize,
    base: Option<TextMap>,
    whole: Span,
    /// Brackets and call arguments open around the current position.
    nesting: usize,
}

/// The deepest an expression's tree may be: deeper ones are refused where they would otherwise
/// exhaust the stack of tilegen's recursive passes.
pub const MAX_EXPR_DEPTH: usize = 200;

/// The most brackets and calls an expression may nest (each level is several frames of the
/// recursive-descent parser).
pub const MAX_NESTING: usize = 64;

/// The depth of `e`'s tree, computed without recursion.
fn depth(e: &Expr) -> usize {
    let mut deepest = 0;
    let mut stack = vec![(e, 1)];
    while let Some((e, d)) = stack.pop() {
        deepest = deepest.max(d);
        match &e.kind {
            ExprKind::Unary(_, x) => stack.push((x, d + 1)),
            ExprKind::Binary(_, a, b) => stack.extend([(&**a, d + 1), (&**b, d + 1)]),
            ExprKind::Index(_, idx) => stack.extend(idx.iter().map(|x| (x, d + 1))),
            ExprKind::Call(_, args) => stack.extend(args.iter().map(|a| (&a.value, d + 1))),
            _ => {}
        }
    }
    deepest
}

impl ExprParser {
    /// Lexes `text`, whose first character sits at file offset `base` (if known); `whole`
    /// is the span to blame when positions inside the text are unknown.
    pub fn new(text: &str, base: Option<&TextMap>, whole: Span) -> Result<ExprParser, Diagnostic> {
        let base = base.cloned();
        let mut lexer = Lexer { text, pos: 0 };
        let mut toks = Vec::new();
        loop {
            match lexer.next() {
                Ok(t) => {
                    let end = t.0 == Tok::End;
                    toks.push(t);
                    if end {
                        break;
                    }
                }
                Err((s, e, msg)) => {
                    let span = Self::map(base.as_ref(), whole, s, e);
                    return Err(Diagnostic::error(span, msg)
                        .hint("expressions use names, numbers, + - * / %, comparisons, && ||, calls f(x) and indexing x[i, j]"));
                }
            }
        }
        Ok(ExprParser { toks, pos: 0, base, whole, nesting: 0 })
    }

    fn map(base: Option<&TextMap>, whole: Span, s: usize, e: usize) -> Span {
        match base {
            Some(m) => Span::new(m.offset(s), m.offset(e.max(s + 1))),
            None => whole,
        }
    }

    fn span(&self, s: usize, e: usize) -> Span {
        Self::map(self.base.as_ref(), self.whole, s, e)
    }

    fn peek(&self) -> &Tok {
        &self.toks[self.pos].0
    }

    fn tok_span(&self) -> Span {
        let (_, s, e) = self.toks[self.pos];
        self.span(s, e)
    }

    fn bump(&mut self) -> (Tok, usize, usize) {
        let t = self.toks[self.pos].clone();
        if self.pos + 1 < self.toks.len() {
            self.pos += 1;
        }
        t
    }

    fn eat(&mut self, p: &str) -> bool {
        if matches!(self.peek(), Tok::Punct(q) if *q == p) {
            self.bump();
            true
        } else {
            false
        }
    }

    fn expect(&mut self, p: &str) -> Result<usize, Diagnostic> {
        if let Tok::Punct(q) = self.peek() && *q == p {
            return Ok(self.bump().2);
        }
        Err(self.unexpected(&format!("`{p}`")))
    }

    fn unexpected(&self, wanted: &str) -> Diagnostic {
        let found = match self.peek() {
            Tok::End => "the end of the text".to_string(),
            Tok::Int(v) => format!("`{v}`"),
            Tok::Float(_, s) => format!("`{s}`"),
            Tok::Name(n) => format!("`{n}`"),
            Tok::Punct(p) => format!("`{p}`"),
        };
        let span = if matches!(self.peek(), Tok::End) && self.pos > 0 {
            let (_, _, e) = self.toks[self.pos - 1];
            self.span(e, e + 1)
        } else {
            self.tok_span()
        };
        Diagnostic::error(span, format!("expected {wanted}, found {found}"))
    }

    /// Parses a whole line: an expression or an assignment; trailing text is an error.
    pub fn line(mut self) -> Result<Line, Diagnostic> {
        let lhs = self.expr()?;
        let op = match self.peek() {
            Tok::Punct("=") => Some(AssignOp::Set),
            Tok::Punct("+=") => Some(AssignOp::Add),
            Tok::Punct("-=") => Some(AssignOp::Sub),
            Tok::Punct("*=") => Some(AssignOp::Mul),
            _ => None,
        };
        let line = match op {
            Some(op) => {
                self.bump();
                let rhs = self.expr()?;
                Line::Assign(lhs, op, rhs)
            }
            None => Line::Expr(lhs),
        };
        if !matches!(self.peek(), Tok::End) {
            return Err(self.unexpected("the end of the statement"));
        }
        Ok(line)
    }

    /// Parses a whole string as one expression.
    pub fn whole_expr(mut self) -> Result<Expr, Diagnostic> {
        let e = self.expr()?;
        if !matches!(self.peek(), Tok::End) {
            return Err(self.unexpected("the end of the expression"));
        }
        Ok(e)
    }

    fn expr(&mut self) -> Result<Expr, Diagnostic> {
        if self.nesting >= MAX_NESTING {
            return Err(Diagnostic::error(self.tok_span(), format!("the expression nests more than {MAX_NESTING} brackets or calls deep")));
        }
        self.nesting += 1;
        let e = self.binary(0);
        self.nesting -= 1;
        let e = e?;
        if depth(&e) > MAX_EXPR_DEPTH {
            return Err(Diagnostic::error(e.span, format!("the expression is more than {MAX_EXPR_DEPTH} operations deep"))
                .hint("split it over several statements or constants"));
        }
        Ok(e)
    }

    fn binary(&mut self, level: usize) -> Result<Expr, Diagnostic> {
        const LEVELS: [&[(&str, BinOp)]; 5] = [
            &[("||", BinOp::Or)],
            &[("&&", BinOp::And)],
            &[("<=", BinOp::Le), (">=", BinOp::Ge), ("==", BinOp::Eq), ("!=", BinOp::Ne), ("<", BinOp::Lt), (">", BinOp::Gt)],
            &[("+", BinOp::Add), ("-", BinOp::Sub)],
            &[("*", BinOp::Mul), ("/", BinOp::Div), ("%", BinOp::Rem)],
        ];
        if level == LEVELS.len() {
            return self.unary();
        }
        let mut lhs = self.binary(level + 1)?;
        loop {
            let op = match self.peek() {
                Tok::Punct(p) => LEVELS[level].iter().find(|(s, _)| s == p).map(|(_, op)| *op),
                _ => None,
            };
            let Some(op) = op else { break };
            self.bump();
            let rhs = self.binary(level + 1)?;
            let span = lhs.span.to(rhs.span);
            lhs = Expr { kind: ExprKind::Binary(op, Box::new(lhs), Box::new(rhs)), span };
            // Checked as the chain grows: a tree built far deeper would overflow the stack
            // even when dropped.
            if depth(&lhs) > MAX_EXPR_DEPTH {
                return Err(Diagnostic::error(lhs.span, format!("the expression is more than {MAX_EXPR_DEPTH} operations deep"))
                    .hint("split it over several statements or constants"));
            }
            if op.is_comparison() {
                break;
            }
        }
        Ok(lhs)
    }

    fn unary(&mut self) -> Result<Expr, Diagnostic> {
        let op = match self.peek() {
            Tok::Punct("-") => Some(UnOp::Neg),
            Tok::Punct("!") => Some(UnOp::Not),
            _ => None,
        };
        if let Some(op) = op {
            let start = self.tok_span();
            self.bump();
            // A run of prefix operators nests like brackets do.
            if self.nesting >= MAX_NESTING {
                return Err(Diagnostic::error(self.tok_span(), format!("the expression nests more than {MAX_NESTING} brackets, calls or prefix operators deep")));
            }
            self.nesting += 1;
            let inner = self.unary();
            self.nesting -= 1;
            let inner = inner?;
            // Fold `-<literal>` so that negative constants stay literals.
            let span = start.to(inner.span);
            return Ok(match (op, inner.kind) {
                (UnOp::Neg, ExprKind::Int(v)) if v != i64::MIN => Expr { kind: ExprKind::Int(-v), span },
                // `-(-1.5)` is the literal `1.5`, not the text `--1.5`.
                (UnOp::Neg, ExprKind::Float(v, s)) => {
                    let text = s.strip_prefix('-').map_or_else(|| format!("-{s}"), str::to_string);
                    Expr { kind: ExprKind::Float(-v, text), span }
                }
                (op, kind) => Expr { kind: ExprKind::Unary(op, Box::new(Expr { kind, span: inner.span })), span },
            });
        }
        self.postfix()
    }

    fn postfix(&mut self) -> Result<Expr, Diagnostic> {
        let (tok, s, e) = self.bump();
        let span = self.span(s, e);
        match tok {
            Tok::Int(v) => Ok(Expr { kind: ExprKind::Int(v), span }),
            Tok::Float(v, lit) => Ok(Expr { kind: ExprKind::Float(v, lit), span }),
            Tok::Name(n) if n == "true" || n == "false" => Ok(Expr { kind: ExprKind::Bool(n == "true"), span }),
            Tok::Name(n) if n == "inf" => Ok(Expr { kind: ExprKind::Float(f64::INFINITY, n), span }),
            Tok::Name(name) => {
                let ident = Ident { name: name.clone(), span };
                if self.eat("(") {
                    let mut args = Vec::new();
                    if !self.eat(")") {
                        loop {
                            args.push(self.arg()?);
                            if self.eat(",") {
                                continue;
                            }
                            self.expect(")")?;
                            break;
                        }
                    }
                    let end = self.toks[self.pos.saturating_sub(1)].2;
                    Ok(Expr { kind: ExprKind::Call(ident, args), span: span.to(self.span(end - 1, end)) })
                } else if self.eat("[") {
                    let mut idx = vec![self.index()?];
                    while self.eat(",") {
                        idx.push(self.index()?);
                    }
                    let end = self.expect("]")?;
                    Ok(Expr { kind: ExprKind::Index(ident, idx), span: span.to(self.span(end - 1, end)) })
                } else {
                    Ok(Expr { kind: ExprKind::Name(name), span })
                }
            }
            Tok::Punct("(") => {
                let inner = self.expr()?;
                let end = self.expect(")")?;
                Ok(Expr { kind: inner.kind, span: span.to(self.span(end - 1, end)) })
            }
            tok => {
                // `bump` does not move past the end, so only a real token is stepped back over.
                if tok != Tok::End {
                    self.pos -= 1;
                }
                Err(self.unexpected("a value (a name, a number or `(`)"))
            }
        }
    }

    /// One index inside `[...]`: an expression, or a slice `start:` / `:` that marks a tile
    /// dimension of a copy's origin (the extent comes from the buffer).
    fn index(&mut self) -> Result<Expr, Diagnostic> {
        if matches!(self.peek(), Tok::Punct(":")) {
            let span = self.tok_span();
            self.bump();
            let zero = Expr { kind: ExprKind::Int(0), span };
            return Ok(Expr { kind: ExprKind::Slice(Box::new(zero)), span });
        }
        let start = self.expr()?;
        if matches!(self.peek(), Tok::Punct(":")) {
            let colon = self.tok_span();
            self.bump();
            if !matches!(self.peek(), Tok::Punct(",") | Tok::Punct("]")) {
                return Err(Diagnostic::error(self.tok_span(), "a tile slice has no end: the extent comes from the buffer")
                    .hint("write `start:` (or `:` for a tile at 0)"));
            }
            let span = start.span.to(colon);
            return Ok(Expr { kind: ExprKind::Slice(Box::new(start)), span });
        }
        Ok(start)
    }

    fn arg(&mut self) -> Result<Arg, Diagnostic> {
        if let (Tok::Name(n), Tok::Punct("=")) = (self.peek().clone(), &self.toks[(self.pos + 1).min(self.toks.len() - 1)].0) {
            let span = self.tok_span();
            self.bump();
            self.bump();
            let value = self.expr()?;
            return Ok(Arg { key: Some(Ident { name: n, span }), value });
        }
        Ok(Arg { key: None, value: self.expr()? })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<Line, Diagnostic> {
        ExprParser::new(s, Some(&TextMap::at(100)), Span::new(100, 100 + s.len()))?.line()
    }

    #[test]
    fn precedence_and_spans() {
        let Line::Expr(e) = parse("a + b * c").unwrap() else { panic!() };
        let ExprKind::Binary(BinOp::Add, l, r) = e.kind else { panic!() };
        assert_eq!(l.span, Span::new(100, 101));
        assert!(matches!(r.kind, ExprKind::Binary(BinOp::Mul, ..)));
        assert_eq!(r.span, Span::new(104, 109));
    }

    #[test]
    fn deep_expressions_are_errors_not_stack_overflows() {
        let nested = format!("{}x{}", "(".repeat(5000), ")".repeat(5000));
        assert!(parse(&nested).unwrap_err().message.contains("nests more than 64 brackets or calls deep"));
        let calls = format!("{}x{}", "exp(".repeat(5000), ")".repeat(5000));
        assert!(parse(&calls).unwrap_err().message.contains("nests more than 64"));
        let prefixes = format!("{}x", "- ".repeat(100_000));
        assert!(parse(&prefixes).unwrap_err().message.contains("prefix operators deep"));
        let chain = format!("x{}", " + 1".repeat(50_000));
        assert!(parse(&chain).unwrap_err().message.contains("more than 200 operations deep"));
        // Up to the limit, both parse; `-(-1.5)` is the literal 1.5.
        assert!(parse(&format!("{}x{}", "(".repeat(60), ")".repeat(60))).is_ok() && parse(&format!("x{}", " + 1".repeat(150))).is_ok());
        let Line::Expr(e) = parse("-(-1.5)").unwrap() else { panic!() };
        assert!(matches!(&e.kind, ExprKind::Float(v, text) if *v == 1.5 && text == "1.5"), "{e:?}");
    }

    #[test]
    fn assignments_calls_and_keywords() {
        let Line::Assign(t, AssignOp::Set, v) = parse("acc[i, j] = max(acc[i, j] + bias[j], 0.0)").unwrap() else { panic!() };
        assert!(matches!(t.kind, ExprKind::Index(..)));
        assert!(matches!(v.kind, ExprKind::Call(..)));
        let Line::Expr(e) = parse("gemm(A_s, B_s, acc, transpose_b=true)").unwrap() else { panic!() };
        let ExprKind::Call(_, args) = e.kind else { panic!() };
        assert_eq!(args[3].key.as_ref().unwrap().name, "transpose_b");
    }

    #[test]
    fn errors_point_at_the_token() {
        let err = parse("copy(A[by, ], A_s)").unwrap_err();
        assert_eq!(err.span, Span::new(111, 112));
        assert!(err.message.contains("expected a value"), "{}", err.message);
        let err = parse("a * ").unwrap_err();
        assert!(err.message.ends_with("found the end of the text"), "{}", err.message);
        let err = parse("copy(A, B) extra").unwrap_err();
        assert!(err.message.contains("end of the statement"));
        let err = parse("a $ b").unwrap_err();
        assert_eq!(err.span, Span::new(102, 103));
    }

    #[test]
    fn negative_literals_fold() {
        let Line::Expr(e) = parse("-1.5e3").unwrap() else { panic!() };
        assert!(matches!(e.kind, ExprKind::Float(v, _) if v == -1500.0));
    }
}
