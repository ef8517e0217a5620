//! The row-wise lowering (every target): programs without gemms that load a tile of rows
//! into registers, compute on it element by element, reduce along its rows and store it —
//! softmax, RMSNorm, LayerNorm and the like.
//!
//! Requires: a checked spec with no `gemm` and no `dequant_int4`. Guarantees: a
//! [`RowsPlan`] that places every fragment, or errors (with spans) for what this lowering
//! does not take.
//!
//! Every 2-D fragment is one `[R, C]` row tile, laid out alike: the block's threads form
//! `row_groups` x `threads_per_row`; thread (g, l) holds rows g, g + row_groups, ... and of
//! each the `vector`-wide column vectors l, l + threads_per_row, ..., so that consecutive
//! threads move consecutive 16-byte vectors and a row's values sit in `threads_per_row`
//! consecutive threads. A 1-D fragment `[R]` holds one value per row a thread holds (row
//! statistics); a reduction folds a thread's values, then xor-shuffles within the warp (a
//! wave of 64 lanes on AMD), then (when a row spans warps) adds the warps' partials through
//! shared memory (LDS). `serial` and `unroll` loops repeat their statements on the same
//! registers, so a row longer than the tile is read in column chunks (a pass for its
//! statistics, another to write it: softmax over a vocabulary).

use crate::ast::*;
use crate::check::{eval_int, Info, Symbol};
use crate::diag::{Diagnostic, Span};
use crate::target::Target;

/// 32-bit registers per thread the row tile's data may take ([`RowsPlan::registers`]).
pub const MAX_ROW_VALUES: i64 = 128;

/// A global ↔ register copy of the row tile.
#[derive(Clone, Debug, PartialEq)]
pub struct RowsCopy {
    /// The copy statement.
    pub stmt: StmtId,
    /// The global tensor (2-D, row-major).
    pub tensor: usize,
    /// The 2-D fragment.
    pub buffer: usize,
    /// Global → registers (a load), or registers → global (a store).
    pub load: bool,
    /// The tile's origin in the tensor: its first row and first column, or for row values
    /// its first row alone.
    pub origin: Vec<Expr>,
    /// A 1-D fragment of row values to or from a 1-D tensor (one element per row), rather
    /// than the row tile to or from a 2-D tensor.
    pub row_values: bool,
}

/// A 1-D tensor read by one parallel block at a chunk's columns: `T[offset + j]`, `offset`
/// a multiple of the vector that does not depend on the element.
#[derive(Clone, Debug, PartialEq)]
pub struct ChunkVector {
    /// The `parallel(i, j)` statement.
    pub block: StmtId,
    /// The 1-D tensor.
    pub tensor: usize,
    /// The chunk's first column.
    pub offset: Expr,
}

/// How a row-wise program runs.
#[derive(Clone, Debug, PartialEq)]
pub struct RowsPlan {
    /// The row tile's rows.
    pub rows: i64,
    /// The row tile's columns.
    pub cols: i64,
    /// Elements per vector (16 bytes of the widest tensor copied, or fewer where the
    /// columns do not divide).
    pub vector: i64,
    /// Consecutive threads that hold one row.
    pub threads_per_row: i64,
    /// Rows the block holds at once (threads / threads_per_row).
    pub row_groups: i64,
    /// Rows each thread holds.
    pub rows_per_thread: i64,
    /// Vectors of each of its rows a thread holds.
    pub vectors_per_row: i64,
    /// The 2-D fragments (buffer indices), in spec order.
    pub tiles: Vec<usize>,
    /// The 1-D fragments (one value per row).
    pub stats: Vec<usize>,
    /// The copies, in spec order.
    pub copies: Vec<RowsCopy>,
    /// 1-D tensors that `parallel(i, j)` blocks read at the column index alone (`W[j]`): each
    /// thread loads them a vector at a time, beside its vectors of the row tile.
    pub column_vectors: Vec<usize>,
    /// 1-D tensors that a `parallel(i, j)` block reads at a chunk's column (`W[k*block_N + j]`):
    /// the thread loads its vectors of them when the block starts.
    pub chunk_vectors: Vec<ChunkVector>,
    /// Lanes per warp (32 on NVIDIA, 64 on AMD: a wave).
    pub warp: i64,
    /// Whether the program reduces rows that span several warps (through shared memory).
    pub cross_warp: bool,
    /// 32-bit registers a thread's data takes: its share of every 2-D fragment and its row
    /// values (one each), and its vectors of the column vectors (packed).
    pub registers: i64,
    /// Why, in a sentence: the thread layout's reasons.
    pub why: String,
}

