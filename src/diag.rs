//! Diagnostics: source files, spans, and codespan-style reports.
//!
//! Every stage reports problems as [`Diagnostic`]s that carry a byte [`Span`] into the
//! spec's text. Rendering (file:line:col, the source line, a caret under the offending
//! text, and a hint) happens only at the edge, in [`Diagnostic::render`].

use std::fmt::Write as _;

/// A half-open byte range `[start, end)` into a [`SourceFile`]'s text.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Span {
    /// First byte of the span.
    pub start: usize,
    /// One past the last byte of the span.
    pub end: usize,
}

impl Span {
    /// A span from `start` to `end`.
    pub fn new(start: usize, end: usize) -> Span {
        Span { start, end: end.max(start) }
    }

    /// The smallest span covering both.
    pub fn to(self, other: Span) -> Span {
        Span::new(self.start.min(other.start), self.end.max(other.end))
    }
}

/// A spec file: its display path (as the user gave it, never made absolute) and its text.
#[derive(Clone, Debug)]
pub struct SourceFile {
    /// The path shown in diagnostics and in generated headers.
    pub path: String,
    /// The file's contents.
    pub text: String,
    line_starts: Vec<usize>,
}

impl SourceFile {
    /// Wraps `text` read from `path`.
    pub fn new(path: impl Into<String>, text: impl Into<String>) -> SourceFile {
        let text = text.into();
        let mut line_starts = vec![0];
        line_starts.extend(text.match_indices('\n').map(|(i, _)| i + 1));
        SourceFile { path: path.into(), text, line_starts }
    }

    /// 1-based line and 1-based column (in characters) of a byte offset.
    pub fn line_col(&self, offset: usize) -> (usize, usize) {
        let offset = offset.min(self.text.len());
        let line = match self.line_starts.binary_search(&offset) {
            Ok(l) => l,
            Err(l) => l - 1,
        };
        let start = self.line_starts[line];
        let col = self.text[start..floor_char(&self.text, offset)].chars().count();
        (line + 1, col + 1)
    }

    /// The text of 1-based line `line`, without its newline.
    pub fn line_text(&self, line: usize) -> &str {
        let start = self.line_starts.get(line - 1).copied().unwrap_or(self.text.len());
        let end = self.line_starts.get(line).map(|e| e - 1).unwrap_or(self.text.len());
        self.text[start..end.max(start)].trim_end_matches('\r')
    }

    /// Byte offset of a 1-based line and a 0-based column counted in characters.
    pub fn offset_of(&self, line: usize, col_chars: usize) -> usize {
        let Some(&start) = self.line_starts.get(line.saturating_sub(1)) else {
            return self.text.len();
        };
        let rest = &self.text[start..];
        rest.char_indices().nth(col_chars).map(|(i, _)| start + i).unwrap_or(self.text.len())
    }

    /// The source text under a span.
    pub fn snippet(&self, span: Span) -> &str {
        let s = floor_char(&self.text, span.start.min(self.text.len()));
        let e = floor_char(&self.text, span.end.min(self.text.len()));
        &self.text[s..e.max(s)]
    }
}

fn floor_char(text: &str, mut i: usize) -> usize {
    while i > 0 && !text.is_char_boundary(i) {
        i -= 1;
    }
    i
}

/// A secondary location attached to a diagnostic ("first defined here").
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Label {
    /// Where.
    pub span: Span,
    /// What it shows.
    pub message: String,
}

/// How serious a diagnostic is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Severity {
    /// The spec cannot be compiled.
    #[default]
    Error,
    /// The spec compiles, but part of it does nothing (an unused buffer, a result never read);
    /// `--deny-warnings` makes these fail `check` and `gen`.
    Warning,
}

impl Severity {
    /// The word reports use: `error` or `warning`.
    pub fn name(self) -> &'static str {
        match self {
            Severity::Error => "error",
            Severity::Warning => "warning",
        }
    }
}

/// One problem found in a spec.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Diagnostic {
    /// An error, or a warning that lets the spec compile.
    pub severity: Severity,
    /// The primary location: the offending text.
    pub span: Span,
    /// What is wrong.
    pub message: String,
    /// What to do about it.
    pub hint: Option<String>,
    /// Related locations.
    pub labels: Vec<Label>,
    /// The spec is fine, but the target has no lowering for its program shape: `tilegen gen`
    /// over every target skips the pair with a note instead of failing.
    pub unsupported: bool,
    /// The cause alone, where `message` also says which lowering refused the spec: an error
    /// that lists several lowerings' refusals quotes this instead of the whole message.
    pub cause: Option<String>,
}

