//! The spec's abstract syntax: what the user wrote, with a span on every part.
//!
//! Produced by [`crate::front`]; nothing here has been checked. Statements carry a
//! [`StmtId`] (pre-order index) so that later stages keep their findings in side tables
//! instead of mutating the tree.

use crate::diag::Span;
use std::fmt;

/// A name and where it was written.
#[derive(Clone, Debug, PartialEq)]
pub struct Ident {
    /// The name.
    pub name: String,
    /// Where.
    pub span: Span,
}

/// Element types.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DType {
    /// IEEE binary32.
    F32,
    /// IEEE binary16.
    F16,
    /// bfloat16.
    BF16,
    /// 8-bit float E4M3 (OCP "e4m3fn": 4 exponent bits, 3 mantissa bits, no infinities,
    /// largest finite 448; torch.float8_e4m3fn).
    F8E4M3,
    /// Signed 8-bit integer.
    I8,
    /// Signed 32-bit integer.
    I32,
}

impl DType {
    /// Every dtype, in the order messages list them.
    pub const ALL: [DType; 6] = [DType::F32, DType::F16, DType::BF16, DType::F8E4M3, DType::I8, DType::I32];

    /// The spelling in specs.
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::F8E4M3 => "f8e4m3",
            DType::I8 => "i8",
            DType::I32 => "i32",
        }
    }

    /// Parses a spec spelling.
    pub fn from_name(s: &str) -> Option<DType> {
        DType::ALL.into_iter().find(|d| d.name() == s)
    }

    /// Size of one element in bytes.
    pub fn bytes(self) -> u64 {
        match self {
            DType::F32 | DType::I32 => 4,
            DType::F16 | DType::BF16 => 2,
            DType::I8 | DType::F8E4M3 => 1,
        }
    }

    /// Whether this is a floating-point type.
    pub fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F16 | DType::BF16 | DType::F8E4M3)
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Binary operators, loosest-binding last.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinOp {
    /// `*`
    Mul,
    /// `/` (integer division on integers)
    Div,
    /// `%`
    Rem,
    /// `+`
    Add,
    /// `-`
    Sub,
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `>`
    Gt,
    /// `>=`
    Ge,
    /// `==`
    Eq,
    /// `!=`
    Ne,
    /// `&&`
    And,
    /// `||`
    Or,
}

impl BinOp {
    /// The operator's spelling (the same in specs and C++).
    pub fn symbol(self) -> &'static str {
        match self {
            BinOp::Mul => "*",
            BinOp::Div => "/",
            BinOp::Rem => "%",
            BinOp::Add => "+",
            BinOp::Sub => "-",
            BinOp::Lt => "<",
            BinOp::Le => "<=",
            BinOp::Gt => ">",
            BinOp::Ge => ">=",
            BinOp::Eq => "==",
            BinOp::Ne => "!=",
            BinOp::And => "&&",
            BinOp::Or => "||",
        }
    }

    /// Whether the result is a boolean.
    pub fn is_comparison(self) -> bool {
        matches!(self, BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge | BinOp::Eq | BinOp::Ne)
    }

    /// Whether both operands and the result are booleans.
    pub fn is_logical(self) -> bool {
        matches!(self, BinOp::And | BinOp::Or)
    }
}

/// Unary operators.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnOp {
    /// `-x`
    Neg,
    /// `!x`
    Not,
}

/// An expression.
#[derive(Clone, Debug, PartialEq)]
pub struct Expr {
    /// What it is.
    pub kind: ExprKind,
    /// Where.
    pub span: Span,
}

/// Expression forms.
#[derive(Clone, Debug, PartialEq)]
pub enum ExprKind {
    /// An integer literal.
    Int(i64),
    /// A floating-point literal, with its spelling kept for byte-identical output.
    Float(f64, String),
    /// `true` / `false`.
    Bool(bool),
    /// A name: constant, runtime dim, loop or block index, or a whole buffer.
    Name(String),
    /// `x[i, j]`: an element of a buffer or tensor.
    Index(Ident, Vec<Expr>),
    /// `f(a, b, key=c)`: an intrinsic, a cast or a statement.
    Call(Ident, Vec<Arg>),
    /// `-x`, `!x`.
    Unary(UnOp, Box<Expr>),
    /// `a + b`, ...
    Binary(BinOp, Box<Expr>, Box<Expr>),
    /// `start:` inside a copy's tile origin: a dimension the tile spans (`:` is `0:`).
    /// The front end moves slices into [`Operand::tile_dims`]; anywhere else the checker
    /// rejects them.
    Slice(Box<Expr>),
}

