//! A YAML tree with a span on every node, built from yaml-rust2's marked events.
//!
//! serde_yaml gives no positions for values, and every diagnostic must point at the
//! offending text, so the front end reads YAML through this tree instead.
//! Requires: UTF-8 text. Guarantees: every scalar's span covers its source text (for
//! single-line plain and quoted scalars exactly; other styles from their first character),
//! mapping keys keep their order, and anchors, aliases and tags are rejected with a span.

use crate::diag::{Diagnostic, SourceFile, Span};
use yaml_rust2::parser::{Event, MarkedEventReceiver, Parser};
use yaml_rust2::scanner::{Marker, TScalarStyle};

/// A YAML node with its location.
#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    /// What it is.
    pub kind: NodeKind,
    /// Where it is.
    pub span: Span,
}

/// Where a scalar's value sits in the file: from `base`, one byte of value per byte of source,
/// except at `folds`, where a byte of the value stands for a line break and the next line's
/// indentation (a plain or `>` scalar written over several lines: a space where the break
/// was folded, the break itself where it was kept).
#[derive(Clone, Debug, PartialEq)]
pub struct TextMap {
    /// The file offset of the value's first byte.
    pub base: usize,
    /// (value offset of such a byte, source bytes it stands for beyond its one).
    pub folds: Vec<(usize, usize)>,
}

impl TextMap {
    /// A value that is a verbatim slice of the file from `base`.
    pub fn at(base: usize) -> TextMap {
        TextMap { base, folds: Vec::new() }
    }

    /// The file offset of value byte `i` (or of the end, for `i` = the value's length).
    pub fn offset(&self, i: usize) -> usize {
        self.base + i + self.folds.iter().filter(|(v, _)| *v < i).map(|(_, extra)| extra).sum::<usize>()
    }

    /// The map of the value's text from byte `skip` on.
    pub fn skip(&self, skip: usize) -> TextMap {
        TextMap { base: self.offset(skip), folds: self.folds.iter().filter(|(v, _)| *v >= skip).map(|(v, e)| (v - skip, *e)).collect() }
    }

    /// Maps `value`, written from file offset `start` of `text` over one or more lines, onto
    /// the file; None where the value is not the source text with its line breaks folded.
    /// Each line after a break loses up to `indent` leading spaces (all of them, for a plain
    /// scalar; a `>` scalar's more-indented lines keep the rest).
    fn folded(text: &str, start: usize, value: &str, indent: usize) -> Option<TextMap> {
        let src = text.get(start..)?.as_bytes();
        let plain = indent == usize::MAX;
        let (mut p, mut folds) = (0, Vec::new());
        let skip_indent = |p: &mut usize| {
            let mut n = 0;
            while n < indent && src.get(*p).is_some_and(|b| matches!(b, b' ' | b'\t')) {
                *p += 1;
                n += 1;
            }
        };
        // Steps over the line break at `p` (`\n` or `\r\n`) and the next line's indentation.
        let next_line = |p: &mut usize| {
            *p += if src.get(*p) == Some(&b'\r') && src.get(*p + 1) == Some(&b'\n') { 2 } else { 1 };
            skip_indent(p);
        };
        for (i, &c) in value.as_bytes().iter().enumerate() {
            match src.get(p) {
                // Blanks before a folded break in a plain scalar: YAML drops them with it.
                Some(b' ' | b'\t') if plain && c == b' ' && src[p..].iter().find(|b| !matches!(b, b' ' | b'\t')).is_some_and(|b| matches!(b, b'\r' | b'\n')) => {
                    let from = p;
                    while src.get(p).is_some_and(|b| matches!(b, b' ' | b'\t')) {
                        p += 1;
                    }
                    next_line(&mut p);
                    folds.push((i, p - from - 1));
                }
                // A kept break, written `\r\n`.
                Some(b'\r') if c == b'\n' && src.get(p + 1) == Some(&b'\n') => {
                    let from = p;
                    next_line(&mut p);
                    folds.push((i, p - from - 1));
                }
                Some(&s) if s == c => {
                    p += 1;
                    if c == b'\n' {
                        let from = p;
                        skip_indent(&mut p);
                        if p > from {
                            folds.push((i, p - from));
                        }
                    }
                }
                Some(b'\r' | b'\n') if c == b' ' => {
                    let from = p;
                    next_line(&mut p);
                    folds.push((i, p - from - 1));
                }
                _ => return None,
            }
        }
        Some(TextMap { base: start, folds })
    }
}