impl Diagnostic {
    /// An error at `span`.
    pub fn error(span: Span, message: impl Into<String>) -> Diagnostic {
        Diagnostic { severity: Severity::Error, span, message: message.into(), hint: None, labels: Vec::new(), unsupported: false, cause: None }
    }

    /// A warning at `span`: the spec compiles, but this part of it does nothing.
    pub fn warning(span: Span, message: impl Into<String>) -> Diagnostic {
        Diagnostic { severity: Severity::Warning, ..Diagnostic::error(span, message) }
    }

    /// Records the cause alone (see [`Diagnostic::cause`]).
    pub fn with_cause(mut self, cause: impl Into<String>) -> Diagnostic {
        self.cause = Some(cause.into());
        self
    }

    /// The cause alone where one was recorded, else the whole message: what an error that
    /// lists several lowerings' refusals quotes.
    pub fn cause_or_message(&self) -> &str {
        self.cause.as_deref().unwrap_or(&self.message)
    }

    /// Marks the diagnostic as "no lowering on this target" (see [`Diagnostic::unsupported`]).
    pub fn unsupported_on_target(mut self) -> Diagnostic {
        self.unsupported = true;
        self
    }

    /// Adds a hint.
    pub fn hint(mut self, hint: impl Into<String>) -> Diagnostic {
        self.hint = Some(hint.into());
        self
    }

    /// Adds a hint only if there is one.
    pub fn maybe_hint(mut self, hint: Option<String>) -> Diagnostic {
        if hint.is_some() {
            self.hint = hint;
        }
        self
    }

    /// Adds a secondary label.
    pub fn label(mut self, span: Span, message: impl Into<String>) -> Diagnostic {
        self.labels.push(Label { span, message: message.into() });
        self
    }

    /// Renders the report: `path:line:col: error: message` (or `warning:`), the line, a caret,
    /// labels, hint.
    pub fn render(&self, file: &SourceFile) -> String {
        let mut out = String::new();
        let (line, col) = file.line_col(self.span.start);
        let _ = writeln!(out, "{}:{}:{}: {}: {}", file.path, line, col, self.severity.name(), self.message);
        // One gutter width for every excerpt of the diagnostic, as wide as its longest line number.
        let gutter = std::iter::once(line).chain(self.labels.iter().map(|l| file.line_col(l.span.start).0)).max().unwrap_or(line).to_string().len();
        render_excerpt(&mut out, file, self.span, None, gutter);
        for label in &self.labels {
            let (l, c) = file.line_col(label.span.start);
            let _ = writeln!(out, "  --> {}:{}:{}: {}", file.path, l, c, label.message);
            render_excerpt(&mut out, file, label.span, None, gutter);
        }
        if let Some(hint) = &self.hint {
            let _ = writeln!(out, "  = hint: {hint}");
        }
        out
    }
}

/// The most characters of a source line an excerpt shows.
const EXCERPT_WIDTH: usize = 120;

fn render_excerpt(out: &mut String, file: &SourceFile, span: Span, note: Option<&str>, gutter_width: usize) {
    let (line, col) = file.line_col(span.start);
    let text = file.line_text(line);
    let gutter = format!("{line:>gutter_width$}");
    let pad = " ".repeat(gutter.len());
    // Underline to the end of the span or of the line, whichever comes first; at least one caret.
    let line_chars = text.chars().count();
    let span_chars = file.snippet(span).lines().next().map(|s| s.chars().count()).unwrap_or(0);
    // A long line shows a window of it around the span's start, cut ends marked with `…`.
    let (first, last) = if line_chars <= EXCERPT_WIDTH {
        (0, line_chars)
    } else {
        let first = (col - 1).saturating_sub(EXCERPT_WIDTH / 3).min(line_chars - EXCERPT_WIDTH);
        (first, first + EXCERPT_WIDTH)
    };
    let shown: String = text.chars().skip(first).take(last - first).collect();
    let (before, after) = (if first > 0 { "…" } else { "" }, if last < line_chars { "…" } else { "" });
    let width = span_chars.min(last.saturating_sub(col - 1)).max(1);
    let _ = writeln!(out, "{pad} |");
    let _ = writeln!(out, "{gutter} | {before}{shown}{after}");
    let _ = write!(out, "{pad} | {}{}", " ".repeat(col - 1 - first + before.chars().count()), "^".repeat(width));
    if let Some(note) = note {
        let _ = write!(out, " {note}");
    }
    out.push('\n');
}