impl Expr {
    /// Visits this expression and every subexpression in pre-order (indices, call
    /// arguments, operands); `f` returns whether to descend into the children of the
    /// expression it is given. The one walk behind every analysis of expressions.
    pub fn visit<'a, F: FnMut(&'a Expr) -> bool>(&'a self, f: &mut F) {
        if !f(self) {
            return;
        }
        match &self.kind {
            ExprKind::Index(_, idx) => idx.iter().for_each(|i| i.visit(f)),
            ExprKind::Call(_, args) => args.iter().for_each(|a| a.value.visit(f)),
            ExprKind::Unary(_, x) | ExprKind::Slice(x) => x.visit(f),
            ExprKind::Binary(_, a, b) => {
                a.visit(f);
                b.visit(f);
            }
            ExprKind::Int(_) | ExprKind::Float(..) | ExprKind::Bool(_) | ExprKind::Name(_) => {}
        }
    }

    /// The names the expression reads, with where: each buffer or tensor it indexes and each
    /// bare name (a variable, a constant, a size, a whole buffer), in pre-order.
    pub fn names_read(&self) -> Vec<(&str, Span)> {
        let mut names = Vec::new();
        self.visit(&mut |x| {
            match &x.kind {
                ExprKind::Index(name, _) => names.push((name.name.as_str(), name.span)),
                ExprKind::Name(name) => names.push((name.as_str(), x.span)),
                _ => {}
            }
            true
        });
        names
    }

    /// Whether the name `name` occurs anywhere in the expression.
    pub fn mentions(&self, name: &str) -> bool {
        let mut found = false;
        self.visit(&mut |x| {
            found |= matches!(&x.kind, ExprKind::Name(n) if n == name);
            !found
        });
        found
    }
}

/// A call argument, positional or `key=value`.
#[derive(Clone, Debug, PartialEq)]
pub struct Arg {
    /// The keyword, for `key=value`.
    pub key: Option<Ident>,
    /// The value.
    pub value: Expr,
}

/// Identifies a statement: its pre-order position in the body.
pub type StmtId = usize;

/// A statement.
#[derive(Clone, Debug, PartialEq)]
pub struct Stmt {
    /// Pre-order index, unique in the spec.
    pub id: StmtId,
    /// What it does.
    pub kind: StmtKind,
    /// The statement's text (for a block, its header).
    pub span: Span,
}

impl Stmt {
    /// The buffer or tensor this statement itself writes (not its nested statements'); `None`
    /// for blocks.
    pub fn written(&self) -> Option<&str> {
        match &self.kind {
            StmtKind::Copy { dst, .. } => Some(&dst.name.name),
            StmtKind::Dequant { dst, .. } | StmtKind::Reduce { dst, .. } => Some(&dst.name),
            StmtKind::Gemm { c, .. } => Some(&c.name),
            StmtKind::Clear { buf } | StmtKind::Fill { buf, .. } => Some(&buf.name),
            StmtKind::Assign { target, .. } => Some(&target.name),
            StmtKind::Loop { .. } | StmtKind::Parallel { .. } | StmtKind::If { .. } => None,
        }
    }
}

/// An operand of `copy`: a whole buffer (`A_s`) or a tile of a tensor at an origin (`A[y, x]`).
#[derive(Clone, Debug, PartialEq)]
pub struct Operand {
    /// The buffer or tensor.
    pub name: Ident,
    /// The origin, for a tensor tile.
    pub origin: Option<Vec<Expr>>,
    /// The origin's dimensions the tile spans, when the origin has slices
    /// (`Q[b, m0:, h, :]` spans dims 1 and 3, and fixes the others); `None`: all of them.
    pub tile_dims: Option<Vec<usize>>,
    /// The whole operand's text.
    pub span: Span,
}

