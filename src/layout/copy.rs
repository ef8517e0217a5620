//! Common and free levels for memory: shared-buffer majorness and swizzles, copy atoms,
//! vector widths and thread layouts.

use super::{Alignment, FragmentLayout, Infer, SharedLayout, Swizzle};
use crate::ast::*;
use crate::diag::Diagnostic;

/// A tile's coordinates along its buffer's dimensions, and the fixed indices (tensor
/// dimension, index) of the tensor dimensions it does not span.
type TileCoords = (Vec<Expr>, Vec<(usize, Expr)>);

/// What a copy moves between.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CopyKind {
    /// Global tile → shared buffer, with cp.async.
    GlobalToShared,
    /// MMA accumulator → global tile, converted and staged through shared memory so that
    /// the global writes are wide and coalesced.
    AccumulatorToGlobal,
    /// MMA accumulator → shared buffer, converted to the buffer's dtype: each thread writes
    /// the values it holds (pairs of neighbouring columns as one 32-bit store where the
    /// buffer's rows are contiguous), between two barriers.
    AccumulatorToShared,
}

/// A thread arrangement over a 2-D tile, in the copy's CuTe mode order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ThreadLayout {
    /// Threads along each CuTe mode.
    pub shape: (i64, i64),
    /// Whether mode 0 is the contiguous one (threads numbered along it first).
    pub contiguous_first: bool,
}

/// How one copy statement lowers.
#[derive(Clone, Debug, PartialEq)]
pub struct CopyPlan {
    /// What kind of copy.
    pub kind: CopyKind,
    /// The global tensor (`None`: accumulator → shared).
    pub tensor: Option<usize>,
    /// The buffer: the shared destination of a global → shared copy, the accumulator of the
    /// others.
    pub buffer: usize,
    /// Accumulator → shared: the shared buffer written.
    pub shared_dst: Option<usize>,
    /// The tile's coordinate along each buffer dimension (origin / extent).
    pub tile_coords: Vec<Expr>,
    /// Tensor dimensions the copy does not span, with their fixed index (`Q[b, m0:, h, :]`
    /// fixes dims 0 and 2): the tile is taken from the tensor sliced at these.
    pub fixed: Vec<(usize, Expr)>,
    /// Spec dims in the CuTe mode order the copy works in.
    pub cute_dims: Vec<usize>,
    /// Tile extents in CuTe order.
    pub cute_shape: Vec<i64>,
    /// The CuTe copy operation.
    pub atom: String,
    /// Elements per vector.
    pub vector_elems: i64,
    /// Bits per vector.
    pub vector_bits: i64,
    /// Thread arrangement.
    pub threads: ThreadLayout,
    /// Shared bytes used for staging (epilogues), 0 otherwise.
    pub staging_bytes: u64,
    /// The staging tile's swizzle and atom (epilogues).
    pub staging_swizzle: Option<(Swizzle, (i64, i64))>,
    /// sm90a: issued as TMA loads instead of cp.async (global → shared only).
    pub tma: Option<super::TmaLoad>,
    /// Global → shared copies of 16-bit per-group scales (or zero points) in 4-byte vectors,
    /// from a tensor whose rows may hold an odd number of them (`K / 128` per weight row with
    /// K = 896, 1152, ...): every other row then starts 2 bytes into a word, where cp.async
    /// cannot start. The kernel gets a second instantiation for that case (`kOddRows`, chosen
    /// by the launcher), which copies each row of the tile from the 4-byte word holding its
    /// first element into a shared row two elements wider, and whose dequant reads such rows
    /// one element later. Only a dequant reading the buffer (its only reader) knows the shift.
    pub odd_rows: bool,
    /// Why.
    pub why: String,
}

impl CopyPlan {
    /// Threads that take part: fewer than the block's when the tile has fewer vectors.
    pub fn active_threads(&self) -> i64 {
        self.threads.shape.0 * self.threads.shape.1
    }
}

fn log2(x: i64) -> u32 {
    63 - (x.max(1) as u64).leading_zeros()
}

/// The swizzle that makes 16-byte accesses along rows of `row_elems` elements of `bytes`
/// each conflict-free: XOR the 16-byte chunk index with the 128-byte line index.
pub fn swizzle_for(row_elems: i64, bytes: u64) -> (Swizzle, i64) {
    let row_bytes = (row_elems as u64 * bytes).min(128);
    let bits = if row_bytes >= 32 { log2((row_bytes / 16) as i64) } else { 0 };
    let atom_elems = (row_bytes / bytes).max(1) as i64;
    (Swizzle { bits, base: log2((16 / bytes.min(16)) as i64), shift: 3 }, atom_elems)
}

