//! Reads of buffers before anything writes them. Registers and shared memory start undefined,
//! so a fragment read before any statement writes it (a `gemm` into an accumulator nobody
//! cleared, a running maximum first assigned after its loop) computes on garbage, silently.
//!
//! The analysis follows the body in order and keeps the buffers some statement so far may have
//! written (a write under an `if`, or in a loop that might not run, counts: it only reports reads
//! that no path can have prepared). Inside a loop, a write later in the body reaches a read from
//! the second iteration on; the first iteration still reads undefined values, so that read is
//! reported too, unless it sits under an `if` inside the loop, which may be what keeps it out of
//! the first iteration (`if t > 0:`).
//!
//! The same walk finds what does nothing, as warnings: buffers no statement uses, buffers whose
//! values no other statement reads (a gemm accumulating into a fragment that is never stored),
//! constants nothing names, inputs never read and outputs never written. A second walk warns of
//! a statement whose whole-buffer write (`clear`, `fill`, a copy or dequant into the buffer, a
//! reduction that starts afresh) a later statement of the same block overwrites whole before
//! anything reads it.

use super::Checker;
use crate::ast::*;
use crate::diag::{Diagnostic, Span};
use std::collections::{BTreeMap, BTreeSet};

/// The walk's state.
struct Init<'a> {
    /// The spec's buffers, by name.
    buffers: BTreeSet<&'a str>,
    /// Buffers some statement before the current one may have written.
    written: BTreeSet<&'a str>,
    /// Buffers the enclosing loops' bodies write (they reach a read from the loop's second
    /// iteration on): the `if`s around the outermost such loop, and the statements that write.
    carried: BTreeMap<&'a str, (usize, Vec<Span>)>,
    /// Loops and `if`s enclosing the statement.
    loops: usize,
    ifs: usize,
    /// The statement being walked.
    at: Span,
    /// One report per buffer.
    reported: BTreeSet<&'a str>,
    errors: Vec<Diagnostic>,
    /// What the statement being walked writes: its reads of that name update it in place
    /// (a gemm's accumulator, `x += ...`) and do not count as uses of its values.
    writing: Option<&'a str>,
    /// Buffers and tensors some statement reads, other than to update them in place.
    read: BTreeSet<&'a str>,
    /// Buffers some statement updates in place (reads only to write back).
    updated: BTreeSet<&'a str>,
    /// The first statement that writes each buffer or tensor.
    first_write: BTreeMap<&'a str, Span>,
}

impl Checker<'_> {
    /// Reports reads of buffers that no earlier statement writes, and warns of what does
    /// nothing (see the module's doc).
    pub(super) fn flow(&mut self) {
        let spec = self.spec;
        let mut init = Init {
            buffers: spec.buffers.iter().map(|b| b.name.name.as_str()).collect(),
            written: BTreeSet::new(),
            carried: BTreeMap::new(),
            loops: 0,
            ifs: 0,
            at: spec.kernel.span,
            reported: BTreeSet::new(),
            errors: Vec::new(),
            writing: None,
            read: BTreeSet::new(),
            updated: BTreeSet::new(),
            first_write: BTreeMap::new(),
        };
        init.block(&spec.body);
        self.errors.extend(std::mem::take(&mut init.errors));
        self.unused(&init);
        // A buffer nothing reads has its warning already.
        let live: BTreeSet<&str> = spec.buffers.iter().map(|b| b.name.name.as_str()).filter(|b| init.read.contains(b)).collect();
        overwritten(&spec.body, &live, &mut self.info.warnings);
    }

    /// Warns of buffers, constants and tensors that do nothing, from what the walk saw.
    fn unused(&mut self, init: &Init) {
        let spec = self.spec;
        for b in &spec.buffers {
            let name = b.name.name.as_str();
            match init.first_write.get(name) {
                None if !init.read.contains(name) => {
                    let allocated = if b.scope.0 == Scope::Shared { ": every block still allocates its shared memory" } else { "" };
                    self.info.warnings.push(Diagnostic::warning(b.name.span, format!("buffer `{name}` is never used{allocated}"))
                        .hint("remove its declaration, or use it in the body"));
                }
                Some(&at) if !init.read.contains(name) => {
                    let updated = if init.updated.contains(name) { " other than to update it" } else { "" };
                    self.info.warnings.push(Diagnostic::warning(at, format!("`{name}` is written here, but no statement reads its values{updated}"))
                        .hint(format!("copy `{name}` to an output or use it in a later statement; otherwise the statements writing it do nothing")));
                }
                _ => {}
            }
        }
        for k in &spec.constants {
            let name = k.name.name.as_str();
            let named = |d: &Dim| matches!(d, Dim::Named(i) | Dim::Div(i, ..) if i.name == name);
            let used = spec.tensors.iter().any(|t| t.shape.iter().any(named))
                || spec.buffers.iter().any(|b| b.shape.iter().any(|e| e.mentions(name)))
                || spec.grid.iter().any(|g| g.extent.mentions(name))
                || spec.constants.iter().chain(spec.targets.iter().flat_map(|o| &o.constants)).any(|c| c.name.name != name && c.value.mentions(name))
                || spec.body_mentions(name);
            if !used {
                self.info.warnings.push(Diagnostic::warning(k.name.span, format!("constant `{name}` is never used"))
                    .hint("remove it, or use it in a shape, the grid or the body"));
            }
        }
        for t in &spec.tensors {
            let name = t.name.name.as_str();
            if t.output && !init.first_write.contains_key(name) {
                self.info.warnings.push(Diagnostic::warning(t.name.span, format!("output `{name}` is never written: the kernel leaves it as it was"))
                    .hint(format!("copy a result to `{name}`, or drop `output: true` if it is an input")));
            } else if !t.output && !init.read.contains(name) {
                self.info.warnings.push(Diagnostic::warning(t.name.span, format!("input `{name}` is never read: the launcher takes its pointer and ignores it"))
                    .hint(format!("read `{name}` in the body, or remove it from `tensors`")));
            }
        }
    }
}