/// Loops.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LoopKind {
    /// `serial(k, n)`: a plain loop.
    Serial,
    /// `unroll(k, n)`: a fully unrolled loop (n must be a constant).
    Unroll,
    /// `pipelined(k, n, stages)`: a software-pipelined main loop.
    Pipelined,
}

impl LoopKind {
    /// The keyword.
    pub fn keyword(self) -> &'static str {
        match self {
            LoopKind::Serial => "serial",
            LoopKind::Unroll => "unroll",
            LoopKind::Pipelined => "pipelined",
        }
    }
}

/// Assignment operators in `parallel` blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AssignOp {
    /// `=`
    Set,
    /// `+=`
    Add,
    /// `-=`
    Sub,
    /// `*=`
    Mul,
}

impl AssignOp {
    /// The spelling.
    pub fn symbol(self) -> &'static str {
        match self {
            AssignOp::Set => "=",
            AssignOp::Add => "+=",
            AssignOp::Sub => "-=",
            AssignOp::Mul => "*=",
        }
    }
}

/// Reductions along one dimension of a fragment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReduceOp {
    /// `reduce_max`
    Max,
    /// `reduce_sum`
    Sum,
}

impl ReduceOp {
    /// The statement's name.
    pub fn keyword(self) -> &'static str {
        match self {
            ReduceOp::Max => "reduce_max",
            ReduceOp::Sum => "reduce_sum",
        }
    }
}

/// `dequant_int4`'s zero point: the stored 4-bit value that means zero.
#[derive(Clone, Debug, PartialEq)]
pub enum ZeroPoint {
    /// `zero=N` (8 when omitted: values -8..7 stored offset by 8), and where it was written.
    Constant(i64, crate::diag::Span),
    /// `zeros=Z`: one per group of each row, a shared tile shaped and typed like the scales,
    /// holding integers 0..15 (GPTQ and AWQ checkpoints' zero points).
    PerGroup(Ident),
}

impl ZeroPoint {
    /// The per-group tile, if any.
    pub fn tile(&self) -> Option<&Ident> {
        match self {
            ZeroPoint::PerGroup(z) => Some(z),
            ZeroPoint::Constant(..) => None,
        }
    }
}

/// `dequant_int4`'s `order`: where each of a packed word's eight values sits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum NibbleOrder {
    /// `order=sequential` (the default): value `i` of the word in bits `4i .. 4i+3`.
    #[default]
    Sequential,
    /// `order=interleaved`: value `2i` in bits `4i .. 4i+3` and value `2i+1` in bits
    /// `16+4i .. 16+4i+3` (nibbles in the order 0, 2, 4, 6, 1, 3, 5, 7, as TensorRT-LLM's and
    /// AWQ's kernels pack them), so that a pair of neighbouring values is one shift away from
    /// the two halves of a 32-bit register.
    Interleaved,
}

impl NibbleOrder {
    /// The spelling in a spec.
    pub const NAMES: [&'static str; 2] = ["sequential", "interleaved"];

    /// The spec's spelling.
    pub fn name(self) -> &'static str {
        match self {
            NibbleOrder::Sequential => Self::NAMES[0],
            NibbleOrder::Interleaved => Self::NAMES[1],
        }
    }

    /// The order a spec spells `name`, if any.
    pub fn from_name(name: &str) -> Option<Self> {
        [NibbleOrder::Sequential, NibbleOrder::Interleaved].into_iter().find(|o| o.name() == name)
    }

    /// Where a word keeps its values, as the diagnostics, `explain` and the headers say it.
    pub fn layout(self) -> &'static str {
        match self {
            NibbleOrder::Sequential => "value i of a word in bits 4i..4i+3",
            NibbleOrder::Interleaved => "value 2i of a word in bits 4i..4i+3, value 2i+1 in bits 16+4i..16+4i+3",
        }
    }

    /// The bit at which value `i` (0..8) of a packed word starts.
    pub fn shift(self, i: usize) -> u32 {
        let i = (i % 8) as u32;
        match self {
            NibbleOrder::Sequential => 4 * i,
            NibbleOrder::Interleaved => 4 * (i / 2) + 16 * (i % 2),
        }
    }
}

