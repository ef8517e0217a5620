//! AMD fused programs that are neither GEMM-shaped (composable_kernel device GEMMs) nor
//! softmax attention (CK fused attention): the tile lowering on 16x16x16 MFMAs, wave64.
//!
//! Requires: a checked spec and an AMD target. Guarantees: a [`TilePlan`] that gives every
//! fragment a wave grid and every shared buffer an LDS pitch, with the LDS total within the
//! target's 64 KB, or one error per construct the lowering does not cover, at its span.
//!
//! The layout every fragment takes is the *row-of-lane* layout of one 16x16 block: lane `l`
//! holds row `l % 16`, columns `4 * (l / 16)` .. `+ 3`. It is the MFMA result of the swapped
//! product (Cᵀ = Bᵀ·Aᵀ on the instruction, as CK's `TransposeC`), and it is also the layout of
//! the MFMA's row operand, so a fragment converted to bf16/f16 feeds the next product straight
//! from registers (the P·V of attention-like programs).

use crate::ast::*;
use crate::check::{Info, Symbol};
use crate::diag::Diagnostic;
use crate::target::Target;
use std::collections::BTreeMap;

/// Lanes per wave on CDNA.
pub const WAVE: i64 = 64;
/// The MFMA block: 16x16 results, 16-deep k steps.
pub const BLOCK: i64 = 16;

/// The 32x32 MFMA of CK's instance for `target`, as "<M>x<N>x<K>[ i8]": 16-bit operands step 8
/// deep; i8 ones 16 on gfx942 and 8 on gfx90a.
pub fn ck_mfma(target: Target, int8: bool) -> &'static str {
    match (int8, target) {
        (false, _) => "32x32x8",
        (true, Target::Gfx90a) => "32x32x8 i8",
        (true, _) => "32x32x16 i8",
    }
}

/// The output's elements per vector store of CK's device GEMM instance: the plain instance's
/// C transfer moves 4 scalars along N; the multi-D one's CDE transfer 16 bytes.
pub fn ck_output_vector(out: DType, plain: bool) -> i64 {
    if plain {
        4
    } else {
        16 / out.bytes() as i64
    }
}

/// How the waves of a workgroup share one fragment's 16x16 blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WaveGrid {
    /// Fragment rows and columns (0 columns: a 1-D fragment of row statistics, one value
    /// per row block per lane, for the rows the lane holds).
    pub rows: i64,
    /// See `rows`.
    pub cols: i64,
    /// Waves along the rows and along the columns.
    pub wm: i64,
    /// See `wm`.
    pub wn: i64,
    /// Wave groups that split the k steps of the gemms into the fragment (1: no split); the
    /// partial sums are added through LDS before the fragment is read.
    pub ks: i64,
}

impl WaveGrid {
    /// Row blocks each wave holds.
    pub fn row_blocks(&self) -> i64 {
        self.rows / BLOCK / self.wm
    }
    /// Column blocks each wave holds.
    pub fn col_blocks(&self) -> i64 {
        self.cols / BLOCK / self.wn
    }
}

/// One shared buffer in LDS.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LdsBuffer {
    /// Padding elements after each row (0 for 1-D buffers).
    pub pad: i64,
    /// Bytes, padding included.
    pub bytes: u64,
    /// Why this padding.
    pub why: String,
}

/// One gemm on MFMAs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MfmaGemm {
    /// The instruction.
    pub instr: &'static str,
    /// m, n, k of the product.
    pub mnk: (i64, i64, i64),
    /// A is the register fragment (a bf16/f16 fragment in the row-of-lane layout).
    pub a_in_registers: bool,
    /// Whether each lane reads its 4 k values of A (and of B) as one 8-byte LDS read (k is
    /// contiguous in that buffer) or as 4 reads down a column.
    pub a_row_reads: bool,
    /// See `a_row_reads`.
    pub b_row_reads: bool,
}

