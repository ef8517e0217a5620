//! The tile lowering's arithmetic: row reductions, MFMA products (with the k-split partial
//! sums added through LDS), and element-wise `parallel` blocks over fragments.

use super::*;

impl<'a> Lower<'a> {
    /// `reduce_max` / `reduce_sum` along the rows of a fragment: each lane folds its 4
    /// columns of every block of a row, then the 4 lanes that hold the row (l, l ^ 16,
    /// l ^ 32, l ^ 48) trade their partial results with two shuffles.
    pub(super) fn reduce(&mut self, s: &Stmt, op: ReduceOp, src: &Ident, dst: &Ident, clear: bool) {
        let (Some(sb), Some(db)) = (self.buffer(src), self.buffer(dst)) else { return };
        self.whole(sb);
        let g = self.grid(sb);
        let (sn, dn) = (self.name(sb), self.name(db));
        let (st, dt) = (self.c.spec.buffers[sb].dtype.0, self.c.spec.buffers[db].dtype.0);
        let identity = match op {
            ReduceOp::Max => "-INFINITY",
            ReduceOp::Sum => "0.f",
        };
        let fold = |a: &str, b: &str| match op {
            ReduceOp::Max => format!("fmaxf({a}, {b})"),
            ReduceOp::Sum => format!("{a} + {b}"),
        };
        self.comment(s, "each lane folds its 4 columns of every block of a row, then the row's 4 lanes trade with shuffles");
        self.line("#pragma unroll");
        self.open(format!("for (int bi = 0; bi < {}; ++bi)", g.row_blocks()));
        self.line(format!("float part = {identity};"));
        self.line("#pragma unroll");
        self.open(format!("for (int bj = 0; bj < {}; ++bj)", g.col_blocks()));
        self.line("#pragma unroll");
        self.open("for (int r = 0; r < 4; ++r)");
        self.line(format!("part = {};", fold("part", &to_float(st, &format!("{sn}[bi][bj][r]")))));
        self.close();
        self.close();
        self.line(format!("part = {};", fold("part", "__shfl_xor(part, 16)")));
        self.line(format!("part = {};", fold("part", "__shfl_xor(part, 32)")));
        if clear {
            self.line(format!("{dn}[bi] = {};", from_float(dt, "part")));
        } else {
            self.line(format!("{dn}[bi] = {};", from_float(dt, &fold(&to_float(dt, &format!("{dn}[bi]")), "part"))));
        }
        self.close();
    }

    pub(super) fn gemm(&mut self, s: &Stmt, a: &Ident, b: &Ident, c: &Ident) {
        let (Some(ai), Some(bi), Some(ci)) = (self.buffer(a), self.buffer(b), self.buffer(c)) else { return };
        let Some(m) = self.plan.gemms.get(&s.id) else { return };
        let g = self.grid(ci);
        let (mm, nn, kk) = m.mnk;
        let cn = self.name(ci);
        let steps = kk / BLOCK;
        let split = if g.ks > 1 { format!(", the k steps shared out over {} wave groups", g.ks) } else { String::new() };
        self.comment(s, &format!("{mm}x{nn}x{kk} in {steps} k-steps of 16{split}; each MFMA takes the B operand as its rows and A's as its columns, so the result lands row-of-lane"));
        let reads: Vec<usize> = [ai, bi].into_iter().filter(|x| self.c.spec.buffers[*x].scope.0 == Scope::Shared).collect();
        self.sync_for(&reads, &[]);
        if g.ks > 1 && self.split.get(&ci) == Some(&Split::Whole) {
            self.line(format!("// `{cn}` holds a whole value: one group keeps it, the others start their partial sums from zero."));
            self.for_each_element(g, |l| l.line(format!("if ({cn}_group != 0) {cn}[bi][bj][r] = 0.f;")));
        }
        self.split.insert(ci, if g.ks > 1 { Split::Partial } else { Split::Whole });
        let (an, bn) = (self.name(ai), self.name(bi));
        let op = block_type(self.c.spec.buffers[ai].dtype.0);
        if g.ks > 1 && steps % g.ks == 0 {
            // A trip count the compiler sees, so that the loop unrolls.
            self.line("#pragma unroll");
            self.open(format!("for (int kq = 0; kq < {}; ++kq)", steps / g.ks));
            let every = match g.ks { 2 => "other".to_string(), 3 => "third".to_string(), n => format!("{n}th") };
            self.line(format!("int const kk = kq * {} + {cn}_group;  // this group's k steps: every {every}", g.ks));
        } else if g.ks > 1 {
            self.open(format!("for (int kk = {cn}_group; kk < {steps}; kk += {})", g.ks));
        } else {
            self.line("#pragma unroll");
            self.open(format!("for (int kk = 0; kk < {steps}; ++kk)"));
        }
        self.line("int const k0 = kk * 16 + lane_col;  // this lane's 4 k values in the step");
        if m.a_in_registers {
            self.line(format!("// `{an}` is already in the MFMA operand layout: its block (bi, kk) is this step's A."));
        } else {
            self.line(format!("{op} a_rows[{}];  // A (`{an}`): rows of this wave's row blocks of `{cn}`", g.row_blocks()));
            self.line("#pragma unroll");
            self.open(format!("for (int bi = 0; bi < {}; ++bi)", g.row_blocks()));
            let row = format!("{cn}_row + bi * 16 + lane_row");
            let read = if m.a_row_reads { format!("load_vec<4>(&{an}[{row}][k0])") } else { format!("load_col4(&{an}[k0][{row}], {})", self.pitch(ai)) };
            self.line(format!("a_rows[bi] = {read};"));
            self.close();
        }
        self.line("#pragma unroll");
        self.open(format!("for (int bj = 0; bj < {}; ++bj)", g.col_blocks()));
        let col = format!("{cn}_col + bj * 16 + lane_row");
        let read = if m.b_row_reads { format!("load_vec<4>(&{bn}[{col}][k0])") } else { format!("load_col4(&{bn}[k0][{col}], {})", self.pitch(bi)) };
        self.line(format!("{op} const b_cols = {read};  // B (`{bn}`): column {col} of the block"));
        self.line("#pragma unroll");
        self.open(format!("for (int bi = 0; bi < {}; ++bi)", g.row_blocks()));
        let a_op = if m.a_in_registers { format!("{an}[bi][kk]") } else { "a_rows[bi]".into() };
        if self.c.spec.buffers[ci].dtype.0 == DType::F16 {
            // An f16 accumulator: the MFMA adds in f32, and the block rounds to f16 after it.
            self.line(format!("{cn}[bi][bj] = convert4<ck::half_t>(mfma_16x16x16(b_cols, {a_op}, convert4<float>({cn}[bi][bj])));"));
        } else {
            self.line(format!("{cn}[bi][bj] = mfma_16x16x16(b_cols, {a_op}, {cn}[bi][bj]);"));
        }
        self.close();
        self.close();
        self.close();
    }