impl<'a> Init<'a> {
    fn block(&mut self, stmts: &'a [Stmt]) {
        for s in stmts {
            self.stmt(s);
        }
    }

    fn stmt(&mut self, s: &'a Stmt) {
        self.at = s.span;
        self.writing = s.written();
        match &s.kind {
            StmtKind::Loop { count, body, .. } => {
                self.expr(count);
                let outer = self.carried.clone();
                let mut writes = Vec::new();
                walk_stmts(body, &mut |t| writes.extend(t.written().map(|w| (w, t.span))));
                for (w, at) in writes {
                    self.carried.entry(w).or_insert((self.ifs, Vec::new())).1.push(at);
                }
                self.loops += 1;
                self.block(body);
                self.loops -= 1;
                self.carried = outer;
            }
            StmtKind::If { cond, then_body, else_body } => {
                self.expr(cond);
                self.ifs += 1;
                self.block(then_body);
                self.block(else_body);
                self.ifs -= 1;
            }
            StmtKind::Parallel { body, .. } => self.block(body),
            StmtKind::Copy { src, dst } => {
                for origin in [src, dst].into_iter().filter_map(|o| o.origin.as_ref()) {
                    origin.iter().for_each(|e| self.expr(e));
                }
                self.read(&src.name, None);
                self.write(&dst.name.name);
            }
            StmtKind::Dequant { src, dst, scales, zero, .. } => {
                for r in [src, scales].into_iter().chain(zero.tile()) {
                    self.read(r, None);
                }
                self.write(&dst.name);
            }
            StmtKind::Reduce { src, dst, clear, .. } => {
                self.read(src, None);
                if !clear {
                    self.read(dst, Some(format!("`clear=false` combines the reduction with `{}`'s values: fill it first (`fill({0}, -inf)` for a running maximum, `clear({0})` for a sum)", dst.name)));
                }
                self.write(&dst.name);
            }
            StmtKind::Gemm { a, b, c, .. } => {
                self.read(a, None);
                self.read(b, None);
                let before = if self.loops > 0 { "before the loop" } else { "before the gemm" };
                self.read(c, Some(format!("gemm adds its product to `{}`: `clear({0})` {before}", c.name)));
                self.write(&c.name);
            }
            StmtKind::Clear { buf } => self.write(&buf.name),
            StmtKind::Fill { buf, value } => {
                self.expr(value);
                self.write(&buf.name);
            }
            StmtKind::Assign { target, indices, op, value } => {
                indices.iter().for_each(|e| self.expr(e));
                self.expr(value);
                if *op != AssignOp::Set {
                    self.read(target, Some(format!("`{}` updates `{}`'s values: write it first", op.symbol(), target.name)));
                }
                self.write(&target.name);
            }
        }
    }

    fn write(&mut self, name: &'a str) {
        self.first_write.entry(name).or_insert(self.at);
        if self.buffers.contains(name) {
            self.written.insert(name);
        }
    }

    /// Checks the buffers `e` reads (elements, or a whole buffer by name).
    fn expr(&mut self, e: &'a Expr) {
        for (name, span) in e.names_read() {
            self.check(name, span, None);
        }
    }

    fn read(&mut self, buf: &'a Ident, hint: Option<String>) {
        self.check(&buf.name, buf.span, hint);
    }