/// The plan of the AMD tile lowering.
#[derive(Clone, Debug, PartialEq)]
pub struct TilePlan {
    /// Why the spec takes this lowering.
    pub why: String,
    /// Waves per workgroup (the spec's threads / 64).
    pub waves: i64,
    /// Per fragment buffer index.
    pub fragments: BTreeMap<usize, WaveGrid>,
    /// Per shared buffer index.
    pub shared: BTreeMap<usize, LdsBuffer>,
    /// Per gemm statement.
    pub gemms: BTreeMap<StmtId, MfmaGemm>,
    /// Per copy between a tensor and LDS or a fragment: elements per vector access (1:
    /// element by element).
    pub vectors: BTreeMap<StmtId, i64>,
    /// The base-pointer alignment each vectorised tensor needs: (tensor, elements, why).
    pub alignment: Vec<(usize, i64, String)>,
    /// LDS for adding k-split partial sums (the largest split fragment's), bytes.
    pub scratch_bytes: u64,
    /// All LDS, bytes, each array rounded up to 128 bytes.
    pub lds_total: u64,
}

/// The MFMA for an operand type.
pub fn instruction(d: DType) -> Option<&'static str> {
    match d {
        DType::BF16 => Some("v_mfma_f32_16x16x16_bf16 (__builtin_amdgcn_mfma_f32_16x16x16bf16_1k)"),
        DType::F16 => Some("v_mfma_f32_16x16x16_f16 (__builtin_amdgcn_mfma_f32_16x16x16f16)"),
        _ => None,
    }
}

/// The wave grid of a `rows` x `cols` fragment: as many waves along the rows as divide them,
/// then along the columns, and the waves left over split the k steps.
pub fn wave_grid(rows: i64, cols: i64, waves: i64) -> WaveGrid {
    let (rb, cb) = (rows / BLOCK, cols / BLOCK);
    let largest_divisor = |of: i64, at_most: i64| (1..=at_most.min(of)).rev().find(|d| of % d == 0 && waves % d == 0).unwrap_or(1);
    let wm = largest_divisor(rb, waves);
    let wn = (1..=(waves / wm).min(cb)).rev().find(|d| cb % d == 0 && (waves / wm) % d == 0).unwrap_or(1);
    WaveGrid { rows, cols, wm, wn, ks: waves / (wm * wn) }
}