/// Renders all diagnostics, sorted by position, followed by a count of errors and warnings.
pub fn render_all(diags: &[Diagnostic], file: &SourceFile) -> String {
    let mut sorted: Vec<&Diagnostic> = diags.iter().collect();
    sorted.sort_by_key(|d| (d.span.start, d.message.clone()));
    let mut out = String::new();
    for d in &sorted {
        out.push_str(&d.render(file));
        out.push('\n');
    }
    let count = |severity: Severity| {
        let n = sorted.iter().filter(|d| d.severity == severity).count();
        (n > 0).then(|| format!("{n} {}{}", severity.name(), if n == 1 { "" } else { "s" }))
    };
    let counts: Vec<String> = [Severity::Error, Severity::Warning].into_iter().filter_map(count).collect();
    let _ = writeln!(out, "{}: {} found", file.path, if counts.is_empty() { "0 errors".to_string() } else { counts.join(" and ") });
    out
}

/// "did you mean `x`?" for the closest candidate within a small edit distance.
pub fn did_you_mean<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<String> {
    nearest(word, candidates).map(|c| format!("did you mean `{c}`?"))
}

/// The closest candidate within a small edit distance.
pub fn nearest<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let mut best: Option<(usize, &str)> = None;
    for cand in candidates {
        let d = edit_distance(&word.to_lowercase(), &cand.to_lowercase());
        let limit = (word.chars().count().max(cand.chars().count()) / 3).max(1);
        if d <= limit && best.is_none_or(|(bd, bc)| d < bd || (d == bd && cand < bc)) {
            best = Some((d, cand));
        }
    }
    best.map(|(_, c)| c)
}

/// Optimal-string-alignment distance: edits, with a swap of neighbours counting once.
fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            d[i][j] = (d[i - 1][j] + 1).min(d[i][j - 1] + 1).min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                d[i][j] = d[i][j].min(d[i - 2][j - 2] + 1);
            }
        }
    }
    d[a.len()][b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_col_counts_characters() {
        let f = SourceFile::new("x.yaml", "é: 1\nab: cd\n");
        assert_eq!(f.line_col(0), (1, 1));
        assert_eq!(f.line_col(f.text.find("cd").unwrap()), (2, 5));
        assert_eq!(f.line_text(2), "ab: cd");
    }

    #[test]
    fn suggestions_pick_the_nearest_name() {
        assert_eq!(did_you_mean("thrads", ["threads", "tensors"]).as_deref(), Some("did you mean `threads`?"));
        assert_eq!(did_you_mean("zzzzzz", ["threads"]), None);
        assert_eq!(did_you_mean("claer", ["copy", "clear"]).as_deref(), Some("did you mean `clear`?"));
    }

    #[test]
    fn render_has_location_line_and_caret() {
        let f = SourceFile::new("s.yaml", "threads: 100\n");
        let d = Diagnostic::error(Span::new(9, 12), "bad").hint("fix it");
        let r = d.render(&f);
        assert!(r.starts_with("s.yaml:1:10: error: bad\n"), "{r}");
        assert!(r.contains("1 | threads: 100\n  |          ^^^\n"), "{r}");
        assert!(r.contains("= hint: fix it"));
    }

    #[test]
    fn long_lines_show_a_window_around_the_span() {
        let line = format!("doc: {}bad{}", "a".repeat(5000), "b".repeat(5000));
        let f = SourceFile::new("s.yaml", format!("{line}\n"));
        let r = Diagnostic::error(Span::new(5005, 5008), "here").render(&f);
        let lines: Vec<&str> = r.lines().collect();
        assert!(lines[0].starts_with("s.yaml:1:5006: error: here"), "{r}");
        // The window starts 40 characters before the span and holds 120, both ends cut.
        assert_eq!(lines[2], format!("1 | …{}bad{}…", "a".repeat(40), "b".repeat(77)));
        assert_eq!(lines[3], format!("  | {}^^^", " ".repeat(41)));
        // Near either end, the window sits against it.
        let r = Diagnostic::error(Span::new(0, 3), "start").render(&f);
        assert!(r.contains(&format!("1 | doc{}…\n  | ^^^\n", &line[3..120])), "{r}");
        let end = line.len() - 1;
        let r = Diagnostic::error(Span::new(end, end + 1), "end").render(&f);
        assert!(r.contains(&format!("1 | …{}\n  | {}^\n", &line[line.len() - 120..], " ".repeat(120))), "{r}");
    }
}
