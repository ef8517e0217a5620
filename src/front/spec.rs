//! Builds the AST from the spanned YAML tree.

use super::expr::{ExprParser, Line};
use super::yaml::{self, Node, NodeKind};
use crate::ast::*;
use crate::diag::{did_you_mean, Diagnostic, SourceFile, Span};

/// A call's arguments: the positional ones, then the keyword ones with their names.
type CallArgs = (Vec<Expr>, Vec<(Ident, Expr)>);

/// The statement keywords, for suggestions.
pub const STATEMENTS: [&str; 7] = ["copy", "gemm", "clear", "fill", "reduce_max", "reduce_sum", "dequant_int4"];
/// The block keywords, for suggestions.
pub const BLOCKS: [&str; 6] = ["pipelined", "serial", "unroll", "parallel", "if", "else"];

/// The block keyword `text` starts with (`if bx <= by`, `serial(k, n)`), if any.
pub fn block_keyword(text: &str) -> Option<&'static str> {
    BLOCKS.into_iter().find(|k| text.strip_prefix(*k).is_some_and(|rest| rest.is_empty() || rest.starts_with([' ', '('])))
}
const TOP_KEYS: [&str; 9] = ["kernel", "doc", "tensors", "constants", "grid", "threads", "buffers", "body", "targets"];
const TARGET_KEYS: [&str; 5] = ["constants", "threads", "cluster", "schedule", "swizzle"];
const TENSOR_KEYS: [&str; 4] = ["dtype", "shape", "order", "output"];
const BUFFER_KEYS: [&str; 3] = ["scope", "dtype", "shape"];

struct Cx {
    errors: Vec<Diagnostic>,
    /// Keys suggested for misspelt ones, with the mapping they were misspelt in (`the spec`,
    /// ``tensor `A` ``), so that "missing" is not reported twice.
    suggested: Vec<(String, String)>,
    /// How many of the errors were found in the body.
    body_errors: usize,
    next_id: StmtId,
}

/// What the front end produced: a spec (possibly missing the statements that failed to
/// parse) and the errors found.
pub struct Parsed {
    /// The spec, when its declarations parsed; statements with errors are left out.
    pub spec: Option<Spec>,
    /// Every structural error.
    pub errors: Vec<Diagnostic>,
    /// Whether all errors are inside the body, so that checking the rest is still sound.
    pub errors_only_in_body: bool,
}

/// Parses a spec file into its AST, reporting every structural error.
pub fn parse_spec(file: &SourceFile) -> Result<Spec, Vec<Diagnostic>> {
    let p = parse_spec_partial(file);
    match p.spec {
        Some(spec) if p.errors.is_empty() => Ok(spec),
        _ => Err(p.errors),
    }
}

/// Parses a spec, keeping what parsed so that checking can report further errors.
pub fn parse_spec_partial(file: &SourceFile) -> Parsed {
    let root = match yaml::parse(file) {
        Ok(r) => r,
        Err(errors) => return Parsed { spec: None, errors, errors_only_in_body: false },
    };
    let mut cx = Cx { errors: Vec::new(), suggested: Vec::new(), body_errors: 0, next_id: 0 };
    let spec = cx.spec(&root);
    let errors_only_in_body = cx.body_errors == cx.errors.len();
    Parsed { spec, errors: cx.errors, errors_only_in_body }
}

impl Cx {
    fn err(&mut self, d: Diagnostic) {
        self.errors.push(d);
    }

    /// The entries of a mapping node, checking keys against `allowed` and for duplicates.
    /// Whether a misspelt key of mapping `what` was answered with "did you mean `key`?".
    fn was_suggested(&self, what: &str, key: &str) -> bool {
        self.suggested.iter().any(|(w, k)| w == what && k == key)
    }