/// Plans a spec for the tile lowering.
pub fn plan(spec: &Spec, info: &Info, target: Target, why: String) -> Result<TilePlan, Vec<Diagnostic>> {
    let mut errors = Vec::new();
    let (threads, threads_span) = spec.threads;
    if threads % WAVE != 0 || !(WAVE..=1024).contains(&threads) {
        errors.push(Diagnostic::error(threads_span, format!("the {target} tile lowering runs whole waves of 64 lanes: {threads} threads is not a multiple of 64 between 64 and 1024"))
            .hint("use 64, 128, 256, ... threads, or a `targets:` override for this target").unsupported_on_target());
    }
    let waves = (threads / WAVE).max(1);
    let mut plan = TilePlan { why, waves, fragments: BTreeMap::new(), shared: BTreeMap::new(), gemms: BTreeMap::new(), vectors: BTreeMap::new(), alignment: Vec::new(), scratch_bytes: 0, lds_total: 0 };
    // The shared buffers MFMAs read their operands from.
    let mut operands = std::collections::BTreeSet::new();
    spec.walk(&mut |s| if let StmtKind::Gemm { a, b, .. } = &s.kind {
        operands.insert(a.name.clone());
        operands.insert(b.name.clone());
    });
    for (i, b) in spec.buffers.iter().enumerate() {
        let shape = &info.buffer_shapes[i];
        let bytes = b.dtype.0.bytes() as i64;
        match b.scope.0 {
            Scope::Shared if shape.len() > 2 => {
                errors.push(Diagnostic::error(b.shape_span, format!("the {target} tile lowering holds 1-D and 2-D shared buffers; `{}` is {}-D", b.name.name, shape.len()))
                    .hint("this spec renders for sm80 and sm90a").unsupported_on_target());
            }
            Scope::Shared => {
                // 8 bytes of padding per row put the 16 rows one MFMA operand read touches
                // in 16 different bank pairs; other buffers are read along their rows.
                let pad = if shape.len() == 2 && operands.contains(&b.name.name) { (8 / bytes).max(1) } else { 0 };
                let elems: i64 = if shape.len() == 2 { shape[0] * (shape[1] + pad) } else { shape.iter().product() };
                let why = if pad > 0 { format!("{} bytes of padding per row: the 16 rows of one MFMA operand read start in different banks", pad * bytes) } else { "unpadded: read along its rows".into() };
                plan.shared.insert(i, LdsBuffer { pad, bytes: (elems * bytes) as u64, why });
            }
            Scope::Fragment if shape.len() == 1 => {
                // Row statistics: one value per row, held by the lanes that hold the row.
                if shape[0] % BLOCK != 0 || !matches!(b.dtype.0, DType::F32 | DType::F16 | DType::BF16) {
                    errors.push(Diagnostic::error(b.shape_span, format!("the {target} tile lowering holds row statistics per 16-row block, in f32, f16 or bf16: `{}` is {} [{}]", b.name.name, b.dtype.0, shape[0]))
                        .hint("make it a float type with a multiple of 16 rows").unsupported_on_target());
                    continue;
                }
                let g = wave_grid(shape[0], BLOCK, waves);
                plan.fragments.insert(i, WaveGrid { rows: shape[0], cols: 0, wm: g.wm, wn: 1, ks: 1 });
            }
            Scope::Fragment => {
                if shape.len() != 2 {
                    errors.push(Diagnostic::error(b.shape_span, format!("the {target} tile lowering holds 1-D and 2-D fragments; `{}` is {}-D", b.name.name, shape.len()))
                        .hint("this spec renders for sm80 and sm90a").unsupported_on_target());
                    continue;
                }
                if shape[0] % BLOCK != 0 || shape[1] % BLOCK != 0 {
                    errors.push(Diagnostic::error(b.shape_span, format!("the {target} tile lowering holds fragments in 16x16 MFMA blocks: `{}` is {}x{}", b.name.name, shape[0], shape[1]))
                        .hint("make both extents multiples of 16").unsupported_on_target());
                    continue;
                }
                if !matches!(b.dtype.0, DType::F32 | DType::BF16 | DType::F16) {
                    errors.push(Diagnostic::error(b.dtype.1, format!("the {target} tile lowering holds f32, bf16 or f16 fragments, not {}", b.dtype.0)).unsupported_on_target());
                    continue;
                }
                plan.fragments.insert(i, wave_grid(shape[0], shape[1], waves));
            }
        }
    }
    let buffer_of = |name: &Ident| match info.symbols.get(&name.name) {
        Some(Symbol::Buffer(b)) => Some(*b),
        _ => None,
    };
    let row_stats = |b: usize| plan.fragments.get(&b).is_some_and(|g| g.cols == 0);
    spec.walk(&mut |s| match &s.kind {
        StmtKind::Reduce { src, dst, dim, .. } => {
            let (Some(sb), Some(db)) = (buffer_of(src), buffer_of(dst)) else { return };
            let (Some(gs), Some(gd)) = (plan.fragments.get(&sb), plan.fragments.get(&db)) else { return };
            if dim.0 != 1 {
                errors.push(Diagnostic::error(dim.1, format!("the {target} tile lowering reduces fragments along their rows (dim=1) only"))
                    .hint("reduce along dim=1, or transpose the product that fills the fragment").unsupported_on_target());
            } else if gs.cols == 0 || gd.cols != 0 || gs.wn != 1 || gs.ks != 1 || gs.wm != gd.wm {
                errors.push(Diagnostic::error(s.span, format!(
                    "the {target} tile lowering reduces a row inside the wave that holds it: `{}` must be 2-D with whole rows in each wave (its waves are {}x{}, {} k group(s)) and `{}` its row statistics",
                    src.name, gs.wm, gs.wn, gs.ks, dst.name))
                    .hint(format!("give `{}` at least {} row blocks of 16", src.name, waves)).unsupported_on_target());
            }
        }
        StmtKind::Gemm { a, b, c, transpose_a, transpose_b } => {
            let (Some(ai), Some(bi), Some(ci)) = (buffer_of(a), buffer_of(b), buffer_of(c)) else { return };
            if [ai, bi, ci].iter().any(|&x| row_stats(x)) {
                return;  // the checker rejects 1-D gemm operands
            }
            let (ab, bb, cb) = (&spec.buffers[ai], &spec.buffers[bi], &spec.buffers[ci]);
            let (sa, sb) = (&info.buffer_shapes[ai], &info.buffer_shapes[bi]);
            let (m, k) = if *transpose_a { (sa[1], sa[0]) } else { (sa[0], sa[1]) };
            let n = if *transpose_b { sb[0] } else { sb[1] };
            let Some(instr) = instruction(ab.dtype.0).filter(|_| ab.dtype.0 == bb.dtype.0) else {
                errors.push(Diagnostic::error(s.span, format!("the {target} tile lowering multiplies bf16 or f16 operands of one type on MFMAs: `{}` is {} and `{}` is {}", a.name, ab.dtype.0, b.name, bb.dtype.0)).unsupported_on_target());
                return;
            };
            // An f16 accumulator is rounded to f16 after each MFMA (16 k values), as the
            // interpreter does; the MFMA itself adds in f32.
            if !matches!(cb.dtype.0, DType::F32 | DType::F16) || cb.scope.0 != Scope::Fragment {
                errors.push(Diagnostic::error(c.span, format!("the {target} tile lowering accumulates MFMAs in an f32 or f16 fragment; `{}` is a {} {} buffer", c.name, cb.dtype.0, cb.scope.0.name())).unsupported_on_target());
                return;
            }
            if k % BLOCK != 0 {
                errors.push(Diagnostic::error(s.span, format!("the {target} tile lowering steps k by 16 (one MFMA): this product's k is {k}")).hint("make the reduced extent a multiple of 16").unsupported_on_target());
                return;
            }
            if bb.scope.0 != Scope::Shared {
                errors.push(Diagnostic::error(b.span, format!("the {target} tile lowering reads B from LDS: `{}` is a fragment", b.name))
                    .hint("copy it to a shared buffer first").unsupported_on_target());
                return;
            }
            let a_in_registers = ab.scope.0 == Scope::Fragment;
            if a_in_registers {
                let (Some(ga), Some(gc)) = (plan.fragments.get(&ai), plan.fragments.get(&ci)) else { return };
                if *transpose_a || ga.wn != 1 || ga.ks != 1 || gc.ks != 1 || ga.wm != gc.wm {
                    errors.push(Diagnostic::error(a.span, format!(
                        "the {target} tile lowering feeds `{}` to the MFMAs from registers only when each wave holds whole rows of it and the matching rows of `{}`: its waves are {}x{} (rows x columns, {} k group(s)) and `{}`'s {}x{} ({} k group(s)) with {} waves",
                        a.name, c.name, ga.wm, ga.wn, ga.ks, c.name, gc.wm, gc.wn, gc.ks, waves))
                        .hint(format!("give `{}` at least {} row blocks of 16, or stage it through a shared buffer", a.name, waves)).unsupported_on_target());
                    return;
                }
            }
            plan.gemms.insert(s.id, MfmaGemm { instr, mnk: (m, n, k), a_in_registers, a_row_reads: !*transpose_a, b_row_reads: *transpose_b });
        }
        StmtKind::Copy { src, dst } => {
            let scope = |o: &Operand| buffer_of(&o.name).map(|b| spec.buffers[b].scope.0);
            if [&src.name, &dst.name].into_iter().filter_map(buffer_of).any(row_stats) {
                errors.push(Diagnostic::error(s.span, format!("the {target} tile lowering has no copies of row statistics yet")).unsupported_on_target());
                return;
            }
            match (scope(src), scope(dst)) {
                (None, Some(Scope::Fragment)) | (Some(Scope::Shared), Some(Scope::Fragment)) => errors.push(Diagnostic::error(s.span, format!(
                    "the {target} tile lowering fills fragments only from gemms, `clear`, `fill` and `parallel`: this copy into `{}` has no lowering yet", dst.name.name))
                    .hint("compute into the fragment, or read the shared buffer inside a `parallel` block").unsupported_on_target()),
                _ => {}
            }
        }
        StmtKind::Parallel { vars, .. } => {
            let Some(&d) = info.parallel_domains.get(&s.id) else { return };
            if spec.buffers[d].scope.0 == Scope::Fragment {
                let Some(grid) = plan.fragments.get(&d) else { return };
                // Every fragment the block touches is read or written at [vars], with the
                // domain's wave grid: each lane then works on its own registers.
                let mut bad: Option<(crate::diag::Span, String)> = None;
                let names: Vec<&str> = vars.iter().map(|v| v.name.as_str()).collect();
                let mut check = |name: &Ident, idx: &[Expr], span: crate::diag::Span, written: bool| {
                    let Some(b) = buffer_of(name) else { return };
                    if bad.is_some() {
                        return;
                    }
                    if spec.buffers[b].scope.0 != Scope::Fragment {
                        if written {
                            bad = Some((span, format!("the {target} tile lowering writes only fragments in a `parallel` block over a fragment: `{}` is a shared buffer", name.name)));
                        }
                        return;
                    }
                    let Some(g) = plan.fragments.get(&b) else { return };
                    let indexed = |n: usize| idx.len() == n && idx.iter().zip(&names).all(|(e, v)| matches!(&e.kind, ExprKind::Name(x) if x == v));
                    // The block's own shape at [vars]; or, in a block over a 2-D fragment
                    // whose waves hold whole rows, row statistics read at [row var].
                    let ok = (indexed(names.len()) && g == grid)
                        || (g.cols == 0 && grid.cols > 0 && !written && indexed(1) && g.rows == grid.rows && g.wm == grid.wm && grid.wn == 1 && grid.ks == 1);
                    if !ok {
                        bad = Some((span, format!("the {target} tile lowering runs a `parallel` block over `{}` lane by lane, so every fragment in it must be indexed [{}] and have `{}`'s shape (or, read-only, be its row statistics indexed [{}] with every row in one wave): `{}` here does not",
                            spec.buffers[d].name.name, names.join(", "), spec.buffers[d].name.name, names[0], name.name)));
                    }
                };
                if let StmtKind::Parallel { body, .. } = &s.kind {
                    let writes: std::collections::BTreeSet<crate::diag::Span> = assigned(body).into_iter().collect();
                    for (name, idx, span) in accesses(body) {
                        check(name, idx, span, writes.contains(&span));
                    }
                }
                if let Some((span, msg)) = bad {
                    errors.push(Diagnostic::error(span, msg).hint("stage the other operand through a shared buffer").unsupported_on_target());
                }
            } else {
                errors.push(Diagnostic::error(s.span, format!("the {target} tile lowering runs `parallel` blocks over fragments; `{}` is a shared buffer", spec.buffers[d].name.name))
                    .hint("run the element-wise step on a fragment").unsupported_on_target());
            }
        }
        _ => {}
    });
    plan_vectors(spec, info, &mut plan);
    plan.scratch_bytes = plan.fragments.values().filter(|g| g.ks > 1 && g.cols > 0).map(|g| (g.ks * g.rows * g.cols * 4) as u64).max().unwrap_or(0);
    // Each array counted at the 128-byte alignment hipcc may give it.
    plan.lds_total = plan.shared.values().map(|b| b.bytes).chain([plan.scratch_bytes]).map(|b| b.div_ceil(128) * 128).sum::<u64>();
    let budget = target.smem_budget();
    if plan.lds_total > budget {
        let parts: Vec<String> = plan.shared.iter().map(|(i, b)| format!("`{}` {}", spec.buffers[*i].name.name, b.bytes))
            .chain((plan.scratch_bytes > 0).then(|| format!("k-split partial sums {}", plan.scratch_bytes))).collect();
        errors.push(Diagnostic::error(spec.buffers.first().map_or(spec.kernel.span, |b| b.span), format!(
            "LDS over budget: the shared buffers need {} bytes ({}) but {target} allows {budget} bytes per workgroup", plan.lds_total, parts.join(", ")))
            .hint("use smaller tiles for this target (a `targets:` override of the tile constants)").unsupported_on_target());
    }
    if errors.is_empty() { Ok(plan) } else { Err(errors) }
}