/// The shapes of YAML nodes tilegen reads.
#[derive(Clone, Debug, PartialEq)]
pub enum NodeKind {
    /// A scalar, with `text_at`: where its value sits in the file when it is the source text
    /// (plain or quoted on one line; plain or `>` folded over several), so that expression
    /// spans inside it can be mapped back to the file.
    Scalar {
        /// The value.
        value: String,
        /// Where the value's text sits in the file, when it is known.
        text_at: Option<TextMap>,
        /// Whether it was written plain (unquoted).
        plain: bool,
    },
    /// A sequence.
    Seq(Vec<Node>),
    /// A mapping, in source order.
    Map(Vec<(Node, Node)>),
}

impl Node {
    /// The scalar's value, if this is a scalar.
    pub fn as_str(&self) -> Option<&str> {
        match &self.kind {
            NodeKind::Scalar { value, .. } => Some(value),
            _ => None,
        }
    }

    /// A short word for what this node is, for messages.
    pub fn describe(&self) -> &'static str {
        match &self.kind {
            NodeKind::Scalar { value, plain: true, .. } if value.is_empty() || value == "~" || value == "null" => "an empty value",
            NodeKind::Scalar { .. } => "a scalar",
            NodeKind::Seq(_) => "a list",
            NodeKind::Map(_) => "a mapping",
        }
    }
}

enum Frame {
    Seq(Span, Vec<Node>),
    Map(Span, Vec<Node>),
}

struct Builder<'a> {
    file: &'a SourceFile,
    stack: Vec<Frame>,
    root: Option<Node>,
    errors: Vec<Diagnostic>,
    /// YAML documents begun so far: a second one is an error.
    documents: usize,
}

impl Builder<'_> {
    fn offset(&self, m: &Marker) -> usize {
        self.file.offset_of(m.line(), m.col())
    }

    fn push_node(&mut self, node: Node) {
        match self.stack.last_mut() {
            Some(Frame::Seq(_, items)) | Some(Frame::Map(_, items)) => items.push(node),
            None => {
                if self.root.is_none() {
                    self.root = Some(node);
                }
            }
        }
    }

    fn scalar(&self, value: String, style: TScalarStyle, start: usize) -> Node {
        let src = &self.file.text[start.min(self.file.text.len())..];
        let first_line = src.lines().next().map_or(0, str::len).max(1);
        let (text_at, len) = match style {
            TScalarStyle::Plain if src.starts_with(value.as_str()) => (Some(TextMap::at(start)), value.len()),
            TScalarStyle::SingleQuoted | TScalarStyle::DoubleQuoted
                if src.get(1..).is_some_and(|s| s.starts_with(value.as_str()))
                    && src.get(1 + value.len()..).is_some_and(|s| s.starts_with(['\'', '"'])) =>
            {
                (Some(TextMap::at(start + 1)), value.len() + 2)
            }
            // Over several lines: the span is the first line's, positions inside map through
            // the folds. A `>` scalar's event sits at its text, on the line after the `>`;
            // that line's indentation is the block's.
            TScalarStyle::Plain => (TextMap::folded(&self.file.text, start, &value, usize::MAX), first_line),
            TScalarStyle::Folded => {
                let line_start = self.file.text[..start.min(self.file.text.len())].rfind('\n').map_or(0, |n| n + 1);
                (TextMap::folded(&self.file.text, start, &value, start - line_start), first_line)
            }
            _ => (None, first_line),
        };
        let plain = matches!(style, TScalarStyle::Plain);
        if plain && value.is_empty() {
            // A key with no value: the event sits at the next token, maybe lines on; blame
            // the end of the key's line instead.
            let end = self.file.text[..start.min(self.file.text.len())].trim_end().len();
            return Node { kind: NodeKind::Scalar { value, text_at: None, plain }, span: Span::new(end, end) };
        }
        Node { kind: NodeKind::Scalar { value, text_at, plain }, span: Span::new(start, start + len) }
    }
}