impl RowsPlan {
    /// Register values per thread of each 2-D fragment.
    pub fn values_per_thread(&self) -> i64 {
        self.rows_per_thread * self.vectors_per_row * self.vector
    }

    /// Bytes of shared memory (LDS on AMD) the cross-warp reductions use (one float per warp).
    pub fn scratch_bytes(&self, threads: i64) -> u64 {
        if self.cross_warp { (threads / self.warp * 4) as u64 } else { 0 }
    }
}

/// Whether a spec is a row-wise program's candidate: no gemm and no dequant anywhere.
pub fn is_candidate(spec: &Spec) -> bool {
    let mut found = false;
    spec.walk(&mut |s| found |= matches!(s.kind, StmtKind::Gemm { .. } | StmtKind::Dequant { .. }));
    !found
}

/// Plans a row-wise program for `target` (32-lane warps on NVIDIA, 64-lane waves on AMD).
pub fn plan(spec: &Spec, info: &Info, target: Target) -> Result<RowsPlan, Vec<Diagnostic>> {
    let mut errors = Vec::new();
    let threads = spec.threads.0;
    let shape = |b: usize| info.buffer_shapes[b].as_slice();
    // Buffers: fragments only, 2-D ones all of one shape.
    let mut tiles = Vec::new();
    let mut stats = Vec::new();
    let mut tile_shape: Option<(i64, i64, Span)> = None;
    for (i, b) in spec.buffers.iter().enumerate() {
        if b.scope.0 != Scope::Fragment {
            errors.push(Diagnostic::error(b.scope.1, format!(
                "the {target} row-wise lowering (programs without gemms) keeps its tiles in registers: shared buffer `{}` has no place in it", b.name.name))
                .hint("declare the tile `scope: fragment`; copies fill fragments straight from global memory"));
            continue;
        }
        if !b.dtype.0.is_float() {
            errors.push(Diagnostic::error(b.dtype.1, format!("the row-wise lowering computes in floating point; `{}` is {}", b.name.name, b.dtype.0))
                .hint("declare it f32: copies convert to and from integer tensors (toward zero, saturating, on the way out), and `rint` rounds"));
        } else if target.is_amd() && b.dtype.0 != DType::F32 {
            errors.push(Diagnostic::error(b.dtype.1, format!("the {target} row-wise lowering keeps fragments in f32; `{}` is {}", b.name.name, b.dtype.0))
                .hint("declare it f32 (copies convert on the way in and out)"));
        }
        match *shape(i) {
            [r, c] => {
                match tile_shape {
                    None => tile_shape = Some((r, c, b.shape_span)),
                    Some((r0, c0, first)) if (r0, c0) != (r, c) => errors.push(Diagnostic::error(b.shape_span, format!(
                        "the row-wise lowering lays every 2-D fragment out as one row tile, but `{}` is [{r}, {c}] where another is [{r0}, {c0}]", b.name.name))
                        .label(first, "the row tile's shape was fixed here")
                        .hint("give every 2-D fragment the same shape")),
                    Some(_) => {}
                }
                tiles.push(i);
            }
            [_] => stats.push(i),
            _ => errors.push(Diagnostic::error(b.shape_span, format!("the row-wise lowering takes 1-D and 2-D fragments; `{}` has {} dimensions", b.name.name, shape(i).len()))),
        }
    }
    let Some((rows, cols, tile_span)) = tile_shape else {
        errors.push(Diagnostic::error(spec.kernel.span, format!(
            "the {target} target lowers programs without gemms row-wise, and this one has no 2-D fragment to hold its rows"))
            .hint("declare a fragment `[block_M, block_N]`, fill it with `copy(X[bx*block_M, 0], x)`, compute on it and copy it out"));
        return Err(errors);
    };
    for &b in &stats {
        if shape(b)[0] != rows {
            errors.push(Diagnostic::error(spec.buffers[b].shape_span, format!(
                "`{}` holds one value per row of the row tile, which has {rows} rows, but it has {}", spec.buffers[b].name.name, shape(b)[0]))
                .label(tile_span, "the row tile's shape")
                .hint(format!("make it [{rows}]")));
        }
    }
    // Statements: copies, fills, parallel blocks and row reductions, and serial (or unrolled)
    // loops of them: a row wider than the tile is walked in column chunks (`X[r, k*block_N]`).
    let buffer = |n: &str| match info.symbols.get(n) {
        Some(Symbol::Buffer(b)) => Some(*b),
        _ => None,
    };
    let tensor = |n: &str| match info.symbols.get(n) {
        Some(Symbol::Tensor(t)) => Some(*t),
        _ => None,
    };
    let mut copies = Vec::new();
    let mut widest = 1;
    let mut stmts = Vec::new();
    flatten(&spec.body, &mut stmts);
    for s in stmts.iter().copied() {
        match &s.kind {
            StmtKind::Clear { .. } | StmtKind::Fill { .. } | StmtKind::Parallel { .. } => {}
            StmtKind::Loop { kind: LoopKind::Serial | LoopKind::Unroll, .. } => {}
            StmtKind::Loop { kind: LoopKind::Pipelined, .. } => {
                errors.push(Diagnostic::error(s.span, "the row-wise lowering has no shared-memory stages to pipeline: a `pipelined` loop has no meaning in it")
                    .hint("write `serial(k, n)` (or `unroll`): each trip loads its tile into the same registers"));
            }
            StmtKind::Reduce { op, src, dim, .. } => {
                if !buffer(&src.name).is_some_and(|b| tiles.contains(&b)) {
                    errors.push(Diagnostic::error(src.span, format!("`{}` reduces `{}`, which is not a 2-D fragment", op.keyword(), src.name))
                        .hint("reduce a 2-D fragment into a 1-D one"));
                } else if dim.0 != 1 {
                    errors.push(Diagnostic::error(dim.1, "the row-wise lowering reduces along dim 1 (each row into one value) only")
                        .hint("lay the data out so that the reduced dimension is the columns"));
                }
            }
            StmtKind::Copy { src, dst } => {
                let (from, to) = (tensor(&src.name.name), tensor(&dst.name.name));
                let (t, b, op, load) = match (from, to) {
                    (Some(t), None) => (t, buffer(&dst.name.name), src, true),
                    (None, Some(t)) => (t, buffer(&src.name.name), dst, false),
                    _ => {
                        errors.push(Diagnostic::error(s.span, "the row-wise lowering copies between global memory and a 2-D fragment only")
                            .hint("compute one fragment from another in a `parallel` block instead"));
                        continue;
                    }
                };
                let ten = &spec.tensors[t];
                // Row values: a 1-D fragment to or from a 1-D tensor, one value per row
                // (LayerNorm's saved mean and rstd, softmax's log-sum-exp).
                if let Some(b) = b.filter(|b| stats.contains(b)) {
                    let origin = match (&op.origin, &op.tile_dims) {
                        (Some(o), None) if o.len() == 1 && ten.shape.len() == 1 => o[0].clone(),
                        _ => {
                            errors.push(Diagnostic::error(op.span, format!("a fragment of row values copies to or from a 1-D tensor at the tile's first row; `{}` has {} dimension(s)", ten.name.name, ten.shape.len()))
                                .label(ten.span, "declared here")
                                .hint("declare the tensor [M] and write e.g. `copy(rstd, R[bx*block_M])`"));
                            continue;
                        }
                    };
                    copies.push(RowsCopy { stmt: s.id, tensor: t, buffer: b, load, origin: vec![origin], row_values: true });
                    continue;
                }
                let Some(b) = b.filter(|b| tiles.contains(b)) else {
                    errors.push(Diagnostic::error(s.span, "the row-wise lowering copies whole row tiles, or row values to and from a 1-D tensor: this fragment is neither")
                        .hint("copy into or out of the [rows, columns] fragment, or a [rows] fragment"));
                    continue;
                };
                if ten.shape.len() != 2 || ten.order.0 != Order::RowMajor {
                    errors.push(Diagnostic::error(op.span, format!("the row-wise lowering reads and writes 2-D row-major tensors; `{}` is not one", ten.name.name))
                        .label(ten.span, "declared here")
                        .hint("view the data as a row-major [rows, columns] tensor"));
                    continue;
                }
                let origin = match (&op.origin, &op.tile_dims) {
                    (Some(o), None) if o.len() == 2 => o.clone(),
                    _ => {
                        errors.push(Diagnostic::error(op.span, "the row-wise lowering needs the tile's origin as `[row, column]`")
                            .hint("write e.g. `X[bx*block_M, 0]`"));
                        continue;
                    }
                };
                widest = widest.max(ten.dtype.0.bytes() as i64);
                copies.push(RowsCopy { stmt: s.id, tensor: t, buffer: b, load, origin, row_values: false });
            }
            StmtKind::If { .. } | StmtKind::Assign { .. } | StmtKind::Gemm { .. } | StmtKind::Dequant { .. } => {
                errors.push(Diagnostic::error(s.span, "the row-wise lowering (programs without gemms) takes copies, `clear`, `fill`, `parallel` blocks, row reductions and `serial` / `unroll` loops of them")
                    .hint("express the computation element-wise in `parallel` blocks; conditions go into `select`"));
            }
        }
    }
    // (A load refused above has its own error.)
    let loads = stmts.iter().any(|s| matches!(&s.kind, StmtKind::Copy { src, .. } if tensor(&src.name.name).is_some()));
    if !loads {
        errors.push(Diagnostic::error(spec.kernel.span, "this row-wise program never loads a tile: nothing fills its fragments from global memory")
            .hint("add `copy(X[bx*block_M, 0], x)`"));
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    // The vector: 16 bytes of the widest tensor copied, halved until the columns divide.
    let mut vector = 16 / widest;
    while vector > 1 && cols % vector != 0 {
        vector /= 2;
    }
    let aligned = |e: &Expr| match &e.kind {
        ExprKind::Int(v) => v % vector == 0,
        ExprKind::Binary(BinOp::Mul, x, y) => [x, y].iter().any(|f| eval_int(f, &info.symbols).is_some_and(|v| v % vector == 0)),
        _ => false,
    };
    for cp in copies.iter().filter(|cp| !cp.row_values) {
        let e = &cp.origin[1];
        if !aligned(e) {
            errors.push(Diagnostic::error(e.span, format!("the tile's first column must be a multiple of {vector} (the row tile's vectors)"))
                .hint(format!("write it as 0 or `<tile index>*block_N` with block_N a multiple of {vector}")));
        }
    }
    // Threads per row: up to a warp, more only when the tile has too few rows for that.
    let vpr = cols / vector;
    let mut l0 = 1;
    let warp: i64 = if target.is_amd() { 64 } else { 32 };
    while l0 * 2 <= vpr.min(warp) && vpr % (l0 * 2) == 0 {
        l0 *= 2;
    }
    let (threads_per_row, why) = if threads % l0 == 0 && threads / l0 <= rows && rows % (threads / l0) == 0 {
        (l0, format!("{l0} threads per row: the most (up to a {}) that divide the row's {vpr} vectors of {vector} elements", if target.is_amd() { "wave" } else { "warp" }))
    } else if rows <= threads && threads % rows == 0 && (threads / rows).count_ones() == 1 && vpr % (threads / rows) == 0 {
        let l = threads / rows;
        (l, format!("{l} threads per row: the tile's {rows} row(s) share the block's threads"))
    } else {
        errors.push(Diagnostic::error(spec.threads.1, format!(
            "the row-wise lowering cannot spread a [{rows}, {cols}] tile over {threads} threads: a row has {vpr} vector(s) of {vector} elements, so at most {l0} thread(s) share it and the block would hold {} rows at a time, which the tile's {rows} are not a multiple of; nor can the tile's rows share all the threads ({} per row for {vpr} vector(s))",
            threads / l0, if rows <= threads && threads % rows == 0 { (threads / rows).to_string() } else { format!("{threads}/{rows}") }))
            .label(tile_span, "the row tile")
            .hint("make the tile's rows a multiple of the rows the block holds at a time, or use fewer threads, or wider rows"));
        return Err(errors);
    };
    if threads % warp != 0 {
        errors.push(Diagnostic::error(spec.threads.1, format!("the {target} row-wise lowering needs whole {}: {threads} threads are not a multiple of {warp}", if target.is_amd() { "waves" } else { "warps" }))
            .hint(format!("use a multiple of {warp} threads, or a `targets:` override for {target}")).unsupported_on_target());
    }
    // 1-D tensors read at the column index of a parallel block over the row tile, in vectors of
    // at most 16 bytes (and not where the vector's local name, `<tensor>_vec`, is a spec name);
    // and those read at a chunk's column, `W[e + j]` with `e` a multiple of the vector that
    // does not depend on the element (`k*block_N` in a loop over column chunks), loaded as
    // vectors at the start of that block (`<tensor>_chunk`).
    let mut column_vectors = Vec::new();
    let mut chunk_vectors: Vec<ChunkVector> = Vec::new();
    spec.walk(&mut |s| {
        let StmtKind::Parallel { vars, body } = &s.kind else { return };
        if vars.len() != 2 {
            return;
        }
        let is_var = |e: &Expr, v: &Ident| matches!(&e.kind, ExprKind::Name(n) if *n == v.name);
        // Whether `e` is the same for every element: no parallel variable, no element read.
        let uniform = |e: &Expr| {
            let mut ok = true;
            e.visit(&mut |x| {
                ok &= match &x.kind {
                    ExprKind::Name(n) => vars.iter().all(|v| v.name != *n),
                    ExprKind::Index(..) => false,
                    _ => true,
                };
                ok
            });
            ok
        };
        for st in body {
            let StmtKind::Assign { value, .. } = &st.kind else { continue };
            value.visit(&mut |x| {
                let ExprKind::Index(name, idx) = &x.kind else { return true };
                let Some(t) = tensor(&name.name).filter(|t| spec.tensors[*t].shape.len() == 1 && vector * spec.tensors[*t].dtype.0.bytes() as i64 <= 16) else { return true };
                let [e] = idx.as_slice() else { return true };
                if is_var(e, &vars[1]) {
                    if !info.symbols.contains_key(&format!("{}_vec", name.name)) && !column_vectors.contains(&t) {
                        column_vectors.push(t);
                    }
                } else if let ExprKind::Binary(BinOp::Add, a, b) = &e.kind
                    && let Some(offset) = if is_var(b, &vars[1]) { Some(a) } else if is_var(a, &vars[1]) { Some(b) } else { None }
                    && uniform(offset)
                    && aligned(offset)
                    && !info.symbols.contains_key(&format!("{}_chunk", name.name))
                    && !chunk_vectors.iter().any(|cv| cv.block == s.id && cv.tensor == t)
                {
                    chunk_vectors.push(ChunkVector { block: s.id, tensor: t, offset: (**offset).clone() });
                }
                true
            });
        }
    });
    let row_groups = threads / threads_per_row;
    let rows_per_thread = rows / row_groups;
    let vectors_per_row = vpr / threads_per_row;
    let values_per_thread = rows_per_thread * vectors_per_row * vector;
    let column_registers: i64 = column_vectors.iter().chain(chunk_vectors.iter().map(|cv| &cv.tensor))
        .map(|t| (vectors_per_row * vector * spec.tensors[*t].dtype.0.bytes() as i64 + 3) / 4).sum();
    let values = tiles.len() as i64 * values_per_thread + column_registers + stats.len() as i64 * rows_per_thread;
    let mut has_reduction = false;
    spec.walk(&mut |s| has_reduction |= matches!(s.kind, StmtKind::Reduce { .. }));
    let p = RowsPlan {
        rows,
        cols,
        vector,
        threads_per_row,
        row_groups,
        rows_per_thread,
        vectors_per_row,
        tiles,
        stats,
        copies,
        column_vectors,
        chunk_vectors,
        warp,
        cross_warp: threads_per_row > warp && has_reduction,
        registers: values,
        why: format!("{why}; consecutive threads move consecutive {}-byte vectors", vector * widest),
    };
    if values > MAX_ROW_VALUES {
        errors.push(Diagnostic::error(spec.threads.1, format!(
            "the row tile's fragments need {values} registers per thread with {threads} threads ({} for each of {} 2-D fragment(s), {rows_per_thread} for each of {} fragment(s) of row values{}), over the {MAX_ROW_VALUES} this lowering allows",
            p.values_per_thread(), p.tiles.len(), p.stats.len(),
            if column_registers == 0 { String::new() } else { format!(", {} for the 1-D tensor(s) read at the column index", column_registers) }))
            .label(tile_span, "the row tile")
            .hint("use more threads, fewer rows per block, or fewer 2-D fragments (compute into one in place)"));
    }
    if errors.is_empty() { Ok(p) } else { Err(errors) }
}

/// `stmts` and the bodies of their `serial` and `unroll` loops, in program order (a loop
/// before its body); parallel blocks' assignments and other blocks' bodies are not entered.
pub fn flatten<'a>(stmts: &'a [Stmt], out: &mut Vec<&'a Stmt>) {
    for s in stmts {
        out.push(s);
        if let StmtKind::Loop { kind: LoopKind::Serial | LoopKind::Unroll, body, .. } = &s.kind {
            flatten(body, out);
        }
    }
}