/// What every value of a runtime size is known to be a multiple of: the product of the
/// divisors its divided extents (`K/8`, `K/128`) require, at least.
fn size_divisor(spec: &Spec, name: &str) -> i64 {
    let mut d = 1i64;
    for dim in spec.tensors.iter().flat_map(|t| &t.shape) {
        if let Dim::Div(n, div, _) = dim && n.name == name {
            d = lcm(d, *div);
        }
    }
    d
}

fn lcm(a: i64, b: i64) -> i64 {
    fn gcd(a: i64, b: i64) -> i64 { if b == 0 { a } else { gcd(b, a % b) } }
    a / gcd(a, b) * b
}

/// Whether every value of the extent is a multiple of `v`.
fn extent_multiple_of(spec: &Spec, info: &Info, d: &Dim, v: i64) -> bool {
    match d {
        Dim::Fixed(x, _) => x % v == 0,
        Dim::Named(n) => info.const_int(&n.name).map_or_else(|| size_divisor(spec, &n.name) % v == 0, |x| x % v == 0),
        Dim::Div(n, div, _) => info.const_int(&n.name).map_or_else(|| (size_divisor(spec, &n.name) / div) % v == 0, |x| (x / div) % v == 0),
    }
}

/// Whether an origin expression is a multiple of `v` for every value of its variables.
fn origin_multiple_of(e: &Expr, info: &Info, v: i64) -> bool {
    if let Some(x) = crate::check::eval_int(e, &info.symbols) {
        return x % v == 0;
    }
    match &e.kind {
        ExprKind::Binary(BinOp::Mul, a, b) => origin_multiple_of(a, info, v) || origin_multiple_of(b, info, v),
        ExprKind::Binary(BinOp::Add | BinOp::Sub, a, b) => origin_multiple_of(a, info, v) && origin_multiple_of(b, info, v),
        _ => false,
    }
}