impl Builder<'_> {
    /// A plain scalar that a `,` cut short: inside `{...}` or `[...]` a comma ends a plain
    /// value, so `{extent: ceildiv(M, block_M)}` reads `ceildiv(M` and a key `block_M)`.
    /// Caught where the cut value has an unclosed bracket and a comma follows it.
    fn cut_at_comma(&self, node: &Node) -> Option<Diagnostic> {
        let NodeKind::Scalar { value, plain: true, text_at: Some(at) } = &node.kind else { return None };
        let start = &at.base;
        if !at.folds.is_empty() {
            return None;
        }
        let open = value.matches(['(', '[']).count();
        let close = value.matches([')', ']']).count();
        let after = self.file.text.get(start + value.len()..)?.trim_start_matches([' ', '\t']);
        if open <= close || !after.starts_with(',') {
            return None;
        }
        // The whole value as written: up to the first `,`, `}` or `]` outside its brackets.
        let text = &self.file.text[*start..];
        let mut depth = 0i32;
        let end = text.char_indices().find(|&(_, ch)| {
            match ch {
                '(' | '[' => depth += 1,
                ')' | ']' if depth > 0 => depth -= 1,
                _ => {}
            }
            depth == 0 && matches!(ch, ',' | '}' | ']' | '\n')
        }).map_or(text.len(), |(i, _)| i);
        let whole = text[..end].trim_end();
        let how = match self.stack.last() {
            Some(Frame::Map(..)) => ", or write the mapping one key per line",
            _ => "",
        };
        Some(Diagnostic::error(node.span, format!("`{value}` is cut short by the `,` after it: inside `{{...}}` or `[...]` a comma separates entries, even within brackets"))
            .hint(format!("quote the whole value (`\"{whole}\"`){how}")))
    }
}

impl MarkedEventReceiver for Builder<'_> {
    fn on_event(&mut self, ev: Event, mark: Marker) {
        let at = self.offset(&mark);
        match ev {
            Event::DocumentStart => {
                self.documents += 1;
                if self.documents == 2 {
                    let end = self.file.text[at..].lines().next().map_or(at, |l| at + l.len()).max(at + 1).min(self.file.text.len());
                    self.errors.push(Diagnostic::error(Span::new(at, end), "a second YAML document: a spec file holds one spec")
                        .hint("put each spec in a file of its own (a `---` line starts a document, a `...` line ends one)"));
                }
            }
            Event::Scalar(value, style, anchor, tag) => {
                if anchor != 0 || tag.is_some() {
                    self.errors.push(
                        Diagnostic::error(Span::new(at, at + 1), "YAML anchors and tags are not part of the spec language")
                            .hint("write the value out in full"),
                    );
                }
                let node = self.scalar(value, style, at);
                if let Some(d) = self.cut_at_comma(&node) {
                    self.errors.push(d);
                }
                self.push_node(node);
            }
            Event::SequenceStart(..) => self.stack.push(Frame::Seq(Span::new(at, at + 1), Vec::new())),
            Event::MappingStart(..) => self.stack.push(Frame::Map(Span::new(at, at + 1), Vec::new())),
            Event::SequenceEnd => {
                if let Some(Frame::Seq(span, items)) = self.stack.pop() {
                    let span = items.iter().fold(span, |s, n| s.to(n.span));
                    self.push_node(Node { kind: NodeKind::Seq(items), span });
                }
            }
            Event::MappingEnd => {
                if let Some(Frame::Map(span, items)) = self.stack.pop() {
                    let start = items.first().map_or(span, |n| n.span);
                    let span = items.iter().fold(start, |s, n| s.to(n.span));
                    let mut pairs = Vec::new();
                    let mut it = items.into_iter();
                    while let (Some(k), Some(v)) = (it.next(), it.next()) {
                        pairs.push((k, v));
                    }
                    self.push_node(Node { kind: NodeKind::Map(pairs), span });
                }
            }
            Event::Alias(_) => self.errors.push(
                Diagnostic::error(Span::new(at, at + 1), "YAML aliases are not part of the spec language")
                    .hint("write the value out in full"),
            ),
            _ => {}
        }
    }
}