/// Statement forms.
#[derive(Clone, Debug, PartialEq)]
pub enum StmtKind {
    /// `reduce_max(src, dst, dim=1, clear=true)`: dst = reduction of src along `dim`
    /// (combined with dst's old values when `clear=false`).
    Reduce {
        /// Which reduction.
        op: ReduceOp,
        /// The 2-D fragment reduced.
        src: Ident,
        /// The 1-D fragment written.
        dst: Ident,
        /// The dimension reduced away, and where it was written.
        dim: (i64, crate::diag::Span),
        /// Start from the identity (true) or from dst's values (false).
        clear: bool,
    },
    /// `dequant_int4(src, dst, scales=S, zero=8)` or `dequant_int4(src, dst, scales=S,
    /// zeros=Z)`, optionally with `order=interleaved`: unpacks 4-bit weights, eight per 32-bit
    /// word of `src` (element `c` of a row is value `c%8` of word `c/8`, at the bits
    /// [`NibbleOrder::shift`] gives), and scales them per group:
    /// `dst[r, c] = (nibble − z) · scales[r, c / group]`, where `group` is dst's column count
    /// over scales' and `z` the zero point (the constant, or `Z[r, c / group]`).
    Dequant {
        /// The packed words, a shared [R, C/8] i32 tile.
        src: Ident,
        /// The unpacked values, a shared [R, C] f16/bf16 tile.
        dst: Ident,
        /// One scale per group of each row, a shared [R, C/group] tile of dst's type.
        scales: Ident,
        /// The stored value that means zero.
        zero: ZeroPoint,
        /// Where each value sits in its word.
        order: NibbleOrder,
    },
    /// `copy(src, dst)`: extents come from the buffer side.
    Copy {
        /// Source.
        src: Operand,
        /// Destination.
        dst: Operand,
    },
    /// `gemm(A, B, C, transpose_a=.., transpose_b=..)`: C += op(A) · op(B).
    Gemm {
        /// Left operand buffer.
        a: Ident,
        /// Right operand buffer.
        b: Ident,
        /// Accumulator buffer.
        c: Ident,
        /// A is stored [k, m].
        transpose_a: bool,
        /// B is stored [n, k].
        transpose_b: bool,
    },
    /// `clear(x)`: x = 0.
    Clear {
        /// The buffer.
        buf: Ident,
    },
    /// `fill(x, v)`.
    Fill {
        /// The buffer.
        buf: Ident,
        /// The value.
        value: Expr,
    },
    /// `x[i, j] op= e`, inside `parallel`.
    Assign {
        /// The buffer written.
        target: Ident,
        /// Its indices.
        indices: Vec<Expr>,
        /// `=`, `+=`, ...
        op: AssignOp,
        /// The value.
        value: Expr,
    },
    /// `serial` / `unroll` / `pipelined` loops.
    Loop {
        /// Which loop.
        kind: LoopKind,
        /// The loop variable, counting 0..count.
        var: Ident,
        /// The trip count.
        count: Expr,
        /// Shared-memory stages (pipelined only).
        stages: Option<Expr>,
        /// The body.
        body: Vec<Stmt>,
    },
    /// `parallel(i, j)`: element-wise assignments over a buffer's index space.
    Parallel {
        /// One variable per dimension.
        vars: Vec<Ident>,
        /// Assignments.
        body: Vec<Stmt>,
    },
    /// `if cond` with an optional following `else`.
    If {
        /// The condition.
        cond: Expr,
        /// Taken branch.
        then_body: Vec<Stmt>,
        /// Otherwise.
        else_body: Vec<Stmt>,
    },
}

/// Majorness of a 2-D tensor in memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Order {
    /// The last dimension is contiguous.
    RowMajor,
    /// The first dimension is contiguous.
    ColMajor,
}

/// A dimension of a tensor's shape: a constant or a runtime size.
#[derive(Clone, Debug, PartialEq)]
pub enum Dim {
    /// A literal extent.
    Fixed(i64, Span),
    /// A name: a constant or, when not a constant, a runtime size.
    Named(Ident),
    /// `K/8`: a size divided by an integer, exactly (packed tensors: eight 4-bit values per
    /// 32-bit word, one scale per group of 128). The launcher rejects sizes that do not divide.
    Div(Ident, i64, Span),
}