/// Vector widths for the copies between tensors and LDS or fragments: up to 16 bytes along
/// the tensor's contiguous dimension, where the tile's width, the LDS pitch, the tile origin
/// and the tensor's contiguous extent are all multiples of it (so that a vector is wholly
/// inside the tensor or wholly outside), and the base pointer is aligned (a launcher check).
fn plan_vectors(spec: &Spec, info: &Info, plan: &mut TilePlan) {
    let buffer_of = |name: &Ident| match info.symbols.get(&name.name) {
        Some(Symbol::Buffer(b)) => Some(*b),
        _ => None,
    };
    let tensor_of = |name: &Ident| match info.symbols.get(&name.name) {
        Some(Symbol::Tensor(t)) => Some(*t),
        _ => None,
    };
    let mut found = Vec::new();
    spec.walk(&mut |s| {
        let StmtKind::Copy { src, dst } = &s.kind else { return };
        let (tensor_op, buf) = match (tensor_of(&src.name), tensor_of(&dst.name), buffer_of(&src.name), buffer_of(&dst.name)) {
            (Some(t), None, None, Some(b)) => ((t, src), b),
            (None, Some(t), Some(b), None) => ((t, dst), b),
            _ => return,
        };
        let (t, op) = tensor_op;
        let tensor = &spec.tensors[t];
        let shape = &info.buffer_shapes[buf];
        let bytes = tensor.dtype.0.bytes() as i64;
        // LDS tiles move as they are; fragments convert each register on the way out.
        let fragment = spec.buffers[buf].scope.0 == Scope::Fragment;
        if (!fragment && spec.buffers[buf].dtype.0 != tensor.dtype.0) || shape.is_empty() {
            return;
        }
        // The tile's last dimension must be the tensor's contiguous one.
        let rank = tensor.shape.len();
        let contiguous = if rank == 2 && tensor.order.0 == Order::ColMajor { 0 } else { rank - 1 };
        let dims: Vec<usize> = op.tile_dims.clone().unwrap_or_else(|| (0..rank).collect());
        if dims.last() != Some(&contiguous) {
            return;
        }
        let origin_ok = |v: i64| op.origin.as_ref().is_none_or(|o| origin_multiple_of(&o[contiguous], info, v));
        let cols = *shape.last().unwrap();
        let pitch = if fragment { 4 } else { plan.shared.get(&buf).map_or(cols, |l| cols + l.pad) };
        let widest = if fragment { 4 } else { 16 / bytes };
        let v = (1..=widest).rev().filter(|v| widest % v == 0)
            .find(|&v| cols % v == 0 && pitch % v == 0 && origin_ok(v) && extent_multiple_of(spec, info, &tensor.shape[contiguous], v))
            .unwrap_or(1);
        if v > 1 {
            found.push((s.id, t, v, format!("copies of `{}` move {} bytes per access", tensor.name.name, v * bytes)));
        } else {
            found.push((s.id, t, 1, String::new()));
        }
    });
    for (id, t, v, why) in found {
        plan.vectors.insert(id, v);
        if v > 1 {
            match plan.alignment.iter_mut().find(|a| a.0 == t) {
                Some(a) if a.1 < v => *a = (t, v, why),
                Some(_) => {}
                None => plan.alignment.push((t, v, why)),
            }
        }
    }
}

