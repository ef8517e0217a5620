//! Checking of statements: copies, gemms, loops, parallel blocks.

use super::{Checker, Symbol, Ty};
use crate::ast::*;
use crate::diag::Diagnostic;

/// One side of a copy, resolved.
enum Side {
    Global(usize),
    Buffer(usize),
}

impl Checker<'_> {
    pub fn block(&mut self, stmts: &[Stmt]) {
        for s in stmts {
            self.stmt(s);
        }
    }

    fn stmt(&mut self, s: &Stmt) {
        let names: Vec<&Ident> = match &s.kind {
            StmtKind::Copy { src, dst } => vec![&src.name, &dst.name],
            StmtKind::Gemm { a, b, c, .. } => vec![a, b, c],
            StmtKind::Reduce { src, dst, .. } => vec![src, dst],
            StmtKind::Dequant { src, dst, scales, .. } => vec![src, dst, scales],
            _ => Vec::new(),
        };
        if names.iter().any(|n| self.unknown_extents.contains(&n.name)) {
            return;
        }
        match &s.kind {
            StmtKind::Copy { src, dst } => self.copy(s, src, dst),
            StmtKind::Gemm { a, b, c, transpose_a, transpose_b } => self.gemm(s, a, b, c, *transpose_a, *transpose_b),
            StmtKind::Clear { buf } => {
                self.buffer(buf, "clear");
            }
            StmtKind::Reduce { op, src, dst, dim, .. } => self.reduce(*op, src, dst, *dim),
            StmtKind::Dequant { src, dst, scales, zero, .. } => self.dequant(src, dst, scales, zero),
            StmtKind::Fill { buf, value } => {
                if let Some(b) = self.buffer(buf, "fill") {
                    let want = if self.spec.buffers[b].dtype.0.is_float() { Ty::Float } else { Ty::Int };
                    match self.ty(value, false, true) {
                        Some(Ty::Bool) => self.err(Diagnostic::error(value.span, "a fill value must be a number")),
                        Some(Ty::Float) if want == Ty::Int => self.err(Diagnostic::error(value.span, format!("`{}` holds integers; this value is a float", buf.name)).hint("cast it with i32(...)")),
                        _ => {}
                    }
                }
            }
            StmtKind::Assign { target, .. } => {
                self.err(Diagnostic::error(target.span.to(s.span), "element assignments go inside a `parallel` block")
                    .hint(format!("wrap it: `- parallel(i, j):` with this line indented below; `{}` is then iterated in parallel", target.name)));
            }
            StmtKind::Loop { kind, var, count, stages, body } => {
                self.int_expr(count, "a trip count", true);
                if *kind == LoopKind::Unroll {
                    match super::eval_int(count, &self.info.symbols) {
                        None => self.err(Diagnostic::error(count.span, "`unroll` needs a constant trip count").hint("use `serial` for runtime trip counts")),
                        Some(n) if n > super::MAX_UNROLL => self.err(Diagnostic::error(count.span, format!(
                            "`unroll` copies its body {n} times, more than the {} tilegen unrolls", super::MAX_UNROLL))
                            .hint("use `serial` for long loops (the compiler may still unroll them partly)")),
                        Some(_) => {}
                    }
                }
                if let Some(st) = stages {
                    // A named stage count's errors also point at its declaration.
                    let declared = |d: Diagnostic, this: &Self| match &st.kind {
                        ExprKind::Name(n) => match this.declared_at(n) {
                            Some(at) => d.label(at, format!("`{n}` is declared here")),
                            None => d,
                        },
                        _ => d,
                    };
                    match super::eval_int(st, &self.info.symbols) {
                        Some(v) if v > super::MAX_STAGES => {
                            let d = Diagnostic::error(st.span, format!("{v} stages is more than the {} tilegen supports", super::MAX_STAGES))
                                .hint("2 to 4 stages hide global-memory latency; more only costs shared memory");
                            self.err(declared(d, self));
                        }
                        Some(v) if v >= 1 => {
                            self.info.stages.insert(s.id, v);
                        }
                        Some(v) => {
                            let d = Diagnostic::error(st.span, format!("a pipeline needs at least 1 stage, found {v}"))
                                .hint("use 2 to 4 stages to overlap loads with math; 1 runs without overlap");
                            self.err(declared(d, self));
                        }
                        None => {
                            // An unknown name (`stagez`) is reported as one, with its suggestion.
                            let before = self.errors.len();
                            self.ty(st, false, false);
                            if self.errors.len() == before {
                                self.err(Diagnostic::error(st.span, "the stage count must be a constant integer")
                                    .hint("declare it under constants, e.g. `stages: 3`"));
                            }
                        }
                    }
                }
                if self.bind_var(var) {
                    self.block(body);
                    self.scope_vars.pop();
                } else {
                    self.block(body);
                }
            }
            StmtKind::Parallel { vars, body } => self.parallel(s, vars, body),
            StmtKind::If { cond, then_body, else_body } => {
                match self.ty(cond, false, true) {
                    Some(Ty::Bool) | None => {}
                    Some(t) => self.err(Diagnostic::error(cond.span, format!("an `if` condition must be a comparison, found {}", if t == Ty::Int { "an integer" } else { "a float" }))
                        .hint("write e.g. `if k > 0`")),
                }
                self.block(then_body);
                self.block(else_body);
            }
        }
    }

    fn buffer(&mut self, ident: &Ident, op: &str) -> Option<usize> {
        match self.resolve_expecting(ident, |s| matches!(s, Symbol::Buffer(_)))? {
            Symbol::Buffer(b) => Some(b),
            _ => {
                self.err(Diagnostic::error(ident.span, format!("`{op}` works on buffers, and `{}` is not one", ident.name))
                    .hint("declare it under `buffers` with scope shared or fragment"));
                None
            }
        }
    }

    fn side(&mut self, op: &Operand) -> Option<Side> {
        match self.resolve(&op.name)? {
            Symbol::Tensor(t) => {
                let tensor = &self.spec.tensors[t];
                let Some(origin) = &op.origin else {
                    self.err(Diagnostic::error(op.span, format!("`{}` is a global tensor: copy a tile of it by giving the tile's origin", op.name.name))
                        .hint(format!("write `{}[{}]`", op.name.name, vec!["0"; tensor.shape.len()].join(", "))));
                    return None;
                };
                if origin.len() != tensor.shape.len() {
                    self.err(Diagnostic::error(op.span, format!("`{}` has {} dimensions, but the origin has {}", op.name.name, tensor.shape.len(), origin.len())));
                    return None;
                }
                let mut ok = true;
                for e in origin {
                    ok &= self.int_expr(e, "a tile origin", true);
                }
                ok.then_some(Side::Global(t))
            }
            Symbol::Buffer(b) => {
                if let Some(origin) = &op.origin {
                    let span = origin.first().map_or(op.span, |e| e.span);
                    self.err(Diagnostic::error(span, format!("buffer `{}` is copied whole; it takes no origin", op.name.name))
                        .hint(format!("write `{}`", op.name.name)));
                    return None;
                }
                Some(Side::Buffer(b))
            }
            _ => {
                self.err(Diagnostic::error(op.name.span, format!("`{}` is not a tensor or a buffer", op.name.name)));
                None
            }
        }
    }

    fn copy(&mut self, s: &Stmt, src: &Operand, dst: &Operand) {
        let (a, b) = (self.side(src), self.side(dst));
        let (Some(a), Some(b)) = (a, b) else { return };
        let spec = self.spec;
        match (&a, &b) {
            (Side::Global(_), Side::Global(_)) => {
                self.err(Diagnostic::error(s.span, "a copy from global memory to global memory")
                    .hint("stage the tile through a shared or fragment buffer"));
            }
            (Side::Global(t), Side::Buffer(buf)) | (Side::Buffer(buf), Side::Global(t)) => {
                let (t, buf) = (*t, *buf);
                let (tensor, buffer) = (&spec.tensors[t], &spec.buffers[buf]);
                let shape = self.info.buffer_shapes[buf].clone();
                let tile = if matches!(a, Side::Global(_)) { src } else { dst };
                let tile_dims: Vec<usize> = tile.tile_dims.clone().unwrap_or_else(|| (0..tensor.shape.len()).collect());
                if tile.tile_dims.is_some() && shape.len() != tile_dims.len() {
                    self.err(Diagnostic::error(tile.span, format!(
                        "the tile of `{}` spans {} dimension{} (the slices `start:`), but buffer `{}` is {}-D",
                        tensor.name.name, tile_dims.len(), if tile_dims.len() == 1 { "" } else { "s" }, buffer.name.name, shape.len()))
                        .label(buffer.shape_span, "buffer shape declared here")
                        .hint(format!("mark exactly {} of the origin's indices as slices", shape.len())));
                    return;
                }
                if shape.len() != tile_dims.len() {
                    self.err(Diagnostic::error(s.span, format!(
                        "copy between `{}` ({}-D) and buffer `{}` ({}-D): ranks differ",
                        tensor.name.name, tensor.shape.len(), buffer.name.name, shape.len()))
                        .label(buffer.shape_span, "buffer shape declared here")
                        .hint(if shape.len() < tensor.shape.len() {
                            let example: Vec<&str> = (0..tensor.shape.len()).map(|d| if d + shape.len() < tensor.shape.len() { "0" } else { "0:" }).collect();
                            format!("to copy a {}-D tile of a {}-D tensor, mark the tile's dimensions as slices (`start:`); the other indices stay fixed, e.g. `{}[{}]`",
                                shape.len(), tensor.shape.len(), tensor.name.name, example.join(", "))
                        } else {
                            "give the buffer the tensor's rank".to_string()
                        }));
                    return;
                }
                let tile_shape: Vec<&Dim> = tile_dims.iter().map(|d| &tensor.shape[*d]).collect();
                for (d, extent) in tile_shape.into_iter().zip(&shape) {
                    if let Dim::Fixed(v, _) = d && extent > v {
                        self.err(Diagnostic::error(tile.span, format!("the tile is {extent} wide but `{}` has only {v} in that dimension", tensor.name.name)));
                    }
                    if matches!(d, Dim::Named(_) | Dim::Div(..)) && let Some(v) = d.eval(|n| self.info.const_int(n)) && *extent > v {
                        self.err(Diagnostic::error(tile.span, format!("the tile is {extent} wide but `{}` has only {v} in that dimension", tensor.name.name)));
                    }
                }
                if matches!(b, Side::Global(_)) && !tensor.output {
                    self.err(Diagnostic::error(dst.name.span, format!("`{}` is written here but not marked as an output", tensor.name.name))
                        .label(tensor.name.span, "declared here")
                        .hint("add `output: true` to the tensor"));
                }
                if tensor.dtype.0 != buffer.dtype.0 && buffer.scope.0 != Scope::Fragment {
                    self.err(Diagnostic::error(s.span, format!(
                        "copy between `{}` ({}) and shared buffer `{}` ({}) would convert the dtype",
                        tensor.name.name, tensor.dtype.0, buffer.name.name, buffer.dtype.0))
                        .label(buffer.dtype.1, "buffer dtype declared here")
                        .hint("only copies through fragments convert; give the shared buffer the tensor's dtype"));
                }
            }
            (Side::Buffer(x), Side::Buffer(y)) => {
                let (x, y) = (*x, *y);
                let (bx, by) = (&spec.buffers[x], &spec.buffers[y]);
                if self.info.buffer_shapes[x] != self.info.buffer_shapes[y] {
                    self.err(Diagnostic::error(s.span, format!(
                        "copy from `{}` {:?} to `{}` {:?}: shapes differ", bx.name.name, self.info.buffer_shapes[x], by.name.name, self.info.buffer_shapes[y])));
                }
                if bx.scope.0 == Scope::Shared && by.scope.0 == Scope::Shared {
                    self.err(Diagnostic::error(s.span, "a copy from shared memory to shared memory").hint("copy through a fragment, or use one buffer"));
                }
                if bx.dtype.0 != by.dtype.0 && bx.scope.0 != Scope::Fragment {
                    self.err(Diagnostic::error(s.span, format!("copy from `{}` ({}) to `{}` ({}) would convert the dtype", bx.name.name, bx.dtype.0, by.name.name, by.dtype.0))
                        .hint("only copies whose source is a fragment convert"));
                }
            }
        }
    }

    fn reduce(&mut self, op: ReduceOp, src: &Ident, dst: &Ident, dim: (i64, crate::diag::Span)) {
        let (is, id) = (self.buffer(src, op.keyword()), self.buffer(dst, op.keyword()));
        let (Some(is), Some(id)) = (is, id) else { return };
        let spec = self.spec;
        let (bs, bd) = (&spec.buffers[is], &spec.buffers[id]);
        for (b, ident) in [(bs, src), (bd, dst)] {
            if b.scope.0 != Scope::Fragment {
                self.err(Diagnostic::error(ident.span, format!("`{}` reduces fragments, and `{}` is in {} memory", op.keyword(), ident.name, b.scope.0.name()))
                    .label(b.scope.1, "scope declared here")
                    .hint("copy the tile into a fragment first, or declare the buffer with `scope: fragment`"));
            }
            if !b.dtype.0.is_float() {
                self.err(Diagnostic::error(ident.span, format!("`{}` works on floating-point fragments; `{}` is {}", op.keyword(), ident.name, b.dtype.0)));
            }
        }
        let (ss, sd) = (self.info.buffer_shapes[is].clone(), self.info.buffer_shapes[id].clone());
        if ss.len() != 2 {
            self.err(Diagnostic::error(src.span, format!("`{}` reduces a 2-D fragment; `{}` is {}-D", op.keyword(), src.name, ss.len()))
                .label(bs.shape_span, "shape declared here"));
            return;
        }
        if dim.0 != 0 && dim.0 != 1 {
            self.err(Diagnostic::error(dim.1, format!("`dim` must be 0 or 1 for the 2-D fragment `{}`, found {}", src.name, dim.0))
                .hint("dim=1 reduces each row to one value (row statistics)"));
            return;
        }
        let want = ss[1 - dim.0 as usize];
        if sd.len() != 1 || sd[0] != want {
            self.err(Diagnostic::error(dst.span, format!(
                "reducing `{}` {:?} along dim {} gives [{want}] values, but `{}` is {:?}", src.name, ss, dim.0, dst.name, sd))
                .label(bd.shape_span, "shape declared here")
                .hint(format!("declare `{}` with shape [{want}]", dst.name)));
        }
    }

    fn dequant(&mut self, src: &Ident, dst: &Ident, scales: &Ident, zero: &ZeroPoint) {
        const OP: &str = "dequant_int4";
        let (is, id, ic) = (self.buffer(src, OP), self.buffer(dst, OP), self.buffer(scales, OP));
        let zeros = zero.tile().map(|z| (self.buffer(z, OP), z));
        let (Some(is), Some(id), Some(ic)) = (is, id, ic) else { return };
        let zeros = match zeros {
            Some((None, _)) => return,
            Some((Some(iz), z)) => Some((iz, z)),
            None => None,
        };
        let spec = self.spec;
        for (i, ident) in [(is, src), (id, dst), (ic, scales)].into_iter().chain(zeros) {
            let b = &spec.buffers[i];
            if b.scope.0 != Scope::Shared {
                self.err(Diagnostic::error(ident.span, format!("`{OP}` works on shared tiles, and `{}` is in {} memory", ident.name, b.scope.0.name()))
                    .label(b.scope.1, "scope declared here")
                    .hint("declare it with `scope: shared`"));
            }
            if self.info.buffer_shapes[i].len() != 2 {
                self.err(Diagnostic::error(ident.span, format!("`{OP}` works on 2-D tiles; `{}` is {}-D", ident.name, self.info.buffer_shapes[i].len()))
                    .label(b.shape_span, "shape declared here"));
                return;
            }
        }
        let (bs, bd, bc) = (&spec.buffers[is], &spec.buffers[id], &spec.buffers[ic]);
        if bs.dtype.0 != DType::I32 {
            self.err(Diagnostic::error(src.span, format!("`{}` holds the packed words, eight 4-bit values per i32; it is {}", src.name, bs.dtype.0))
                .label(bs.dtype.1, "declared here"));
        }
        if !matches!(bd.dtype.0, DType::F16 | DType::BF16) {
            self.err(Diagnostic::error(dst.span, format!("`{OP}` unpacks to f16 or bf16; `{}` is {}", dst.name, bd.dtype.0))
                .label(bd.dtype.1, "declared here"));
        } else if bc.dtype.0 != bd.dtype.0 {
            self.err(Diagnostic::error(scales.span, format!("the scales `{}` are {} but `{}` is {}; they must match", scales.name, bc.dtype.0, dst.name, bd.dtype.0))
                .label(bc.dtype.1, "declared here"));
        }
        if let ZeroPoint::Constant(v, span) = zero && !(0..16).contains(v) {
            self.err(Diagnostic::error(*span, format!("`zero` is a stored 4-bit value, 0 to 15; found {v}")));
        }
        if let Some((iz, z)) = zeros {
            let bz = &spec.buffers[iz];
            if bz.dtype.0 != bc.dtype.0 {
                self.err(Diagnostic::error(z.span, format!("the zero points `{}` are {} but the scales `{}` are {}; they must match", z.name, bz.dtype.0, scales.name, bc.dtype.0))
                    .label(bz.dtype.1, "declared here")
                    .hint("zero points are small integers (0 to 15) held in the scales' type"));
            }
            if self.info.buffer_shapes[iz] != self.info.buffer_shapes[ic] {
                self.err(Diagnostic::error(z.span, format!(
                    "the zero points `{}` {:?} must have the scales' shape {:?}: one per group of each row",
                    z.name, self.info.buffer_shapes[iz], self.info.buffer_shapes[ic]))
                    .label(bz.shape_span, "shape declared here"));
            }
        }
        let (ss, sd, sc) = (self.info.buffer_shapes[is].clone(), self.info.buffer_shapes[id].clone(), self.info.buffer_shapes[ic].clone());
        if ss[0] != sd[0] || ss[1] * 8 != sd[1] {
            self.err(Diagnostic::error(src.span, format!(
                "`{}` {:?} unpacks to [{}, {}] values, but `{}` is {:?}", src.name, ss, ss[0], ss[1] * 8, dst.name, sd))
                .label(bd.shape_span, "shape declared here")
                .hint(format!("eight values per word: declare `{}` with shape [{}, {}]", src.name, sd[0], sd[1] / 8)));
        }
        if sc[0] != sd[0] || sc[1] < 1 || sd[1] % sc[1] != 0 || (sd[1] / sc[1]) % 8 != 0 {
            self.err(Diagnostic::error(scales.span, format!(
                "the scales `{}` {:?} must have `{}`'s {} rows and one column per group of its {} columns, with groups a multiple of 8 wide",
                scales.name, sc, dst.name, sd[0], sd[1]))
                .label(bc.shape_span, "shape declared here")
                .hint(format!("for groups of 128: shape [{}, {}/128]", sd[0], sd[1])));
        }
    }

    fn gemm(&mut self, s: &Stmt, a: &Ident, b: &Ident, c: &Ident, ta: bool, tb: bool) {
        let (ia, ib, ic) = (self.buffer(a, "gemm"), self.buffer(b, "gemm"), self.buffer(c, "gemm"));
        let (Some(ia), Some(ib), Some(ic)) = (ia, ib, ic) else { return };
        let spec = self.spec;
        let (ba, bb, bc) = (&spec.buffers[ia], &spec.buffers[ib], &spec.buffers[ic]);
        if bc.scope.0 != Scope::Fragment {
            self.err(Diagnostic::error(c.span, format!("gemm's accumulator `{}` is in {} memory; it must be a fragment", c.name, bc.scope.0.name()))
                .label(bc.scope.1, "scope declared here")
                .hint("declare the accumulator with `scope: fragment`"));
        }
        let (sa, sb, sc) = (self.info.buffer_shapes[ia].clone(), self.info.buffer_shapes[ib].clone(), self.info.buffer_shapes[ic].clone());
        let mut bad_rank = false;
        for (buf, shape) in [(ba, &sa), (bb, &sb), (bc, &sc)] {
            if shape.len() != 2 {
                self.errors.push(Diagnostic::error(buf.shape_span, format!("gemm operand `{}` must be 2-D, found {}-D", buf.name.name, shape.len())));
                bad_rank = true;
            }
        }
        if bad_rank {
            return;
        }
        let (m, ka) = if ta { (sa[1], sa[0]) } else { (sa[0], sa[1]) };
        let (kb, n) = if tb { (sb[1], sb[0]) } else { (sb[0], sb[1]) };
        if ka != kb {
            self.err(Diagnostic::error(s.span, format!(
                "gemm's K differs: `{}` gives K = {ka} but `{}` gives K = {kb}", a.name, b.name))
                .label(ba.shape_span, format!("`{}` is {:?}{}", a.name, sa, if ta { " (transposed: [K, M])" } else { " ([M, K])" }))
                .label(bb.shape_span, format!("`{}` is {:?}{}", b.name, sb, if tb { " (transposed: [N, K])" } else { " ([K, N])" }))
                .hint("make the K extents equal, or set transpose_a / transpose_b to match how the tiles are stored"));
        }
        if sc[0] != m || sc[1] != n {
            self.err(Diagnostic::error(c.span, format!("gemm's accumulator `{}` is {:?}, but the product is [{m}, {n}]", c.name, sc))
                .label(bc.shape_span, "accumulator shape declared here")
                .hint(format!("declare `{}` with shape [{m}, {n}]", c.name)));
        }
        if ba.dtype.0 != bb.dtype.0 {
            self.err(Diagnostic::error(s.span, format!("gemm operands differ in dtype: `{}` is {} and `{}` is {}", a.name, ba.dtype.0, b.name, bb.dtype.0))
                .label(ba.dtype.1, format!("`{}`'s dtype", a.name))
                .label(bb.dtype.1, format!("`{}`'s dtype", b.name))
                .hint("give both operands the same dtype"));
        }
        let acc_ok = match ba.dtype.0 {
            DType::BF16 => bc.dtype.0 == DType::F32,
            DType::F16 => matches!(bc.dtype.0, DType::F32 | DType::F16),
            DType::I8 => bc.dtype.0 == DType::I32,
            DType::F32 | DType::F8E4M3 => bc.dtype.0 == DType::F32,
            DType::I32 => false,
        };
        if !acc_ok {
            let want = match ba.dtype.0 {
                DType::BF16 => "f32",
                DType::F16 => "f32 or f16",
                DType::I8 => "i32",
                _ => "f32",
            };
            self.err(Diagnostic::error(c.span, format!("a gemm of {} operands cannot accumulate in {}", ba.dtype.0, bc.dtype.0))
                .label(bc.dtype.1, "accumulator dtype declared here")
                .hint(format!("accumulate {} products in {want}", ba.dtype.0)));
        }
    }

    fn parallel(&mut self, s: &Stmt, vars: &[Ident], body: &[Stmt]) {
        let mut bound = 0;
        for v in vars {
            if self.bind_var(v) {
                bound += 1;
            }
        }
        let mut domain: Option<(usize, &Ident)> = None;
        for st in body {
            let StmtKind::Assign { target, indices, value, .. } = &st.kind else {
                self.err(Diagnostic::error(st.span, "a `parallel` block holds only element assignments like `acc[i, j] = ...`"));
                continue;
            };
            let Some(b) = self.buffer(target, "assignment") else { continue };
            let plain = indices.len() == vars.len()
                && indices.iter().zip(vars).all(|(e, v)| matches!(&e.kind, ExprKind::Name(n) if *n == v.name));
            if !plain {
                let want = vars.iter().map(|v| v.name.as_str()).collect::<Vec<_>>().join(", ");
                self.err(Diagnostic::error(target.span.to(indices.last().map_or(target.span, |e| e.span)), format!("a `parallel` assignment must write `{}[{want}]`", target.name))
                    .hint("each assignment writes the element at the block's own indices, in order"));
                continue;
            }
            let shape = self.info.buffer_shapes[b].clone();
            match domain {
                None => {
                    domain = Some((b, target));
                    self.info.parallel_domains.insert(s.id, b);
                }
                Some((d, first)) if self.info.buffer_shapes[d] != shape && !self.unknown_extents.contains(&target.name) && !self.unknown_extents.contains(&first.name) => {
                    self.err(Diagnostic::error(target.span, format!(
                        "mismatched shapes in a parallel block: `{}` is {:?} but `{}` is {:?}",
                        target.name, shape, first.name, self.info.buffer_shapes[d]))
                        .label(first.span, "the block's index space comes from here")
                        .hint("split the block: one `parallel` per shape"));
                }
                _ => {}
            }
            let want = if self.spec.buffers[b].dtype.0.is_float() { Ty::Float } else { Ty::Int };
            match self.ty(value, true, true) {
                Some(Ty::Bool) => self.err(Diagnostic::error(value.span, "cannot store a condition in a buffer").hint("use `select(cond, a, b)`")),
                Some(Ty::Float) if want == Ty::Int => self.err(Diagnostic::error(value.span, format!("`{}` holds integers; this value is a float", target.name)).hint("cast it with i32(...)")),
                _ => {}
            }
        }
        if domain.is_none() && !body.is_empty() {
            // Errors were reported above.
        } else if body.is_empty() {
            self.err(Diagnostic::error(s.span, "an empty `parallel` block"));
        }
        for _ in 0..bound {
            self.scope_vars.pop();
        }
    }
}