    fn check(&mut self, name: &'a str, at: Span, hint: Option<String>) {
        if self.writing == Some(name) {
            self.updated.insert(name);
        } else {
            self.read.insert(name);
        }
        if !self.buffers.contains(name) || self.written.contains(name) || self.reported.contains(name) {
            return;
        }
        let carried = self.carried.get(name);
        // Under an `if` inside a loop that writes it, the branch may keep the read out of the
        // first iteration.
        if carried.is_some_and(|&(ifs, _)| self.ifs > ifs) {
            return;
        }
        // A write by another statement of the loop, to point at (the reading statement's own
        // write, as a gemm's, goes without saying).
        let later = carried.and_then(|(_, spans)| spans.iter().copied().find(|&w| w != self.at));
        self.reported.insert(name);
        let mut d = Diagnostic::error(at, format!("`{name}` is read here before any statement writes it: registers and shared memory start undefined"));
        if let Some(later) = later {
            d = d.label(later, "written here, later in the loop: that reaches the read only from the second iteration on");
        }
        let hint = hint.unwrap_or_else(|| format!("write `{name}` before this read (clear, fill, copy or an assignment in `parallel`)"));
        self.errors.push(d.hint(hint));
    }
}

/// The buffer a statement overwrites whole, without reading it: whatever it held before is lost.
fn overwrites(s: &Stmt) -> Option<&str> {
    match &s.kind {
        StmtKind::Copy { dst, .. } if dst.origin.is_none() => Some(&dst.name.name),
        StmtKind::Dequant { dst, .. } | StmtKind::Reduce { dst, clear: true, .. } => Some(&dst.name),
        StmtKind::Clear { buf } | StmtKind::Fill { buf, .. } => Some(&buf.name),
        _ => None,
    }
}

/// The names a statement, or any statement nested in it, reads (elements, whole buffers and
/// tensors, and the values an update combines with).
fn reads<'a>(s: &'a Stmt, out: &mut BTreeSet<&'a str>) {
    let expr = |e: &'a Expr, out: &mut BTreeSet<&'a str>| out.extend(e.names_read().into_iter().map(|(name, _)| name));
    match &s.kind {
        StmtKind::Copy { src, dst } => {
            out.insert(&src.name.name);
            for origin in [src, dst].into_iter().filter_map(|o| o.origin.as_ref()) {
                origin.iter().for_each(|e| expr(e, out));
            }
        }
        StmtKind::Dequant { src, scales, zero, .. } => {
            out.extend([src, scales].into_iter().chain(zero.tile()).map(|i| i.name.as_str()));
        }
        StmtKind::Reduce { src, dst, clear, .. } => {
            out.insert(&src.name);
            if !clear {
                out.insert(&dst.name);
            }
        }
        StmtKind::Gemm { a, b, c, .. } => out.extend([a, b, c].map(|i| i.name.as_str())),
        StmtKind::Clear { .. } => {}
        StmtKind::Fill { value, .. } => expr(value, out),
        StmtKind::Assign { target, indices, op, value } => {
            indices.iter().for_each(|e| expr(e, out));
            expr(value, out);
            if *op != AssignOp::Set {
                out.insert(&target.name);
            }
        }
        StmtKind::Loop { count, body, .. } => {
            expr(count, out);
            body.iter().for_each(|t| reads(t, out));
        }
        StmtKind::If { cond, then_body, else_body } => {
            expr(cond, out);
            then_body.iter().chain(else_body).for_each(|t| reads(t, out));
        }
        StmtKind::Parallel { body, .. } => body.iter().for_each(|t| reads(t, out)),
    }
}

/// Warns of whole-buffer writes of `live` buffers that a later statement of the same block
/// overwrites whole before any statement reads them. Nested blocks are walked on their own;
/// a write in one that nothing in it reads may still be read after it, or in the next
/// iteration, so only straight-line successors count.
fn overwritten(stmts: &[Stmt], live: &BTreeSet<&str>, warnings: &mut Vec<Diagnostic>) {
    // Buffers written whole by an earlier statement of this block and not read since.
    let mut pending: BTreeMap<&str, Span> = BTreeMap::new();
    for s in stmts {
        let mut read = BTreeSet::new();
        reads(s, &mut read);
        pending.retain(|name, _| !read.contains(name));
        // Writes inside nested blocks may be partial or conditional: they end the search.
        let mut nested = Vec::new();
        walk_stmts(std::slice::from_ref(s), &mut |t| nested.extend(t.written().filter(|_| !std::ptr::eq(t, s))));
        pending.retain(|name, _| !nested.contains(name));
        match overwrites(s).filter(|b| live.contains(b)) {
            Some(name) => {
                if let Some(at) = pending.insert(name, s.span) {
                    warnings.push(Diagnostic::warning(at, format!("the values this writes to `{name}` are overwritten before any statement reads them"))
                        .label(s.span, "overwritten here")
                        .hint("remove the first write, or read the buffer between the two"));
                }
            }
            None => {
                if let Some(name) = s.written() {
                    // A partial write (an element assignment, a gemm's accumulation) keeps the rest.
                    pending.remove(name);
                }
            }
        }
        match &s.kind {
            StmtKind::Loop { body, .. } | StmtKind::Parallel { body, .. } => overwritten(body, live, warnings),
            StmtKind::If { then_body, else_body, .. } => {
                overwritten(then_body, live, warnings);
                overwritten(else_body, live, warnings);
            }
            _ => {}
        }
    }
}