impl Infer<'_> {
    /// The enclosing pipelined loop of every statement.
    pub fn pipelined_parent(&self) -> std::collections::BTreeMap<StmtId, StmtId> {
        fn go(stmts: &[Stmt], parent: Option<StmtId>, out: &mut std::collections::BTreeMap<StmtId, StmtId>) {
            for s in stmts {
                if let Some(p) = parent {
                    out.insert(s.id, p);
                }
                match &s.kind {
                    StmtKind::Loop { kind: LoopKind::Pipelined, body, .. } => go(body, Some(s.id), out),
                    StmtKind::Loop { body, .. } | StmtKind::Parallel { body, .. } => go(body, parent, out),
                    StmtKind::If { then_body, else_body, .. } => {
                        go(then_body, parent, out);
                        go(else_body, parent, out);
                    }
                    _ => {}
                }
            }
        }
        let mut out = std::collections::BTreeMap::new();
        go(&self.spec.body, None, &mut out);
        out
    }

    fn contiguous_dim(&self, tensor: usize) -> usize {
        let t = &self.spec.tensors[tensor];
        match (t.shape.len(), t.order.0) {
            (2, Order::ColMajor) => 0,
            (n, _) => n.saturating_sub(1),
        }
    }

    /// The tensor dimensions a copy operand's tile spans, in buffer-dimension order.
    fn tile_dims(&self, op: &Operand, tensor: usize) -> Vec<usize> {
        op.tile_dims.clone().unwrap_or_else(|| (0..self.spec.tensors[tensor].shape.len()).collect())
    }

    /// The buffer dimension that lies along the tensor's contiguous dimension, or an error
    /// when the tile does not span it (every element would be a separate transaction).
    fn tile_contiguous(&mut self, op: &Operand, tensor: usize) -> Option<usize> {
        let c = self.contiguous_dim(tensor);
        let dims = self.tile_dims(op, tensor);
        let found = dims.iter().position(|d| *d == c);
        if found.is_none() {
            let t = &self.spec.tensors[tensor];
            self.err(Diagnostic::error(op.span, format!(
                "this tile of `{}` does not span its contiguous dimension (dim {c}), so it cannot be moved in vectors",
                t.name.name))
                .hint(format!("make dim {c} one of the tile's slices (`:`)")));
        }
        found
    }

    pub(super) fn shared_layouts(&mut self) {
        let parents = self.pipelined_parent();
        let stmts = self.statements();
        for (i, buf) in self.spec.buffers.iter().enumerate() {
            if buf.scope.0 != Scope::Shared {
                continue;
            }
            let shape = self.shape(i).to_vec();
            let bytes = buf.dtype.0.bytes();
            let role = self.plan.mmas.values().find_map(|m| {
                if m.a == i {
                    Some(("A", vec![m.a_dims.0, m.a_dims.1]))
                } else if m.b == i {
                    Some(("B", vec![m.b_dims.0, m.b_dims.1]))
                } else {
                    None
                }
            });
            let fill = stmts.iter().find_map(|s| match &s.kind {
                StmtKind::Copy { src, dst } if dst.name.name == buf.name.name => {
                    self.tensor_index(&src.name.name).map(|t| (s.id, t, src))
                }
                _ => None,
            });
            let (cute_dims, why_role) = match &role {
                Some((r, dims)) => (dims.clone(), format!("gemm operand {r}, viewed as ({}, K)", if *r == "A" { "M" } else { "N" })),
                None => ((0..shape.len()).collect(), "not a gemm operand".to_string()),
            };
            // Written from registers by `copy(acc, buf)`: each thread holds pairs of
            // neighbouring accumulator columns, so rows contiguous make them 32-bit stores.
            let from_registers = stmts.iter().find_map(|s| match &s.kind {
                StmtKind::Copy { src, dst } if dst.name.name == buf.name.name => self.buffer_index(&src.name.name)
                    .filter(|b| self.spec.buffers[*b].scope.0 == Scope::Fragment)
                    .map(|b| self.spec.buffers[b].name.name.clone()),
                _ => None,
            });
            let (contiguous_dim, why_contiguous) = match (fill, from_registers) {
                (None, Some(acc)) if shape.len() == 2 => {
                    (1, format!("written from `{acc}`'s registers, whose threads hold pairs of neighbouring columns, so dim 1 is contiguous (one 32-bit store per pair)"))
                }
                (Some((s, t, op)), _) => {
                    let Some(d) = self.tile_contiguous(op, t) else {
                        self.failed_stmts.insert(s);
                        self.failed_buffers.insert(i);
                        continue;
                    };
                    // The copy plan (plan_g2s) adds the vector it chose to this clause.
                    (d, format!("{} contiguous to match `{}`", dim_label(&self.spec.buffers[i].shape, d), self.spec.tensors[t].name.name))
                }
                (None, _) => {
                    (cute_dims.last().copied().unwrap_or(0), "not filled from global memory, so K (or the last dim) is contiguous".to_string())
                }
            };
            let mut why_swizzle = String::new();
            let cute_shape: Vec<i64> = cute_dims.iter().map(|d| shape[*d]).collect();
            let k_major = role.as_ref().map(|(_, dims)| dims[1] == contiguous_dim);
            // A dequant fused into its gemm: the unpacked tile is never stored, and the packed
            // one is read a 16-byte chunk of eight rows at a time by each quad of lanes.
            let fused_dst = self.fused_dequant(|d| matches!(d, StmtKind::Dequant { dst, .. } if dst.name == buf.name.name));
            let fused_src = self.fused_dequant(|d| matches!(d, StmtKind::Dequant { src, .. } if src.name == buf.name.name));
            let (mut swizzle, atom_elems) = swizzle_for(shape[contiguous_dim], bytes);
            if role.is_none() && swizzle.bits > 0 && !fused_src {
                // Only ldmatrix's column reads of gemm operands need the swizzle; other
                // tiles are written by cp.async and read along their rows, conflict-free as
                // they are, and plain strides keep their addressing cheap.
                swizzle.bits = 0;
                why_swizzle = "no swizzle: it is only read along rows, which plain strides keep conflict-free".into();
            }
            let atom_first_contiguous = cute_dims.len() == 2 && cute_dims[0] == contiguous_dim;
            let atom_shape = if cute_dims.len() < 2 {
                (atom_elems, 1)
            } else if atom_first_contiguous {
                (atom_elems, 8)
            } else {
                (8, atom_elems)
            };
            if swizzle.bits > 0 {
                why_swizzle = format!(
                    "Swizzle<{},{},{}> on a {}x{} atom spreads each 128-byte line's 16-byte chunks over all banks for both the {} writes and the {}",
                    swizzle.bits, swizzle.base, swizzle.shift, atom_shape.0, atom_shape.1, if fill.is_some() { "cp.async" } else { "register" },
                    if fused_src { "fused gemm's reads (a 16-byte chunk from each of eight rows at a time)" } else { "ldmatrix reads" });
            }
            for (d, ext) in cute_shape.iter().enumerate() {
                let a = if d == 0 { atom_shape.0 } else { atom_shape.1 };
                if ext % a != 0 {
                    self.err(Diagnostic::error(buf.shape_span, format!(
                        "shared buffer `{}` extent {ext} is not a multiple of its {a}-element swizzle atom", buf.name.name))
                        .hint("use extents that are multiples of 8 (and of 64 along the contiguous dimension, or at most 64)"));
                }
            }
            let parent = fill.and_then(|(s, _, _)| parents.get(&s));
            let staged = parent.is_some();
            let stages = parent.and_then(|p| self.info.stages.get(p)).copied().unwrap_or(1);
            let elems: i64 = shape.iter().product();
            self.plan.shared.insert(i, SharedLayout {
                cute_dims,
                cute_shape,
                contiguous_dim,
                k_major,
                swizzle,
                atom_shape,
                atom_first_contiguous,
                stages,
                staged,
                bytes: if fused_dst { 0 } else { elems as u64 * bytes * stages as u64 },
                odd_rows: false,
                registers_only: fused_dst,
                gmma_atom: None,
                // A fused dequant's destination is never stored: one clause says so.
                why_role: if fused_dst {
                    "gemm operand B, never written: the dequant that fills it is fused into its only reader, the gemm, which unpacks its B fragments in registers from the packed words".to_string()
                } else {
                    why_role
                },
                why_contiguous: if fused_dst { String::new() } else { why_contiguous },
                why_swizzle: if fused_dst { String::new() } else { why_swizzle },
            });
        }
    }

    /// Whether a fused dequant statement satisfies `which`.
    fn fused_dequant(&self, which: impl Fn(&StmtKind) -> bool) -> bool {
        self.fused.keys().any(|id| self.spec.stmt(*id).is_some_and(|s| which(&s.kind)))
    }

    /// The tile coordinates along the buffer's dimensions, and the fixed indices of the
    /// tensor dimensions the tile does not span.
    fn tile_coords(&mut self, op: &Operand, tensor: usize, shape: &[i64]) -> Option<TileCoords> {
        let origin = op.origin.as_ref()?;
        let dims = self.tile_dims(op, tensor);
        let fixed: Vec<(usize, Expr)> = (0..origin.len()).filter(|d| !dims.contains(d)).map(|d| (d, origin[d].clone())).collect();
        let mut coords = Vec::new();
        for (e, ext) in dims.iter().map(|d| &origin[*d]).zip(shape) {
            let c = match &e.kind {
                ExprKind::Int(0) => Some(Expr { kind: ExprKind::Int(0), span: e.span }),
                // A one-wide tile starts anywhere: the origin is the tile index.
                _ if *ext == 1 => Some(e.clone()),
                ExprKind::Binary(BinOp::Mul, x, y) => {
                    if crate::check::eval_int(y, &self.info.symbols) == Some(*ext) {
                        Some((**x).clone())
                    } else if crate::check::eval_int(x, &self.info.symbols) == Some(*ext) {
                        Some((**y).clone())
                    } else {
                        None
                    }
                }
                _ => None,
            };
            match c {
                Some(c) if !crate::check::non_negative(&c, &self.info.symbols) => {
                    self.err(Diagnostic::error(e.span, format!("the {} target's copies check a tile against the tensor's far edges only, and this tile index may be negative", self.target))
                        .hint("start tiles at index 0 or later (`k*block_K`, not `(k - 1)*block_K`); a neighbour's element can be read by index in a `parallel` block, which checks both edges"));
                    return None;
                }
                Some(c) => coords.push(c),
                None => {
                    self.err(Diagnostic::error(e.span, format!("the {} target needs tile-aligned origins: this origin is not a multiple of the tile extent {ext}", self.target))
                        .hint(format!("write the origin as `<tile index>*{ext}` (e.g. `by*block_M`)")));
                    return None;
                }
            }
        }
        for (_, e) in &fixed {
            if !crate::check::non_negative(e, &self.info.symbols) {
                self.err(Diagnostic::error(e.span, format!("the {} target's copies check a tile against the tensor's far edges only, and this index may be negative", self.target))
                    .hint("index the dimension the tile does not span with a value that is 0 or more (a block index, a loop variable)"));
                return None;
            }
        }
        Some((coords, fixed))
    }

    pub(super) fn require_alignment(&mut self, tensor: usize, v: i64, why: String) {
        if v <= 1 || self.plan.alignment.iter().any(|a| a.tensor == tensor && a.vector_elems >= v) {
            return;
        }
        self.set_alignment(Alignment { tensor, vector_elems: v, whole_rows: true, why });
    }

    /// Makes `a` the launcher's one alignment check of its tensor.
    fn set_alignment(&mut self, a: Alignment) {
        self.plan.alignment.retain(|x| x.tensor != a.tensor);
        self.plan.alignment.push(a);
        self.plan.alignment.sort_by_key(|x| x.tensor);
    }

    /// Thread layout for `threads` threads moving `v`-element vectors over a tile whose
    /// contiguous mode is `c` (0 or 1) with CuTe extents `shape`. With `partial`, a tile
    /// smaller than one vector per thread is moved by the first threads only (the copy is
    /// guarded by `tid < active`).
    fn thread_layout(&self, shape: &[i64], c: usize, v: i64, partial: bool) -> Option<ThreadLayout> {
        let threads = self.spec.threads.0;
        let along = (shape[c] / v).min(threads);
        if along < 1 || threads % along != 0 || shape[c] % (along * v) != 0 {
            return None;
        }
        let mut across = threads / along;
        let other = shape.get(1 - c).copied().unwrap_or(1);
        if partial && other < across && across % other == 0 {
            across = other;
        }
        if other % across != 0 {
            return None;
        }
        Some(if c == 0 { ThreadLayout { shape: (along, across), contiguous_first: true } } else { ThreadLayout { shape: (across, along), contiguous_first: false } })
    }

    pub(super) fn copy_plans(&mut self) {
        for s in self.statements() {
            let StmtKind::Copy { src, dst } = &s.kind else { continue };
            let (sb, db) = (self.buffer_index(&src.name.name), self.buffer_index(&dst.name.name));
            let (st, dt) = (self.tensor_index(&src.name.name), self.tensor_index(&dst.name.name));
            let scope = |b: Option<usize>| b.map(|b| self.spec.buffers[b].scope.0);
            match (st, db, sb, dt) {
                (Some(t), Some(b), _, _) if scope(Some(b)) == Some(Scope::Shared) => self.plan_g2s(s, src, t, b),
                (_, _, Some(b), Some(t)) if matches!(self.plan.fragments.get(&b), Some(FragmentLayout::MmaAccumulator { .. })) => self.plan_acc_store(s, dst, b, t),
                (_, Some(d), Some(b), _) if scope(Some(d)) == Some(Scope::Shared) && matches!(self.plan.fragments.get(&b), Some(FragmentLayout::MmaAccumulator { .. })) => {
                    self.plan_acc_to_shared(s, b, d)
                }
                _ if [sb, db].iter().flatten().any(|b| self.failed_buffers.contains(b)) => {
                    self.failed_stmts.insert(s.id);
                }
                _ => {
                    let what = |b: Option<usize>, t: Option<usize>| match (b, t) {
                        (Some(b), _) => match self.plan.fragments.get(&b) {
                            Some(FragmentLayout::Striped { .. }) => "a fragment that no gemm owns".to_string(),
                            _ => format!("{} memory", self.spec.buffers[b].scope.0.name()),
                        },
                        _ => "global memory".to_string(),
                    };
                    self.err(Diagnostic::error(s.span, format!(
                        "the {} target cannot lower a copy from {} to {} yet",
                        self.target, what(sb, st), what(db, dt)))
                        .hint("supported: global → shared (cp.async), gemm accumulator → global (the epilogue) and gemm accumulator → shared"));
                }
            }
        }
    }

    fn plan_g2s(&mut self, s: &Stmt, src: &Operand, t: usize, b: usize) {
        let shape = self.shape(b).to_vec();
        let Some((coords, fixed)) = self.tile_coords(src, t, &shape) else {
            self.failed_stmts.insert(s.id);
            return;
        };
        let Some(layout) = self.plan.shared.get(&b).cloned() else {
            self.failed_stmts.insert(s.id);
            return;
        };
        let bytes = self.spec.buffers[b].dtype.0.bytes() as i64;
        let c = layout.cute_dims.iter().position(|d| *d == layout.contiguous_dim).unwrap_or(0);
        // Scales and zero points that the odd-rows instantiation can copy take rows of any
        // length as 4-byte pairs. A wider vector (a 512-deep k-tile's four scales, 8 bytes)
        // would have the launcher refuse row lengths the spec allows (`scales [N, K/128]`
        // would need `(K/128) % 4 == 0`), so it is used only where the sizes already make rows
        // whole vectors, or where the threads cannot split the tile into pairs. Scale tiles
        // are small: the narrower copy costs little.
        let any_rows = bytes == 2 && layout.swizzle.bits == 0 && self.odd_rows_fit(s, t, b, &layout, &coords)
            && layout.cute_shape[c] % 2 == 0 && self.thread_layout(&layout.cute_shape, c, 2, true).is_some();
        let divisors = self.info.size_divisors(self.spec);
        let (mut chosen, mut passed_over) = (None, None);
        for vbytes in [16, 8, 4] {
            let v = vbytes / bytes;
            let fits = v >= 1 && layout.cute_shape[c] % v == 0;
            if any_rows && v > 2 && !self.info.whole_vectors(&divisors, &self.spec.tensors[t].shape[1], v) {
                if fits && self.thread_layout(&layout.cute_shape, c, v, true).is_some() {
                    passed_over = passed_over.or(Some((v, vbytes)));
                }
                continue;
            }
            if fits && let Some(tl) = self.thread_layout(&layout.cute_shape, c, v, true) {
                chosen = Some((v, vbytes, tl));
                break;
            }
        }
        let row_bytes = layout.cute_shape[c] * bytes;
        if chosen.is_none() && row_bytes < 4 {
            let dtype = self.spec.buffers[b].dtype.0;
            self.err(Diagnostic::error(s.span, format!(
                "the {:?} tile of `{}` is {row_bytes} contiguous {} wide, and cp.async moves at least 4 contiguous bytes",
                shape, self.spec.buffers[b].name.name, if row_bytes == 1 { "byte" } else { "bytes" }))
                .hint(format!("widen the tile along its contiguous dimension to {} or more {} elements (for one scale per group, a k-tile of at least {} groups)",
                    4 / bytes, dtype.name(), 4 / bytes)));
            self.failed_stmts.insert(s.id);
            return;
        }
        let Some((v, vbytes, threads)) = chosen else {
            self.err(Diagnostic::error(s.span, format!(
                "the {} threads cannot split the {:?} tile of `{}` into cp.async vectors evenly",
                self.spec.threads.0, shape, self.spec.buffers[b].name.name))
                .hint("make the tile hold a multiple of threads × 8 elements"));
            self.failed_stmts.insert(s.id);
            return;
        };
        let atom = if vbytes == 16 { "SM80_CP_ASYNC_CACHEGLOBAL<cute::uint128_t>".to_string() } else { format!("SM80_CP_ASYNC_CACHEALWAYS<cute::uint{}_t>", vbytes * 8) };
        let tname = self.spec.tensors[t].name.name.clone();
        let odd_rows = v == 2 && any_rows;
        // The layout matched the tensor's contiguous dimension; its reason is the vector chosen.
        if let Some(l) = self.plan.shared.get_mut(&b) {
            l.why_contiguous += &format!(" so cp.async moves {vbytes}-byte vectors");
            if odd_rows {
                l.odd_rows = true;
                l.bytes += (layout.cute_shape[0] * 2 * bytes * layout.stages) as u64;
                // The odd-rows instantiation's rows (dim 1, odd_rows_fit) are one pair longer
                // (6 scales for a tile's 4), so the atom tiles them a pair at a time; with no
                // swizzle the atom only sets the order of the elements.
                l.atom_shape.1 = 2;
                l.why_contiguous += "; in the odd-rows instantiation each row has two more elements, for rows of the tensor that start mid-word (the bytes count them)";
            }
        }
        if odd_rows {
            self.set_alignment(Alignment::base_only(t, 2, format!("cp.async moves `{tname}` 4 bytes at a time from 4-byte aligned addresses; rows of any length")));
        } else {
            self.require_alignment(t, v, format!("cp.async moves {vbytes}-byte vectors of `{tname}`"));
        }
        let active = threads.shape.0 * threads.shape.1;
        let mut why = format!(
            "{vbytes}-byte cp.async ({}) vectors of {v} elements along the contiguous dimension; {}x{} threads, numbered along it first so that neighbours read neighbouring bytes{}",
            if vbytes == 16 { "L2-only" } else { "cached" }, threads.shape.0, threads.shape.1,
            if active < self.spec.threads.0 { format!(" (the tile holds one vector for each of only {active} threads: the others skip it)") } else { String::new() });
        if let Some((wide, wide_bytes)) = passed_over {
            let row_len = self.spec.tensors[t].shape[1].text();
            why += &format!("; pairs rather than the {wide_bytes}-byte vectors a row of the tile could take, which would need {row_len} to be a multiple of {wide}");
        }
        if odd_rows {
            let row_len = self.spec.tensors[t].shape[1].text();
            why += &format!(
                "; with an odd number of elements per row ({row_len} odd) every other row starts 2 bytes into a word, so the kernel's odd-rows instantiation (the launcher picks it) copies each row from the word holding its first element, one word more, into a row two elements wider, bytes past the row zero-filled, and the dequant reads such rows one element later");
        }
        self.plan.copies.insert(s.id, super::CopyPlan {
            kind: CopyKind::GlobalToShared,
            tensor: Some(t),
            buffer: b,
            shared_dst: None,
            tile_coords: coords,
            fixed,
            cute_dims: layout.cute_dims.clone(),
            cute_shape: layout.cute_shape.clone(),
            atom,
            vector_elems: v,
            vector_bits: vbytes * 8,
            threads,
            staging_bytes: 0,
            staging_swizzle: None,
            tma: None,
            odd_rows,
            why,
        });
    }

    /// Whether copy `s` of tensor `t` into `b` (16-bit elements in 4-byte vectors) can take
    /// rows of any length through the odd-rows instantiation ([`super::CopyPlan::odd_rows`]):
    /// the row length is not known to be even; the tensor is 2-D and row-major and the tile a
    /// stage of a pipelined loop whose variable is its column coordinate, with an even number
    /// of rows (so a row's parity is its parity in the tile); `b` is filled by this copy only
    /// and read only by `dequant_int4` statements as their scales or zero points; and any
    /// other such copy has rows of the same length (one instantiation serves them all).
    fn odd_rows_fit(&self, s: &Stmt, t: usize, b: usize, layout: &SharedLayout, coords: &[Expr]) -> bool {
        if !matches!(self.target, crate::target::Target::Sm80 | crate::target::Target::Sm90a) {
            return false;
        }
        let tensor = &self.spec.tensors[t];
        if tensor.shape.len() != 2 || tensor.order.0 != Order::RowMajor || layout.cute_dims != [0, 1] || layout.contiguous_dim != 1
            || !layout.staged || layout.cute_shape[0] % 2 != 0 || coords.len() != 2 {
            return false;
        }
        if tensor.shape[1].eval(|n| self.info.const_int(n)).is_some_and(|n| n % 2 == 0) {
            return false;
        }
        let loop_var = self.pipelined_parent().get(&s.id).and_then(|p| self.spec.stmt(*p)).and_then(|l| match &l.kind {
            StmtKind::Loop { var, .. } => Some(var.name.clone()),
            _ => None,
        });
        let Some(var) = loop_var else { return false };
        if !matches!(&coords[1].kind, ExprKind::Name(n) if *n == var) || coords[0].mentions(&var) {
            return false;
        }
        let name = &self.spec.buffers[b].name.name;
        if self.spec.body_mentions(name) {
            return false;
        }
        let (mut fills, mut group_reads, mut other_uses) = (0, 0, 0);
        self.spec.walk(&mut |st| match &st.kind {
            StmtKind::Copy { src, dst } => {
                fills += usize::from(dst.name.name == *name);
                other_uses += usize::from(src.name.name == *name);
            }
            StmtKind::Dequant { src, dst, scales, zero, .. } => {
                group_reads += usize::from(scales.name == *name || zero.tile().is_some_and(|z| z.name == *name));
                other_uses += usize::from(src.name == *name || dst.name == *name);
            }
            StmtKind::Gemm { a, b, c, .. } => other_uses += usize::from([a, b, c].iter().any(|x| x.name == *name)),
            StmtKind::Reduce { src, dst, .. } => other_uses += usize::from(src.name == *name || dst.name == *name),
            StmtKind::Clear { buf } | StmtKind::Fill { buf, .. } => other_uses += usize::from(buf.name == *name),
            StmtKind::Assign { target, .. } => other_uses += usize::from(target.name == *name),
            _ => {}
        });
        if fills != 1 || group_reads == 0 || other_uses != 0 {
            return false;
        }
        let row_len = tensor.shape[1].text();
        self.plan.copies.values().filter(|cp| cp.odd_rows)
            .all(|cp| cp.tensor.is_some_and(|o| self.spec.tensors[o].shape[1].text() == row_len))
    }

    fn plan_acc_to_shared(&mut self, s: &Stmt, acc: usize, b: usize) {
        let Some(layout) = self.plan.shared.get(&b).cloned() else {
            self.failed_stmts.insert(s.id);
            return;
        };
        if layout.staged {
            self.err(Diagnostic::error(s.span, format!(
                "`{}` is also filled by a pipelined copy; a buffer written from registers must not be a pipeline stage",
                self.spec.buffers[b].name.name))
                .hint("give the registers' copy a buffer of its own"));
            self.failed_stmts.insert(s.id);
            return;
        }
        let bytes = self.spec.buffers[b].dtype.0.bytes() as i64;
        let pairs = layout.contiguous_dim == 1 && layout.swizzle.base >= 1;
        let (vector_elems, atom) = if pairs { (2, format!("UniversalCopy<uint{}_t>", 2 * bytes * 8)) } else { (1, format!("UniversalCopy<uint{}_t>", bytes * 8)) };
        let shape = self.shape(acc).to_vec();
        let why = format!(
            "each thread converts the `{}` values it holds to {} and writes them into `{}` in place ({}), between barriers: one so that earlier readers of `{}` are done, one so that the tile is complete before it is read",
            self.spec.buffers[acc].name.name, self.spec.buffers[b].dtype.0, self.spec.buffers[b].name.name,
            if pairs { "pairs of neighbouring columns as one 32-bit store" } else { "one element per store: the buffer's columns are contiguous" },
            self.spec.buffers[b].name.name);
        self.plan.copies.insert(s.id, super::CopyPlan {
            kind: CopyKind::AccumulatorToShared,
            tensor: None,
            buffer: acc,
            shared_dst: Some(b),
            tile_coords: Vec::new(),
            fixed: Vec::new(),
            cute_dims: vec![0, 1],
            cute_shape: shape,
            atom,
            vector_elems,
            vector_bits: vector_elems * bytes * 8,
            threads: ThreadLayout { shape: (self.spec.threads.0, 1), contiguous_first: false },
            staging_bytes: 0,
            staging_swizzle: None,
            tma: None,
            odd_rows: false,
            why,
        });
    }

    fn plan_acc_store(&mut self, s: &Stmt, dst: &Operand, b: usize, t: usize) {
        let shape = self.shape(b).to_vec();
        let Some((coords, fixed)) = self.tile_coords(dst, t, &shape) else {
            self.failed_stmts.insert(s.id);
            return;
        };
        let out_bytes = self.spec.tensors[t].dtype.0.bytes();
        let Some(contiguous) = self.tile_contiguous(dst, t) else {
            self.failed_stmts.insert(s.id);
            return;
        };
        let v = (16 / out_bytes as i64).min(shape[contiguous]);
        let Some(threads) = self.thread_layout(&shape, contiguous, v, true) else {
            self.err(Diagnostic::error(s.span, format!("the {} threads cannot split the {:?} output tile into 16-byte stores evenly", self.spec.threads.0, shape)));
            return;
        };
        let (swz, atom_elems) = swizzle_for(shape[contiguous], out_bytes);
        let atom = if contiguous == 1 { (8, atom_elems) } else { (atom_elems, 8) };
        let tname = self.spec.tensors[t].name.name.clone();
        self.require_alignment(t, v, format!("the epilogue stores {}-byte vectors of `{tname}`", v * out_bytes as i64));
        let elems: i64 = shape.iter().product();
        let active = threads.shape.0 * threads.shape.1;
        let why = format!(
            "accumulators are converted to {} and staged through a swizzled shared tile (Swizzle<{},{},{}>), then stored as {}-byte vectors by {}x{} threads{}: whole 128-byte lines per warp instead of scattered 4-byte writes",
            self.spec.tensors[t].dtype.0, swz.bits, swz.base, swz.shift, v * out_bytes as i64, threads.shape.0, threads.shape.1,
            if active < self.spec.threads.0 { format!(" (the tile has vectors for only {active} threads)") } else { String::new() });
        self.plan.copies.insert(s.id, super::CopyPlan {
            kind: CopyKind::AccumulatorToGlobal,
            tensor: Some(t),
            buffer: b,
            shared_dst: None,
            tile_coords: coords,
            fixed,
            cute_dims: vec![0, 1],
            cute_shape: shape,
            atom: format!("UniversalCopy<cute::uint{}_t>", v * out_bytes as i64 * 8),
            vector_elems: v,
            vector_bits: v * out_bytes as i64 * 8,
            threads,
            staging_bytes: elems as u64 * out_bytes,
            staging_swizzle: Some((swz, atom)),
            tma: None,
            odd_rows: false,
            why,
        });
    }
}

/// How a comment names dimension `d` of a buffer whose shape is `shape`: its extent's name
/// with the index (`block_N (dim 1)`), or the index alone for a computed extent. The extent
/// reads unambiguously beside the operand view's mode order, which can differ from the spec's.
pub(super) fn dim_label(shape: &[crate::ast::Expr], d: usize) -> String {
    match shape.get(d).map(|e| &e.kind) {
        Some(crate::ast::ExprKind::Name(n)) => format!("`{n}` (dim {d})"),
        Some(crate::ast::ExprKind::Int(v)) => format!("the extent {v} (dim {d})"),
        _ => format!("dim {d}"),
    }
}