    /// A shared buffer's row pitch in elements.
    fn pitch(&self, b: usize) -> String {
        let shape = &self.c.spec.buffers[b].shape;
        let pad = self.plan.shared[&b].pad;
        format!("{} + {pad}", self.ex(&shape[1]))
    }

    pub(super) fn parallel(&mut self, s: &Stmt, vars: &[Ident], body: &[Stmt]) {
        let Some(&d) = self.c.info.parallel_domains.get(&s.id) else { return };
        let g = self.grid(d);
        // Fragments read in the block must be whole; shared buffers read need a barrier.
        let mut frags = Vec::new();
        let mut shared_reads = Vec::new();
        for (name, _, _) in crate::layout::mfma::accesses(body) {
            if let Some(b) = self.buffer(name) {
                match self.c.spec.buffers[b].scope.0 {
                    Scope::Fragment => frags.push(b),
                    Scope::Shared => shared_reads.push(b),
                }
            }
        }
        frags.sort();
        frags.dedup();
        self.comment(s, "each lane on its own registers");
        for f in &frags {
            self.whole(*f);
        }
        self.sync_for(&shared_reads, &[]);
        let (row, col) = self.coords(d);
        // The index variables the body uses.
        // A fragment's indices are its registers' positions, not uses of the variables.
        let mut used = BTreeSet::new();
        let fragment = |n: &Ident| self.buffer(n).is_some_and(|b| self.c.spec.buffers[b].scope.0 == Scope::Fragment);
        let mut collect = |e: &Expr| e.visit(&mut |x| match &x.kind {
            ExprKind::Index(n, _) if fragment(n) => false,
            ExprKind::Name(n) => {
                used.insert(n.clone());
                true
            }
            _ => true,
        });
        walk_stmts(body, &mut |st| match &st.kind {
            StmtKind::Assign { value, .. } => collect(value),
            StmtKind::If { cond, .. } => collect(cond),
            _ => {}
        });
        let names: Vec<String> = vars.iter().map(|v| v.name.clone()).collect();
        self.for_each_element(g, |l| {
            if let Some(v) = names.first().filter(|v| used.contains(*v)) {
                l.line(format!("int const {v} = {row};"));
            }
            if let Some(v) = names.get(1).filter(|v| used.contains(*v)) {
                l.line(format!("int const {v} = {col};"));
            }
            l.assigns(body);
        });
        for st in body {
            if let StmtKind::Assign { target, .. } = &st.kind && let Some(b) = self.buffer(target) {
                self.split.insert(b, Split::Whole);
            }
        }
    }

    pub(super) fn assigns(&mut self, body: &[Stmt]) {
        for st in body {
            match &st.kind {
                StmtKind::Assign { target, op, value, .. } => {
                    let Some(b) = self.buffer(target) else { continue };
                    let env = ParEnv { c: self.c, plan: self.plan, conv: &self.conv };
                    let v = self.conv.expr(value, &env);
                    let (n, dt) = (self.name(b), self.c.spec.buffers[b].dtype.0);
                    let text = self.c.file.snippet(st.span).trim().to_string();
                    let reg = register(n, self.plan.fragments.get(&b).is_some_and(|g| g.cols == 0));
                    let line = match (op, dt) {
                        (AssignOp::Set, _) => format!("{reg} = {};", from_float(dt, &v)),
                        (_, DType::F32) => format!("{reg} {} {v};", op.symbol()),
                        _ => format!("{reg} = {};", from_float(dt, &format!("{} {} ({v})", to_float(dt, &reg), &op.symbol()[..1]))),
                    };
                    self.line(format!("{line}  // spec {}: {text}", self.c.line(st.span)));
                }
                StmtKind::If { cond, then_body, else_body } => {
                    let env = ParEnv { c: self.c, plan: self.plan, conv: &self.conv };
                    let cond = self.conv.expr(cond, &env);
                    self.open(format!("if ({cond})"));
                    self.assigns(then_body);
                    if !else_body.is_empty() {
                        self.else_branch();
                        self.assigns(else_body);
                    }
                    self.close();
                }
                _ => {}
            }
        }
    }
}