/// Parses `file` into a spanned tree. A syntax error is one diagnostic at its position.
pub fn parse(file: &SourceFile) -> Result<Node, Vec<Diagnostic>> {
    let mut builder = Builder { file, stack: Vec::new(), root: None, errors: Vec::new(), documents: 0 };
    let mut parser = Parser::new_from_str(&file.text);
    let loaded = parser.load(&mut builder, true);
    if builder.documents > 1 {
        // Whatever follows a second `---` (another spec, or text that is not YAML) is not read.
        return Err(builder.errors);
    }
    if let Err(e) = loaded {
        let at = file.offset_of(e.marker().line(), e.marker().col());
        if let Some(d) = block_without_colon(file, at) {
            return Err(vec![d]);
        }
        let end = file.text[at..].chars().next().map_or(at, |c| at + c.len_utf8());
        return Err(vec![Diagnostic::error(Span::new(at, end), format!("YAML syntax error: {}", e.info()))
            .hint("check the indentation and quoting on this line and the one before it; statements containing `: ` or ` #` need quotes")]);
    }
    if !builder.errors.is_empty() {
        return Err(builder.errors);
    }
    match builder.root {
        Some(root) => Ok(root),
        None => Err(vec![Diagnostic::error(Span::new(0, 0), "the spec is empty")
            .hint("a spec is a YAML mapping starting with `kernel: <name>`")]),
    }
}