    fn entries<'n>(&mut self, node: &'n Node, what: &str, allowed: &[&str]) -> Vec<(&'n str, &'n Node, &'n Node)> {
        let NodeKind::Map(pairs) = &node.kind else {
            self.err(Diagnostic::error(node.span, format!("{what} must be a mapping, found {}", node.describe())));
            return Vec::new();
        };
        let mut out: Vec<(&str, &Node, &Node)> = Vec::new();
        for (k, v) in pairs {
            let Some(key) = k.as_str() else {
                self.err(Diagnostic::error(k.span, format!("keys of {what} must be plain names")));
                continue;
            };
            if let Some((_, first, _)) = out.iter().find(|(n, _, _)| *n == key) {
                let first = first.span;
                self.err(Diagnostic::error(k.span, format!("duplicate key `{key}` in {what}"))
                    .label(first, "first written here")
                    .hint("remove one of the two entries"));
                continue;
            }
            if !allowed.is_empty() && !allowed.contains(&key) {
                if let Some(near) = crate::diag::nearest(key, allowed.iter().copied()) {
                    self.suggested.push((what.to_string(), near.to_string()));
                }
                let hint = did_you_mean(key, allowed.iter().copied())
                    .unwrap_or_else(|| format!("the keys of {what} are: {}", allowed.join(", ")));
                self.err(Diagnostic::error(k.span, format!("unknown key `{key}` in {what}")).hint(hint));
                continue;
            }
            out.push((key, k, v));
        }
        out
    }

    fn scalar<'n>(&mut self, node: &'n Node, what: &str) -> Option<&'n str> {
        match node.as_str() {
            Some(s) => Some(s),
            None => {
                self.err(Diagnostic::error(node.span, format!("{what} must be a single value, found {}", node.describe())));
                None
            }
        }
    }

    fn ident(&mut self, node: &Node, what: &str) -> Option<Ident> {
        let s = self.scalar(node, what)?;
        if is_identifier(s) {
            Some(Ident { name: s.to_string(), span: node.span })
        } else {
            self.err(Diagnostic::error(node.span, format!("{what} `{s}` is not a valid name"))
                .hint("names start with an ASCII letter or `_` and hold ASCII letters, digits and `_` (they become C++ identifiers)"));
            None
        }
    }

    fn expr(&mut self, node: &Node, what: &str) -> Option<Expr> {
        let NodeKind::Scalar { value, text_at, .. } = &node.kind else {
            self.err(Diagnostic::error(node.span, format!("{what} must be an expression, found {}", node.describe())));
            return None;
        };
        if value.trim().is_empty() {
            self.err(Diagnostic::error(node.span, format!("{what} is empty")));
            return None;
        }
        match ExprParser::new(value, text_at.as_ref(), node.span).and_then(ExprParser::whole_expr) {
            Ok(e) => Some(e),
            Err(d) => {
                self.err(d);
                None
            }
        }
    }

    fn spec(&mut self, root: &Node) -> Option<Spec> {
        if !matches!(root.kind, NodeKind::Map(_)) {
            self.err(Diagnostic::error(root.span, "a spec must be a YAML mapping")
                .hint("start with `kernel: <name>`, then tensors, constants, grid, threads, buffers and body"));
            return None;
        }
        let entries = self.entries(root, "the spec", &TOP_KEYS);
        let get = |k: &str| entries.iter().find(|(n, _, _)| *n == k).map(|(_, _, v)| *v);
        let mut missing = Vec::new();
        for key in ["kernel", "tensors", "grid", "threads", "body"] {
            if get(key).is_none() && !self.was_suggested("the spec", key) {
                missing.push(key);
            }
        }
        if !missing.is_empty() {
            let at = Span::new(root.span.start, root.span.start + 1);
            self.err(Diagnostic::error(at, format!("the spec is missing {}", missing.iter().map(|k| format!("`{k}`")).collect::<Vec<_>>().join(", ")))
                .hint("every spec needs kernel, tensors, grid, threads and body"));
        }
        let kernel = get("kernel").and_then(|n| self.ident(n, "the kernel name"));
        let doc = get("doc").and_then(|n| {
            let text = self.scalar(n, "doc")?;
            // The doc goes into comments of the generated files: a line break would end one,
            // and a backslash at the end of a wrapped line would splice the next line into it.
            if text.chars().any(|c| c.is_control() || c == '\\') {
                self.err(Diagnostic::error(n.span, "doc must be one line of text, without line breaks, control characters or backslashes")
                    .hint("generated files wrap it into comment lines themselves"));
                return None;
            }
            Some(text.to_string())
        });
        let tensors = get("tensors").map(|n| self.tensors(n)).unwrap_or_default();
        let constants = get("constants").map(|n| self.constants(n)).unwrap_or_default();
        let grid = get("grid").map(|n| self.grid(n)).unwrap_or_default();
        let threads = get("threads").and_then(|n| self.threads(n));
        let buffers = get("buffers").map(|n| self.buffers(n)).unwrap_or_default();
        let targets = get("targets").map(|n| self.targets(n)).unwrap_or_default();
        let before = self.errors.len();
        let body = get("body").map(|n| self.block(n, "body")).unwrap_or_default();
        self.body_errors = self.errors.len() - before;
        Some(Spec {
            kernel: kernel?,
            doc,
            tensors,
            constants,
            grid,
            threads: threads?,
            buffers,
            body,
            stmt_count: self.next_id,
            targets,
            cluster: None,
            schedule: None,
            swizzle: None,
        })
    }

    fn tensors(&mut self, node: &Node) -> Vec<Tensor> {
        let mut out = Vec::new();
        for (_, k, v) in self.entries(node, "tensors", &[]) {
            let Some(name) = self.ident(k, "tensor name") else { continue };
            let what = format!("tensor `{}`", name.name);
            let fields = self.entries(v, &what, &TENSOR_KEYS);
            let get = |key: &str| fields.iter().find(|(n, _, _)| *n == key).map(|(_, _, v)| *v);
            let dtype = match get("dtype") {
                Some(d) => self.dtype(d),
                None if self.was_suggested(&what, "dtype") => None,
                None => {
                    self.err(Diagnostic::error(name.span, format!("tensor `{}` has no dtype", name.name)).hint(format!("add `dtype: bf16` (dtypes are {})", DType::ALL.map(|d| d.name()).join(", "))));
                    None
                }
            };
            let shape = match get("shape") {
                Some(s) => self.dims(s),
                None if self.was_suggested(&what, "shape") => None,
                None => {
                    self.err(Diagnostic::error(name.span, format!("tensor `{}` has no shape", name.name)).hint("add `shape: [M, K]`"));
                    None
                }
            };
            let order = match get("order") {
                None => Some((Order::RowMajor, name.span)),
                Some(o) => match self.scalar(o, "order") {
                    Some("row_major") => Some((Order::RowMajor, o.span)),
                    Some("col_major") => Some((Order::ColMajor, o.span)),
                    Some(other) => {
                        let hint = did_you_mean(other, ["row_major", "col_major"]).unwrap_or_else(|| "use `row_major` or `col_major`".into());
                        self.err(Diagnostic::error(o.span, format!("unknown order `{other}`")).hint(hint));
                        None
                    }
                    None => None,
                },
            };
            let output = match get("output") {
                None => Some(false),
                Some(o) => match self.scalar(o, "output") {
                    Some("true") => Some(true),
                    Some("false") => Some(false),
                    Some(other) => {
                        let mut d = Diagnostic::error(o.span, format!("`output` must be true or false, found `{other}`"));
                        if let Some(spec @ ("true" | "false")) = crate::check::spec_literal(other) {
                            d = d.hint(format!("write it in lower case: `output: {spec}`"));
                        }
                        self.err(d);
                        None
                    }
                    None => None,
                },
            };
            if let (Some(dtype), Some(shape), Some(order), Some(output)) = (dtype, shape, order, output) {
                out.push(Tensor { span: k.span.to(v.span), name, dtype, shape, order, output });
            }
        }
        out
    }

    fn dtype(&mut self, node: &Node) -> Option<(DType, Span)> {
        let s = self.scalar(node, "dtype")?;
        match DType::from_name(s) {
            Some(d) => Some((d, node.span)),
            None => {
                let hint = did_you_mean(s, DType::ALL.iter().map(|d| d.name()))
                    .unwrap_or_else(|| format!("dtypes are {}", DType::ALL.map(|d| d.name()).join(", ")));
                self.err(Diagnostic::error(node.span, format!("unknown dtype `{s}`")).hint(hint));
                None
            }
        }
    }

    fn list<'n>(&mut self, node: &'n Node, what: &str) -> Option<&'n [Node]> {
        match &node.kind {
            NodeKind::Seq(items) if !items.is_empty() => Some(items),
            NodeKind::Seq(_) => {
                self.err(Diagnostic::error(node.span, format!("{what} is empty")));
                None
            }
            _ => {
                self.err(Diagnostic::error(node.span, format!("{what} must be a list like [M, K], found {}", node.describe())));
                None
            }
        }
    }

    fn dims(&mut self, node: &Node) -> Option<Vec<Dim>> {
        let items = self.list(node, "a shape")?;
        let mut dims = Vec::new();
        let mut ok = true;
        for item in items {
            match item.as_str() {
                Some(s) if s.parse::<i64>().is_ok() => dims.push(Dim::Fixed(s.parse().unwrap_or(0), item.span)),
                Some(s) if is_identifier(s) => dims.push(Dim::Named(Ident { name: s.into(), span: item.span })),
                Some(s) if s.split_once('/').is_some_and(|(n, d)| is_identifier(n.trim()) && d.trim().parse::<i64>().is_ok()) => {
                    let (n, d) = s.split_once('/').unwrap_or_default();
                    dims.push(Dim::Div(Ident { name: n.trim().into(), span: item.span }, d.trim().parse().unwrap_or(0), item.span));
                }
                _ => {
                    self.err(Diagnostic::error(item.span, "a tensor dimension must be a name (a constant or a runtime size), an integer, or a name divided by an integer (`K/8`)")
                        .hint("write `shape: [M, K]`; expressions are allowed only in buffer shapes"));
                    ok = false;
                }
            }
        }
        ok.then_some(dims)
    }

    fn constants(&mut self, node: &Node) -> Vec<Constant> {
        let mut out = Vec::new();
        for (_, k, v) in self.entries(node, "constants", &[]) {
            let Some(name) = self.ident(k, "constant name") else { continue };
            let Some(value) = self.expr(v, "a constant") else { continue };
            // Expressions (`2 * block_K`, `1.4426950408889634 / sqrt(D)`) are folded into
            // literals once the target's overrides are in (`check::consts::fold`).
            if let ExprKind::Int(v) = value.kind && i32::try_from(v).is_err() {
                self.err(Diagnostic::error(value.span, format!("constant `{}` is {v}, beyond the 32-bit `int` the generated code declares it as", name.name)));
                continue;
            }
            out.push(Constant { name, value });
        }
        out
    }

    fn threads(&mut self, node: &Node) -> Option<(i64, Span)> {
        let e = self.expr(node, "threads")?;
        match e.kind {
            ExprKind::Int(v) => Some((v, e.span)),
            _ => {
                self.err(Diagnostic::error(e.span, "threads must be an integer literal").hint("for example `threads: 128`"));
                None
            }
        }
    }

    fn targets(&mut self, node: &Node) -> Vec<TargetOverride> {
        let mut out = Vec::new();
        for (_, k, v) in self.entries(node, "targets", &[]) {
            let Some(target) = self.ident(k, "target name") else { continue };
            let fields = self.entries(v, &format!("target `{}`", target.name), &TARGET_KEYS);
            let mut constants = Vec::new();
            let mut cluster = None;
            let mut threads = None;
            let mut schedule = None;
            let mut swizzle = None;
            for (key, _, value) in fields {
                match key {
                    "constants" => constants = self.constants(value),
                    "threads" => threads = self.threads(value),
                    "schedule" => schedule = self.schedule(value),
                    "swizzle" => swizzle = self.swizzle(value),
                    _ => {
                        let items = self.list(value, "a cluster shape");
                        let dims: Vec<i64> = items.unwrap_or_default().iter().filter_map(|i| i.as_str()?.parse().ok()).collect();
                        if dims.len() != 2 || dims.iter().any(|d| *d < 1) {
                            self.err(Diagnostic::error(value.span, "a cluster shape is two positive integers, like [2, 1]"));
                        } else {
                            cluster = Some((dims, value.span));
                        }
                    }
                }
            }
            out.push(TargetOverride { target, constants, threads, cluster, schedule, swizzle });
        }
        out
    }

    fn swizzle(&mut self, node: &Node) -> Option<(i64, Span)> {
        let e = self.expr(node, "swizzle")?;
        match e.kind {
            ExprKind::Int(v) if [1, 2, 4, 8].contains(&v) => Some((v, e.span)),
            _ => {
                self.err(Diagnostic::error(e.span, "swizzle is 1, 2, 4 or 8: the CTAs per band of the persistent tile scheduler")
                    .hint("for example `swizzle: 4`; 1 walks the tiles in the scheduler's raster order"));
                None
            }
        }
    }

    fn schedule(&mut self, node: &Node) -> Option<(KernelSchedule, Span)> {
        let name = self.ident(node, "a kernel schedule")?;
        let names = KernelSchedule::ALL.map(|(n, _)| n);
        match KernelSchedule::ALL.iter().find(|(n, _)| *n == name.name) {
            Some((_, s)) => Some((*s, name.span)),
            None => {
                let hint = did_you_mean(&name.name, names.iter().copied()).unwrap_or_else(|| format!("schedules are {}", names.join(", ")));
                self.err(Diagnostic::error(name.span, format!("unknown kernel schedule `{}`", name.name)).hint(hint));
                None
            }
        }
    }

    fn grid(&mut self, node: &Node) -> Vec<GridDim> {
        let mut out = Vec::new();
        for (_, k, v) in self.entries(node, "grid", &[]) {
            let Some(var) = self.ident(k, "block index name") else { continue };
            // `bx: extent` or `bx: {extent: ..., order: ascending | descending}`.
            let (extent_node, mut descending) = (v, false);
            let extent_node = if let NodeKind::Map(_) = &v.kind {
                let fields = self.entries(v, &format!("grid dimension `{}`", var.name), &["extent", "order"]);
                for (key, _, value) in &fields {
                    if *key == "order" {
                        match self.scalar(value, "order") {
                            Some("ascending") => {}
                            Some("descending") => descending = true,
                            Some(other) => self.err(Diagnostic::error(value.span, format!("unknown block order `{other}`"))
                                .hint("use `ascending` (the default) or `descending` (block 0 gets the last index)")),
                            None => {}
                        }
                    }
                }
                match fields.iter().find(|(key, _, _)| *key == "extent") {
                    Some((_, _, value)) => *value,
                    None => {
                        self.err(Diagnostic::error(var.span, format!("grid dimension `{}` has no `extent`", var.name))
                            .hint(format!("write `{}: {{extent: ceildiv(N, block_N), order: descending}}`", var.name)));
                        continue;
                    }
                }
            } else {
                extent_node
            };
            let Some(extent) = self.expr(extent_node, "a grid extent") else { continue };
            out.push(GridDim { var, extent, descending });
        }
        out
    }

    fn buffers(&mut self, node: &Node) -> Vec<Buffer> {
        let mut out = Vec::new();
        for (_, k, v) in self.entries(node, "buffers", &[]) {
            let Some(name) = self.ident(k, "buffer name") else { continue };
            let what = format!("buffer `{}`", name.name);
            let fields = self.entries(v, &what, &BUFFER_KEYS);
            let get = |key: &str| fields.iter().find(|(n, _, _)| *n == key).map(|(_, _, v)| *v);
            for key in BUFFER_KEYS {
                if get(key).is_none() && !self.was_suggested(&what, key) {
                    self.err(Diagnostic::error(name.span, format!("buffer `{}` has no `{key}`", name.name))
                        .hint("buffers need scope (shared or fragment), dtype and shape"));
                }
            }
            let scope = get("scope").and_then(|s| match self.scalar(s, "scope") {
                Some("shared") => Some((Scope::Shared, s.span)),
                Some("fragment") => Some((Scope::Fragment, s.span)),
                Some(other) => {
                    let hint = did_you_mean(other, ["shared", "fragment"]).unwrap_or_else(|| "use `shared` or `fragment`".into());
                    self.err(Diagnostic::error(s.span, format!("unknown scope `{other}`")).hint(hint));
                    None
                }
                None => None,
            });
            let dtype = get("dtype").and_then(|d| self.dtype(d));
            let shape_node = get("shape");
            let shape = shape_node.and_then(|s| self.list(s, "a shape")).map(|items| {
                items.iter().filter_map(|i| self.expr(i, "a buffer extent")).collect::<Vec<_>>()
            });
            if let (Some(scope), Some(dtype), Some(shape), Some(sn)) = (scope, dtype, shape, shape_node) {
                out.push(Buffer { span: k.span.to(v.span), shape_span: sn.span, name, scope, dtype, shape });
            }
        }
        out
    }

    fn block(&mut self, node: &Node, what: &str) -> Vec<Stmt> {
        let NodeKind::Seq(items) = &node.kind else {
            self.err(Diagnostic::error(node.span, format!("{what} must be a list of statements, found {}", node.describe()))
                .hint("write each statement on its own line starting with `- `"));
            return Vec::new();
        };
        let mut out: Vec<Stmt> = Vec::new();
        for item in items {
            match &item.kind {
                NodeKind::Scalar { .. } => {
                    if let Some(s) = self.statement(item) {
                        out.push(s);
                    }
                }
                NodeKind::Map(pairs) if pairs.len() == 1 => {
                    let (k, v) = &pairs[0];
                    if k.as_str() == Some("else") {
                        let body = self.block(v, "an else block");
                        match out.last_mut() {
                            Some(Stmt { kind: StmtKind::If { else_body, .. }, .. }) if else_body.is_empty() => *else_body = body,
                            _ => self.err(Diagnostic::error(k.span, "`else` without an `if` before it")
                                .hint("`else:` must directly follow an `if cond:` block")),
                        }
                        continue;
                    }
                    if let Some(s) = self.block_stmt(k, v) {
                        out.push(s);
                    }
                }
                NodeKind::Map(pairs) => {
                    let span = pairs.get(1).map_or(item.span, |p| p.0.span);
                    self.err(Diagnostic::error(span, "a block statement has exactly one header")
                        .hint("start each block on its own `- ` line"));
                }
                NodeKind::Seq(_) => self.err(Diagnostic::error(item.span, "a statement cannot be a list")
                    .hint("nest statements under a block header such as `- serial(k, n):`")),
            }
        }
        out
    }

    fn parse_line(&mut self, node: &Node) -> Option<Line> {
        let NodeKind::Scalar { value, text_at, .. } = &node.kind else { return None };
        match ExprParser::new(value, text_at.as_ref(), node.span).and_then(ExprParser::line) {
            Ok(l) => Some(l),
            Err(d) => {
                self.err(d);
                None
            }
        }
    }

    fn new_id(&mut self) -> StmtId {
        self.next_id += 1;
        self.next_id - 1
    }

    fn statement(&mut self, node: &Node) -> Option<Stmt> {
        // A block header without its `:` is a plain value (with the body folded into it when
        // the body is indented below): say what is missing rather than failing to parse it.
        // An assignment to a buffer that happens to be named like a block (`serial[i] = 0.0`)
        // is not one.
        if let NodeKind::Scalar { value, text_at, .. } = &node.kind
            && let Some(keyword) = block_keyword(value)
            && !matches!(ExprParser::new(value, text_at.as_ref(), node.span).and_then(ExprParser::line), Ok(Line::Assign(..)))
        {
            self.err(Diagnostic::error(node.span, format!("`{keyword}` opens a block: it needs a `:` at the end of its line"))
                .hint("end the header with `:` and indent the block's statements below it"));
            return None;
        }
        let id = self.new_id();
        let line = self.parse_line(node)?;
        let span = node.span;
        let kind = match line {
            Line::Assign(target, op, value) => match target.kind {
                ExprKind::Index(name, indices) => StmtKind::Assign { target: name, indices, op, value },
                ExprKind::Name(n) => StmtKind::Assign { target: Ident { name: n, span: target.span }, indices: Vec::new(), op, value },
                _ => {
                    self.err(Diagnostic::error(target.span, "the left side of an assignment must be a buffer element like `acc[i, j]`"));
                    return None;
                }
            },
            Line::Expr(Expr { kind: ExprKind::Call(func, args), span: call_span }) => self.call_stmt(func, args, call_span)?,
            Line::Expr(e) => {
                self.err(Diagnostic::error(e.span, "expected a statement such as `copy(src, dst)` or `x[i] = e`")
                    .hint(format!("statements are {}; blocks are {}", STATEMENTS.join(", "), BLOCKS.join(", "))));
                return None;
            }
        };
        Some(Stmt { id, kind, span })
    }

    fn positional(&mut self, func: &Ident, args: Vec<Arg>, n: usize, keys: &[&str], span: Span) -> Option<CallArgs> {
        let mut pos = Vec::new();
        let mut kw: Vec<(Ident, Expr)> = Vec::new();
        for a in args {
            match a.key {
                Some(k) => {
                    if !keys.contains(&k.name.as_str()) {
                        let hint = did_you_mean(&k.name, keys.iter().copied()).unwrap_or_else(|| {
                            if keys.is_empty() { format!("`{}` takes no keyword arguments", func.name) } else { format!("`{}` takes {}", func.name, keys.join(", ")) }
                        });
                        self.err(Diagnostic::error(k.span, format!("unknown argument `{}` to `{}`", k.name, func.name)).hint(hint));
                        return None;
                    }
                    if kw.iter().any(|(p, _)| p.name == k.name) {
                        self.err(Diagnostic::error(k.span, format!("argument `{}` given twice", k.name)));
                        return None;
                    }
                    kw.push((k, a.value));
                }
                None if !kw.is_empty() => {
                    self.err(Diagnostic::error(a.value.span, "positional argument after a keyword argument"));
                    return None;
                }
                None => pos.push(a.value),
            }
        }
        if pos.len() != n {
            self.err(Diagnostic::error(span, format!("`{}` takes {n} argument{}, found {}", func.name, if n == 1 { "" } else { "s" }, pos.len())));
            return None;
        }
        Some((pos, kw))
    }

    fn operand(&mut self, e: Expr) -> Option<Operand> {
        match e.kind {
            ExprKind::Name(n) => Some(Operand { name: Ident { name: n, span: e.span }, origin: None, tile_dims: None, span: e.span }),
            ExprKind::Index(name, idx) => {
                let mut dims = Vec::new();
                let origin = idx.into_iter().enumerate().map(|(d, x)| match x.kind {
                    ExprKind::Slice(start) => {
                        dims.push(d);
                        *start
                    }
                    _ => x,
                }).collect();
                Some(Operand { name, origin: Some(origin), tile_dims: (!dims.is_empty()).then_some(dims), span: e.span })
            }
            _ => {
                self.err(Diagnostic::error(e.span, "a copy operand is a buffer name (`A_s`) or a tensor tile origin (`A[by*block_M, k*block_K]`)"));
                None
            }
        }
    }

    fn buffer_name(&mut self, e: Expr, role: &str) -> Option<Ident> {
        match e.kind {
            ExprKind::Name(n) => Some(Ident { name: n, span: e.span }),
            _ => {
                self.err(Diagnostic::error(e.span, format!("{role} must be a buffer name")));
                None
            }
        }
    }

    fn flag(&mut self, kw: &[(Ident, Expr)], key: &str) -> Option<bool> {
        match kw.iter().find(|(k, _)| k.name == key) {
            None => Some(false),
            Some((_, Expr { kind: ExprKind::Bool(b), .. })) => Some(*b),
            Some((_, e)) => {
                let mut d = Diagnostic::error(e.span, format!("`{key}` must be true or false"));
                if let ExprKind::Name(n) = &e.kind && let Some(spec @ ("true" | "false")) = crate::check::spec_literal(n) {
                    d = d.hint(format!("write it in lower case: `{key}={spec}`"));
                }
                self.err(d);
                None
            }
        }
    }

    fn call_stmt(&mut self, func: Ident, args: Vec<Arg>, span: Span) -> Option<StmtKind> {
        match func.name.as_str() {
            "copy" => {
                let (mut p, _) = self.positional(&func, args, 2, &[], span)?;
                let dst = p.pop()?;
                let src = p.pop()?;
                let src = self.operand(src);
                let dst = self.operand(dst);
                Some(StmtKind::Copy { src: src?, dst: dst? })
            }
            "gemm" => {
                let (mut p, kw) = self.positional(&func, args, 3, &["transpose_a", "transpose_b"], span)?;
                let c = p.pop()?;
                let b = p.pop()?;
                let a = p.pop()?;
                let (a, b, c) = (self.buffer_name(a, "gemm's A"), self.buffer_name(b, "gemm's B"), self.buffer_name(c, "gemm's accumulator"));
                let ta = self.flag(&kw, "transpose_a")?;
                let tb = self.flag(&kw, "transpose_b")?;
                Some(StmtKind::Gemm { a: a?, b: b?, c: c?, transpose_a: ta, transpose_b: tb })
            }
            "reduce_max" | "reduce_sum" => {
                let op = if func.name == "reduce_max" { ReduceOp::Max } else { ReduceOp::Sum };
                let (mut p, kw) = self.positional(&func, args, 2, &["dim", "clear"], span)?;
                let dst = p.pop()?;
                let src = p.pop()?;
                let (src, dst) = (self.buffer_name(src, "a reduction's source"), self.buffer_name(dst, "a reduction's destination"));
                let dim = match kw.iter().find(|(k, _)| k.name == "dim") {
                    None => (1, func.span),
                    Some((_, Expr { kind: ExprKind::Int(v), span })) => (*v, *span),
                    Some((_, e)) => {
                        self.err(Diagnostic::error(e.span, "`dim` must be an integer literal").hint("write `dim=1` to reduce along the columns"));
                        return None;
                    }
                };
                let clear = match kw.iter().find(|(k, _)| k.name == "clear") {
                    None => true,
                    Some(_) => self.flag(&kw, "clear")?,
                };
                Some(StmtKind::Reduce { op, src: src?, dst: dst?, dim, clear })
            }
            "dequant_int4" => {
                let (mut p, kw) = self.positional(&func, args, 2, &["scales", "zero", "zeros", "order"], span)?;
                let dst = p.pop()?;
                let src = p.pop()?;
                let (src, dst) = (self.buffer_name(src, "dequant_int4's packed source"), self.buffer_name(dst, "dequant_int4's destination"));
                let scales = match kw.iter().find(|(k, _)| k.name == "scales") {
                    Some((_, e)) => self.buffer_name(e.clone(), "`scales`"),
                    None => {
                        self.err(Diagnostic::error(func.span, "`dequant_int4` needs `scales=<buffer>`: one scale per group of each row")
                            .hint("write `dequant_int4(Wq_s, W_s, scales=S_s)`"));
                        None
                    }
                };
                let zero = match (kw.iter().find(|(k, _)| k.name == "zero"), kw.iter().find(|(k, _)| k.name == "zeros")) {
                    (Some(_), Some((k, _))) => {
                        self.err(Diagnostic::error(k.span, "`zero` and `zeros` both give the zero point; write one")
                            .hint("`zero=8` for one constant, `zeros=Z_s` for one per group"));
                        return None;
                    }
                    (None, Some((_, e))) => ZeroPoint::PerGroup(self.buffer_name(e.clone(), "`zeros`")?),
                    (None, None) => ZeroPoint::Constant(8, func.span),
                    (Some((_, Expr { kind: ExprKind::Int(v), span })), None) => ZeroPoint::Constant(*v, *span),
                    (Some((_, e)), None) => {
                        self.err(Diagnostic::error(e.span, "`zero` must be an integer literal")
                            .hint("8 stores -8..7 offset by 8; 0 stores 0..15; `zeros=<buffer>` gives one per group"));
                        return None;
                    }
                };
                let order = match kw.iter().find(|(k, _)| k.name == "order").map(|(_, e)| e) {
                    None => NibbleOrder::Sequential,
                    Some(e) => {
                        let name = match &e.kind {
                            ExprKind::Name(n) => Some(n.as_str()),
                            _ => None,
                        };
                        match name.and_then(NibbleOrder::from_name) {
                            Some(order) => order,
                            None => {
                                let hint = name.and_then(|n| did_you_mean(n, NibbleOrder::NAMES.iter().copied())).unwrap_or_else(|| {
                                    format!("`sequential`: {}; `interleaved`: {}", NibbleOrder::Sequential.layout(), NibbleOrder::Interleaved.layout())
                                });
                                self.err(Diagnostic::error(e.span, "`order` must be `sequential` or `interleaved`").hint(hint));
                                return None;
                            }
                        }
                    }
                };
                Some(StmtKind::Dequant { src: src?, dst: dst?, scales: scales?, zero, order })
            }
            "clear" => {
                let (mut p, _) = self.positional(&func, args, 1, &[], span)?;
                let buf = self.buffer_name(p.pop()?, "clear's operand")?;
                Some(StmtKind::Clear { buf })
            }
            "fill" => {
                let (mut p, _) = self.positional(&func, args, 2, &[], span)?;
                let value = p.pop()?;
                let buf = self.buffer_name(p.pop()?, "fill's operand")?;
                Some(StmtKind::Fill { buf, value })
            }
            other => {
                let hint = if BLOCKS.contains(&other) {
                    format!("`{other}` opens a block: write `- {other}(...):` with the body indented below it")
                } else {
                    did_you_mean(other, STATEMENTS.iter().copied())
                        .unwrap_or_else(|| format!("statements are {}", STATEMENTS.join(", ")))
                };
                self.err(Diagnostic::error(func.span, format!("unknown statement `{other}`")).hint(hint));
                None
            }
        }
    }

    fn block_stmt(&mut self, header: &Node, body: &Node) -> Option<Stmt> {
        let id = self.new_id();
        let NodeKind::Scalar { value, text_at, .. } = &header.kind else {
            self.err(Diagnostic::error(header.span, "a block header must be text like `serial(k, n)`"));
            return None;
        };
        if let Some(rest) = value.strip_prefix("if ").or_else(|| value.strip_prefix("if(").map(|_| &value[2..])) {
            let skip = value.len() - rest.len();
            let cond = ExprParser::new(rest, text_at.as_ref().map(|m| m.skip(skip)).as_ref(), header.span).and_then(ExprParser::whole_expr);
            let then_body = self.block(body, "an if block");
            return match cond {
                Ok(cond) => Some(Stmt { id, kind: StmtKind::If { cond, then_body, else_body: Vec::new() }, span: header.span }),
                Err(d) => {
                    self.err(d);
                    None
                }
            };
        }
        let line = self.parse_line(header);
        let errors_before = self.errors.len();
        let inner = self.block(body, "a block");
        // A body whose every statement failed to parse is not "empty": its errors say why.
        let body_failed = inner.is_empty() && self.errors.len() > errors_before;
        let line = line?;
        let Line::Expr(Expr { kind: ExprKind::Call(func, args), span }) = line else {
            self.err(Diagnostic::error(header.span, "expected a block header such as `pipelined(k, n, stages)`, `serial(k, n)`, `parallel(i, j)` or `if cond`"));
            return None;
        };
        let kind = match func.name.as_str() {
            "pipelined" | "serial" | "unroll" => {
                let loop_kind = match func.name.as_str() {
                    "pipelined" => LoopKind::Pipelined,
                    "serial" => LoopKind::Serial,
                    _ => LoopKind::Unroll,
                };
                let n = if loop_kind == LoopKind::Pipelined { 3 } else { 2 };
                let (mut p, _) = self.positional(&func, args, n, &[], span)?;
                let stages = if loop_kind == LoopKind::Pipelined { p.pop() } else { None };
                let count = p.pop()?;
                let var = self.buffer_name(p.pop()?, "the loop variable")?;
                StmtKind::Loop { kind: loop_kind, var, count, stages, body: inner }
            }
            "parallel" => {
                let mut vars = Vec::new();
                for a in args {
                    if let Some(k) = a.key {
                        self.err(Diagnostic::error(k.span, "`parallel` takes only index names"));
                        return None;
                    }
                    vars.push(self.buffer_name(a.value, "a parallel index")?);
                }
                if vars.is_empty() {
                    self.err(Diagnostic::error(span, "`parallel` needs one index name per dimension, like `parallel(i, j)`"));
                    return None;
                }
                if body_failed {
                    return None;
                }
                StmtKind::Parallel { vars, body: inner }
            }
            other => {
                let hint = if STATEMENTS.contains(&other) {
                    format!("`{other}` is a statement, not a block: write it as a list item without `:`")
                } else {
                    did_you_mean(other, BLOCKS.iter().copied()).unwrap_or_else(|| format!("blocks are {}", BLOCKS.join(", ")))
                };
                self.err(Diagnostic::error(func.span, format!("unknown block `{other}`")).hint(hint));
                return None;
            }
        };
        Some(Stmt { id, kind, span: header.span })
    }
}