/// The spans of the assignments in a `parallel` body (its writes).
fn assigned(body: &[Stmt]) -> Vec<crate::diag::Span> {
    let mut out = Vec::new();
    for s in body {
        match &s.kind {
            StmtKind::Assign { .. } => out.push(s.span),
            StmtKind::If { then_body, else_body, .. } => {
                out.extend(assigned(then_body));
                out.extend(assigned(else_body));
            }
            _ => {}
        }
    }
    out
}

/// Every buffer or tensor element a `parallel` body reads or writes: name, indices, span.
pub fn accesses(body: &[Stmt]) -> Vec<(&Ident, &[Expr], crate::diag::Span)> {
    fn expr<'a>(e: &'a Expr, out: &mut Vec<(&'a Ident, &'a [Expr], crate::diag::Span)>) {
        e.visit(&mut |x| {
            if let ExprKind::Index(n, idx) = &x.kind {
                out.push((n, idx.as_slice(), x.span));
            }
            true
        });
    }
    fn go<'a>(body: &'a [Stmt], out: &mut Vec<(&'a Ident, &'a [Expr], crate::diag::Span)>) {
        for s in body {
            match &s.kind {
                StmtKind::Assign { target, indices, value, .. } => {
                    out.push((target, indices.as_slice(), s.span));
                    indices.iter().for_each(|i| expr(i, out));
                    expr(value, out);
                }
                StmtKind::If { cond, then_body, else_body } => {
                    expr(cond, out);
                    go(then_body, out);
                    go(else_body, out);
                }
                _ => {}
            }
        }
    }
    let mut out = Vec::new();
    go(body, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wave_grids_split_rows_then_columns_then_k() {
        assert_eq!(wave_grid(64, 64, 2), WaveGrid { rows: 64, cols: 64, wm: 2, wn: 1, ks: 1 });
        assert_eq!(wave_grid(128, 64, 4), WaveGrid { rows: 128, cols: 64, wm: 4, wn: 1, ks: 1 });
        assert_eq!(wave_grid(32, 64, 4), WaveGrid { rows: 32, cols: 64, wm: 2, wn: 2, ks: 1 });
        // One row block, two column blocks, four waves: two k groups.
        assert_eq!(wave_grid(16, 32, 4), WaveGrid { rows: 16, cols: 32, wm: 1, wn: 2, ks: 2 });
        assert_eq!(wave_grid(48, 16, 4), WaveGrid { rows: 48, cols: 16, wm: 1, wn: 1, ks: 4 });
    }
}