impl Dim {
    /// Where it was written.
    pub fn span(&self) -> Span {
        match self {
            Dim::Fixed(_, s) | Dim::Div(_, _, s) => *s,
            Dim::Named(i) => i.span,
        }
    }

    /// The extent as a C++ (and spec) expression: `128`, `K`, `(K / 8)`.
    pub fn text(&self) -> String {
        match self {
            Dim::Fixed(v, _) => v.to_string(),
            Dim::Named(i) => i.name.clone(),
            Dim::Div(i, d, _) => format!("({} / {d})", i.name),
        }
    }

    /// The extent, given the value of each name (constants and runtime sizes).
    pub fn eval(&self, value_of: impl Fn(&str) -> Option<i64>) -> Option<i64> {
        match self {
            Dim::Fixed(v, _) => Some(*v),
            Dim::Named(i) => value_of(&i.name),
            Dim::Div(i, d, _) => value_of(&i.name).map(|v| v / d),
        }
    }
}

/// A global-memory tensor: a launcher argument.
#[derive(Clone, Debug, PartialEq)]
pub struct Tensor {
    /// Its name, also the launcher parameter's.
    pub name: Ident,
    /// Element type and where it was written.
    pub dtype: (DType, Span),
    /// Shape.
    pub shape: Vec<Dim>,
    /// Majorness (2-D only; 1-D tensors are contiguous).
    pub order: (Order, Span),
    /// Written by the kernel.
    pub output: bool,
    /// The whole entry.
    pub span: Span,
}

/// Memory scopes of buffers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// Shared memory of the thread block.
    Shared,
    /// Registers, distributed over the block's threads by layout inference.
    Fragment,
}

impl Scope {
    /// The spelling.
    pub fn name(self) -> &'static str {
        match self {
            Scope::Shared => "shared",
            Scope::Fragment => "fragment",
        }
    }
}

/// An on-chip buffer.
#[derive(Clone, Debug, PartialEq)]
pub struct Buffer {
    /// Name.
    pub name: Ident,
    /// Scope and where it was written.
    pub scope: (Scope, Span),
    /// Element type and where it was written.
    pub dtype: (DType, Span),
    /// Extents: constant expressions.
    pub shape: Vec<Expr>,
    /// Where the shape list was written.
    pub shape_span: Span,
    /// The whole entry.
    pub span: Span,
}

/// A named compile-time constant.
#[derive(Clone, Debug, PartialEq)]
pub struct Constant {
    /// Name.
    pub name: Ident,
    /// Value: an integer or a float literal.
    pub value: Expr,
}

/// One grid dimension: a block-index variable and its extent (x first).
#[derive(Clone, Debug, PartialEq)]
pub struct GridDim {
    /// The block index name, e.g. `bx`.
    pub var: Ident,
    /// Number of blocks.
    pub extent: Expr,
    /// `order: descending`: the first blocks launched get the last index (causal attention
    /// starts its longest rows first, so the last wave is not left with them).
    pub descending: bool,
}

/// The kernel schedule of a CUTLASS 3.x collective on sm90a (`schedule:` under `targets:`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KernelSchedule {
    /// Two consumer warpgroups split each tile's rows (the default).
    Cooperative,
    /// Two consumer warpgroups take whole tiles in turn: one's MMAs run while the other
    /// stores its tile.
    Pingpong,
}