/// Whether `s` is a C-style identifier.
pub fn is_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_') && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Applies the `targets:` settings for `target`: replaces the constants and the thread
/// count it overrides and sets the cluster shape, kernel schedule and scheduler swizzle.
/// Reports unknown targets and constants.
pub fn apply_target(spec: &mut Spec, target: crate::target::Target) -> Vec<Diagnostic> {
    let mut errors = Vec::new();
    let names: Vec<&str> = crate::target::Target::ALL.iter().map(|t| t.name()).collect();
    let overrides = spec.targets.clone();
    for o in &overrides {
        if crate::target::Target::from_name(&o.target.name).is_none() {
            let hint = crate::target::Target::suggest(&o.target.name).map(|t| format!("did you mean `{t}`?")).unwrap_or_else(|| format!("targets are {}", names.join(", ")));
            errors.push(Diagnostic::error(o.target.span, format!("unknown target `{}`", o.target.name)).hint(hint));
            continue;
        }
        for c in &o.constants {
            let Some(base) = spec.constants.iter().find(|k| k.name.name == c.name.name) else {
                let hint = did_you_mean(&c.name.name, spec.constants.iter().map(|k| k.name.name.as_str()))
                    .unwrap_or_else(|| "declare the constant under `constants` first".into());
                errors.push(Diagnostic::error(c.name.span, format!("`{}` overrides a constant the spec does not declare", c.name.name)).hint(hint));
                continue;
            };
            // Written numbers must keep the constant's kind: every use was checked for it.
            let kind = |e: &Expr| match e.kind {
                ExprKind::Int(_) => Some("an integer"),
                ExprKind::Float(..) => Some("a float"),
                ExprKind::Bool(_) => Some("a boolean"),
                _ => None,
            };
            if let (Some(want), Some(have)) = (kind(&base.value), kind(&c.value)) && want != have {
                errors.push(Diagnostic::error(c.value.span, format!("`{}` is {want}, but this override for {} makes it {have}", c.name.name, o.target.name))
                    .label(base.value.span, "declared here"));
            }
        }
        if o.target.name != target.name() {
            continue;
        }
        for c in &o.constants {
            if let Some(k) = spec.constants.iter_mut().find(|k| k.name.name == c.name.name) {
                k.value = c.value.clone();
            }
        }
        if let Some(t) = o.threads {
            spec.threads = t;
        }
        if let Some((dims, span)) = &o.cluster {
            if target != crate::target::Target::Sm90a {
                errors.push(Diagnostic::error(*span, format!("the {target} target has no thread-block clusters")).hint("clusters are an sm90a setting"));
            } else {
                spec.cluster = Some((dims.clone(), *span));
            }
        }
        if let Some((swizzle, span)) = o.swizzle {
            if target != crate::target::Target::Sm90a {
                errors.push(Diagnostic::error(span, format!("the {target} target has no tile-scheduler swizzle")).hint("`swizzle` sets the sm90a CUTLASS collective's persistent tile scheduler"));
            } else {
                spec.swizzle = Some((swizzle, span));
            }
        }
        if let Some((schedule, span)) = o.schedule {
            if target != crate::target::Target::Sm90a {
                errors.push(Diagnostic::error(span, format!("the {target} target has no kernel schedules")).hint("`schedule` picks the sm90a CUTLASS collective's kernel schedule"));
            } else {
                spec.schedule = Some((schedule, span));
            }
        }
    }
    errors
}