/// A syntax error just after a block statement written without its `:` (`- if bx <= by` with
/// its body below): YAML then reads the body's `- parallel(i, j):` as a mapping inside a plain
/// value and blames that line. Point at the line that lacks the colon instead.
fn block_without_colon(file: &SourceFile, at: usize) -> Option<Diagnostic> {
    let line_start = file.text[..at.min(file.text.len())].rfind('\n').map_or(0, |i| i + 1);
    let before = &file.text[..line_start];
    let (start, line) = before.trim_end_matches('\n').rsplit_once('\n').map_or((0, before.trim_end_matches('\n')), |(b, l)| (b.len() + 1, l));
    let code = line.split(" #").next().unwrap_or(line).trim_end();
    let stmt = code.trim_start().strip_prefix("- ")?.trim_start();
    let keyword = crate::front::spec::block_keyword(stmt)?;
    if code.ends_with(':') {
        return None;
    }
    let end = start + code.len();
    let from = start + (code.len() - stmt.len());
    Some(Diagnostic::error(Span::new(from, end), format!("`{keyword}` opens a block: it needs a `:` at the end of its line"))
        .hint(format!("write `{stmt}:` and indent its statements below it")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scalars_in_flow_and_block_keep_exact_spans() {
        let f = SourceFile::new("t.yaml", "a: {x: [M, K]}\nbody:\n  - copy(A[i, j], B)\n");
        let root = parse(&f).unwrap();
        let NodeKind::Map(top) = &root.kind else { panic!() };
        let NodeKind::Seq(body) = &top[1].1.kind else { panic!() };
        assert_eq!(f.snippet(body[0].span), "copy(A[i, j], B)");
        let NodeKind::Map(inner) = &top[0].1.kind else { panic!() };
        let NodeKind::Seq(dims) = &inner[0].1.kind else { panic!() };
        assert_eq!(f.snippet(dims[1].span), "K");
    }

    #[test]
    fn quoted_scalars_map_their_inner_text() {
        let f = SourceFile::new("t.yaml", "s: 'a: b'\n");
        let root = parse(&f).unwrap();
        let NodeKind::Map(top) = &root.kind else { panic!() };
        let NodeKind::Scalar { text_at, .. } = &top[0].1.kind else { panic!() };
        assert_eq!(*text_at, Some(TextMap::at(4)));
    }

    #[test]
    fn a_second_document_is_an_error_at_its_marker() {
        for rest in ["kernel: b\n", "garbage: [unclosed\n"] {
            let f = SourceFile::new("t.yaml", format!("kernel: a\n---\n{rest}"));
            let err = parse(&f).unwrap_err();
            assert_eq!(err.len(), 1, "{err:?}");
            assert!(err[0].message.contains("a spec file holds one spec"), "{}", err[0].message);
            assert_eq!(f.snippet(err[0].span), "---");
        }
        // A `---` before the only document is fine.
        assert!(parse(&SourceFile::new("t.yaml", "---\nkernel: a\n")).is_ok());
    }

    #[test]
    fn a_block_statement_without_its_colon_is_named() {
        let f = SourceFile::new("t.yaml", "body:\n  - if bx <= by   # the lower triangle\n      - parallel(i, j):\n          - x = 1\n");
        let err = parse(&f).unwrap_err();
        assert_eq!(err.len(), 1);
        assert_eq!(err[0].message, "`if` opens a block: it needs a `:` at the end of its line");
        assert_eq!(f.snippet(err[0].span), "if bx <= by");
    }

    #[test]
    fn statements_over_several_lines_map_every_position() {
        // Plain (continuation lines folded into spaces) and `>-` (a more-indented line keeps
        // its break and its extra indentation): each name's span is where it is written.
        let text = "body:\n  - x = max(a +\n      f32(b), 0.0)\n  - >-\n    y = c +\n      f32(d)\n";
        let f = SourceFile::new("t.yaml", text);
        let root = parse(&f).unwrap();
        let NodeKind::Map(top) = &root.kind else { panic!() };
        let NodeKind::Seq(body) = &top[0].1.kind else { panic!() };
        for (node, names) in body.iter().zip([["a", "b"], ["c", "d"]]) {
            let NodeKind::Scalar { value, text_at: Some(at), .. } = &node.kind else { panic!("{node:?}") };
            for name in names {
                let i = value.rfind(name).unwrap();
                assert_eq!(&text[at.offset(i)..at.offset(i + 1)], name, "{value:?}");
            }
            let end = value.len();
            assert_eq!(&text[at.offset(end - 1)..at.offset(end)], ")");
        }
    }

    #[test]
    fn folds_after_trailing_blanks_and_crlf_breaks_map_too() {
        for text in ["body:\n  - x = a +   \n      f32(b)\n", "body:\r\n  - >-\r\n    x = a +\r\n      f32(b)\r\n"] {
            let f = SourceFile::new("t.yaml", text);
            let root = parse(&f).unwrap();
            let NodeKind::Map(top) = &root.kind else { panic!() };
            let NodeKind::Seq(body) = &top[0].1.kind else { panic!() };
            let NodeKind::Scalar { value, text_at: Some(at), .. } = &body[0].kind else { panic!("{text:?}: {:?}", body[0]) };
            let i = value.rfind('b').unwrap();
            assert_eq!(&text[at.offset(i)..at.offset(i + 1)], "b", "{text:?}");
        }
    }

    #[test]
    fn syntax_errors_have_a_position() {
        let f = SourceFile::new("t.yaml", "a: [1, 2\nb: 3\n");
        let err = parse(&f).unwrap_err();
        assert_eq!(err.len(), 1);
        assert!(err[0].message.starts_with("YAML syntax error"));
    }
}