impl KernelSchedule {
    /// Every schedule, by its spelling in a spec.
    pub const ALL: [(&'static str, KernelSchedule); 2] =
        [(KernelSchedule::Cooperative.name(), KernelSchedule::Cooperative), (KernelSchedule::Pingpong.name(), KernelSchedule::Pingpong)];

    /// The spelling in a spec.
    pub const fn name(self) -> &'static str {
        match self {
            KernelSchedule::Cooperative => "cooperative",
            KernelSchedule::Pingpong => "pingpong",
        }
    }
}

/// Per-target settings: constants that take other values for one target (tile sizes
/// tuned for it) and, on sm90a, the thread-block cluster shape, kernel schedule and
/// tile-scheduler swizzle.
#[derive(Clone, Debug, PartialEq)]
pub struct TargetOverride {
    /// The target's name as written.
    pub target: Ident,
    /// Constants to replace for that target.
    pub constants: Vec<Constant>,
    /// `threads: N`: the block's threads for that target.
    pub threads: Option<(i64, crate::diag::Span)>,
    /// `cluster: [x, y]` (sm90a).
    pub cluster: Option<(Vec<i64>, crate::diag::Span)>,
    /// `schedule: pingpong` (sm90a).
    pub schedule: Option<(KernelSchedule, crate::diag::Span)>,
    /// `swizzle: 4` (sm90a): CTAs per swizzle band of the persistent tile scheduler.
    pub swizzle: Option<(i64, crate::diag::Span)>,
}

/// A whole spec.
#[derive(Clone, Debug, PartialEq)]
pub struct Spec {
    /// The kernel's name (a C identifier).
    pub kernel: Ident,
    /// One-line description.
    pub doc: Option<String>,
    /// Global tensors in launcher order.
    pub tensors: Vec<Tensor>,
    /// Constants in source order.
    pub constants: Vec<Constant>,
    /// Grid dimensions, x first.
    pub grid: Vec<GridDim>,
    /// Threads per block and where it was written.
    pub threads: (i64, Span),
    /// On-chip buffers.
    pub buffers: Vec<Buffer>,
    /// The kernel body.
    pub body: Vec<Stmt>,
    /// Number of statements (ids are `0..stmt_count`).
    pub stmt_count: usize,
    /// Per-target settings, as written.
    pub targets: Vec<TargetOverride>,
    /// The cluster shape in effect for the target compiled for (set by `apply_target`).
    pub cluster: Option<(Vec<i64>, crate::diag::Span)>,
    /// The kernel schedule asked for the target compiled for (set by `apply_target`).
    pub schedule: Option<(KernelSchedule, crate::diag::Span)>,
    /// The swizzle band asked for the target compiled for (set by `apply_target`).
    pub swizzle: Option<(i64, crate::diag::Span)>,
}

impl Spec {
    /// The order the kernel's `dequant_int4` statements read their packed words in (the
    /// checker makes them agree); sequential when there are none.
    pub fn nibble_order(&self) -> NibbleOrder {
        let mut order = None;
        walk_stmts(&self.body, &mut |s| {
            if let StmtKind::Dequant { order: o, .. } = &s.kind {
                order.get_or_insert(*o);
            }
        });
        order.unwrap_or_default()
    }

    /// The tensors the body copies straight into buffer `tile` (`copy(T[...], tile)`), each
    /// once, in statement order.
    pub fn tensors_copied_into(&self, tile: &str) -> Vec<String> {
        let mut names = Vec::new();
        walk_stmts(&self.body, &mut |s| {
            if let StmtKind::Copy { src, dst } = &s.kind
                && dst.name.name == tile
                && src.origin.is_some()
                && !names.contains(&src.name.name)
            {
                names.push(src.name.name.clone());
            }
        });
        names
    }

    /// The statement with id `id`.
    pub fn stmt(&self, id: StmtId) -> Option<&Stmt> {
        let mut found = None;
        self.walk(&mut |s| {
            if s.id == id {
                found = Some(s);
            }
        });
        found
    }

    /// The stage-count expression of the first `pipelined` loop for which `wanted` holds.
    pub fn pipelined_stages(&self, wanted: impl Fn(&[Stmt]) -> bool) -> Option<&Expr> {
        let mut found = None;
        self.walk(&mut |s| {
            if let StmtKind::Loop { kind: LoopKind::Pipelined, stages: Some(st), body, .. } = &s.kind && found.is_none() && wanted(body) {
                found = Some(st);
            }
        });
        found
    }

    /// Whether the body reads tensor `name`: a copy from it, or an element read in an
    /// expression. An output it reads is updated in place (its initial contents are an input).
    pub fn reads_tensor(&self, name: &str) -> bool {
        let mut found = false;
        self.walk(&mut |s| {
            found |= match &s.kind {
                StmtKind::Copy { src, .. } => src.name.name == name,
                StmtKind::Assign { value, .. } => {
                    let mut read = false;
                    value.visit(&mut |x| {
                        read |= matches!(&x.kind, ExprKind::Index(n, _) if n.name == name);
                        !read
                    });
                    read
                }
                _ => false,
            };
        });
        found
    }

    /// Whether output `t` is also read, and so updated in place.
    pub fn is_in_place(&self, t: &Tensor) -> bool {
        t.output && self.reads_tensor(&t.name.name)
    }

    /// Whether a run needs `t`'s contents before it starts: an input, or an output updated in
    /// place (the harness uploads it rather than poisoning it; `tilegen run` reads its .npy).
    pub fn starts_from(&self, t: &Tensor) -> bool {
        !t.output || self.is_in_place(t)
    }

    /// Whether any expression of the body (indices, origins, loop counts, conditions, values)
    /// names `name`.
    pub fn body_mentions(&self, name: &str) -> bool {
        let mut found = false;
        self.walk(&mut |s| {
            let exprs: Vec<&Expr> = match &s.kind {
                StmtKind::Copy { src, dst } => [src, dst].into_iter().flat_map(|o| o.origin.iter().flatten()).collect(),
                StmtKind::Fill { value, .. } => vec![value],
                StmtKind::Assign { indices, value, .. } => indices.iter().chain([value]).collect(),
                StmtKind::Loop { count, stages, .. } => [count].into_iter().chain(stages).collect(),
                StmtKind::If { cond, .. } => vec![cond],
                StmtKind::Reduce { .. } | StmtKind::Dequant { .. } | StmtKind::Gemm { .. } | StmtKind::Clear { .. } | StmtKind::Parallel { .. } => vec![],
            };
            found |= exprs.iter().any(|e| e.mentions(name));
        });
        found
    }

    /// Visits every statement in pre-order.
    pub fn walk<'a>(&'a self, f: &mut impl FnMut(&'a Stmt)) {
        walk_stmts(&self.body, f);
    }
}

/// Where statement `id` is: the block that holds it (`stmts`, or a block nested in them), its
/// position there, and whether that block is `stmts` itself. `None` if no block holds it.
pub fn locate(stmts: &[Stmt], id: StmtId) -> Option<(&[Stmt], usize, bool)> {
    fn inner(stmts: &[Stmt], id: StmtId, top: bool) -> Option<(&[Stmt], usize, bool)> {
        if let Some(i) = stmts.iter().position(|s| s.id == id) {
            return Some((stmts, i, top));
        }
        stmts.iter().find_map(|s| match &s.kind {
            StmtKind::Loop { body, .. } | StmtKind::Parallel { body, .. } => inner(body, id, false),
            StmtKind::If { then_body, else_body, .. } => inner(then_body, id, false).or_else(|| inner(else_body, id, false)),
            _ => None,
        })
    }
    inner(stmts, id, true)
}

/// Whether statements `earlier` and `later` are in one block, `earlier` first, and nothing
/// between them (nested statements included) writes buffer `buf`.
pub fn untouched_between(stmts: &[Stmt], earlier: StmtId, later: StmtId, buf: &str) -> bool {
    let Some((block, e, _)) = locate(stmts, earlier) else { return false };
    let Some(l) = block.iter().position(|s| s.id == later).filter(|&l| e < l) else { return false };
    let mut written = false;
    walk_stmts(&block[e + 1..l], &mut |s| written |= s.written() == Some(buf));
    !written
}

/// Visits every statement of `stmts` and of the blocks nested in them, in pre-order.
pub fn walk_stmts<'a>(stmts: &'a [Stmt], f: &mut impl FnMut(&'a Stmt)) {
    for s in stmts {
        f(s);
        match &s.kind {
            StmtKind::Loop { body, .. } | StmtKind::Parallel { body, .. } => walk_stmts(body, f),
            StmtKind::If { then_body, else_body, .. } => {
                walk_stmts(then_body, f);
                walk_stmts(else_body, f);
            }
            _ => {}
        }
    }
}
