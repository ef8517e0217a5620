//! Unit tests of layout-inference decisions, through the library API.

use tilegen::ast::StmtKind;
use tilegen::diag::SourceFile;
use tilegen::layout::{BatchForm, CopyKind, DequantZero, EpilogueOp, FragmentLayout, GemmSchedule, MbarrierRole, PipelineMode};
use tilegen::target::Target;

fn spec(tiles: (i64, i64, i64), stages: i64, threads: i64, a_order: &str, transpose_b: bool) -> String {
    let (bm, bn, bk) = tiles;
    let (b_shape, b_origin, bs_shape) = if transpose_b {
        ("[N, K]", "B[bx*block_N, k*block_K]", "[block_N, block_K]")
    } else {
        ("[K, N]", "B[k*block_K, bx*block_N]", "[block_K, block_N]")
    };
    format!(
        "kernel: t\ntensors:\n  A: {{dtype: bf16, shape: [M, K], order: {a_order}}}\n  B: {{dtype: bf16, shape: {b_shape}}}\n  C: {{dtype: bf16, shape: [M, N], output: true}}\n\
constants: {{block_M: {bm}, block_N: {bn}, block_K: {bk}, stages: {stages}}}\ngrid:\n  bx: ceildiv(N, block_N)\n  by: ceildiv(M, block_M)\nthreads: {threads}\n\
buffers:\n  A_s: {{scope: shared, dtype: bf16, shape: [block_M, block_K]}}\n  B_s: {{scope: shared, dtype: bf16, shape: {bs_shape}}}\n  acc: {{scope: fragment, dtype: f32, shape: [block_M, block_N]}}\n\
body:\n  - clear(acc)\n  - pipelined(k, ceildiv(K, block_K), stages):\n      - copy(A[by*block_M, k*block_K], A_s)\n      - copy({b_origin}, B_s)\n      - gemm(A_s, B_s, acc, transpose_b={transpose_b})\n  - copy(acc, C[by*block_M, bx*block_N])\n")
}

fn compile(text: String) -> Result<tilegen::Compiled, Vec<String>> {
    tilegen::compile(SourceFile::new("t.yaml", text), Target::Sm80)
        .map_err(|(f, d)| d.iter().map(|d| d.render(&f)).collect())
}

#[test]
fn warps_split_the_tile_into_square_warp_tiles() {
    let c = compile(spec((128, 256, 32), 4, 256, "row_major", false)).unwrap();
    let m = c.plan.mmas.values().next().unwrap();
    assert_eq!(m.warps, (2, 4));
    assert_eq!(m.atom, "SM80_16x8x16_F32BF16BF16F32_TN");
    assert_eq!(m.k_blocks, 2);
    let c = compile(spec((256, 64, 32), 3, 128, "row_major", false)).unwrap();
    assert_eq!(c.plan.mmas.values().next().unwrap().warps, (4, 1));
}

#[test]
fn swizzles_follow_the_contiguous_row_width() {
    let c = compile(spec((128, 128, 32), 3, 128, "row_major", false)).unwrap();
    let a = &c.plan.shared[&0];
    assert_eq!((a.swizzle.bits, a.swizzle.base, a.swizzle.shift), (2, 3, 3), "64-byte K rows");
    assert_eq!(a.k_major, Some(true));
    let b = &c.plan.shared[&1];
    assert_eq!((b.swizzle.bits, b.atom_shape), (3, (64, 8)), "128-byte N rows of B");
    assert_eq!(b.k_major, Some(false), "row-major B [K, N] is N-contiguous");
    let c = compile(spec((128, 128, 64), 3, 128, "row_major", false)).unwrap();
    assert_eq!(c.plan.shared[&0].swizzle.bits, 3, "128-byte K rows");
}

#[test]
fn majorness_follows_the_global_tensors() {
    // Column-major A makes A_s M-contiguous (ldmatrix.trans); B stored [N, K] is K-major.
    let c = compile(spec((128, 128, 32), 3, 128, "col_major", true)).unwrap();
    assert_eq!(c.plan.shared[&0].k_major, Some(false));
    assert_eq!(c.plan.shared[&0].contiguous_dim, 0);
    assert_eq!(c.plan.shared[&1].k_major, Some(true));
}

#[test]
fn copies_use_16_byte_vectors_and_record_alignment() {
    let c = compile(spec((128, 128, 32), 3, 128, "row_major", false)).unwrap();
    let g2s: Vec<_> = c.plan.copies.values().filter(|p| p.kind == CopyKind::GlobalToShared).collect();
    assert_eq!(g2s.len(), 2);
    for p in &g2s {
        assert_eq!((p.vector_elems, p.vector_bits), (8, 128));
        assert!(p.atom.contains("CACHEGLOBAL<cute::uint128_t>"));
    }
    // A's threads run along K: 32 elements / 8 per vector = 4 threads per row.
    assert_eq!(g2s[0].threads.shape, (32, 4));
    let store = c.plan.copies.values().find(|p| p.kind == CopyKind::AccumulatorToGlobal).unwrap();
    assert_eq!(store.staging_bytes, 128 * 128 * 2);
    let aligned: Vec<_> = c.plan.alignment.iter().map(|a| (a.tensor, a.vector_elems)).collect();
    assert_eq!(aligned, vec![(0, 8), (1, 8), (2, 8)]);
}

#[test]
fn pipelines_and_shared_memory_are_planned() {
    let c = compile(spec((128, 256, 32), 4, 256, "row_major", false)).unwrap();
    let p = c.plan.pipelines.values().next().unwrap();
    assert_eq!((p.stages, p.mode), (4, PipelineMode::Multistage));
    assert_eq!((p.producers.len(), p.consumers.len()), (2, 1));
    assert_eq!(c.plan.smem.buffers, 4 * (128 * 32 + 32 * 256) * 2);
    assert_eq!(c.plan.smem.total, c.plan.smem.buffers.max(128 * 256 * 2));
    assert!(matches!(c.plan.fragments[&2], FragmentLayout::MmaAccumulator { .. }));
    let c = compile(spec((128, 128, 32), 1, 128, "row_major", false)).unwrap();
    assert_eq!(c.plan.pipelines.values().next().unwrap().mode, PipelineMode::Synchronous);
}

#[test]
fn target_limits_are_errors_with_both_figures() {
    let errs = compile(spec((256, 256, 64), 5, 256, "row_major", false)).unwrap_err().join("\n");
    assert!(errs.contains("needs 327680 bytes but sm80 allows 166912 bytes"), "{errs}");
    let errs = compile(spec((128, 72, 32), 3, 128, "row_major", false)).unwrap_err().join("\n");
    assert!(errs.contains("cannot be split over 4 warps"), "{errs}");
}

/// The `.cu` file a compiled spec renders to.
fn rendered_cu(c: &tilegen::Compiled) -> String {
    let files = tilegen::back::render(c).unwrap_or_else(|_| panic!("renders"));
    files.into_iter().find(|f| f.name.ends_with(".cu")).expect("a .cu file").contents
}

/// `text` with every run of whitespace, line breaks included, one space (none after `(`): code
/// the generator broke over several lines (`back::tidy`) matches its one-line spelling.
fn squashed(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ").replace("( ", "(")
}

fn compile_for(text: String, target: Target) -> Result<tilegen::Compiled, Vec<String>> {
    tilegen::compile(SourceFile::new("t.yaml", text), target).map_err(|(f, d)| d.iter().map(|d| d.render(&f)).collect())
}

#[test]
fn sm90a_plans_an_explicit_collective_with_an_evt_epilogue() {
    use tilegen::layout::EvtNode;
    let bundled = |name: &str| std::fs::read_to_string(format!("{}/specs/{name}", env!("CARGO_MANIFEST_DIR"))).unwrap();
    let c = compile_for(bundled("gemm_bias_relu_bf16.yaml"), Target::Sm90a).unwrap();
    let p = c.plan.collective.as_ref().unwrap();
    // The spec's per-target constants and cluster apply.
    assert_eq!((p.tile, p.cluster, p.stages), ((128, 256, 64), (2, 1), 4));
    assert_eq!(p.layouts, ("RowMajor", "RowMajor", "RowMajor"));
    let GemmSchedule::Cutlass { kernel, epilogue, .. } = p.schedule else { panic!("{:?}", p.schedule) };
    assert!(!kernel.contains("Auto") && !epilogue.contains("Auto"));
    // relu(acc + bias[col]) as a tree: maximum(plus(acc, row_broadcast(bias)), 0).
    let EvtNode::Compute { op: EpilogueOp::Max, children } = &p.epilogue else { panic!("{:?}", p.epilogue) };
    assert!(matches!(&children[0], EvtNode::Compute { op: EpilogueOp::Add, children: inner }
        if inner[0] == EvtNode::Acc && inner[1] == EvtNode::RowBroadcast { tensor: 2 }));
    assert!(matches!(&children[1], EvtNode::Scalar { value } if value == "0.0f"));
    assert!(p.smem_bytes <= 232_448);
    // The same spec still plans for sm80 with its own constants.
    let c = compile_for(bundled("gemm_bias_relu_bf16.yaml"), Target::Sm80).unwrap();
    assert!(c.plan.collective.is_none());
    assert_eq!(c.plan.mmas.values().next().unwrap().mnk, (128, 128, 32));
}

#[test]
fn sm90a_maps_majorness_and_refuses_what_it_cannot_lower() {
    // Column-major A and B stored [N, K]: CUTLASS ColumnMajor for both.
    let c = compile_for(spec((128, 128, 64), 4, 128, "col_major", true), Target::Sm90a).unwrap();
    assert_eq!(c.plan.collective.as_ref().unwrap().layouts, ("ColumnMajor", "ColumnMajor", "RowMajor"));
    // What the collective refuses takes tilegen's CuTe-level lowering, with the reason kept for
    // explain and the file's banner: a tile the cooperative kernel does not fit, ...
    let c = compile_for(spec((64, 128, 32), 4, 128, "row_major", false), Target::Sm90a).unwrap();
    assert!(c.plan.collective.is_none() && !c.plan.mmas.is_empty());
    assert_eq!(c.plan.collective_reason.as_deref(), Some("tile 64x128x32 does not fit the sm90a cooperative WGMMA kernel"));
    // ... or an epilogue EVT cannot spell (here on warpgroup MMAs: 128 accumulators per thread).
    let exp2 = spec((128, 128, 64), 4, 128, "row_major", false).replace("  - copy(acc, C", "  - parallel(i, j):\n      - acc[i, j] = exp2(acc[i, j])\n  - copy(acc, C");
    let c = compile_for(exp2, Target::Sm90a).unwrap();
    assert!(c.plan.collective_reason.as_ref().is_some_and(|r| r.contains("cannot express `exp2`")) && c.plan.mmas.values().all(|m| m.wgmma.is_some()));
    assert!(tilegen::explain::explain(&c).contains("lowering: tilegen's CuTe-level code, not a CUTLASS collective: GEMM-shaped, but the collective cannot take it: "));
    // When neither takes it, one error says so, then each lowering's reasons.
    let errs = compile_for(spec((128, 256, 64), 6, 128, "row_major", false), Target::Sm90a).unwrap_err().join("\n");
    assert!(errs.contains("the sm90a target has no lowering for this GEMM: a CUTLASS collective cannot take it (one reason), and neither can tilegen's CuTe-level lowering"), "{errs}");
    // Each reason names its lowering (they print in source order, interleaved).
    assert!(errs.contains("CUTLASS collective: shared memory over budget") && errs.contains("but sm90a allows 232448 bytes")
        && errs.contains("CuTe-level lowering: the accumulators need 256 registers per thread with 128 threads, over the 128 this lowering allows"), "{errs}");
}

#[test]
fn sm90a_batched_gemm_takes_the_collectives_batch_mode_and_others_fall_back_to_warpgroup_mmas() {
    let bmm = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/golden/specs/bmm_bf16.yaml")).unwrap();
    // 3-D A, B and C sharing their leading dimension, stepped by `bz`: CUTLASS's batch mode.
    let c = compile_for(bmm.clone(), Target::Sm90a).unwrap();
    let p = c.plan.collective.as_ref().expect("a batched GEMM takes the collective");
    assert_eq!(p.batch, Some(tilegen::layout::BatchPlan { var: "bz".into(), extent: "batch".into(), form: BatchForm::Batched }));
    assert!(p.why.contains("over the `batch` batches of its batch mode"), "{}", p.why);
    let cu = &rendered_cu(&c);
    assert!(cu.contains("args.problem_shape = {M, N, K, batch};"), "{cu}");
    assert!(cu.contains("args.mainloop.dA = cute::make_stride(int64_t(K), cute::Int<1>{}, int64_t(M) * K);"), "{cu}");
    assert!(cu.contains("args.epilogue.dD = cute::make_stride(int64_t(N), cute::Int<1>{}, int64_t(M) * N);"), "{cu}");
    let explained = tilegen::explain::explain(&c);
    assert!(explained.contains("batch: the leading dimension (`batch`, stepped by `bz`) is the collective's batch mode L"), "{explained}");
    // Batched A against one B shared by every batch (a linear layer over [batch, M, K]
    // activations): the batches fold into M, one GEMM of batch·M rows.
    let shared_b = bmm.replace("B: {dtype: bf16, shape: [batch, K, N]}", "B: {dtype: bf16, shape: [K, N]}").replace("B[bz, k*block_K:", "B[k*block_K:");
    assert_ne!(shared_b, bmm);
    let c = compile_for(shared_b, Target::Sm90a).unwrap();
    let p = c.plan.collective.as_ref().expect("a shared B takes the collective");
    assert_eq!(p.batch.as_ref().map(|b| b.form), Some(BatchForm::FoldedIntoM));
    let cu = &rendered_cu(&c);
    assert!(cu.contains("args.problem_shape = {batch * M, N, K, 1};") && cu.contains("int64_t(batch) * M > 2147483647"), "{cu}");
    // One A against batched B: the batch mode with A's batch stride a static zero.
    let shared_a = bmm.replace("A: {dtype: bf16, shape: [batch, M, K]}", "A: {dtype: bf16, shape: [M, K]}").replace("A[bz, by*block_M:", "A[by*block_M:");
    assert_ne!(shared_a, bmm);
    let c = compile_for(shared_a, Target::Sm90a).unwrap();
    assert_eq!(c.plan.collective.as_ref().and_then(|p| p.batch.as_ref()).map(|b| b.form), Some(BatchForm::SharedA));
    let cu = &rendered_cu(&c);
    assert!(cu.contains("// row-major, one matrix for every batch (batch stride 0)\nusing LayoutA = cute::Stride<int64_t, cute::Int<1>, cute::Int<0>>;\n")
        && cu.contains("args.mainloop.dA = cute::make_stride(int64_t(K), cute::Int<1>{}, cute::Int<0>{});")
        && cu.contains("args.mainloop.dB = cute::make_stride(cute::Int<1>{}, int64_t(N), int64_t(K) * N);")
        && cu.contains("args.problem_shape = {M, N, K, batch};"), "{cu}");
    // A batch taken at another variable than the grid's batch one: the collective refuses it,
    // and the CuTe-level lowering computes what the spec says.
    // (256 threads for sm90a: two consumer warpgroups on this lowering.)
    let other_var = bmm.replace("copy(A[bz,", "copy(A[by,").replace("stages: 4}}", "stages: 4}, threads: 256}");
    assert!(other_var.contains("copy(A[by,") && other_var.contains("threads: 256}"));
    let c = compile_for(other_var.clone(), Target::Sm90a).unwrap();
    let why = c.plan.collective_reason.clone().unwrap_or_default();
    assert!(why.contains("a batched GEMM must take every tile at the same grid variable along the batch dimension, one whose extent is `batch`"), "{why}");
    assert!(c.plan.mmas.values().all(|m| m.wgmma.is_some()) && c.plan.warp_specialization.is_some());
    let cu = &rendered_cu(&c);
    let banner = cu.split("\n\n").next().unwrap().replace("\n// ", " ");
    assert!(banner.contains("This spec is GEMM-shaped, but a CUTLASS collective cannot take it: a batched GEMM must take every tile"), "{banner}");
    assert!(cu.contains("int const bz = blockIdx.z;"), "{cu}");
    // Its loop's only work is the gemm: each tile's MMAs stay in flight while the next tile is
    // awaited, and a stage is released one tile later (attention's loops keep their own order).
    assert!(c.plan.pipelines.values().all(|p| p.mma_in_flight));
    assert!(cu.contains("warpgroup_wait<1>();  // the previous tile's MMAs are done; this tile's may still run")
        && cu.contains("arrive_barrier(smem.empty_k[prev_stage]);") && cu.contains("warpgroup_wait<0>();  // the last tile's MMAs"), "{cu}");
    let fa = compile_for(attention(), Target::Sm90a).unwrap();
    assert!(fa.plan.pipelines.values().all(|p| !p.mma_in_flight));
    // A spec's cluster is launched only by a collective: elsewhere it is an error at the value,
    // not a setting silently dropped.
    let clustered = other_var.replace("threads: 256}", "threads: 256, cluster: [2, 1]}");
    let errs = compile_for(clustered, Target::Sm90a).unwrap_err().join("\n");
    assert!(errs.contains("the sm90a target has no lowering for this GEMM") && errs.contains(":26:85: error: CuTe-level lowering: cluster [2, 1] is taken only by the CUTLASS collective of a GEMM-shaped spec"), "{errs}");
    let bmm_clustered = bmm.replace("stages: 4}}", "stages: 4}, cluster: [2, 1]}");
    assert_ne!(bmm_clustered, bmm);
    assert!(compile_for(bmm_clustered, Target::Sm90a).is_ok(), "the batched collective takes a cluster");
    // The collective fixes its own threads (384): a `threads` for sm90a is an error at the value.
    let errs = compile_for(bmm.replace("stages: 4}}", "stages: 4}, threads: 256}"), Target::Sm90a).unwrap_err().join("\n");
    assert!(errs.contains(":26:71: error: `threads: 256` for sm90a is not used: the CUTLASS collective this spec maps onto sets them by its kernel schedule (384)")
        && errs.contains("remove `threads` from this target's entry"), "{errs}");
    // The same for composable_kernel's instances on AMD; the tile lowering (which takes the
    // batched GEMM there) uses it.
    assert!(compile_for(bmm.replace("targets:\n", "targets:\n  gfx942: {threads: 128}\n"), Target::Gfx942).is_ok());
    let errs = compile_for(std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/specs/gemm_bf16.yaml")).unwrap().replace("targets:\n", "targets:\n  gfx942: {threads: 128}\n"), Target::Gfx942).unwrap_err().join("\n");
    assert!(errs.contains("`threads: 128` for gfx942 is not used: the composable_kernel instance this spec maps onto sets its own (256)"), "{errs}");
    let errs = compile_for(attention().replace("stages: 3}}", "stages: 3}, cluster: [2, 1]}"), Target::Sm90a).unwrap_err().join("\n");
    assert!(errs.contains("error: cluster [2, 1] is taken only by the CUTLASS collective") && errs.contains("remove `cluster` from this target's entry"), "{errs}");
}

/// A batched golden spec with one more tensor (before the output) and an epilogue statement.
fn batched_with_epilogue(golden: &str, tensor: &str, stmt: &str) -> String {
    let src = std::fs::read_to_string(format!("{}/tests/golden/specs/{golden}.yaml", env!("CARGO_MANIFEST_DIR"))).unwrap();
    let out = "  C: {dtype: bf16, shape: [batch, M, N], output: true}";
    assert!(src.contains(out) && src.contains("  - copy(acc, C"));
    src.replace(out, &format!("  {tensor}\n{out}")).replace("  - copy(acc, C", &format!("  - parallel(i, j):\n      - {stmt}\n  - copy(acc, C"))
}

#[test]
fn sm90a_batched_epilogue_vectors_step_with_the_batch_and_fold_only_when_rows_allow() {
    let form = |c: &tilegen::Compiled| c.plan.collective.as_ref().and_then(|p| p.batch.as_ref()).map(|b| b.form);
    // One bias per batch over the columns: a row broadcast whose batch stride is its length.
    let c = compile_for(batched_with_epilogue("bmm_bf16", "bias: {dtype: bf16, shape: [batch, N]}", "acc[i, j] = acc[i, j] + f32(bias[bz, bx*block_N + j])"), Target::Sm90a).unwrap();
    assert_eq!(form(&c), Some(BatchForm::Batched));
    let cu = &rendered_cu(&c);
    assert!(squashed(cu).contains("using RowBias = Sm90RowBroadcast<0, TileShape, ElementBias, ElementCompute, Stride<_0, _1, int64_t>,")
        && squashed(cu).contains("{static_cast<ElementBias const*>(bias), ElementBias(0.0f), {cute::Int<0>{}, cute::Int<1>{}, int64_t(N)}}, // bias"), "{cu}");
    assert!(tilegen::explain::explain(&c).contains("D = plus(acc, row_broadcast(bias, per batch))"));
    // One scale per batch over the rows: a column broadcast stepping by M.
    let c = compile_for(batched_with_epilogue("bmm_bf16", "scale: {dtype: f32, shape: [batch, M]}", "acc[i, j] = acc[i, j] * scale[bz, by*block_M + i]"), Target::Sm90a).unwrap();
    assert!(squashed(&rendered_cu(&c)).contains("{static_cast<ElementScale const*>(scale), ElementScale(0.0f), {cute::Int<1>{}, cute::Int<0>{}, int64_t(M)}}, // scale"));
    // With B shared the batches fold into M while every epilogue vector is one value per
    // folded row: a packed [batch, M] vector is, and it needs no batch stride.
    let c = compile_for(batched_with_epilogue("linear3d_bf16", "scale: {dtype: f32, shape: [batch, M]}", "acc[i, j] = acc[i, j] * scale[bz, by*block_M + i]"), Target::Sm90a).unwrap();
    assert_eq!(form(&c), Some(BatchForm::FoldedIntoM));
    let cu = &rendered_cu(&c);
    assert!(cu.contains("// `scale`: one value per output row of every batch (the batches folded into M), broadcast along the\n// columns\nusing ColScale = Sm90ColBroadcast<0, TileShape, ElementScale, ElementCompute, Stride<_1, _0, _0>, 1, false>;\n")
        && !cu.contains("scale) % 16"), "{cu}");
    assert!(!c.plan.alignment.iter().any(|a| c.spec.tensors[a.tensor].name.name == "scale"), "a column broadcast is read element by element");
    assert!(cu.contains("args.problem_shape = {batch * M, N, K, 1};"), "{cu}");
    // A per-row vector repeated in every batch, or one bias per batch over the columns, cannot
    // be indexed by folded rows: the batch mode with B's batch stride a static zero instead.
    for (tensor, stmt, name) in [
        ("scale: {dtype: f32, shape: [M]}", "acc[i, j] = acc[i, j] * scale[by*block_M + i]", "scale"),
        ("bias: {dtype: bf16, shape: [batch, N]}", "acc[i, j] = acc[i, j] + f32(bias[bz, bx*block_N + j])", "bias"),
    ] {
        let c = compile_for(batched_with_epilogue("linear3d_bf16", tensor, stmt), Target::Sm90a).unwrap();
        assert_eq!(form(&c), Some(BatchForm::SharedB), "{stmt}");
        let p = c.plan.collective.as_ref().unwrap();
        assert!(p.why.contains(&format!("with one B for every batch (B's batch stride is 0; the batches do not fold into M because the epilogue's vector `{name}` is not one value per folded row)")), "{}", p.why);
        let cu = &rendered_cu(&c);
        assert!(cu.contains("// row-major, one matrix for every batch (batch stride 0)\nusing LayoutB = cute::Stride<cute::Int<1>, int64_t, cute::Int<0>>;\n")
            && cu.contains("args.mainloop.dB = cute::make_stride(cute::Int<1>{}, int64_t(N), cute::Int<0>{});")
            && cu.contains("args.problem_shape = {M, N, K, batch};") && !cu.contains("2147483647 (one GEMM"), "{cu}");
    }
    // A per-batch vector must be indexed by the batch variable first, and be row-major (packed).
    for (tensor, stmt) in [
        ("bias: {dtype: bf16, shape: [batch, N]}", "acc[i, j] = acc[i, j] + f32(bias[by, bx*block_N + j])"),
        ("bias: {dtype: bf16, shape: [batch, N], order: col_major}", "acc[i, j] = acc[i, j] + f32(bias[bz, bx*block_N + j])"),
    ] {
        // The CuTe-level lowering takes these, with two consumer warpgroups.
        let spec = batched_with_epilogue("bmm_bf16", tensor, stmt).replace("stages: 4}}", "stages: 4}, threads: 256}");
        let c = compile_for(spec, Target::Sm90a).unwrap();
        assert!(c.plan.collective.is_none(), "{tensor} {stmt}");
        assert_eq!(c.plan.collective_reason.as_deref(), Some("the sm90a epilogue cannot express a read of a tensor that is neither a vector nor one vector per batch as a CUTLASS epilogue visitor tree yet"));
    }
}

#[test]
fn sm90a_int8_gemm_takes_the_collective_with_an_f32_epilogue_fragment() {
    let w8a8 = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/golden/specs/gemm_w8a8_bf16.yaml")).unwrap();
    let c = compile_for(w8a8.clone(), Target::Sm90a).unwrap();
    let p = c.plan.collective.as_ref().expect("an int8 GEMM takes the collective");
    assert_eq!((p.accumulator, p.layouts.0, p.layouts.1, p.tile), (tilegen::ast::DType::I32, "RowMajor", "ColumnMajor", (128, 256, 128)));
    // The epilogue computes `out` from the accumulator; the store takes `out`.
    let tilegen::layout::EvtNode::Compute { op: EpilogueOp::Mul, children } = &p.epilogue else { panic!("{:?}", p.epilogue) };
    assert!(matches!(&children[0], tilegen::layout::EvtNode::Compute { op: EpilogueOp::Mul, children: inner } if inner[0] == tilegen::layout::EvtNode::Acc));
    let cu = &rendered_cu(&c);
    assert!(cu.contains("using ElementAccumulator = int32_t;") && cu.contains("using ElementA = int8_t;"), "{cu}");
    // 8-bit WGMMA reads both operands K-major: B stored [K, N] with N contiguous is refused.
    let mn_major = w8a8.replace("B: {dtype: i8, shape: [N, K]}", "B: {dtype: i8, shape: [K, N]}")
        .replace("B_s: {scope: shared,   dtype: i8,  shape: [block_N, block_K]}", "B_s: {scope: shared,   dtype: i8,  shape: [block_K, block_N]}")
        .replace("copy(B[bx*block_N, k*block_K], B_s)", "copy(B[k*block_K, bx*block_N], B_s)").replace(", transpose_b=true", "");
    let errs = compile_for(mn_major.clone(), Target::Sm90a).unwrap_err().join("\n");
    assert!(errs.contains("8-bit warpgroup MMAs read both operands K-major; store B as [N, K] with K contiguous"), "{errs}");
    // A float into the i32 accumulator is a type error; integer arithmetic on it would be
    // computed in f32 by the EVT, so the collective refuses it with the fix.
    let float_into_acc = w8a8.replace("out[i, j] = f32(acc[i, j])", "acc[i, j] = f32(acc[i, j])").replace("copy(out, C", "copy(acc, C");
    let errs = compile_for(float_into_acc, Target::Sm90a).unwrap_err().join("\n");
    assert!(errs.contains("`acc` holds integers; this value is a float"), "{errs}");
    let int_into_acc = w8a8.replace("out[i, j] = f32(acc[i, j]) * a_scale[by*block_M + i] * b_scale[bx*block_N + j]", "acc[i, j] = acc[i, j] * 2").replace("copy(out, C", "copy(acc, C");
    let errs = compile_for(int_into_acc, Target::Sm90a).unwrap_err().join("\n");
    assert!(errs.contains("the epilogue computes in f32, but the accumulator `acc` is i32: compute into an f32 fragment of its shape"), "{errs}");
    // An i32 output takes the accumulator exactly, computed in i32; any other integer output
    // would be rounded from f32 where the spec truncates, and is refused.
    let as_i32 = w8a8.replace("  C: {dtype: bf16,", "  C: {dtype: i32,").replace("sm90a: {cluster", "sm90a: {constants: {stages: 3}, cluster")
        .replace("  - parallel(i, j):\n      - out[i, j] = f32(acc[i, j]) * a_scale[by*block_M + i] * b_scale[bx*block_N + j]\n  - copy(out, C", "  - copy(acc, C");
    assert!(as_i32.contains("  - copy(acc, C") && as_i32.contains("dtype: i32, shape: [M, N]"));
    let cu = &rendered_cu(&compile_for(as_i32.clone(), Target::Sm90a).unwrap());
    assert!(cu.contains("using ElementCompute = int32_t;  // the i32 accumulator is stored as is, exactly") && cu.contains("using ElementD = int32_t;"), "{cu}");
    for (out, expect) in [("i8", "the output is i8: only an i32 accumulator stored as is converts exactly"), ("i32", "the output is i32: only an i32 accumulator stored as is")] {
        let scaled = w8a8.replace("  C: {dtype: bf16,", &format!("  C: {{dtype: {out},"));
        let errs = compile_for(scaled, Target::Sm90a).unwrap_err().join("\n");
        assert!(errs.contains(expect), "{errs}");
    }
    // sm80: mma.sync's 8-bit atom, 32 deep, both operands K-major through ldmatrix.
    let c = compile_for(w8a8.clone(), Target::Sm80).unwrap();
    let m = c.plan.mmas.values().next().unwrap();
    assert_eq!((m.atom.as_str(), m.tile.2, m.k_blocks), ("SM80_16x8x32_S32S8S8S32_TN", 32, 2));
    let errs = compile_for(mn_major, Target::Sm80).unwrap_err().join("\n");
    assert!(errs.contains("8-bit MMA operands are read K-major (ldmatrix cannot transpose 8-bit elements), but `B_s` is MN-major in shared memory"), "{errs}");
    // A 16-bit GEMM may compute its epilogue into a second f32 fragment too.
    let gemm = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/specs/gemm_bf16.yaml")).unwrap()
        .replace("  acc: {scope: fragment, dtype: f32,  shape: [block_M, block_N]}", "  acc: {scope: fragment, dtype: f32,  shape: [block_M, block_N]}\n  out: {scope: fragment, dtype: f32,  shape: [block_M, block_N]}");
    let two = gemm.replace("  - copy(acc, C", "  - parallel(i, j):\n      - out[i, j] = acc[i, j] * 2.0\n      - out[i, j] += acc[i, j]\n  - copy(out, C");
    let c = compile_for(two, Target::Sm90a).unwrap();
    let tree = &c.plan.collective.as_ref().expect("collective").epilogue;
    assert_eq!(tilegen::explain::explain(&c).lines().find(|l| l.contains("D = ")).unwrap().trim(), "D = plus(multiplies(acc, 2.0f), acc)", "{tree:?}");
    // Reading one before anything writes it is an error of the spec, on every target.
    let unwritten = gemm.replace("  - copy(acc, C", "  - parallel(i, j):\n      - acc[i, j] = out[i, j] * 2.0\n  - copy(acc, C");
    let errs = compile_for(unwritten, Target::Sm80).unwrap_err().join("\n");
    assert!(errs.contains("`out` is read here before any statement writes it"), "{errs}");
}

#[test]
fn amd_int8_gemm_takes_composable_kernel_with_exact_i32_accumulation() {
    let w8a8 = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/golden/specs/gemm_w8a8_bf16.yaml")).unwrap();
    let hip = |c: &tilegen::Compiled| tilegen::back::render(c).unwrap_or_else(|_| panic!("renders")).into_iter().find(|f| f.name.ends_with(".hip")).expect("a .hip file").contents;
    for (target, mfma) in [(Target::Gfx942, "32x32x16 i8 MFMA"), (Target::Gfx90a, "32x32x8 i8 MFMA")] {
        let c = compile_for(w8a8.clone(), target).unwrap();
        let p = c.plan.collective.as_ref().expect("CK takes the int8 GEMM");
        // 128 bytes of K per tile, as for 16-bit operands; the epilogue computes in f32.
        assert_eq!((p.accumulator, p.tile, p.epilogue_compute), (tilegen::ast::DType::I32, (128, 128, 128), tilegen::ast::DType::F32));
        let src = hip(&c);
        assert!(tilegen::explain::explain(&c).contains("accumulator i32 (i8 MFMAs, exact)"));
        for want in ["DeviceGemmMultiD_Xdl_CShuffle_V3<", "using ElementA = int8_t;", "using ElementAccumulator = int32_t;  // i8 MFMAs accumulate in i32, exactly",
            "ElementAccumulator,             // CShuffleDataType: the epilogue sees the i32 accumulator", "16, 16,                         // AK1, BK1", mfma,
            "2, 16, 16, false,               // B: source vector dim (K)", "float const acc = ck::type_convert<float>(c);", "K % 16 != 0",
            // The bf16 output moves 8 elements per 16-byte vector, the i8 operands 16.
            "S<8, 1, 4>,", "if (reinterpret_cast<uintptr_t>(C) % 16 != 0 || N % 8 != 0) {"] {
            assert!(squashed(&src).contains(&squashed(want)), "{target}: no `{want}` in\n{src}");
        }
    }
    // The i32 accumulator stored as is (torch._int_mm) is exact: CK's plain GEMM with i32 C.
    let as_i32 = w8a8.replace("  C: {dtype: bf16,", "  C: {dtype: i32,")
        .replace("  - parallel(i, j):\n      - out[i, j] = f32(acc[i, j]) * a_scale[by*block_M + i] * b_scale[bx*block_N + j]\n  - copy(out, C", "  - copy(acc, C");
    assert!(as_i32.contains("  - copy(acc, C"));
    let c = compile_for(as_i32, Target::Gfx942).unwrap();
    assert_eq!(c.plan.collective.as_ref().map(|p| p.epilogue_compute), Some(tilegen::ast::DType::I32));
    let src = hip(&c);
    assert!(src.contains("DeviceGemm_Xdl_CShuffleV3<") && src.contains("using ElementC = int32_t;") && squashed(&src).contains("ElementC, // CShuffleDataType"), "{src}");
    assert!(src.contains("if (reinterpret_cast<uintptr_t>(C) % 16 != 0 || N % 4 != 0) {"), "{src}");
    // A bf16 output of the plain instance moves 4 elements per C-transfer vector, and the
    // launcher asks for no more (B is K-major here, so nothing else needs N % 8).
    let tn = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/golden/specs/gemm_narrow_tn_bf16.yaml")).unwrap();
    let src = hip(&compile_for(tn, Target::Gfx942).unwrap());
    assert!(src.contains("DeviceGemm_Xdl_CShuffleV3<") && squashed(&src).contains(" 4, // C block transfer scalars per vector (N)"), "{src}");
    assert!(src.contains("if (reinterpret_cast<uintptr_t>(C) % 8 != 0 || N % 4 != 0) {") && !src.contains("N % 8"), "{src}");
    // Any other integer output would be rounded from f32 where the spec truncates.
    for out in ["i8", "i32"] {
        let scaled = w8a8.replace("  C: {dtype: bf16,", &format!("  C: {{dtype: {out},"));
        let errs = compile_for(scaled, Target::Gfx942).unwrap_err().join("\n");
        assert!(errs.contains(&format!("the gfx942 target's composable_kernel GEMM writes floating-point outputs (or an i32 accumulator stored as is); `C` is {out}")), "{errs}");
    }
    // CK's int8 instances read B K-major, as 8-bit WGMMA and ldmatrix do.
    let mn_major = w8a8.replace("B: {dtype: i8, shape: [N, K]}", "B: {dtype: i8, shape: [K, N]}")
        .replace("B_s: {scope: shared,   dtype: i8,  shape: [block_N, block_K]}", "B_s: {scope: shared,   dtype: i8,  shape: [block_K, block_N]}")
        .replace("copy(B[bx*block_N, k*block_K], B_s)", "copy(B[k*block_K, bx*block_N], B_s)").replace(", transpose_b=true", "");
    let errs = compile_for(mn_major, Target::Gfx90a).unwrap_err().join("\n");
    assert!(errs.contains("t.yaml:5:3: error: CK device GEMM: the gfx90a target's int8 GEMM reads B as [N, K] with K contiguous"), "{errs}");
    // FP8 stays sm90a's: the AMD targets refuse it.
    let fp8 = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/golden/specs/gemm_fp8_bf16.yaml")).unwrap();
    assert!(compile_for(fp8, Target::Gfx942).is_err());
}

#[test]
fn sm90a_kernel_schedule_and_swizzle_are_target_settings_of_the_collective() {
    let gemm = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/specs/gemm_bf16.yaml")).unwrap();
    let sm90a = "sm90a: {constants: {block_N: 256, block_K: 64, stages: 4}, cluster: [2, 1]}";
    assert!(gemm.contains(sm90a));
    let with = |entry: &str| gemm.replace(sm90a, entry);
    // The default stays cooperative: two consumer warpgroups split the tile's rows.
    let c = compile_for(gemm.clone(), Target::Sm90a).unwrap();
    let p = c.plan.collective.as_ref().unwrap();
    assert_eq!(p.schedule, GemmSchedule::Cutlass { kernel: "cutlass::gemm::KernelTmaWarpSpecializedCooperative", epilogue: "cutlass::epilogue::TmaWarpSpecializedCooperative", epilogue_tile: (128, 32) });
    // Ping-pong: each consumer warpgroup holds a whole tile; the epilogue works in 64-row subtiles.
    let c = compile_for(with("sm90a: {constants: {block_M: 64, block_N: 256, block_K: 64, stages: 5}, schedule: pingpong}"), Target::Sm90a).unwrap();
    let p = c.plan.collective.as_ref().unwrap();
    assert_eq!(p.schedule, GemmSchedule::Cutlass { kernel: "cutlass::gemm::KernelTmaWarpSpecializedPingpong", epilogue: "cutlass::epilogue::TmaWarpSpecialized", epilogue_tile: (64, 32) });
    let cu = rendered_cu(&c);
    assert!(cu.contains("using KernelSchedule = cutlass::gemm::KernelTmaWarpSpecializedPingpong;") && cu.contains("using EpilogueTile = Shape<Int<64>, Int<32>>;"), "{cu}");
    let text = tilegen::explain::explain(&c);
    assert!(text.contains("ping-pong warp-specialised kernel (`schedule: pingpong`") && text.contains("each runs WGMMA on its 64x256 tile from shared memory, then the fused epilogue while the other multiplies")
        && text.contains("D: stored through shared memory in 64x32 subtiles") && text.contains("registers: accumulators 128 per consumer thread (16384 of the tile per warpgroup;"), "{text}");
    // A tile a warpgroup cannot hold is refused with the rule.
    let errs = compile_for(with("sm90a: {constants: {block_N: 256, block_K: 64}, schedule: pingpong}"), Target::Sm90a).map(|c| c.plan.collective_reason.unwrap_or_default()).unwrap_or_else(|e| e.join("\n"));
    assert!(errs.contains("the 128x256 tile needs 256 accumulator registers per consumer thread in the sm90a pingpong kernel"), "{errs}");
    let errs = compile_for(with("sm90a: {constants: {block_M: 256, block_K: 64}, schedule: pingpong}"), Target::Sm90a).map(|c| c.plan.collective_reason.unwrap_or_default()).unwrap_or_else(|e| e.join("\n"));
    assert!(errs.contains("tile 256x128x64 does not fit the sm90a pingpong WGMMA kernel"), "{errs}");
    // Accumulators past 128 registers per consumer thread spill: refused, FP8's promoted
    // second set counted.
    let errs = compile_for(with("sm90a: {constants: {block_M: 256, block_N: 256, block_K: 64, stages: 3}}"), Target::Sm90a).map(|c| c.plan.collective_reason.unwrap_or_default()).unwrap_or_else(|e| e.join("\n"));
    assert!(errs.contains("the 256x256 tile needs 256 accumulator registers per consumer thread in the sm90a cooperative kernel, over the 128 it holds without spilling"), "{errs}");
    let fp8 = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/golden/specs/gemm_fp8_bf16.yaml")).unwrap();
    let fp8_entry = "sm90a: {cluster: [2, 1], swizzle: 8}";
    assert!(fp8.contains(fp8_entry));
    let text = tilegen::explain::explain(&compile_for(fp8.clone(), Target::Sm90a).unwrap());
    assert!(text.contains("registers: accumulators 128 per consumer thread (8192 of the tile per warpgroup, in two f32 sets: FP8 accumulation is promoted;"), "{text}");
    for (entry, need) in [("sm90a: {constants: {block_N: 256, stages: 4}, cluster: [2, 1]}", "the 128x256 tile needs 256 accumulator registers per consumer thread (two sets"), ("sm90a: {schedule: pingpong}", "the 128x128 tile needs 256 accumulator registers per consumer thread (two sets")] {
        let errs = compile_for(fp8.replace(fp8_entry, entry), Target::Sm90a).unwrap_err().join("\n");
        assert!(errs.contains(need) && errs.contains("for f8e4m3 operands use 128x128 tiles (cooperative) or 64x128 (pingpong)"), "{errs}");
    }
    for cluster in ["[1, 2]", "[2, 1]"] {
        assert!(compile_for(fp8.replace(fp8_entry, &format!("sm90a: {{constants: {{block_M: 64, stages: 8}}, schedule: pingpong, cluster: {cluster}}}")), Target::Sm90a).is_ok(), "{cluster}");
    }
    // TMA multicast shares B's tile over the cluster's CTAs along M (A's along N), in whole
    // 8-row pieces.
    let errs = compile_for(with("sm90a: {constants: {block_N: 16, block_K: 64}, cluster: [4, 1]}"), Target::Sm90a).unwrap_err().join("\n");
    assert!(errs.contains("cluster [4, 1] does not fit the 128x16 tile: at most 4 CTAs, and TMA multicast splits B's 16 rows over the cluster's 4 CTAs along M"), "{errs}");
    assert!(compile_for(with("sm90a: {constants: {block_N: 32, block_K: 64}, cluster: [4, 1]}"), Target::Sm90a).is_ok());
    // Spelling, targets, and lowerings without a kernel schedule.
    let errs = compile_for(with("sm90a: {schedule: ping_pong}"), Target::Sm90a).unwrap_err().join("\n");
    assert!(errs.contains("error: unknown kernel schedule `ping_pong`") && errs.contains("did you mean `pingpong`?"), "{errs}");
    let errs = compile_for(gemm.replace("  sm90a: {", "  sm80: {schedule: pingpong}\n  sm90a: {"), Target::Sm80).unwrap_err().join("\n");
    assert!(errs.contains("error: the sm80 target has no kernel schedules"), "{errs}");
    let errs = compile_for(attention().replace("sm90a: {threads: 256,", "sm90a: {schedule: cooperative, threads: 256,"), Target::Sm90a).unwrap_err().join("\n");
    assert!(errs.contains("error: schedule `cooperative` is taken only by the CUTLASS collective of a GEMM-shaped spec"), "{errs}");
    // The persistent scheduler's swizzle band: 1 unless the spec sets it.
    assert!(rendered_cu(&compile_for(gemm.clone(), Target::Sm90a).unwrap()).contains("args.scheduler.max_swizzle_size = 1;  // rasterization: CTAs per swizzle band (none)"));
    let c = compile_for(with("sm90a: {constants: {block_N: 256, block_K: 64, stages: 4}, cluster: [2, 1], swizzle: 4}"), Target::Sm90a).unwrap();
    assert_eq!(c.plan.collective.as_ref().unwrap().swizzle, 4);
    assert!(rendered_cu(&c).contains("args.scheduler.max_swizzle_size = 4;  // rasterization: CTAs per swizzle band\n"));
    assert!(tilegen::explain::explain(&c).contains("in swizzle bands of 4 CTAs"));
    let errs = compile_for(with("sm90a: {swizzle: 3}"), Target::Sm90a).unwrap_err().join("\n");
    assert!(errs.contains("error: swizzle is 1, 2, 4 or 8"), "{errs}");
    let errs = compile_for(gemm.replace("  sm90a: {", "  gfx942: {swizzle: 2}\n  sm90a: {"), Target::Gfx942).unwrap_err().join("\n");
    assert!(errs.contains("error: the gfx942 target has no tile-scheduler swizzle"), "{errs}");
    let errs = compile_for(attention().replace("sm90a: {threads: 256,", "sm90a: {swizzle: 2, threads: 256,"), Target::Sm90a).unwrap_err().join("\n");
    assert!(errs.contains("error: swizzle 2 is taken only by the CUTLASS collective of a GEMM-shaped spec"), "{errs}");
}

fn attention() -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/specs/flash_attention_fwd_bf16.yaml")).unwrap()
}

/// The spec without its `targets:` overrides (on sm90a: one warpgroup, 64-key tiles).
fn without_targets(text: String) -> String {
    match text.find("\ntargets:") {
        Some(at) => text[..at + 1].to_string(),
        None => text,
    }
}

#[test]
fn attention_keeps_rows_in_warps_and_feeds_p_from_registers() {
    let c = compile(attention()).unwrap();
    let buffer = |n: &str| c.spec.buffers.iter().position(|b| b.name.name == n).unwrap();
    let mmas: Vec<_> = c.plan.mmas.iter().collect();
    assert_eq!(mmas.len(), 2);
    let (&qk, s) = mmas[0];
    let (_, pv) = mmas[1];
    // Reduced rows and register operands need every row inside one warp: 4x1, not the
    // squarer 2x2 a plain 128x64 gemm would get.
    assert_eq!(s.warps, (4, 1));
    assert_eq!(pv.warps, (4, 1));
    assert!(!s.a_in_registers);
    assert!(pv.a_in_registers, "P·V reads P from registers");
    assert_eq!(c.plan.fragments[&buffer("P_f")], FragmentLayout::MmaAccumulator { gemm: qk });
    // m is fixed by the reduction; m_prev, l and alpha through the parallel blocks.
    for n in ["m", "m_prev", "l", "alpha"] {
        assert_eq!(c.plan.fragments[&buffer(n)], FragmentLayout::RowStats { gemm: qk }, "{n}");
    }
    // The 2-D tiles of the 4-D tensors: batch and head indices fixed, seq and dim spanned.
    let q = c.plan.copies.values().find(|cp| cp.buffer == buffer("Q_s")).unwrap();
    assert_eq!(q.kind, CopyKind::GlobalToShared);
    assert_eq!(q.fixed.iter().map(|(d, _)| *d).collect::<Vec<_>>(), vec![0, 2]);
    assert_eq!(q.vector_elems, 8);
    // V is the B operand of P·V stored [k, n]: MN-major in shared memory (ldmatrix.trans).
    assert_eq!(c.plan.shared[&buffer("V_s")].k_major, Some(false));
    assert_eq!(c.plan.shared[&buffer("K_s")].k_major, Some(true));
    let p = c.plan.pipelines.values().next().unwrap();
    assert_eq!(p.mode, PipelineMode::Multistage);
    assert_eq!(p.producers.len(), 2);
    // Q's copy, just before the loop with only register clears between, leaves its wait
    // to the loop's first one.
    let q_copy = c.plan.copies.iter().find(|(_, cp)| cp.buffer == buffer("Q_s")).map(|(id, _)| *id).unwrap();
    assert_eq!(p.covers, vec![q_copy]);
}

#[test]
fn attention_without_row_reductions_in_warps_is_a_conflict() {
    // The row max read at the column index needs other threads' registers.
    let text = attention().replace("O_f[i, j] *= alpha[i]", "O_f[i, j] *= alpha[j]");
    let errs = compile(text).unwrap_err().join("\n");
    assert!(errs.contains("read at another index than the block's row index `i`"), "{errs}");
    // A rank-reducing copy must span the contiguous (last) dimension.
    let text = attention().replace("copy(K[bz, t*block_N:, by, :], K_s)", "copy(K[bz, t*block_N:, by:, 0], K_s)");
    let errs = compile(text).unwrap_err().join("\n");
    assert!(errs.contains("does not span its contiguous dimension"), "{errs}");
}

fn w4a16() -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/specs/w4a16_gemm_bf16.yaml")).unwrap()
}

/// The bundled w4a16 spec with a 32-row tile of A (prefill-sized), which the thin-tile
/// lowering does not take: the dequant is fused into mma.sync's B fragments instead.
fn w4a16_wide() -> String {
    w4a16().replace("constants: {block_M: 16, block_N: 32, block_K: 512, stages: 4}", "constants: {block_M: 32, block_N: 64, block_K: 256, stages: 4}")
        .replace("threads: 256", "threads: 128")
}

#[test]
fn thin_tiles_unpack_weights_into_the_mma_a_operand_from_whole_words() {
    let c = compile(w4a16()).unwrap();
    let p = c.plan.dequant_gemm.as_ref().expect("the thin-tile plan");
    // 16 rows of A: two 8-row tiles (the MMA's N), one when M <= 8; 32 weight rows as two
    // 16-row groups, each split over 4 warps taking one of the four 128-deep steps of a tile.
    assert_eq!((p.block, p.m_tiles, p.small_m, p.row_groups, p.k_split, p.k_steps, p.group, &p.zero), ((16, 32, 512), 2, true, 2, 4, 4, 128, &DequantZero::Constant(8)));
    // [16, 512] A rows need 32 bytes of padding and Swizzle<1,3,3>; the words Swizzle<1,4,2>.
    assert_eq!((p.a_layout.pad, p.a_layout.swizzle.bits, p.a_layout.swizzle.base, p.a_layout.swizzle.shift), (16, 1, 3, 3));
    assert_eq!((p.w_layout.pad, p.w_layout.swizzle.bits, p.w_layout.swizzle.base, p.w_layout.swizzle.shift), (0, 1, 4, 2));
    // Scales: 4-byte copies, three per weight row (its two pairs, and one more for rows that
    // start mid-word when K / 128 is odd), into rows of 4 + 2 slots.
    assert_eq!((p.a_chunks, p.w_chunks, p.scale_pairs), (4, 2, 96));
    // Four stages, and a full and an empty mbarrier per stage, in a struct whose size is a
    // multiple of its 128-byte alignment (as sizeof counts it: the kernel asserts the figure).
    assert_eq!(c.plan.smem.total, (4 * (16 * 528 * 2 + 32 * 64 * 4 + 32 * 6 * 2) + 4 * 16_u64).next_multiple_of(128));
    assert!(rendered_cu(&c).contains(&format!("static_assert(kSmemBytes<true> == {}, ", c.plan.smem.total)));
    // The general tables stay empty: nothing else plans this program.
    assert!(c.plan.mmas.is_empty() && c.plan.copies.is_empty() && c.plan.dequants.is_empty());
    let cu = &rendered_cu(&c);
    // The cp.async flavour: a quad owns one 128-deep step (one group), so the MMAs sum the exact
    // (value - zero) * A of a step and the row's scale multiplies the step's sums once.
    assert!(p.scale_per_step(), "a step of the cp.async flavour lies in one group");
    for needle in ["Mma::fma(d[0], d[1], d[2], d[3], w0, w1, w2, w3, x.x, x.y, d[0], d[1], d[2], d[3]);", "dequant_int4x2_exact<ElementS_s>(lo, 0, neg_bias_lo)",
                   "float (&d)[4] = step[mt][i % 2];", "accum[mt][chain][2] = fmaf(scale_hi, step[mt][chain][2], accum[mt][chain][2]);",
                   "float const scale_lo = half_bits_to_float<ElementS_s>(ld_shared_u16(scales_rd[0][s] + stage_scales));",
                   "constexpr uint32_t neg_bias_lo = dequant_neg_bias<8, ElementS_s>(), neg_bias_hi = neg_bias_lo;",
                   "Swizzle<1, 3, 3>{}", "constexpr int kRowA_s = block_K + 16;", "bool const decode = M <= 8;", "decode ? (odd_rows ? w4a16_gemm_bf16_kernel<1, true> : w4a16_gemm_bf16_kernel<1, false>)",
                   "smem.partials[wk][row][w_row]",
                   // Any number of scales per row: odd rows of an odd count start mid-word.
                   // The launcher picks kOddRows (its own instantiations) when they do.
                   "bool const odd_rows = (K / 128) % 2 != 0;", "odd_rows ? w4a16_gemm_bf16_kernel<2, true> : w4a16_gemm_bf16_kernel<2, false>",
                   "int const scale_shift = kOddRows ? (n0 + scale_row) & 1 : 0;", "constexpr int kRowS_s = (block_K / 128) + (kOddRows ? 2 : 0);",
                   "(k0 + s) * 128 / kGroup + (kOddRows ? (n0 + w_row + 8 * h) & 1 : 0)", "min(4, max(0, 2 * (k_left / kGroup - scale_first)))",
                   // The mbarrier pipeline: refill two tiles ahead, wait for the tile, release it; A through L1.
                   "constexpr int kPrefetch = 2;", "mbarrier_arrive_on_copies(full + 8 * next_stage);",
                   "mbarrier_wait(full + 8 * stage, (tile / stages) % 2);", "mbarrier_arrive(empty + 8 * stage);", "cp_async_16_l1(A_dst[i]"] {
        assert!(cu.contains(needle), "the kernel lacks {needle}");
    }
    assert!(cu.contains("if (reinterpret_cast<uintptr_t>(scales) % 4 != 0) {"), "the launcher takes an odd number of scales per row");
    assert!(p.tma.is_none(), "sm80 has no TMA");
    // sm90a takes the same lowering (mma.sync), and says why not warpgroup MMAs; a producer warp
    // loads its stages with TMA, the tiles kept as 256-deep spans under the 128-byte swizzle.
    let c9 = compile_for(w4a16(), Target::Sm90a).unwrap();
    assert!(c9.plan.dequant_gemm.is_some() && c9.plan.mma_sync_reason.as_deref().is_some_and(|r| r.contains("64 rows per warpgroup")));
    let p9 = c9.plan.dequant_gemm.as_ref().unwrap();
    let t = p9.tma.as_ref().expect("a TMA producer on sm90a");
    assert_eq!((t.span, t.spans, t.scale_copies, t.min_blocks), (256, 2, 3, 2));
    assert_eq!((p9.a_layout.pad, p9.a_layout.swizzle.bits, p9.a_layout.swizzle.base, p9.a_layout.swizzle.shift), (0, 3, 3, 3));
    assert_eq!((p9.w_layout.pad, p9.w_layout.swizzle.bits, p9.w_layout.swizzle.base, p9.w_layout.swizzle.shift), (0, 3, 2, 3));
    // Unpadded stages: A's and the words' 1024-byte aligned, so the union of the buffers pads
    // to 1024 before the mbarriers (99840 -> 100352), and the storage rounds to 1024 again.
    assert_eq!(c9.plan.smem.total, ((4 * (16 * 512 * 2 + 32 * 64 * 4 + 32 * 6 * 2) as u64).next_multiple_of(1024) + 4 * 16).next_multiple_of(1024));
    assert_eq!(c9.plan.smem.total, 101376, "sizeof(SharedStorage<true>) as nvcc 13.0 has it (the kernel asserts it)");
    let cu = &rendered_cu(&c9);
    for needle in ["__launch_bounds__(kThreads + kProducerThreads, 2)", "SM90_TMA_LOAD_3D::copy(&tma_A, &smem.full[stage]", "SM90_TMA_LOAD_2D::copy(&tma_Wq, &smem.full[stage]",
                   // With K % 256 == 128 (kOddRows), rows of A and of the words as 128-byte lines: a last span past K is zero-filled.
                   "SM90_TMA_LOAD_4D::copy(&tma_A, &smem.full[stage]", "SM90_TMA_LOAD_3D::copy(&tma_Wq, &smem.full[stage]",
                   "cuuint64_t const line_dims[3] = {kLineA, cuuint64_t(K / kLineA), cuuint64_t(M)};", "cuuint64_t const word_dims[2] = {cuuint64_t(K / 8), cuuint64_t(N)};",
                   "set_barrier_transaction_bytes(smem.full[stage], tma_bytes);", "wait_barrier(smem.empty[stage], (j / stages - 1) % 2);",
                   "make_coord(64 * t + 32 * h + 8 * i, span)", "CU_TENSOR_MAP_SWIZZLE_128B", "int const tma_rows = M < tile_rows ? M : tile_rows;",
                   "config.blockDim = dim3(kThreads + kProducerThreads);", "config.dynamicSmemBytes = smem_bytes;", "size_t const smem_bytes = odd_rows ? kSmemBytes<true> : kSmemBytes<false>;"] {
        assert!(cu.contains(needle), "the sm90a kernel lacks {needle}");
    }
    assert!(!cu.contains("K % 256") && cu.contains("if (reinterpret_cast<uintptr_t>(scales) % 4 != 0) {"), "the sm90a launcher takes any multiple of 128");
    assert!(!cu.contains("load_tile") && !cu.contains("A_dst"), "the computing threads copy nothing");
    assert!(!cu.contains("zp_offset"), "no zero-point tile without `zeros=`");
    // Programmatic dependent launch: the launcher allows it, every block lets the next grid launch
    // once set up, and the producer waits for the previous kernel before its first load (the
    // consumers touch global memory only after the stages, so only the producer waits).
    let squashed_cu = squashed(cu);
    for needle in ["pdl.id = cudaLaunchAttributeProgrammaticStreamSerialization;", "pdl.val.programmaticStreamSerializationAllowed = 1;",
                   "config.attrs = &pdl;", "asm volatile(\"griddepcontrol.wait;\" ::: \"memory\");"] {
        assert!(squashed_cu.contains(&squashed(needle)), "the sm90a kernel lacks {needle}");
    }
    let (setup, producer) = (cu.find("__syncthreads();  // the mbarriers are initialised").unwrap(), cu.find("if (warp == kThreads / 32) {").unwrap());
    let launch = cu.find("  launch_dependent_grids();").expect("the blocks let the next grid launch");
    assert!(setup < launch && launch < producer, "once set up, before the roles split");
    let wait = cu.find("    grid_dependency_wait();").expect("the producer waits");
    let first_load = cu.find("SM90_TMA_LOAD_4D::copy(&tma_A").unwrap().min(cu.find("cp_async_4_bytes(scales_dst").unwrap());
    assert!(producer < wait && wait < first_load, "the producer waits before its first load");
    assert_eq!(cu.matches("grid_dependency_wait();").count(), 1, "one wait, the producer's");
    assert!(tilegen::explain::explain(&c9).contains("launch: programmatic dependent launch: the grid may start while the kernel before it in the stream finishes"));
    // sm80: the same launch in an sm_90 branch, every thread waiting before its first copy, and
    // asked for only where the machine code came from that branch's PTX.
    let cu80 = rendered_cu(&c);
    let branch = cu80.find("#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900\n").expect("an sm_90 branch");
    let end = branch + cu80[branch..].find("#endif\n").unwrap();
    let in_branch = |needle: &str| cu80[branch..end].find(needle).map(|i| branch + i).unwrap_or_else(|| panic!("the sm_90 branch lacks {needle}"));
    let (launch80, prefetch80, wait80) = (in_branch("launch_dependent_grids();"), in_branch("prefetch_l2(Wq + int64_t(n0 + row) * (K / 8), prefetch_bytes);"), in_branch("\n  grid_dependency_wait();"));
    in_branch("row < block_N && n0 + row < N; row += kThreads) {"); // every weight row of the block, whatever the thread count
    let first_copy = cu80.find("      load_tile(stage);\n").unwrap();
    assert!(cu80.find("__syncthreads();  // the mbarriers are initialised").unwrap() < launch80 && launch80 < prefetch80 && prefetch80 < wait80 && end < first_copy);
    assert_eq!(cu80.matches("grid_dependency_wait();").count(), 1, "one wait, at the kernel body's level: every thread waits");
    for needle in ["cudaError_t const version_err = loaded_ptx_version(reinterpret_cast<void const*>(kernel), ptx_version);",
                   "if (ptx_version >= 90) {\n    config.attrs = &pdl;\n    config.numAttrs = 1;\n  }"] {
        assert!(cu80.contains(needle), "the sm80 launcher lacks {needle}");
    }
    // The PTX version is asked of the driver once per device, then remembered.
    let helper = cu80.find("inline cudaError_t loaded_ptx_version(void const* kernel, int& version) {").expect("the PTX version helper");
    let (remembered, asked) = (cu80[helper..].find("version = rememberable ? remembered[device].load(std::memory_order_relaxed) : 0;").unwrap(),
                               cu80[helper..].find("cudaFuncGetAttributes(&attributes, kernel)").unwrap());
    assert!(remembered < asked && cu80[helper + asked..].contains("remembered[device].store(version, std::memory_order_relaxed);"));
    assert_eq!(cu80.matches("cudaFuncGetAttributes(").count(), 1, "asked only through the helper");
    assert!(cu80.contains("#include <atomic>\n"));
    assert!(tilegen::explain::explain(&c).contains("launch: in machine code built from sm_90 or later PTX, programmatic dependent launch"));
    // The TMA flavour's quads own 32-value chunks 64 apart across a 256-deep span: an MMA's k's
    // span two groups, so each unpacked pair is scaled before the MMAs.
    assert!(!p9.scale_per_step());
    assert!(cu.contains("dequant_int4x2<ElementS_s>(lo, 0, scale_lo, neg_bias_lo)") && cu.contains("float (&d)[4] = accum[mt][i % 2];"));
    assert!(!cu.contains("dequant_int4x2_exact<ElementS_s>(lo") && !cu.contains("half_bits_to_float"), "no per-step scaling in the TMA flavour");

    // What the lowering does not take runs the general one, with the reason kept for explain.
    let reason = |text: String| {
        let c = compile(text).unwrap();
        assert!(c.plan.dequant_gemm.is_none() && !c.plan.dequants.is_empty());
        c.plan.dequant_gemm_reason.expect("a reason")
    };
    assert!(reason(w4a16_wide()).contains("its M tile is 32 rows"));
    // The earlier bundled tiles (16x64x256 over 4 warps) with a scale per 64 values, or over
    // 2 warps (fewer than its four 16-row groups):
    let earlier = w4a16().replace("constants: {block_M: 16, block_N: 32, block_K: 512, stages: 4}", "constants: {block_M: 16, block_N: 64, block_K: 256, stages: 4}")
        .replace("threads: 256", "threads: 128");
    assert!(compile(earlier.clone()).unwrap().plan.dequant_gemm.is_some(), "those tiles take it as they are");
    assert!(reason(earlier.replace("K/128", "K/64")).contains("groups of a multiple of 128 values"));
    assert!(reason(earlier.replace("threads: 128", "threads: 64")).contains("2 warps cannot split a 64-row weight tile"));
}

#[test]
fn dequant_unpacks_whole_words_in_the_pipeline_and_small_tiles_copy_with_fewer_threads() {
    let c = compile(w4a16_wide()).unwrap();
    let d = c.plan.dequants.values().next().expect("a dequant plan");
    // [64, 256] values = 2048 words over 128 threads; one scale per 128 values.
    assert_eq!((d.words, d.words_per_row, d.per_thread, d.group, d.guarded), (2048, 32, 16, 128, false));
    // The dequant is a consumer of the pipeline; its destination is the gemm's B, unstaged.
    let p = c.plan.pipelines.values().next().unwrap();
    assert_eq!((p.producers.len(), p.consumers.len()), (3, 2));
    let w_s = c.plan.shared.iter().find(|(b, _)| c.spec.buffers[**b].name.name == "W_s").unwrap().1;
    assert!(!w_s.staged && w_s.contiguous_dim == 1 && w_s.k_major == Some(true));
    // W_s's only reader is the gemm right after the dequant: fused, W_s never materialised,
    // and the packed words swizzled for the gemm's column-wise reads.
    let gemm = *c.plan.mmas.keys().next().unwrap();
    assert_eq!(d.fused_into, Some(gemm));
    assert!(w_s.registers_only && w_s.bytes == 0);
    let wq_s = c.plan.shared.iter().find(|(b, _)| c.spec.buffers[**b].name.name == "Wq_s").unwrap().1;
    assert_eq!((wq_s.swizzle.bits, wq_s.swizzle.base), (3, 2));
    // The [64, 2] scale tile: 4-byte vectors, one per row, moved by the first 64 threads.
    let scales = c.plan.copies.values().find(|cp| c.spec.buffers[cp.buffer].name.name == "S_s").unwrap();
    assert_eq!((scales.vector_bits, scales.threads.shape), (32, (64, 1)));
    // The launcher divides K exactly: Wq is [N, K/8], scales [N, K/128]. K % 128 implies
    // K % 8, and so that A's rows (K) are whole 8-element vectors and Wq's (K / 8) whole
    // 4-word ones: neither is checked again.
    let cu = &rendered_cu(&c);
    assert!(cu.contains("if (M < 1 || N < 1 || K < 1 || K % 128 != 0) {"), "divisibility checks");
    assert!(!cu.contains("K % 8 != 0") && !cu.contains("(K / 8) % 4"), "implied checks are dropped");
    assert!(cu.contains("if (reinterpret_cast<uintptr_t>(Wq) % 16 != 0) {"), "the base pointer is still checked");
    assert!(cu.contains("if (tid < 64) {"), "the scale copy is guarded");
    assert!(cu.contains("b0(0) = dequant_int4x2<ElementS_s>(b_words.x, nibble_pair, b_scales, b_neg_bias);"));
    assert!(!cu.contains("sW_s") && !cu.contains("dequant_int4x8"), "W_s is never written");
    // A tile unpacked once and read by a gemm in a later loop is not fused: it is unpacked
    // into shared memory, eight values per 16-byte store.
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/golden/specs/w4_stationary_bf16.yaml")).unwrap();
    let c = compile(text).unwrap();
    let d = c.plan.dequants.values().next().unwrap();
    assert_eq!(d.fused_into, None);
    // 64 words over 128 threads: the last (only) round is guarded.
    assert!(d.guarded && d.per_round.is_none() && d.per_thread == 1);
    let cu = &rendered_cu(&c);
    // Whole words: the kernel calls dequant_int4x8, which unpacks its four pairs with
    // dequant_int4x2; no gemm unpacks its own fragments.
    assert!(squashed(cu).contains("dequant_int4x8(packed[i], scale[i], dequant_neg_bias<8, ElementS_s>())"), "{cu}");
    assert_eq!(cu.matches("dequant_int4x2<").count(), 1, "only inside dequant_int4x8: {cu}");
    assert!(cu.contains("if (r * 4 + wc < 64) {"), "the guard");
}

#[test]
fn wide_scale_rows_keep_4_byte_pairs_so_the_launcher_takes_every_k() {
    // The bundled decode tiles on 2 warps take the general lowering: each [32, 4] tile of
    // scales and of zero points would fit one 8-byte vector per row, which would need
    // `(K / 128) % 4 == 0`. They stay 4-byte pairs with the odd-rows instantiation instead,
    // whose rows are one pair longer (6 elements) and so tile with a 2-wide atom.
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/specs/w4a16_zp_gemm_bf16.yaml")).unwrap().replace("threads: 256", "threads: 64");
    for target in [Target::Sm80, Target::Sm90a] {
        let c = compile_for(text.clone(), target).unwrap();
        assert!(c.plan.dequant_gemm.is_none(), "{target}: the general lowering");
        for buf in ["S_s", "Z_s"] {
            let cp = c.plan.copies.values().find(|cp| c.spec.buffers[cp.buffer].name.name == buf).unwrap();
            assert_eq!((cp.vector_bits, cp.odd_rows, cp.threads.shape), (32, true, (32, 2)), "{target}: {buf}");
            assert!(cp.why.contains("pairs rather than the 8-byte vectors a row of the tile could take, which would need (K / 128) to be a multiple of 4"), "{target}: {}", cp.why);
            let l = c.plan.shared.iter().find(|(b, _)| c.spec.buffers[**b].name.name == buf).unwrap().1;
            assert_eq!((l.cute_shape.as_slice(), l.atom_shape, l.swizzle.bits), ([32, 4].as_slice(), (8, 2), 0), "{target}: {buf}");
            assert!(l.why_contiguous.contains("so cp.async moves 4-byte vectors; in the odd-rows"), "{target}: {}", l.why_contiguous);
        }
        let cu = &rendered_cu(&c);
        assert!(cu.contains("bool const odd_rows = (K / 128) % 2 != 0;") && !cu.contains("(K / 128) % 4"), "{target}: any K % 128 == 0");
        assert!(cu.contains("Layout<Shape<Int<8>, Int<2>>, Stride<Int<2>, _1>>{}"), "{target}: the 2-wide atom");
        assert!(cu.contains("if (reinterpret_cast<uintptr_t>(zeros) % 4 != 0) {"), "{target}: the base pointer is still checked");
    }
    // Where the sizes make every row whole 8-byte vectors (another tensor's K/512 has the
    // launcher check K % 512, so K / 128 is a multiple of 4), the wider vectors stay, with no
    // check of their own and no odd-rows instantiation.
    let whole = text.replace("  C:      {dtype: bf16, shape: [M, N], output: true}", "  C:      {dtype: bf16, shape: [M, N], output: true}\n  flags:  {dtype: i32,  shape: [K/512]}");
    let c = compile(whole).unwrap();
    for buf in ["S_s", "Z_s"] {
        let cp = c.plan.copies.values().find(|cp| c.spec.buffers[cp.buffer].name.name == buf).unwrap();
        assert_eq!((cp.vector_bits, cp.odd_rows), (64, false), "{buf}");
    }
    let cu = &rendered_cu(&c);
    assert!(cu.contains("K % 512 != 0") && !cu.contains("(K / 128) % 4") && !cu.contains("odd_rows"), "no check of its own");
    assert!(cu.contains("if (reinterpret_cast<uintptr_t>(zeros) % 8 != 0) {"), "the base pointer is still checked");
}

#[test]
fn narrow_tiles_give_each_warp_one_mma_column_and_small_stores_fewer_threads() {
    // 16x64 over 8 warps: no 16-wide warp tiles fit, so each warp takes an 8-wide column.
    let c = compile(spec((16, 64, 32), 2, 256, "row_major", true)).unwrap();
    let m = c.plan.mmas.values().next().unwrap();
    assert_eq!((m.warps, m.tile), ((1, 8), (16, 64, 16)));
    // The [16, 64] bf16 output tile is 128 16-byte vectors: the first 128 of 256 threads store.
    let store = c.plan.copies.values().find(|cp| cp.kind == CopyKind::AccumulatorToGlobal).unwrap();
    assert_eq!(store.threads.shape.0 * store.threads.shape.1, 128);
    let cu = &rendered_cu(&c);
    assert!(cu.contains("Copy_Atom<SM75_U32x2_LDSM_N, ElementB_s>"), "B loads two 8x8 tiles per k-block");
    assert!(cu.contains("if (tid < 128 && elem_less("), "the store is guarded");
    // Where 16-wide warp tiles fit they are still chosen.
    let c = compile(spec((16, 128, 32), 2, 256, "row_major", true)).unwrap();
    assert_eq!(c.plan.mmas.values().next().unwrap().tile, (16, 128, 16));
}

#[test]
fn descending_grid_dimensions_start_with_the_last_tile() {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/specs/flash_attention_fwd_causal_bf16.yaml")).unwrap();
    let c = compile(text.clone()).unwrap();
    assert!(c.spec.grid[0].descending && !c.spec.grid[1].descending);
    let cu = &rendered_cu(&c);
    assert!(cu.contains("int const bx = gridDim.x - 1 - blockIdx.x;"));
    assert!(cu.contains("int const by = blockIdx.y;"));
    // Anything but ascending or descending is an error at the value.
    let errs = compile(text.replace("order: descending", "order: backwards")).unwrap_err().join("\n");
    assert!(errs.contains("unknown block order `backwards`") && errs.contains(":20:12"), "{errs}");
    let errs = compile(text.replace("    extent: ceildiv(S, block_M)\n", "")).unwrap_err().join("\n");
    assert!(errs.contains("grid dimension `bx` has no `extent`"), "{errs}");
}

#[test]
fn grid_variables_the_body_never_names_get_no_local() {
    let read = |f: &str| std::fs::read_to_string(format!("{}/specs/{f}", env!("CARGO_MANIFEST_DIR"))).unwrap();
    let with_bz = |text: String| without_targets(text).replace("  by: ceildiv(M, block_M)\n", "  by: ceildiv(M, block_M)\n  bz: 1\n");
    for (file, target) in [("gemm_bf16.yaml", Target::Sm80), ("w4a16_gemm_bf16.yaml", Target::Sm80), ("w4a16_prefill_gemm_bf16.yaml", Target::Sm90a)] {
        let text = with_bz(read(file));
        assert!(text.contains("  bz: 1\n"), "{file}");
        let c = compile_for(text, target).unwrap();
        let files = tilegen::back::render(&c).unwrap_or_else(|d| panic!("{file} renders: {}", d[0].message));
        let cu = &files.iter().find(|f| f.name.ends_with(".cu")).unwrap().contents;
        // The launch keeps the spec's z extent; the kernel declares no `bz` it would never read.
        assert!(!cu.contains("int const bz") && cu.contains("int const by") && cu.contains(" grid_z = 1;"), "{file}: {cu}");
    }
}

fn linear_attention() -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/specs/linear_attention_causal_bf16.yaml")).unwrap()
}

#[test]
fn linear_attention_keeps_register_operand_rows_in_warps_and_reads_k_transposed() {
    let c = compile(linear_attention()).unwrap();
    let buffer = |n: &str| c.spec.buffers.iter().position(|b| b.name.name == n).unwrap();
    let mmas: Vec<_> = c.plan.mmas.iter().collect();
    assert_eq!(mmas.len(), 4);
    let ((&qk, qk_plan), (_, qs), (_, pv), (_, kv)) = (mmas[0], mmas[1], mmas[2], mmas[3]);
    // A_f is not reduced, but P_f = f(A_f) is a register A operand: whole rows per warp
    // (4x1), where a plain 64x64 gemm would get the squarer 2x2.
    assert_eq!(qk_plan.warps, (4, 1));
    assert!(qk_plan.why.contains("register A operand"), "{}", qk_plan.why);
    assert_eq!(c.plan.fragments[&buffer("P_f")], FragmentLayout::MmaAccumulator { gemm: qk });
    // O_f takes Q·S (shared A) and P·V (register A) with one layout.
    assert_eq!((qs.warps, pv.warps), ((4, 1), (4, 1)));
    assert!(pv.a_in_registers && !qs.a_in_registers);
    assert!(qs.why.contains("shares an accumulator"), "{}", qs.why);
    // K_s: K-major B of Q·Kᵀ, M-major A of Kᵀ·V, read through the swapped view.
    let k_s = &c.plan.shared[&buffer("K_s")];
    assert!(qk_plan.k_major(false, k_s) && !qk_plan.transposed_view(false, k_s));
    assert!(!kv.k_major(true, k_s) && kv.transposed_view(true, k_s));
    let cu = &rendered_cu(&c);
    assert!(cu.contains("Tensor sK_s_t = make_tensor(sK_s.data(), swap_mn(sK_s.layout()));"));
    assert!(cu.contains("using S2RCopyAtomK_s3 = Copy_Atom<SM75_U16x8_LDSM_T, ElementK_s>;"), "Kᵀ·V loads A with ldmatrix.trans");
    assert!(cu.contains("using S2RCopyAtomK_s0 = Copy_Atom<SM75_U32x4_LDSM_N, ElementK_s>;"));
    // O_f is declared once, by the gemm that fixed its layout.
    assert_eq!(cu.matches("Tensor O_f = partition_fragment_C(").count(), 1);
}

#[test]
fn accumulators_copy_into_shared_buffers_and_stores_in_loops_get_their_own_staging() {
    let c = compile(linear_attention()).unwrap();
    let buffer = |n: &str| c.spec.buffers.iter().position(|b| b.name.name == n).unwrap();
    // Both copies of S_f into S_s (before the loop and in it) write in place, pairs of
    // columns per 32-bit store; S_s gets dim 1 contiguous for that, unstaged.
    let to_shared: Vec<_> = c.plan.copies.values().filter(|cp| cp.kind == CopyKind::AccumulatorToShared).collect();
    assert_eq!(to_shared.len(), 2);
    assert!(to_shared.iter().all(|cp| cp.buffer == buffer("S_f") && cp.tensor.is_none() && cp.vector_bits == 32));
    let s_s = &c.plan.shared[&buffer("S_s")];
    assert!(s_s.contiguous_dim == 1 && !s_s.staged && s_s.k_major == Some(false));
    // The pipeline runs the accumulator copies as consumers, after its three producers.
    let p = c.plan.pipelines.values().next().unwrap();
    assert_eq!(p.producers.len(), 3);
    let in_loop: Vec<_> = c.plan.copies.iter().filter(|(id, cp)| cp.kind != CopyKind::GlobalToShared && p.consumers.contains(id)).collect();
    assert_eq!(in_loop.len(), 2, "the store of O and the copy of the state");
    // The store inside the loop cannot reuse the buffers: its staging tile adds to them.
    assert!(!c.plan.smem.staging_reuses_buffers);
    assert_eq!(c.plan.smem.total, c.plan.smem.buffers + c.plan.smem.staging);
    let cu = &rendered_cu(&c);
    assert!(cu.contains("copy(r2s_copy_S_s, r2s_thr_S_s.retile_S(S_f_S_s), r2s_thr_S_s.partition_D(sS_s_t));"));
    assert!(!cu.contains("union {"), "no union of buffers and staging");
    // After the loops (attention), the staging tile still reuses the buffers.
    let a = compile(attention()).unwrap();
    assert!(a.plan.smem.staging_reuses_buffers && a.plan.smem.total == a.plan.smem.buffers.max(a.plan.smem.staging));
    // A buffer the pipeline stages cannot also be written from registers.
    let text = linear_attention().replace("  - copy(S_f, S_s)\n  - pipelined", "  - copy(S_f, S_s)\n  - clear(O_f)\n  - copy(O_f, V_s)\n  - pipelined");
    let errs = compile(text).unwrap_err().join("\n");
    assert!(errs.contains("filled by a pipelined copy"), "{errs}");
}

#[test]
fn amd_recognises_softmax_attention_and_refuses_what_only_looks_like_it() {
    let bundled = |name: &str| std::fs::read_to_string(format!("{}/specs/{name}", env!("CARGO_MANIFEST_DIR"))).unwrap();
    // The bundled specs: roles from the gemms and copies, the scale from exp2, the mask from
    // the probe run.
    for (name, causal, head_dim) in [("flash_attention_fwd_bf16.yaml", false, 128), ("flash_attention_fwd_causal_bf16.yaml", true, 128),
                                     ("flash_attention_fwd_d64_bf16.yaml", false, 64), ("flash_attention_fwd_f16.yaml", false, 128)] {
        for target in [Target::Gfx942, Target::Gfx90a] {
            let c = compile_for(bundled(name), target).unwrap_or_else(|e| panic!("{name}: {}", e.join("\n")));
            let a = c.plan.attention.as_ref().unwrap();
            assert_eq!((a.q, a.k, a.v, a.o), (0, 1, 2, 3), "{name}");
            assert_eq!((a.causal, a.head_dim, a.scale_log2.name.as_str()), (causal, head_dim, "scale_log2"), "{name}");
            assert!(a.probe_error < 1e-2, "{name}: {}", a.probe_error);
            assert!(c.plan.collective.is_none() && c.plan.mmas.is_empty());
        }
    }
    // Renamed tensors in another order: the roles follow the program, not the names.
    let renamed = bundled("flash_attention_fwd_causal_bf16.yaml")
        .replace("  Q: {dtype", "  Vv: {dtype").replace("  V: {dtype", "  Qq: {dtype")
        .replace("copy(Q[", "copy(Qq[").replace("copy(V[", "copy(Vv[");
    let c = compile_for(renamed, Target::Gfx942).unwrap();
    let a = c.plan.attention.as_ref().unwrap();
    assert_eq!((a.q, a.v, a.causal), (2, 0, true));
    // A sliding window (keys i-31 ..= i) has attention's structure but is not causal
    // attention: the probe refuses it for AMD, while sm80 lowers it as written.
    let window = bundled("flash_attention_fwd_causal_bf16.yaml").replace(
        "select(t*block_N + j <= bx*block_M + i && t*block_N + j < S,",
        "select(t*block_N + j <= bx*block_M + i && t*block_N + j + 32 > bx*block_M + i && t*block_N + j < S,");
    assert!(compile_for(window.clone(), Target::Sm80).is_ok());
    let errs = compile_for(window, Target::Gfx942).unwrap_err().join("\n");
    assert!(errs.contains("its output is not softmax attention with scale scale_log2 · ln 2"), "{errs}");
    // Nor does the tile lowering take it at these tiles (LDS), and the first error says both;
    // with 64-row query tiles it does (tests/golden/specs/attention_window_bf16.yaml).
    assert!(errs.contains("t.yaml:1:9: error: the gfx942 target has no lowering for this fused program: it is neither GEMM-shaped") && errs.contains("hint: one reason from the tile lowering follows;"), "{errs}");
    assert!(errs.contains("error: LDS over budget: the shared buffers need 67584 bytes (`Q_s` 33792, `K_s` 16896, `V_s` 16896) but gfx942 allows 65536 bytes per workgroup"), "{errs}");
    // A different scale inside exp2 than the spec's softmax: still attention, with that scale.
    let other_scale = bundled("flash_attention_fwd_bf16.yaml").replace("scale_log2: 1.4426950408889634 / sqrt(D)", "scale_log2: 0.09");
    assert!(other_scale.contains("scale_log2: 0.09"));
    let c = compile_for(other_scale, Target::Gfx90a).unwrap();
    assert_eq!(c.plan.attention.as_ref().unwrap().scale_log2.value, 0.09);
    // A literal head dim is named in the generated code.
    let literal = bundled("flash_attention_fwd_d64_bf16.yaml").replace("[B, S, H, D]", "[B, S, H, 64]");
    let c = compile_for(literal, Target::Gfx942).unwrap();
    assert_eq!(c.plan.attention.as_ref().unwrap().head_dim, 64);
    let files = tilegen::back::render(&c).unwrap();
    let hip = &files.iter().find(|f| f.name.ends_with(".hip")).unwrap().contents;
    assert!(hip.contains("constexpr ck::index_t kHeadDim = 64;") && hip.contains("q_lengths{ B, H, S, kHeadDim }"), "{hip}");
    // Other fused programs take the tile lowering, which says why they are not attention.
    let c = compile_for(linear_attention(), Target::Gfx942).unwrap();
    assert!(c.plan.attention.is_none() && c.plan.tile.as_ref().unwrap().why.contains("attention has two gemms (Q·Kᵀ and P·V); this spec has 4"));
}

#[test]
fn amd_tile_lowering_gives_fragments_wave_grids_and_feeds_converted_fragments_from_registers() {
    use tilegen::layout::mfma::WaveGrid;
    let bundled = |name: &str| std::fs::read_to_string(format!("{}/specs/{name}", env!("CARGO_MANIFEST_DIR"))).unwrap();
    let buffer = |c: &tilegen::Compiled, n: &str| c.spec.buffers.iter().position(|b| b.name.name == n).unwrap();
    // w4a16: one 16-row block and two 16-column blocks for four waves: two k groups, whose
    // partial sums are added through 2 x 16 x 32 f32 of LDS.
    let c = compile_for(bundled("w4a16_gemm_bf16.yaml"), Target::Gfx942).unwrap();
    let t = c.plan.tile.as_ref().unwrap();
    assert_eq!(t.waves, 4);
    assert_eq!(t.fragments[&buffer(&c, "acc")], WaveGrid { rows: 16, cols: 32, wm: 1, wn: 2, ks: 2 });
    assert_eq!(t.scratch_bytes, 2 * 16 * 32 * 4);
    let g = t.gemms.values().next().unwrap();
    assert_eq!((g.mnk, g.a_in_registers, g.a_row_reads, g.b_row_reads), ((16, 32, 512), false, true, true));
    // Only MFMA operands are padded: A_s and W_s, not the packed words or the scales.
    assert_eq!([buffer(&c, "A_s"), buffer(&c, "W_s"), buffer(&c, "Wq_s"), buffer(&c, "S_s")].map(|b| t.shared[&b].pad), [4, 4, 0, 0]);
    assert!(t.lds_total <= 65_536 && t.lds_total >= t.shared.values().map(|b| b.bytes).sum::<u64>() + t.scratch_bytes);
    // Vectors where the extents prove them whole: A and Wq (K is a multiple of 128), not the
    // scales (K/128 may be odd) or C (any N); the launcher checks the two base pointers.
    assert_eq!(t.vectors.values().copied().collect::<Vec<_>>(), [4, 4, 1, 1]);
    assert_eq!(c.plan.alignment.iter().map(|a| (a.tensor, a.vector_elems)).collect::<Vec<_>>(), [(0, 4), (1, 4)]);
    // Linear attention: rows split over the two waves; P·V takes P from registers, the other
    // products read LDS, along rows where k is contiguous and down columns where it is not.
    let c = compile_for(linear_attention(), Target::Gfx90a).unwrap();
    let t = c.plan.tile.as_ref().unwrap();
    assert_eq!(t.fragments[&buffer(&c, "P_f")], WaveGrid { rows: 64, cols: 64, wm: 2, wn: 1, ks: 1 });
    assert_eq!(t.fragments[&buffer(&c, "S_f")], WaveGrid { rows: 128, cols: 64, wm: 2, wn: 1, ks: 1 });
    let gemms: Vec<_> = t.gemms.values().map(|g| (g.a_in_registers, g.a_row_reads, g.b_row_reads)).collect();
    assert_eq!(gemms, [(false, true, true), (false, true, false), (true, true, false), (false, false, false)]);
    // D = 128 is a constant: every copy moves 4 bf16 at a time, O's stores included.
    assert_eq!(t.vectors.values().copied().collect::<Vec<_>>(), [4, 4, 4, 4]);
    // With 8 waves each wave would hold half of P's columns: the register operand is refused,
    // at P, with both grids.
    let errs = compile_for(linear_attention().replace("threads: 128", "threads: 512"), Target::Gfx942).unwrap_err().join("\n");
    assert!(errs.contains("error: the gfx942 tile lowering feeds `P_f` to the MFMAs from registers only when each wave holds whole rows of it")
        && errs.contains("its waves are 4x2 (rows x columns, 1 k group(s))"), "{errs}");
    // Whole waves only.
    let errs = compile_for(linear_attention().replace("threads: 128", "threads: 96"), Target::Gfx942).unwrap_err().join("\n");
    assert!(errs.contains("96 threads is not a multiple of 64"), "{errs}");
    // Row statistics: one register per row block, on the waves that hold the rows.
    let window = std::fs::read_to_string(format!("{}/tests/golden/specs/attention_window_bf16.yaml", env!("CARGO_MANIFEST_DIR"))).unwrap();
    let c = compile_for(window.clone(), Target::Gfx942).unwrap();
    let t = c.plan.tile.as_ref().unwrap();
    assert_eq!(t.fragments[&buffer(&c, "m")], WaveGrid { rows: 64, cols: 0, wm: 2, wn: 1, ks: 1 });
    assert_eq!(t.fragments[&buffer(&c, "S_f")], WaveGrid { rows: 64, cols: 32, wm: 2, wn: 1, ks: 1 });
    // Column reductions, and row statistics read at a column index, are refused.
    let square = window.replace("block_N: 32", "block_N: 64").replace("reduce_max(S_f, m, dim=1", "reduce_max(S_f, m, dim=0");
    let errs = compile_for(square, Target::Gfx942).unwrap_err().join("\n");
    assert!(errs.contains("the gfx942 tile lowering reduces fragments along their rows (dim=1) only"), "{errs}");
    let errs = compile_for(window.replace("          - O_f[i, j] *= alpha[i]", "          - O_f[i, j] *= alpha[j]"), Target::Gfx942).unwrap_err().join("\n");
    assert!(errs.contains("or, read-only, be its row statistics indexed [i]"), "{errs}");
}

#[test]
fn sm90a_lowers_attention_gemms_to_warpgroup_mmas_and_says_why_others_stay_on_mma_sync() {
    let c = compile_for(without_targets(attention()), Target::Sm90a).unwrap();
    assert_eq!(c.plan.mma_sync_reason, None);
    let ops: Vec<_> = c.plan.mmas.values().map(|m| m.wgmma.as_ref().expect("a warpgroup MMA").op.clone()).collect();
    assert_eq!(ops, [
        "SM90_64x64x16_F32BF16BF16_SS<GMMA::Major::K, GMMA::Major::K>",   // Q·Kᵀ: both K-major in shared memory
        "SM90_64x128x16_F32BF16BF16_RS<GMMA::Major::K, GMMA::Major::MN>", // P·V: P from registers, V MN-major
    ]);
    assert!(c.plan.mmas.values().all(|m| m.wgmma.as_ref().unwrap().m_steps == 2 && m.warps == (4, 1)));
    let tile = |n: &str| c.plan.shared[&c.spec.buffers.iter().position(|b| b.name.name == n).unwrap()].gmma_atom;
    assert_eq!((tile("Q_s"), tile("K_s"), tile("V_s")),
        (Some("GMMA::Layout_K_SW128_Atom"), Some("GMMA::Layout_K_SW128_Atom"), Some("GMMA::Layout_MN_SW128_Atom")));
    // The same spec on sm80 keeps mma.sync and plain swizzled atoms.
    let c80 = compile(attention()).unwrap();
    assert!(c80.plan.mmas.values().all(|m| m.wgmma.is_none()) && c80.plan.shared.values().all(|l| l.gmma_atom.is_none()));
    assert_eq!(c80.plan.mma_sync_reason, None);

    // What does not fit keeps the whole program on mma.sync, with the reason.
    let reason = |text: String| {
        let c = compile_for(text, Target::Sm90a).unwrap();
        assert!(c.plan.mmas.values().all(|m| m.wgmma.is_none()) && c.plan.shared.values().all(|l| l.gmma_atom.is_none()));
        c.plan.mma_sync_reason.expect("a reason")
    };
    assert!(reason(w4a16()).contains("dequant_int4"), "w4a16");
    // A prefill dequant GEMM with one warpgroup for its 128 weight rows (the wide-tile lowering
    // wants one per 64, see below) unpacks into a GMMA-swizzled shared tile that a warpgroup MMA
    // reads (on sm80 the same spec fuses the unpacking into mma.sync's B fragments).
    let read = |path: &str| std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(path)).unwrap();
    let onewg = read("tests/golden/specs/w4_prefill_onewg_f16.yaml");
    let c = compile_for(onewg.clone(), Target::Sm90a).unwrap();
    let buffer = |c: &tilegen::Compiled, n: &str| c.spec.buffers.iter().position(|b| b.name.name == n).unwrap();
    assert_eq!(c.plan.mma_sync_reason, None);
    assert!(c.plan.dequant_wgmma.is_none() && c.plan.dequant_gemm_reason.as_deref().is_some_and(|r| r.contains("not 64 rows (the warpgroup MMA's M) for each of its 1 consumer warpgroup(s)")), "{:?}", c.plan.dequant_gemm_reason);
    let ops: Vec<_> = c.plan.mmas.values().map(|m| m.wgmma.as_ref().expect("a warpgroup MMA").op.clone()).collect();
    assert_eq!(ops, ["SM90_64x128x16_F32F16F16_SS<GMMA::Major::K, GMMA::Major::K>"]);
    assert!(c.plan.dequants.values().all(|d| d.fused_into.is_none() && d.why.contains("the stores are fenced (fence.proxy.async)")));
    assert_eq!(c.plan.shared[&buffer(&c, "W_s")].gmma_atom, Some("GMMA::Layout_K_SW128_Atom"));
    assert!(c.plan.cp_async_reason.as_deref().is_some_and(|r| r.contains("`Wq_s` is not a warpgroup MMA operand")), "{:?}", c.plan.cp_async_reason);
    assert!(compile(onewg.clone()).unwrap().plan.dequants.values().all(|d| d.fused_into.is_some()));
    // Where the unpacked tile cannot feed warpgroup MMAs, the dequant stays fused into mma.sync,
    // and the reason is the unfused attempt's.
    let narrow = reason(onewg.replace("block_M: 128, block_N: 128", "block_M: 64, block_N: 64").replace("threads: 128", "threads: 256"));
    assert!(narrow.contains("its dequant_int4 is fused into mma.sync's B fragments: with the weights unpacked into a shared tile instead")
        && narrow.contains("has a 64x64 tile; 2 warpgroup(s) of 64-row MMAs need M a multiple of 128"), "{narrow}");
    // An unpacking that is not fused gets the reason its tiles give.
    let stationary = reason(read("tests/golden/specs/w4_stationary_bf16.yaml"));
    assert!(stationary.contains("`A_s` is 32 wide along its contiguous dimension"), "{stationary}");
    // Linear attention: K_s is Q·Kᵀ's K-major B and, through a swapped view, Kᵀ·V's MN-major
    // A; the state is stored from S_f's registers into S_s and read as an MN-major B.
    let c = compile_for(linear_attention(), Target::Sm90a).unwrap();
    let majors: Vec<_> = c.plan.mmas.values().map(|m| m.wgmma.as_ref().expect("a warpgroup MMA").major).collect();
    assert_eq!(majors, [("K", "K"), ("K", "MN"), ("K", "MN"), ("MN", "MN")]);
    // Two warpgroups stack along M, 64 rows each: the bundled spec's sm90a override.
    let c = compile_for(attention(), Target::Sm90a).unwrap();
    assert_eq!(c.spec.threads.0, 256);
    assert!(c.plan.mmas.values().all(|m| m.wgmma.as_ref().is_some_and(|w| w.warpgroups == 2 && w.m_steps == 1) && m.warps == (8, 1)));
    assert!(c.plan.mmas.values().all(|m| m.wgmma.as_ref().unwrap().op.starts_with("SM90_64x128x16_")), "128-key tiles");
    assert!(reason(attention().replace("D: 128", "D: 32")).contains("multiples of 64 elements"), "32-wide rows");
}

#[test]
fn sm90a_prefill_tiles_unpack_weights_into_warpgroup_mma_registers() {
    let read = |path: &str| std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(path)).unwrap();
    let prefill = read("specs/w4a16_prefill_gemm_bf16.yaml");
    let cu_of = |c: &tilegen::Compiled| {
        let files = tilegen::back::render(c).unwrap_or_else(|_| panic!("renders"));
        files.into_iter().find(|f| f.name.ends_with(".cu")).unwrap().contents
    };
    // The bundled spec's sm90a tiles: 256 rows of A (the MMA's N), two consumer warpgroups of 64
    // weight rows, 128-deep k tiles (64-byte rows of packed words) in three stages; the launcher
    // may run 128-row tiles instead.
    let c = compile_for(prefill.clone(), Target::Sm90a).unwrap();
    let p = c.plan.dequant_wgmma.as_ref().expect("the wide-tile plan");
    assert_eq!((p.block, p.stages, p.warpgroups, p.group, &p.zero), ((256, 128, 128), 3, 2, 128, &DequantZero::Constant(8)));
    assert_eq!(p.op, "SM90_64x256x16_F32BF16BF16_RS<GMMA::Major::K, GMMA::Major::K>");
    assert_eq!(p.half_op.as_deref(), Some("SM90_64x128x16_F32BF16BF16_RS<GMMA::Major::K, GMMA::Major::K>"));
    assert_eq!((p.a_atom, p.w_atom, p.m_grid_dim), ("GMMA::Layout_K_SW128_Atom", "GMMA::Layout_K_SW64_Atom", Some(1)));
    // k may be split over a cluster of two blocks: the second hands over its f32 accumulators.
    assert_eq!(p.split_k, Ok(256 * 128 * 4));
    // Three stages of A's and the words' tiles (C's padded tile and the partial tile reuse them)
    // and two mbarriers per stage, rounded up to the 128-byte swizzle's 1024-byte period.
    assert_eq!((c.plan.smem.barriers, c.plan.smem.staging), (8 * 2 * 3, 256 * 128 * 4));
    assert_eq!(c.plan.smem.total, (3 * (256 * 128 * 2 + 128 * 16 * 4) + 8 * 2 * 3u64).div_ceil(1024) * 1024);
    assert_eq!(p.epilogue_bytes, 256 * (128 + 8) * 2);
    // Nothing else plans the program; the scales are read as 2-byte values, so only TMA's
    // operands and C's 16-byte stores constrain alignment.
    assert!(c.plan.mmas.is_empty() && c.plan.copies.is_empty() && c.plan.dequants.is_empty() && c.plan.dequant_gemm.is_none());
    let aligned: Vec<_> = c.plan.alignment.iter().map(|a| (c.spec.tensors[a.tensor].name.name.as_str(), a.vector_elems)).collect();
    assert_eq!(aligned, [("A", 8), ("Wq", 4), ("C", 8)]);
    let cu = cu_of(&c);
    for needle in ["using MmaOp = std::conditional_t<kRowsA == block_M, SM90_64x256x16_F32BF16BF16_RS<GMMA::Major::K, GMMA::Major::K>, SM90_64x128x16_F32BF16BF16_RS<GMMA::Major::K, GMMA::Major::K>>;",
                   "using TiledMma = decltype(make_tiled_mma(MmaOp<kRowsA>{},",
                   "using SmemLayoutWq_sAtom = GMMA::Layout_K_SW64_Atom<ElementWq_s>;", "cutlass::arch::warpgroup_reg_dealloc<40>();", "cutlass::arch::warpgroup_reg_alloc<232>();",
                   "set_barrier_transaction_bytes(smem.full[stage], kStageBytes<kRowsA>);", "wait_barrier(smem.empty[stage], (kt / stages - 1) % 2);",
                   "a_regs[0] = dequant_int4x2<ElementW_s>((&words_lo.x)[2 * h], nibble_pair, scale2[0][i], bias_lo);",
                   "gemm(tiled_mma, W_s(_, _, k16), tCrA_s(_, _, k16, stage), acc);", "arrive_barrier(smem.empty[stage]);",
                   "next_scales[r][i] = col < (K / 128) ? scale_rows[r][col].raw() : 0u;", "Tensor tCsCT = thr_mma.partition_C(sCT);",
                   "bool const half_rows = grid_x * grid_y * grid_z * 2 <= sms &&\n                         (M + block_M / 2 - 1) / (block_M / 2) < 2 * grid_y;",
                   "grid_y = (M + block_M / 2 - 1) / (block_M / 2);", "N % 8 != 0",
                   // The k split: block 0 of the cluster takes the first half of the k-tiles, block 1
                   // hands its accumulators over through distributed shared memory.
                   "template <int kRowsA, int kSplitK>", "int const first_tile = k_half * ((num_tiles + 1) / 2);",
                   "int const last_tile = kSplitK == 2 && k_half == 0 ? (num_tiles + 1) / 2 : num_tiles;",
                   "for (int tile = first_tile; tile < last_tile; ++tile) {",
                   "float4* const peer_partial = peer_shared(reinterpret_cast<float4*>(smem.partial.data()), 0);",
                   "cute::cluster_arrive();  // release: block 1's accumulators are written", "cute::cluster_arrive_relaxed();",
                   "bool const split_k = grid_x * grid_y * grid_z * 2 <= sms && ((K + block_K - 1) / block_K) >= 2;",
                   "grid_z = 2;", "cluster.val.clusterDim.z = kSplitK;",
                   "return split_k ? launch<block_M / 2, 2>(A, Wq, scales, C, M, N, K, grid, stream)",
                   "return split_k ? launch<block_M, 2>(A, Wq, scales, C, M, N, K, grid, stream)"] {
        assert!(squashed(&cu).contains(&squashed(needle)), "the kernel lacks {needle}");
    }
    assert!(!cu.contains("(K / 128) % 2") && !cu.contains("cp_async"), "no copy of the scales");
    let explained = tilegen::explain::explain(&c);
    for needle in ["Wide-tile dequant GEMM (warpgroup MMAs, the unpacked weights as their register A operand)",
                   "row tiles: 256 rows of A per block; the launcher runs an instantiation with 128 (SM90_64x128x16_F32BF16BF16_RS<GMMA::Major::K, GMMA::Major::K>)",
                   "producer: threads 256..383 (one warpgroup, setmaxnreg down to 40 registers)", "`S_s`: not allocated",
                   "and its last row tile is at most half used", "k split: when the grid (after any halving) would occupy at most half the device's SMs",
                   "block 1 writes its f32 accumulators (131072 bytes) into block 0's free stages through distributed shared memory between two cluster barriers"] {
        assert!(explained.contains(needle), "explain lacks {needle}:\n{explained}");
    }
    // The spec's own tiles (128x128, 256-deep k tiles, two stages): 128-byte rows of words, and
    // a 64-row instantiation for small M.
    let c = compile_for(without_targets(prefill.clone()), Target::Sm90a).unwrap();
    let p = c.plan.dequant_wgmma.as_ref().expect("the wide-tile plan");
    assert_eq!((p.block, p.stages, p.w_atom), ((128, 128, 256), 2, "GMMA::Layout_K_SW128_Atom"));
    assert_eq!(p.half_op.as_deref(), Some("SM90_64x64x16_F32BF16BF16_RS<GMMA::Major::K, GMMA::Major::K>"));
    // f16 takes the f16 atoms.
    let c = compile_for(without_targets(prefill.replace("bf16", "f16")), Target::Sm90a).unwrap();
    assert!(c.plan.dequant_wgmma.as_ref().is_some_and(|p| p.op == "SM90_64x128x16_F32F16F16_RS<GMMA::Major::K, GMMA::Major::K>"));
    // Per-group zero points (a 64x64 tile: one warpgroup, no half-height instantiation) are read
    // with the scales.
    let c = compile_for(read("tests/golden/specs/w4_prefill_zp_bf16.yaml"), Target::Sm90a).unwrap();
    let p = c.plan.dequant_wgmma.as_ref().expect("the wide-tile plan");
    assert!(matches!(p.zero, DequantZero::PerGroup { .. }) && p.half_op.is_none() && p.warpgroups == 1);
    let cu = cu_of(&c);
    assert!(cu.contains("neg_bias[r][i] = dequant_neg_bias<ElementW_s>(next_zeros[r][i] * 0x10001u);") && !cu.contains("half_rows"), "{cu}");
    assert!(cu.contains("return split_k ? launch<block_M, 2>(A, Wq, scales, zeros, C, M, N, K, grid, stream)\n                 : launch<block_M, 1>(A, Wq, scales, zeros, C, M, N, K, grid, stream);"), "{cu}");
    // A spec whose grid uses z keeps it: no k split, one launch, and explain says why.
    let spec = without_targets(prefill.clone()).replace("  by: ceildiv(M, block_M)\n", "  by: ceildiv(M, block_M)\n  bz: 1\n");
    let c = compile_for(spec, Target::Sm90a).unwrap();
    let p = c.plan.dequant_wgmma.as_ref().expect("the wide-tile plan");
    assert_eq!(p.split_k, Err("the spec's grid uses z, which the cluster of two blocks splitting k would take".to_string()));
    let cu = cu_of(&c);
    assert!(!cu.contains("kSplitK") && !cu.contains("cluster") && cu.contains("bool const half_rows = grid_x * grid_y * grid_z * 2 <= sms;\n")
        && cu.contains("return half_rows ? launch<block_M / 2>(A, Wq, scales, C, M, N, K, grid, stream)"), "{cu}");
    assert_eq!(c.plan.smem.staging, p.epilogue_bytes);
    assert!(tilegen::explain::explain(&c).contains("k split: not available: the spec's grid uses z"));
    // What it does not take runs the general lowering, with the reason kept for explain.
    let reason = |text: String| {
        let c = compile_for(text, Target::Sm90a).unwrap();
        assert!(c.plan.dequant_wgmma.is_none() && !c.plan.dequants.is_empty());
        c.plan.dequant_gemm_reason.expect("a reason")
    };
    let spec = without_targets(prefill);
    assert!(reason(spec.replace("block_M: 128,", "block_M: 96,")).contains("its 96-row tile of A is the warpgroup MMA's N, which this lowering takes as 64, 128, 192 or 256"));
    assert!(reason(spec.replace("threads: 256", "threads: 128")).contains("its 128-row weight tile is not 64 rows (the warpgroup MMA's M) for each of its 1 consumer warpgroup(s)"));
    assert!(reason(spec.replace("block_K: 256", "block_K: 64").replace("block_K/128", "block_K/32").replace("K/128]", "K/32]")).contains("its k tile of 64 is not a multiple of 128"));
    assert!(reason(spec.replace("threads: 256", "threads: 512").replace("block_N: 128", "block_N: 256")).contains("its 512 threads are 4 consumer warpgroups; it takes one or two"));
    // Below 64 rows of A the thin-tile lowering is the candidate, and says why not.
    assert!(reason(spec.replace("block_M: 128,", "block_M: 32,")).contains("its M tile is 32 rows"));
}

#[test]
fn sm90a_loads_warpgroup_mma_operands_with_tma_or_says_why_not() {
    let c = compile_for(without_targets(attention()), Target::Sm90a).unwrap();
    assert_eq!(c.plan.cp_async_reason, None);
    let load = |n: &str| {
        let b = c.spec.buffers.iter().position(|b| b.name.name == n).unwrap();
        c.plan.copies.values().find(|cp| cp.buffer == b && cp.tensor.is_some()).and_then(|cp| cp.tma.clone()).expect("a TMA load")
    };
    // Q [B, S, H, D]: a [block_M, D] tile in two 64-element-wide boxes (128 bytes, the swizzle
    // span), the tensor map listing (S, D) then the fixed (B, H).
    let q = load("Q_s");
    assert_eq!((q.box_shape, q.boxes, q.bytes, q.tensor_modes.clone()), ((64, 128), 2, 128 * 128 * 2, vec![1, 3, 0, 2]));
    let k = load("K_s");
    assert_eq!((k.box_shape, k.boxes, k.bytes), ((64, 64), 2, 64 * 128 * 2));
    // V_s is read MN-major: its tile is (D, block_N) in CuTe order, D contiguous.
    assert_eq!(load("V_s").tensor_modes, [3, 1, 0, 2]);
    // One mbarrier per stage plus Q's, padded to 128 bytes, counted in the budget.
    assert_eq!(c.plan.smem.barriers, 128);
    assert_eq!(c.plan.smem.total, c.plan.smem.buffers.max(c.plan.smem.staging) + 128);
    let pipeline = c.plan.pipelines.values().next().unwrap();
    assert!(pipeline.why.starts_with("TMA multistage:"), "{}", pipeline.why);
    // One warpgroup: no producer warpgroup, and the reason.
    assert!(c.plan.warp_specialization.is_none());
    assert!(c.plan.ws_reason.as_deref().is_some_and(|w| w.contains("one warpgroup")), "{:?}", c.plan.ws_reason);

    // sm80, and sm90a programs on mma.sync, keep cp.async without a reason to give.
    let c80 = compile(attention()).unwrap();
    assert!(c80.plan.copies.values().all(|cp| cp.tma.is_none()) && c80.plan.smem.barriers == 0);
    let w = compile_for(w4a16(), Target::Sm90a).unwrap();
    assert!(w.plan.copies.values().all(|cp| cp.tma.is_none()) && w.plan.cp_async_reason.is_none());

    // A 512-row Q tile is over a TMA box's 256 rows: every copy stays cp.async, with the reason.
    let c = compile_for(without_targets(attention()).replace("block_M: 128 ", "block_M: 512 "), Target::Sm90a).unwrap();
    assert!(c.plan.mmas.values().all(|m| m.wgmma.is_some()));
    assert!(c.plan.copies.values().all(|cp| cp.tma.is_none()) && c.plan.smem.barriers == 0);
    let why = c.plan.cp_async_reason.expect("a reason");
    assert!(why.contains("copy(Q, Q_s)") && why.contains("at most 256 rows"), "{why}");
}

#[test]
fn sm90a_adds_a_producer_warpgroup_to_two_consumer_warpgroups() {
    // The bundled attention spec on sm90a: 256 threads (two consumer warpgroups).
    let c = compile_for(attention(), Target::Sm90a).unwrap();
    let ws = c.plan.warp_specialization.clone().expect("a producer warpgroup");
    assert_eq!((ws.producer_threads, ws.producer_regs, ws.consumer_regs), (128, 40, 232));
    // The registers setmaxnreg hands out fit the SM: 128 x 40 + 256 x 232 <= 65536.
    assert!(ws.producer_threads * ws.producer_regs + 256 * ws.consumer_regs <= 65536);
    assert_eq!(c.plan.ws_reason, None);
    assert!(c.plan.pipelines.values().all(|p| p.why.starts_with("TMA multistage, warp-specialised")));
    // Full and empty barriers per stage (3 + 3) and Q's: 56 bytes, padded to 128.
    let roles: Vec<(MbarrierRole, i64)> = c.plan.mbarriers.iter().map(|m| (m.role, m.count)).collect();
    assert_eq!(roles, [(MbarrierRole::Full, 3), (MbarrierRole::Empty, 3), (MbarrierRole::Full, 1)]);
    assert_eq!(c.plan.smem.barriers, 128);
    // The kernel launches the producer too, and its barriers among consumers are named.
    let files = tilegen::back::sm80::render(&c).unwrap();
    let text = |ext: &str| files.iter().find(|f| f.name.ends_with(ext)).unwrap().contents.replace("\n// ", " ");
    let cu = text(".cu");
    for needle in ["config.blockDim = dim3(kThreads + kProducerThreads);", "__launch_bounds__(kThreads + kProducerThreads, 1)",
                   "warpgroup_reg_dealloc<40>()", "warpgroup_reg_alloc<232>()", "arrive_barrier(smem.empty_t[prev_stage])",
                   "wait_barrier(smem.empty_t[stage], (t / stages - 1) % 2)", "consumer_sync();  // the shared buffers are free"] {
        assert!(cu.contains(needle), "the kernel lacks {needle}");
    }
    // Only the barrier that publishes the mbarriers' initialisation spans the whole block.
    assert_eq!(cu.matches("__syncthreads();").count(), 1);
    assert!(text(".h").contains("384 (the spec's 256 and a producer warpgroup of 128) threads"));
    // A copy inside an `if` would need the consumers' control flow in the producer: no
    // producer warpgroup, with the reason, and the loads stay TMA issued by one consumer.
    let nested = attention().replace("  - copy(Q[bz, bx*block_M:, by, :], Q_s)\n", "  - if bx >= 0:\n      - copy(Q[bz, bx*block_M:, by, :], Q_s)\n");
    let c = compile_for(nested, Target::Sm90a).unwrap();
    assert!(c.plan.copies.values().any(|cp| cp.tma.is_some()) && c.plan.warp_specialization.is_none());
    assert!(c.plan.ws_reason.as_deref().is_some_and(|w| w.contains("`Q_s` is nested in a block")), "{:?}", c.plan.ws_reason);
    // Linear attention (128 threads) keeps every thread computing.
    let c = compile_for(linear_attention(), Target::Sm90a).unwrap();
    assert!(c.plan.copies.values().any(|cp| cp.tma.is_some()) && c.plan.warp_specialization.is_none());
}

#[test]
fn sm90a_overlaps_each_tiles_second_gemm_with_the_next_tiles_softmax_or_says_why_not() {
    // The bundled attention spec on sm90a: two consumer warpgroups, TMA, 3 stages.
    let c = compile_for(attention(), Target::Sm90a).unwrap();
    let o = c.plan.overlap.clone().expect("an overlapped loop");
    assert_eq!(c.plan.overlap_reason, None);
    let kind = |id| c.spec.stmt(id).map(|s| s.kind.clone()).unwrap();
    assert!(matches!(kind(o.clear), StmtKind::Clear { buf } if buf.name == "S_f"));
    assert!(matches!(kind(o.first), StmtKind::Gemm { c, .. } if c.name == "S_f"));
    assert!(matches!(kind(o.deferred), StmtKind::Gemm { a, c, .. } if a.name == "P_f" && c.name == "O_f"));
    // Between the gemms: the mask, m_prev, reduce_max, alpha and l, exp, reduce_sum run while
    // the previous P·V is in flight; the rescale of O_f and the assignment to P_f wait for it.
    assert_eq!((o.during.len(), o.after.len(), o.moved.len()), (6, 1, 1));
    assert!(matches!(kind(o.after[0]), StmtKind::Parallel { body, .. } if matches!(&body[0].kind, StmtKind::Assign { target, .. } if target.name == "O_f")));
    assert!(matches!(kind(o.moved[0]), StmtKind::Assign { target, .. } if target.name == "P_f"));
    assert!(!o.after_reads_var);
    assert!(c.plan.pipelines.values().all(|p| p.why.contains("software-pipelined")));
    let files = tilegen::back::sm80::render(&c).unwrap();
    let cu = &files.iter().find(|f| f.name.ends_with(".cu")).unwrap().contents;
    for needle in ["tiled_mma0.accumulate_ = GMMA::ScaleOut::Zero;", "issue_S_f(read_stage);\n      issue_O_f(prev_stage);",
                   "warpgroup_wait<1>();", "during_mma(t);\n      warpgroup_wait<0>();", "arrive_barrier(smem.empty_t[prev_stage]);"] {
        assert!(cu.contains(needle), "the kernel lacks {needle}");
    }
    // The conversion to P_f left the softmax's block for the lambda after the wait.
    let after_comment = cu[..cu.find("auto after_mma").unwrap()].rfind("\n\n").unwrap();
    let during = &cu[cu.find("auto during_mma").unwrap()..after_comment];
    let after = &cu[cu.find("auto after_mma").unwrap()..cu.find("// Tile 0").unwrap()];
    assert!(!during.contains("P_f") && !during.contains("O_f"));
    assert!(after.contains("P_f(e) = static_cast<ElementP_f>(S_f(e));") && after.contains("O_f_rc(r, c) *= alpha(r);"));
    // No `clear(S_f)` call: the first MMAs zero the accumulator.
    assert!(!cu.contains("clear(S_f);"));
    // ceildiv(S, block_N) >= 1 for every S the launcher takes: the first and last tiles'
    // code needs no guard. A count that may be 0 keeps one around each.
    assert!(!cu.contains("if (num_tiles > 0)") && cu.contains("// Tile 0 (every size the launcher takes makes num_tiles >= 1)"));
    let c = compile_for(attention().replace("pipelined(t, ceildiv(S, block_N), stages)", "pipelined(t, ceildiv(S, block_N) - 1, stages)"), Target::Sm90a).unwrap();
    assert!(c.plan.overlap.is_some());
    let files = tilegen::back::sm80::render(&c).unwrap();
    let cu = &files.iter().find(|f| f.name.ends_with(".cu")).unwrap().contents;
    assert_eq!(cu.matches("if (num_tiles > 0)").count(), 2, "{cu}");

    let refused = |text: String| {
        let c = compile_for(text, Target::Sm90a).unwrap();
        assert!(c.plan.overlap.is_none() && c.plan.warp_specialization.is_some());
        c.plan.overlap_reason.clone().expect("a reason").1
    };
    // Two stages leave the producer nothing to load ahead once a stage is held a tile longer.
    let why = refused(attention().replace("stages: 3}", "stages: 2}"));
    assert!(why.starts_with("2 stages"), "{why}");
    // A statement after the second gemm would wait for it.
    let why = refused(attention().replace("      - gemm(P_f, V_s, O_f)\n", "      - gemm(P_f, V_s, O_f)\n      - parallel(i):\n          - m_prev[i] = m[i]\n"));
    assert!(why.contains("overlapping needs it last"), "{why}");
    // Moving `P_f = S_f` after the wait would read S_f after a later block rewrote it.
    let why = refused(attention().replace("          - P_f[i, j] = S_f[i, j]\n", "          - P_f[i, j] = S_f[i, j]\n      - parallel(i, j):\n          - S_f[i, j] = S_f[i, j] * 2.0\n"));
    assert!(why.contains("writes `S_f`, which it reads"), "{why}");
    // Without two consumer warpgroups there is no producer warpgroup, and nothing to overlap.
    let c = compile_for(without_targets(attention()), Target::Sm90a).unwrap();
    assert!(c.plan.overlap.is_none() && c.plan.overlap_reason.is_none());
}

#[test]
fn gemm_blocks_take_tiles_in_groups_of_rows_and_other_grids_keep_the_hardware_order() {
    let text = spec((128, 128, 32), 4, 128, "row_major", false);
    let c = compile(text.clone()).unwrap();
    let r = c.plan.raster.as_ref().expect("a GEMM's grid is rasterized");
    assert_eq!((r.group_dim, r.walk_dim, r.group), (1, 0, tilegen::layout::RASTER_GROUP), "groups of `by` rows (A's panels)");
    assert!(r.why.contains("8 panels of `A`"), "{}", r.why);
    let cu = &rendered_cu(&c);
    assert!(cu.contains("constexpr int kRasterGroup = 8;"), "{cu}");
    assert!(cu.contains("int const by = group_first + int(block_linear % group_blocks % group_rows);"), "{cu}");
    assert!(cu.contains("int const bx = int(block_linear % group_blocks / group_rows);"), "{cu}");
    assert!(!cu.contains("int const bx = blockIdx.x;"), "{cu}");
    // With the grid's roles swapped (A's tiles step along bx), the groups split bx.
    let swapped = text
        .replace("bx: ceildiv(N, block_N)\n  by: ceildiv(M, block_M)", "bx: ceildiv(M, block_M)\n  by: ceildiv(N, block_N)")
        .replace("A[by*block_M", "A[bx*block_M").replace("bx*block_N], B_s", "by*block_N], B_s")
        .replace("C[by*block_M, bx*block_N]", "C[bx*block_M, by*block_N]");
    let c = compile(swapped).unwrap();
    let r = c.plan.raster.as_ref().expect("still a GEMM's grid");
    assert_eq!((r.group_dim, r.walk_dim), (0, 1));
    let cu = &rendered_cu(&c);
    assert!(cu.contains("int const group_rows = min(int(gridDim.x) - group_first, kRasterGroup);"), "{cu}");
    // An order the spec asks for is kept, and so is a grid that is not a GEMM's two tile dims.
    let c = compile(text.replace("by: ceildiv(M, block_M)", "by:\n    extent: ceildiv(M, block_M)\n    order: descending")).unwrap();
    assert!(c.plan.raster.is_none());
    assert!(c.plan.raster_reason.as_deref().unwrap().contains("`by` runs in descending order"), "{:?}", c.plan.raster_reason);
    let attention = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/specs/flash_attention_fwd_bf16.yaml")).unwrap();
    let c = compile(attention).unwrap();
    assert!(c.plan.raster.is_none());
    assert!(c.plan.raster_reason.as_deref().unwrap().contains("no pipelined gemm reads two shared tiles"), "{:?}", c.plan.raster_reason);
}

#[test]
fn a_batched_gemm_groups_its_tiles_inside_each_batch_slice() {
    let bmm = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/golden/specs/bmm_bf16.yaml")).unwrap();
    // sm80's bmm, and on sm90a's CuTe-level lowering a GEMM whose grid has a z it never uses.
    let gemm = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/specs/gemm_bf16.yaml")).unwrap()
        .replace("  by: ceildiv(M, block_M)\n", "  by: ceildiv(M, block_M)\n  bz: 1\n")
        .replace("threads: 128", "threads: 256").replace(", cluster: [2, 1]", "");
    for (text, target, slice) in [(bmm.clone(), Target::Sm80, " (inside each `bz` slice)"), (gemm, Target::Sm90a, " (inside each `bz` slice)")] {
        let c = compile_for(text, target).unwrap();
        assert!(c.plan.collective.is_none());
        let r = c.plan.raster.as_ref().expect("the batch index both operands step along keeps its place");
        assert_eq!((r.group_dim, r.walk_dim), (1, 0));
        assert!(r.why.contains(&format!("groups of 8 `by` rows{slice}")), "{}", r.why);
        let cu = &rendered_cu(&c);
        assert!(cu.contains("int const by = group_first + int(block_linear % group_blocks % group_rows);"), "{cu}");
        assert!(!cu.contains("int const bx = blockIdx.x;"), "{cu}");
    }
    let c = compile_for(bmm.clone(), Target::Sm80).unwrap();
    let files = tilegen::back::render(&c).unwrap_or_else(|_| panic!("renders"));
    assert!(files.iter().any(|f| f.contents.contains("int const bz = blockIdx.z;")));
    // CK's device GEMM refuses the 3-D operands; the reason its fallback quotes is the cause
    // alone, without the preface naming the library's lowering.
    let amd = compile_for(bmm.clone(), Target::Gfx942).unwrap();
    let why = &amd.plan.tile.as_ref().unwrap().why;
    assert!(why.contains("`A` has 3 dimensions") && !why.contains("lowers GEMM-shaped specs"), "{why}");
    // The M tiles on z and the batch on y: the hardware walks z last, so the order stays.
    let on_z = bmm
        .replace("by: ceildiv(M, block_M)\n  bz: batch", "by: batch\n  bz: ceildiv(M, block_M)")
        .replace("A[bz, by*block_M:", "A[by, bz*block_M:").replace("B[bz,", "B[by,")
        .replace("C[bz, by*block_M:", "C[by, bz*block_M:");
    assert_ne!(on_z, bmm);
    let c = compile_for(on_z, Target::Sm80).unwrap();
    assert!(c.plan.raster.is_none());
    assert!(c.plan.raster_reason.as_deref().unwrap().contains("`bz` and `bx` include the grid's z"), "{:?}", c.plan.raster_reason);
}

#[test]
fn amd_reports_why_both_lowerings_refuse_a_gemm() {
    // Column-major A: CK's device GEMM refuses it. 32 threads: half a wave, which the tile
    // lowering (the fallback for GEMMs CK refuses) refuses too. sm80 takes it.
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/golden/specs/gemm_nt_f16.yaml")).unwrap()
        .replace("threads: 128", "threads: 32")
        .replace("block_M: 64, block_N: 64, block_K: 64", "block_M: 32, block_N: 32, block_K: 32");
    assert!(compile(text.clone()).is_ok());
    let (file, diags) = tilegen::compile(SourceFile::new("t.yaml", text), Target::Gfx942).expect_err("no AMD lowering");
    let msgs: Vec<&str> = diags.iter().map(|d| d.message.as_str()).collect();
    assert_eq!(msgs.len(), 3, "{msgs:?}");
    assert!(msgs[0].starts_with("the gfx942 target has no lowering for this GEMM") && msgs[0].contains("CK refuses (one reason)"), "{msgs:?}");
    assert!(msgs[1].starts_with("CK device GEMM: ") && msgs[1].contains("row-major A and output only"), "CK's reason is kept: {msgs:?}");
    assert!(msgs[2].starts_with("tile lowering: ") && msgs[2].contains("32 threads is not a multiple of 64"), "the tile lowering's reason is shown: {msgs:?}");
    // Like the LDS budget, the thread count is a reason the target has no lowering (a
    // `targets:` override can fix it, the hint says): `tilegen gen` skips gfx942 with a note.
    assert!(diags.iter().all(|d| d.unsupported), "{msgs:?}");
    let report = tilegen::diag::render_all(&diags, &file);
    assert!(report.contains("t.yaml:11:10") && report.contains("t.yaml:4:41"), "{report}");
}

#[test]
fn warps_skip_row_scales_of_one_on_wide_mma_sync_accumulators_only() {
    let spec = |name: &str| std::fs::read_to_string(format!("{}/specs/{name}.yaml", env!("CARGO_MANIFEST_DIR"))).unwrap();
    let c = compile(spec("flash_attention_fwd_bf16")).unwrap();
    let (id, stats) = c.plan.unit_scale_skips.iter().next().expect("the rescale of O is skippable");
    assert_eq!(c.plan.unit_scale_skips.len(), 1, "only the rescale inside the loop, not the final 1/l");
    assert_eq!(stats.iter().map(|b| c.spec.buffers[*b].name.name.as_str()).collect::<Vec<_>>(), ["alpha"]);
    let tilegen::ast::StmtKind::Parallel { body, .. } = &c.spec.stmt(*id).unwrap().kind else { panic!("a parallel block") };
    assert_eq!(c.file.snippet(body[0].span).trim(), "O_f[i, j] *= alpha[i]");
    let cu = &rendered_cu(&c);
    assert!(cu.contains("scaled |= alpha(r) != 1.0f;") && cu.contains("if (__any_sync(0xffffffffu, scaled)) {"), "{cu}");
    // Head dim 64: 64 accumulator values per thread, below the threshold.
    assert!(compile(spec("flash_attention_fwd_d64_bf16")).unwrap().plan.unit_scale_skips.is_empty());
    // Anything but a plain multiply by a row statistic keeps the block unconditional.
    let c = compile(spec("flash_attention_fwd_bf16").replace("O_f[i, j] *= alpha[i]", "O_f[i, j] *= alpha[i] * 1.0")).unwrap();
    assert!(c.plan.unit_scale_skips.is_empty());
    // Warpgroup MMA accumulators (sm90a) are never written conditionally inside the loop.
    let c = tilegen::compile(SourceFile::new("t.yaml", spec("flash_attention_fwd_bf16")), Target::Sm90a).unwrap_or_else(|_| panic!("plans"));
    assert!(c.plan.mmas.values().all(|m| m.wgmma.is_some()) && c.plan.unit_scale_skips.is_empty());
}

fn w4a16_zp() -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/specs/w4a16_zp_gemm_bf16.yaml")).unwrap()
}

#[test]
fn per_group_zero_points_ride_beside_the_scales_in_every_lowering() {
    // Thin tiles: the zero points' tile is copied by the scales' copiers into storage at a
    // fixed distance from the scales, read through the scales' offsets and folded into the
    // unpacking's bias.
    for target in [Target::Sm80, Target::Sm90a] {
        let c = compile_for(w4a16_zp(), target).unwrap();
        let p = c.plan.dequant_gemm.as_ref().expect("the thin-tile plan");
        let DequantZero::PerGroup { buffer, tensor, .. } = p.zero else { panic!("per-group zero points: {:?}", p.zero) };
        assert_eq!((c.spec.buffers[buffer].name.name.as_str(), c.spec.tensors[tensor].name.name.as_str()), ("Z_s", "zeros"));
        assert_eq!(p.stage_bytes[3], p.stage_bytes[2], "a zero point per scale");
        assert!(c.plan.alignment.iter().any(|a| a.tensor == tensor && a.vector_elems == 2), "the launcher checks the zeros' alignment");
        let cu = &rendered_cu(&c);
        let copy = if target == Target::Sm80 { "cp_async_4_bytes(scales_dst + zp_offset + stage * kStageS_s<kOddRows> * sizeof(ElementS_s), zeros_src, bytes);" } else { "cp_async_4_bytes(scales_dst[i] + zp_offset + stage * kStageS_s<kOddRows> * sizeof(ElementS_s), zeros_src[i] + j * (block_K / 128), bytes);" };
        for needle in ["cute::array_aligned<ElementS_s, stages * kStageS_s<kOddRows>, 128> Z_s;", copy,
                       "uint32_t const neg_bias_lo = dequant_neg_bias<ElementS_s>(ld_shared_u16(scales_rd[0][s] + zp_offset + stage_scales) * 0x10001u);",
                       if target == Target::Sm80 { "dequant_int4x2_exact<ElementS_s>(hi, 3, neg_bias_hi)" } else { "dequant_int4x2<ElementS_s>(hi, 3, scale_hi, neg_bias_hi)" },
                       "const void* zeros"] {
            assert!(squashed(cu).contains(&squashed(needle)), "{target}: the kernel lacks {needle}");
        }
    }
    // The general lowering (a 32-row tile): each row's zero point is read beside its scale.
    let wide = w4a16_zp().replace("constants: {block_M: 16, block_N: 32, block_K: 512, stages: 4}", "constants: {block_M: 32, block_N: 64, block_K: 256, stages: 4}")
        .replace("threads: 256", "threads: 128");
    let c = compile(wide.clone()).unwrap();
    assert!(c.plan.dequant_gemm.is_none() && c.plan.dequants.values().all(|d| d.fused_into.is_some()));
    let cu = &rendered_cu(&c);
    assert!(squashed(cu).contains("uint32_t const b_neg_bias = dequant_neg_bias<ElementS_s>(uint32_t(sZ_s(b_row, k_block / 8 + (kOddRows ? (b_row & 1) : 0), read_stage).raw()) * 0x10001u);"), "{cu}");
    // Zero points in a tensor shaped unlike the scales: the thin-tile lowering says why not
    // (checked before the tile's height), and the general one takes the program.
    let shifted = wide.replace("zeros:  {dtype: bf16, shape: [N, K/128]}", "zeros:  {dtype: bf16, shape: [N, K/64]}");
    let c = compile(shifted).unwrap();
    let reason = c.plan.dequant_gemm_reason.clone().unwrap_or_default();
    assert!(reason.contains("zero points' tensor and copy must match the scales'"), "{reason}");
}

fn w4a16_prefill() -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/specs/w4a16_prefill_gemm_bf16.yaml")).unwrap()
}

#[test]
fn scales_rows_of_odd_length_take_the_odd_rows_instantiation_in_the_general_lowering() {
    // K / 128 scales per row: odd for K = 896 or 1152, when every other row starts 2 bytes into
    // a word. The scales' copy takes rows of any length (base alignment only), its buffer is two
    // elements wider in the odd-rows instantiation, and both the copy and the fused dequant's
    // reads know the shift.
    for target in [Target::Sm80, Target::Sm90a] {
        let spec = if target == Target::Sm80 { w4a16_prefill() } else {
            // sm90a's general lowering: the weights unpacked into W_s for warpgroup MMAs (the
            // golden one-warpgroup spec), read by the unfused dequant.
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/golden/specs/w4_prefill_onewg_f16.yaml")).unwrap()
        };
        let c = compile_for(spec, target).unwrap();
        assert!(c.plan.dequant_gemm.is_none() && c.plan.dequant_wgmma.is_none(), "{target}: the general lowering");
        let scales = c.spec.tensors.iter().position(|t| t.name.name == "scales").unwrap();
        let odd: Vec<_> = c.plan.copies.values().filter(|cp| cp.odd_rows).collect();
        assert_eq!(odd.len(), 1, "{target}: the scales' copy only");
        assert_eq!(odd[0].tensor, Some(scales));
        let s_s = c.spec.buffers.iter().position(|b| b.name.name == "S_s").unwrap();
        assert!(c.plan.shared[&s_s].odd_rows);
        assert!(c.plan.shared.iter().filter(|(b, _)| **b != s_s).all(|(_, l)| !l.odd_rows));
        let a = c.plan.alignment.iter().find(|a| a.tensor == scales).unwrap();
        assert!(!a.whole_rows && a.vector_elems == 2, "{a:?}");
        let cu = &rendered_cu(&c);
        let reader = if target == Target::Sm80 { "sS_s(b_row, k_block / 8 + (kOddRows ? (b_row & 1) : 0), read_stage)" } else { "scale[i] = sS_s(r, wc / 16 + (kOddRows ? (r & 1) : 0), read_stage);" };
        for needle in [
            "template <bool kOddRows>\nusing SmemLayoutS_s = decltype(tile_to_shape(",
            "Int<block_K / 128 + (kOddRows ? 2 : 0)>{}",
            "cute::array_aligned<ElementS_s, cosize_v<SmemLayoutS_s<kOddRows>>, 128> S_s;",
            "SharedStorage<kOddRows>& smem = *reinterpret_cast<SharedStorage<kOddRows>*>(smem_buf);",
            "if constexpr (kOddRows) {",
            "cp_async_rows_from_words<kThreads>(sS_s(_, _, stage), scales, int64_t(bx) * block_N, N, (K / 128), int64_t(tile) * (block_K / 128), tid);",
            "CUTE_DEVICE void cp_async_rows_from_words(",
            "CUTE_DEVICE void cp_async_4_bytes(",
            reader,
            "bool const odd_rows = (K / 128) % 2 != 0;",
            "size_t const smem_bytes = odd_rows ? kSmemBytes<true> : kSmemBytes<false>;",
            "if (reinterpret_cast<uintptr_t>(scales) % 4 != 0) {",
        ] {
            assert!(squashed(cu).contains(&squashed(needle)), "{target}: the kernel lacks {needle}");
        }
        assert!(!cu.contains("(K / 128) % 2 != 0) {"), "{target}: the launcher no longer refuses odd rows");
    }
    // Rows of a length known to be even need no second instantiation.
    let fixed_k = w4a16_prefill().replace("constants: {block_M: 128,", "constants: {K: 1024, block_M: 128,");
    let c = compile_for(fixed_k, Target::Sm80).unwrap();
    assert!(c.plan.copies.values().all(|cp| !cp.odd_rows));
    assert!(!rendered_cu(&c).contains("kOddRows"));
    // A scales tile read by anything but a dequant keeps whole rows: only the dequant knows the
    // shift. Here a parallel block also writes the tile (a scales override).
    let touched = w4a16_prefill().replace("      - dequant_int4(Wq_s, W_s, scales=S_s, zero=8)", "      - parallel(i, j):\n          - S_s[i, j] = S_s[i, j]\n      - dequant_int4(Wq_s, W_s, scales=S_s, zero=8)");
    let c = compile_for(touched, Target::Sm80).unwrap();
    assert!(c.plan.copies.values().all(|cp| !cp.odd_rows));
    let scales = c.spec.tensors.iter().position(|t| t.name.name == "scales").unwrap();
    assert!(c.plan.alignment.iter().any(|a| a.tensor == scales && a.whole_rows));
}

/// A row-wise program: `X` [M, N] of `dtype` into a [rows, cols] fragment, scaled by the 1-D
/// `W` read at `w_index` and reduced along its rows, then stored.
fn rows_spec(rows: i64, cols: i64, threads: i64, dtype: &str, w_index: &str) -> String {
    format!(
        "kernel: t\ntensors:\n  X: {{dtype: {dtype}, shape: [M, N]}}\n  W: {{dtype: bf16, shape: [N]}}\n  Y: {{dtype: {dtype}, shape: [M, N], output: true}}\n\
constants: {{block_M: {rows}, block_N: {cols}}}\ngrid:\n  bx: ceildiv(M, block_M)\nthreads: {threads}\n\
buffers:\n  xs: {{scope: fragment, dtype: f32, shape: [block_M, block_N]}}\n  s: {{scope: fragment, dtype: f32, shape: [block_M]}}\n\
body:\n  - copy(X[bx*block_M, 0], xs)\n  - reduce_sum(xs, s)\n  - parallel(i, j):\n      - xs[i, j] = xs[i, j] * s[i] * f32(W[{w_index}])\n  - copy(xs, Y[bx*block_M, 0])\n")
}

#[test]
fn programs_without_gemms_take_the_row_wise_lowering() {
    // Rows of 1024 bf16 values on 256 threads, 8 rows a block: a warp per row, 16-byte vectors.
    for target in [Target::Sm80, Target::Sm90a] {
        let c = compile_for(rows_spec(8, 1024, 256, "bf16", "j"), target).unwrap();
        let p = c.plan.rows.as_ref().expect("a row-wise plan");
        assert_eq!((p.vector, p.threads_per_row, p.row_groups, p.rows_per_thread, p.vectors_per_row), (8, 32, 8, 1, 4));
        assert!(!p.cross_warp && c.plan.smem.total == 0, "a row within a warp needs no shared memory");
        assert!(c.plan.mmas.is_empty() && c.plan.collective.is_none());
        // X and Y move whole vectors; W is read a vector at a time at the column index.
        assert_eq!(p.column_vectors, vec![1]);
        let aligned: Vec<(usize, i64, bool)> = c.plan.alignment.iter().map(|a| (a.tensor, a.vector_elems, a.whole_rows)).collect();
        assert_eq!(aligned, vec![(0, 8, true), (1, 8, true), (2, 8, true)]);
        let cu = rendered_cu(&c);
        assert!(cu.contains("W_vec[vv] = *reinterpret_cast<cutlass::AlignedArray<ElementW, kVector> const*>(W + col);"), "{cu}");
        assert!(cu.contains("row_reduce<false, kThreadsPerRow>(v)"), "{cu}");
    }
    // One row per block: the row spans all eight warps, whose partials meet in shared memory.
    let c = compile(rows_spec(1, 8192, 256, "bf16", "j")).unwrap();
    let p = c.plan.rows.as_ref().unwrap();
    assert_eq!((p.threads_per_row, p.row_groups, p.vectors_per_row), (256, 1, 4));
    assert!(p.cross_warp);
    assert_eq!(c.plan.smem.total, 32, "one float per warp");
    assert!(rendered_cu(&c).contains("row_reduce<false, kThreadsPerRow>(v, row_scratch)"));
    // f32 tensors: 4-element vectors; a read of W elsewhere than the column index stays a
    // bounds-checked scalar read, and W needs no alignment.
    let c = compile(rows_spec(8, 256, 256, "f32", "bx")).unwrap();
    let p = c.plan.rows.as_ref().unwrap();
    assert_eq!((p.vector, p.threads_per_row, p.vectors_per_row), (4, 32, 2));
    assert!(p.column_vectors.is_empty() && c.plan.alignment.iter().all(|a| a.tensor != 1));
    assert!(rendered_cu(&c).contains("((bx < N) ? static_cast<float>(W[bx]) : 0.f)"));
    // Rows of 12 vectors take 4 threads each; 32 threads would then hold 8 rows of a 4-row tile,
    // and 8 threads per row do not divide 12 vectors: an error naming the thread count.
    let e = compile(rows_spec(4, 96, 32, "bf16", "j")).unwrap_err().join("\n");
    assert!(e.contains("cannot spread a [4, 96] tile over 32 threads"), "{e}");
    // The registers a thread would hold are bounded.
    let e = compile(rows_spec(64, 256, 128, "bf16", "j")).unwrap_err().join("\n");
    assert!(e.contains("need 148 registers per thread with 128 threads"), "{e}");
    // AMD: waves of 64 lanes, so up to 64 threads per row, and HIP spellings.
    for target in [Target::Gfx942, Target::Gfx90a] {
        let c = compile_for(rows_spec(8, 1024, 256, "bf16", "j"), target).unwrap();
        let p = c.plan.rows.as_ref().unwrap();
        assert_eq!((p.warp, p.threads_per_row, p.row_groups, p.rows_per_thread, p.vectors_per_row), (64, 64, 4, 2, 2));
        assert!(c.plan.tile.is_none() && c.plan.collective.is_none());
        let files = tilegen::back::render(&c).unwrap_or_else(|_| panic!("renders"));
        let hip = &files.iter().find(|f| f.name.ends_with(".hip")).expect("a .hip file").contents;
        assert!(hip.contains("ElementXs xs[kRowsPerThread][kVectorsPerRow][kVector];") && hip.contains("__shfl_xor(v, offset)"), "{hip}");
        let c = compile_for(rows_spec(1, 8192, 256, "bf16", "j"), target).unwrap();
        assert_eq!(c.plan.smem.total, 16, "one float per wave");
        // Fragments are f32 there.
        let e = compile_for(rows_spec(8, 1024, 256, "bf16", "j").replace("xs: {scope: fragment, dtype: f32", "xs: {scope: fragment, dtype: bf16"), target).unwrap_err().join("\n");
        assert!(e.contains("row-wise lowering keeps fragments in f32; `xs` is bf16"), "{e}");
    }
}

/// Integer tensors in the row-wise lowering: loaded exactly into float fragments, stored
/// through `float_to_i8` / `float_to_i32` (toward zero, saturating, as the interpreter
/// converts); float-to-integer casts in parallel blocks take the same helpers; fragments stay
/// floating point.
#[test]
fn row_wise_copies_convert_to_and_from_integer_tensors() {
    // bf16 in, i8 out: bf16's 16-byte vectors set the width, so Y moves 8-byte vectors.
    let text = rows_spec(1, 8192, 256, "bf16", "j").replace("Y: {dtype: bf16", "Y: {dtype: i8");
    for target in [Target::Sm80, Target::Gfx942] {
        let c = compile_for(text.clone(), target).unwrap();
        let p = c.plan.rows.as_ref().unwrap();
        assert_eq!(p.vector, 8);
        assert!(c.plan.alignment.iter().any(|a| a.tensor == 2 && a.vector_elems == 8 && a.whole_rows));
        let files = tilegen::back::render(&c).unwrap_or_else(|_| panic!("renders"));
        let code = &files.iter().find(|f| f.name.ends_with(".cu") || f.name.ends_with(".hip")).unwrap().contents;
        assert_eq!(code.matches("int8_t float_to_i8(float x)").count(), 1, "{code}");
        let tile = if target.is_amd() { "xs[rr][vv][ee]" } else { "xs(rr, vv, ee)" };
        assert!(code.contains(&format!("v[ee] = float_to_i8({tile});")) && code.contains("converted to i8 (toward zero, saturating)"), "{code}");
    }
    // i8 in and out: 16 elements a vector; the load converts exactly.
    let c = compile(rows_spec(1, 8192, 256, "i8", "j")).unwrap();
    assert_eq!(c.plan.rows.as_ref().unwrap().vector, 16);
    let cu = rendered_cu(&c);
    assert!(cu.contains("xs(rr, vv, ee) = static_cast<ElementXs>(v[ee]);") && cu.contains("float_to_i8(xs(rr, vv, ee))"), "{cu}");
    // No integer store, no helper; casts of floats to integers take it, of integers do not.
    let plain = rows_spec(8, 1024, 256, "bf16", "j");
    assert!(!rendered_cu(&compile(plain.clone()).unwrap()).contains("float_to_i"));
    let cast = plain.replace("xs[i, j] * s[i] * f32(W[j])", "f32(i8(xs[i, j] * s[i])) + f32(i32(j))");
    let cu = rendered_cu(&compile(cast).unwrap());
    assert!(cu.contains("static_cast<float>(float_to_i8(xs(rr, vv, ee) * s(rr))) + static_cast<float>(static_cast<int32_t>(j))"), "{cu}");
    assert_eq!(cu.matches("int32_t float_to_i32(float x)").count(), 1);
    // rint rounds half to even, as rintf.
    let rounded = plain.replace("xs[i, j] * s[i] * f32(W[j])", "rint(xs[i, j])");
    assert!(rendered_cu(&compile(rounded).unwrap()).contains("xs(rr, vv, ee) = rintf(xs(rr, vv, ee));"));
    // Integer fragments are refused on every target, at the dtype.
    for target in [Target::Sm80, Target::Gfx942] {
        let copy_only = plain.replace("xs: {scope: fragment, dtype: f32", "xs: {scope: fragment, dtype: i32")
            .replace("  - reduce_sum(xs, s)\n  - parallel(i, j):\n      - xs[i, j] = xs[i, j] * s[i] * f32(W[j])\n", "");
        let e = compile_for(copy_only, target).unwrap_err().join("\n");
        assert!(e.contains("the row-wise lowering computes in floating point; `xs` is i32") && e.contains("copies convert"), "{e}");
    }
}

/// A GEMM's f32 accumulator stored to an i8 tensor converts toward zero, saturating, as the
/// spec does: through `float_to_i8` in sm80's CuTe lowering and the AMD tile lowering;
/// composable_kernel's GEMM (whose epilogue would round) declines it, with its reason.
#[test]
fn gemm_accumulators_stored_as_integers_saturate() {
    let text = std::fs::read_to_string(format!("{}/specs/gemm_bf16.yaml", env!("CARGO_MANIFEST_DIR"))).unwrap()
        .replace("C: {dtype: bf16", "C: {dtype: i8");
    let cu = rendered_cu(&compile(text.clone()).unwrap());
    assert!(cu.contains("acc_C(e) = float_to_i8(acc(e));") && cu.matches("int8_t float_to_i8(float x)").count() == 1, "{cu}");
    let c = compile_for(text, Target::Gfx942).unwrap();
    assert!(c.plan.collective.is_none() && c.plan.tile.is_some(), "the tile lowering, not CK's GEMM");
    let why = &c.plan.tile.as_ref().unwrap().why;
    assert!(why.contains("composable_kernel GEMM writes floating-point outputs (or an i32 accumulator stored as is); `C` is i8"), "{why}");
    let files = tilegen::back::render(&c).unwrap_or_else(|_| panic!("renders"));
    let hip = &files.iter().find(|f| f.name.ends_with(".hip")).unwrap().contents;
    assert!(hip.contains("= float_to_i8(acc[bi][bj][r]);") && hip.contains("__device__ inline int8_t float_to_i8(float x)"), "{hip}");
}

/// f8e4m3 (OCP E4M3) tensors: the row-wise lowering stores them on sm80 with integer
/// arithmetic (`float_to_e4m3`: no fp8 conversion instruction in sm_80 code) and on sm90a with
/// CUTLASS's (the hardware's `cvt.rn.satfinite`); fragments stay f32/bf16/f16; other programs
/// and the AMD targets refuse the dtype, at its declaration.
#[test]
fn f8e4m3_tensors_in_the_row_wise_lowering() {
    let text = std::fs::read_to_string(format!("{}/tests/golden/specs/quant_fp8_per_token.yaml", env!("CARGO_MANIFEST_DIR"))).unwrap();
    let cu = rendered_cu(&compile_for(text.clone(), Target::Sm80).unwrap());
    assert!(cu.contains("using ElementQ = cute::float_e4m3_t;") && cu.contains("v[ee] = float_to_e4m3(xs(rr, vv, ee));"), "{cu}");
    assert_eq!(cu.matches("cutlass::float_e4m3_t float_to_e4m3(float x)").count(), 1);
    let c = compile_for(text.clone(), Target::Sm90a).unwrap();
    assert_eq!(c.plan.rows.as_ref().unwrap().vector, 8, "bf16's 16 bytes set the vector; Q moves 8-byte pieces");
    let cu = rendered_cu(&c);
    assert!(cu.contains("v[ee] = static_cast<ElementQ>(xs(rr, vv, ee));") && !cu.contains("float_to_e4m3"), "{cu}");
    for (target, why) in [(Target::Gfx942, "its fp8 is the FNUZ variant"), (Target::Gfx90a, "it has no fp8 type")] {
        let e = compile_for(text.clone(), target).unwrap_err().join("\n");
        assert!(e.contains(&format!("the {target} target has no f8e4m3 (OCP E4M3) support: {why}")) && e.contains("t.yaml:5:"), "{e}");
    }
    // Fragments are not f8e4m3.
    let e = compile(text.replace("xs: {scope: fragment, dtype: f32", "xs: {scope: fragment, dtype: f8e4m3")).unwrap_err().join("\n");
    assert!(e.contains("the row-wise lowering computes in f32, bf16 or f16; fragment `xs` is f8e4m3"), "{e}");
    let cast = text.replace("xs[i, j] = xs[i, j] * inv[i]", "xs[i, j] = f8e4m3(xs[i, j] * inv[i])");
    // Casts round through the type: on sm80 with `float_to_e4m3`, as the stores do; on sm90a
    // with CUTLASS's conversion (the hardware's).
    let cu = rendered_cu(&compile(cast.clone()).unwrap());
    assert!(cu.contains("xs(rr, vv, ee) = static_cast<float>(float_to_e4m3(static_cast<float>(xs(rr, vv, ee) * inv(rr))));"), "{cu}");
    assert_eq!(cu.matches("cutlass::float_e4m3_t float_to_e4m3(float x)").count(), 1);
    assert!(rendered_cu(&compile_for(cast, Target::Sm90a).unwrap()).contains("xs(rr, vv, ee) = static_cast<float>(cute::float_e4m3_t(static_cast<float>(xs(rr, vv, ee) * inv(rr))));"));
    // GEMMs over f8e4m3 operands: sm90a's CUTLASS collective (both operands K-major, as
    // 8-bit warpgroup MMAs read them), and nothing else: not sm80's mma.sync, and no fallback
    // to the CuTe-level lowering when the collective declines.
    let fp8 = std::fs::read_to_string(format!("{}/tests/golden/specs/gemm_fp8_bf16.yaml", env!("CARGO_MANIFEST_DIR"))).unwrap();
    let c = compile_for(fp8.clone(), Target::Sm90a).unwrap();
    let p = c.plan.collective.as_ref().expect("the CUTLASS collective");
    assert_eq!((p.tile, p.accumulator), ((128, 128, 128), tilegen::ast::DType::F32));
    assert!(rendered_cu(&c).contains("using ElementA = cute::float_e4m3_t;"));
    let e = compile_for(fp8.clone(), Target::Sm80).unwrap_err().join("\n");
    assert!(e.contains("the sm80 target takes f8e4m3 tensors in row-wise programs (programs without gemms) only: mma.sync in sm_80 code has no fp8"), "{e}");
    let mn_major = std::fs::read_to_string(format!("{}/specs/gemm_bf16.yaml", env!("CARGO_MANIFEST_DIR"))).unwrap().replace("dtype: bf16", "dtype: f8e4m3");
    let e = compile_for(mn_major, Target::Sm90a).unwrap_err().join("\n");
    assert!(e.contains("the sm90a target multiplies f8e4m3 operands only in a CUTLASS collective, which cannot take this spec") && e.contains("8-bit warpgroup MMAs read both operands K-major"), "{e}");
}

/// A row-wise program over rows longer than its tile: a sum of squares over column chunks,
/// then a second pass that scales and stores each chunk (RMSNorm over any row length).
fn chunked_rows_spec(loop_kind: &str, first_column: &str) -> String {
    format!(r#"kernel: t
tensors:
  X: {{dtype: bf16, shape: [M, N]}}
  Y: {{dtype: bf16, shape: [M, N], output: true}}
constants: {{block_M: 1, block_N: 2048}}
grid:
  bx: ceildiv(M, block_M)
threads: 256
buffers:
  xs: {{scope: fragment, dtype: f32, shape: [block_M, block_N]}}
  s: {{scope: fragment, dtype: f32, shape: [block_M]}}
body:
  - clear(s)
  - {loop_kind}(k, ceildiv(N, block_N)):
      - copy(X[bx*block_M, {first_column}], xs)
      - parallel(i, j):
          - xs[i, j] = xs[i, j] * xs[i, j]
      - reduce_sum(xs, s, clear=false)
  - serial(k, ceildiv(N, block_N)):
      - copy(X[bx*block_M, k*block_N], xs)
      - parallel(i, j):
          - xs[i, j] = xs[i, j] * rsqrt(s[i] / f32(N))
      - copy(xs, Y[bx*block_M, k*block_N])
"#)
}

#[test]
fn rows_longer_than_the_tile_are_read_in_column_chunks() {
    let c = compile(chunked_rows_spec("serial", "k*block_N")).unwrap();
    let p = c.plan.rows.as_ref().expect("a row-wise plan");
    // Three copies, all inside loops, each at the chunk's first column.
    assert_eq!(p.copies.iter().map(|cp| cp.load).collect::<Vec<_>>(), vec![true, true, false]);
    assert_eq!((p.threads_per_row, p.vectors_per_row), (256, 1));
    let cu = rendered_cu(&c);
    for want in [
        "  for (int k = 0; k < ((N + block_N - 1) / block_N); ++k) {\n    // spec 15: copy(X[bx*block_M, k*block_N], xs)",
        "int64_t const col = int64_t(k * block_N) + (row_lane + kThreadsPerRow * vv) * kVector;",
        // The reduction inside the loop accumulates into `s`, and its helper is emitted.
        "s(rr) = s(rr) + row_reduce<false, kThreadsPerRow>(v, row_scratch);",
        "CUTE_DEVICE float row_reduce(float v, float* scratch = nullptr)",
    ] {
        assert!(cu.contains(want), "missing {want:?} in\n{cu}");
    }
    // The same loop unrolled (a constant trip count would be usual; the plan is the same).
    let c = compile(chunked_rows_spec("unroll", "k*block_N").replace("unroll(k, ceildiv(N, block_N))", "unroll(k, 4)")).unwrap();
    assert!(rendered_cu(&c).contains("  CUTE_UNROLL\n  for (int k = 0; k < 4; ++k) {"));
    // A chunk that does not start on a vector, and a pipelined loop, are refused.
    let e = compile(chunked_rows_spec("serial", "k*100")).unwrap_err().join("\n");
    assert!(e.contains("the tile's first column must be a multiple of 8"), "{e}");
    let e = compile(chunked_rows_spec("pipelined", "k*block_N").replace("pipelined(k, ceildiv(N, block_N))", "pipelined(k, ceildiv(N, block_N), 2)")).unwrap_err().join("\n");
    assert!(e.contains("a `pipelined` loop has no meaning in it"), "{e}");
}

#[test]
fn one_d_tensors_read_at_a_chunks_columns_are_loaded_as_vectors_per_block() {
    let text = std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/specs/rms_norm_wide_bf16.yaml")).unwrap();
    // `W[k*block_N + j]` (either order): the block loads the thread's vectors of W at the
    // chunk's columns, and W must be whole vectors.
    for read in ["W[k*block_N + j]", "W[j + k*block_N]"] {
        let c = compile(text.replace("W[k*block_N + j]", read)).unwrap();
        let p = c.plan.rows.as_ref().unwrap();
        assert_eq!(p.chunk_vectors.len(), 1, "{read}");
        assert!(p.column_vectors.is_empty());
        assert!(c.plan.alignment.iter().any(|a| c.spec.tensors[a.tensor].name.name == "W" && a.vector_elems == 8));
        let cu = rendered_cu(&c);
        for want in [
            "cutlass::AlignedArray<ElementW, kVector> W_chunk[kVectorsPerRow];",
            "int64_t const col = int64_t(k * block_N) + (row_lane + kThreadsPerRow * vv) * kVector;",
            "W_chunk[vv] = *reinterpret_cast<cutlass::AlignedArray<ElementW, kVector> const*>(W + col);",
            "* static_cast<float>(W_chunk[vv][ee]);",
        ] {
            assert!(cu.contains(want), "{read}: missing {want:?} in\n{cu}");
        }
    }
    // An offset that is not a whole number of vectors stays a bounds-checked read per value.
    let c = compile(text.replace("W[k*block_N + j]", "W[k*block_N + 3 + j]")).unwrap();
    assert!(c.plan.rows.as_ref().unwrap().chunk_vectors.is_empty());
    assert!(squashed(&rendered_cu(&c)).contains("((k * block_N + 3 + j < N) ? static_cast<float>(W[k * block_N + 3 + j]) : 0.f)"));
}

#[test]
fn indices_that_may_be_negative_are_checked_against_zero_or_refused() {
    let text = std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/specs/rms_norm_wide_bf16.yaml")).unwrap();
    // Row-wise: an element read at `j - 1`, and a copy a chunk to the left, check 0 too; the
    // golden form (provably non-negative) does not.
    let golden = rendered_cu(&compile(text.clone()).unwrap());
    assert!(!golden.contains("0 <= "), "{golden}");
    let shifted = text.replace("f32(W[k*block_N + j])", "f32(W[k*block_N + j - 1])")
        .replace("copy(xs, Y[bx*block_M, k*block_N])", "copy(xs, Y[bx*block_M, (k + 1 - 1)*block_N])");
    let cu = rendered_cu(&compile(shifted).unwrap());
    assert!(squashed(&cu).contains("((0 <= (k * block_N + j) - 1 && (k * block_N + j) - 1 < N) ? static_cast<float>(W[(k * block_N + j) - 1]) : 0.f)"), "{cu}");
    // `(k + 1 - 1)*block_N` is not provably non-negative (a subtraction), though it is: checked.
    assert!(cu.contains("if (0 <= col && row < M && col < N) {"), "{cu}");
    // The CuTe general lowering's copies check the far edges only: a tile index that may be
    // negative is refused, at the origin.
    let gemm = std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("specs/gemm_bf16.yaml")).unwrap();
    let e = compile(gemm.replace("copy(acc, C[by*block_M, bx*block_N])", "copy(acc, C[(by - 1)*block_M, bx*block_N])")).unwrap_err().join("\n");
    assert!(e.contains("22:17: error: the sm80 target's copies check a tile against the tensor's far edges only, and this tile index may be negative"), "{e}");
    // Nor may a constant tile index below 0.
    let e = compile(gemm.replace("copy(acc, C[by*block_M, bx*block_N])", "copy(acc, C[(0 - 1)*block_M, bx*block_N])")).unwrap_err().join("\n");
    assert!(e.contains("this tile index may be negative"), "{e}");
}

#[test]
fn row_values_copy_to_and_from_one_d_tensors() {
    let text = std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/specs/layer_norm_fwd_bf16.yaml")).unwrap();
    let c = compile(text.clone()).unwrap();
    let p = c.plan.rows.as_ref().unwrap();
    assert_eq!(p.copies.iter().map(|cp| (cp.load, cp.row_values)).collect::<Vec<_>>(), vec![(true, false), (false, false), (false, true), (false, true)]);
    // Scalar stores: no alignment asked of Mean and Rstd; the row tile's vector width is X's.
    assert!(c.plan.alignment.iter().all(|a| !["Mean", "Rstd"].contains(&c.spec.tensors[a.tensor].name.name.as_str())));
    assert_eq!(p.vector, 8);
    let cu = rendered_cu(&c);
    assert!(cu.contains("  if (row_lane == 0) {\n    CUTE_UNROLL\n    for (int rr = 0; rr < kRowsPerThread; ++rr) {\n      int64_t const row = int64_t(bx * block_M) + row_group + kRowGroups * rr;\n      if (row < M) {\n        Rstd[row] = static_cast<ElementRstd>(rstd(rr));"), "{cu}");
    // A load of row values, at a first row that may be negative: checked against 0.
    let load = compile(text.replace("  - copy(X[bx*block_M, 0], xs)\n", "  - copy(X[bx*block_M, 0], xs)\n  - copy(Mean[bx*block_M - 1], mean)\n")).unwrap();
    assert!(rendered_cu(&load).contains("mean(rr) = (0 <= row && row < M) ? static_cast<ElementMean>(Mean[row]) : ElementMean(0);"));
    // Row values go to 1-D tensors only.
    let e = compile(text.replace("Mean:  {dtype: f32, shape: [M], output: true}", "Mean:  {dtype: f32, shape: [M, 1], output: true}")
        .replace("copy(mean, Mean[bx*block_M])", "copy(mean, Mean[bx*block_M:, 0])")).unwrap_err().join("\n");
    assert!(e.contains("a fragment of row values copies to or from a 1-D tensor at the tile's first row; `Mean` has 2 dimension(s)"), "{e}");
}

#[test]
fn library_epilogues_compute_integer_subexpressions_in_integers() {
    // `seven / two` is 3 in the spec (as in the sm80 code and the interpreter), not 3.5: the EVT
    // and the CK epilogue take its value as one constant.
    let spec = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/specs/gemm_bias_relu_bf16.yaml")).unwrap()
        .replace("stages: 3}", "stages: 3, seven: 7, two: 2}")
        .replace("max(acc[i, j] + f32(bias[bx*block_N + j]), 0.0)", "acc[i, j] * (seven / two) + f32(bias[bx*block_N + j]) * f32(1 / 2)");
    assert!(spec.contains("(seven / two)"));
    for target in [Target::Sm90a, Target::Gfx942] {
        let c = compile_for(spec.clone(), target).unwrap();
        let src = tilegen::back::render(&c).unwrap_or_else(|_| panic!("renders")).into_iter().map(|f| f.contents).collect::<String>();
        assert!(src.contains("3.0f") && src.contains("0.0f") && !src.contains("float(seven)") && !src.contains("divides"), "{target}:\n{src}");
    }
}

#[test]
fn names_the_generated_code_builds_from_spec_names_are_refused() {
    let errors = |text: String, target: Target| -> String {
        let c = compile_for(text, target).unwrap();
        match tilegen::back::render(&c) {
            Ok(_) => String::new(),
            Err(d) => d.iter().map(|d| d.render(&c.file)).collect(),
        }
    };
    // CuTe's tensor names: mA for tensor A, sA_s for buffer A_s, tCcacc for acc's partition.
    let gemm = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/specs/gemm_bf16.yaml")).unwrap();
    for name in ["mA", "sA_s", "tCcacc"] {
        let spec = gemm.replacen("stages: 4}", &format!("stages: 4, {name}: 3}}"), 1);
        assert!(spec.contains(&format!("{name}: 3")), "{spec}");
        let e = errors(spec, Target::Sm80);
        assert!(e.contains(&format!("the name `{name}` collides with a name in the generated sm80 code")) && e.contains("CuTe's tensor names"), "{name}: {e}");
    }
    // The AMD tile lowering's wave offsets of fragment `acc`.
    let w4 = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/specs/w4a16_gemm_bf16.yaml")).unwrap();
    let spec = w4.replacen("stages: 4}", "stages: 4, acc_row: 3}", 1);
    assert!(spec.contains("acc_row: 3"));
    assert!(errors(spec.clone(), Target::Gfx942).contains("the name `acc_row` collides with a name in the generated gfx942 code"));
    // Elsewhere such a name is the spec's to use.
    assert_eq!(errors(spec, Target::Sm80), "");
}

#[test]
fn library_epilogues_take_only_vectors_as_long_as_the_output_dimension() {
    // `bias: [N]` read at the output rows: the EVT and CK's D tensor would read M values of it
    // unchecked, where the spec reads zeros past N. Both library paths refuse, with the reason.
    let spec = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/specs/gemm_bias_relu_bf16.yaml")).unwrap()
        .replace("f32(bias[bx*block_N + j])", "f32(bias[by*block_M + i])");
    assert!(spec.contains("bias[by*block_M + i]"));
    let why = "the epilogue reads `bias` at every output row, but its extent N is not the output's M";
    let errs = compile_for(spec.clone(), Target::Sm90a).err().unwrap_or_default().join("\n");
    let c = compile_for(spec.clone(), Target::Sm90a).ok();
    assert!(errs.contains(why) || c.as_ref().is_some_and(|c| c.plan.collective.is_none() && tilegen::explain::explain(c).contains(why)), "{errs}");
    let c = compile_for(spec.clone(), Target::Gfx942).unwrap();
    assert!(c.plan.collective.is_none() && c.plan.tile.is_some() && tilegen::explain::explain(&c).contains(why));
    // Declared [M], it is the library's again.
    let fixed = spec.replace("bias: {dtype: bf16, shape: [N]}", "bias: {dtype: bf16, shape: [M]}");
    assert_ne!(fixed, spec);
    for target in [Target::Sm90a, Target::Gfx942] {
        assert!(compile_for(fixed.clone(), target).unwrap().plan.collective.is_some(), "{target}");
    }
}

#[test]
fn a_thread_count_amd_cannot_run_is_a_skipped_target_not_a_spec_error() {
    // 32 threads: a whole warp on NVIDIA, half a wave on AMD. Every reason gfx942 gives is
    // marked as no lowering on that target, so `gen` skips it with a note.
    let spec = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/specs/w4a16_gemm_bf16.yaml")).unwrap().replacen("threads: 256", "threads: 32", 1);
    assert!(spec.contains("threads: 32"));
    let Err((_, diags)) = tilegen::compile(SourceFile::new("t.yaml", spec.clone()), Target::Gfx942) else { panic!("gfx942 lowered 32 threads") };
    assert!(diags.iter().any(|d| d.message.contains("runs whole waves of 64 lanes")), "{diags:?}");
    assert!(diags.iter().all(|d| d.unsupported), "{diags:?}");
}

#[test]
fn constant_expressions_fold_after_the_targets_overrides() {
    let src = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/specs/gemm_bias_gelu_bf16.yaml")).unwrap();
    // out_scale computed from two constants before it, one of them a tile size sm90a overrides.
    let spec = src.replacen("constants: {", "constants: {one_half: 0.25 * 2, ", 1).replace("out_scale: 0.5", "out_scale: one_half * f32(block_N) / block_N");
    assert!(spec.contains("out_scale: one_half * f32(block_N) / block_N"), "{spec}");
    for target in [Target::Sm80, Target::Sm90a] {
        let c = compile_for(spec.clone(), target).unwrap();
        let k = |name: &str| c.spec.constants.iter().find(|k| k.name.name == name).unwrap().value.kind.clone();
        assert_eq!(k("out_scale"), tilegen::ast::ExprKind::Float(0.5, "0.5".into()), "{target}");
        assert_eq!(k("one_half"), tilegen::ast::ExprKind::Float(0.5, "0.5".into()));
    }
    // Integer constants stay integers, with C++'s truncating `/` and the true ceiling.
    let spec = src.replacen("constants: {", "constants: {q: -7 / 2, r: \"ceildiv(-7, 2)\", s: \"i32(2.9) + min(3, 4)\", ", 1);
    let c = compile_for(spec, Target::Sm80).unwrap();
    let k = |name: &str| c.spec.constants.iter().find(|k| k.name.name == name).unwrap().value.kind.clone();
    assert_eq!((k("q"), k("r"), k("s")), (tilegen::ast::ExprKind::Int(-3), tilegen::ast::ExprKind::Int(-3), tilegen::ast::ExprKind::Int(5)));
    // A derived tile size follows the target's override of the one it is computed from.
    let bundled = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/specs/gemm_bf16.yaml")).unwrap();
    let derived = bundled.replace("block_M: 128, block_N: 128,", "block_M: 64, block_N: 2 * block_M,");
    assert_ne!(derived, bundled);
    assert_eq!(compile_for(derived.clone(), Target::Sm80).unwrap().info.const_int("block_N"), Some(128));
    let derived = derived.replace("sm90a: {constants: {block_N: 256,", "sm90a: {constants: {block_M: 128,");
    assert!(derived.contains("sm90a: {constants: {block_M: 128,"), "{derived}");
    let c = compile_for(derived, Target::Sm90a).unwrap();
    assert_eq!(c.info.const_int("block_N"), Some(256));
    let cu = rendered_cu(&c);
    assert!(cu.contains("constexpr int block_N = 256;") && cu.contains("using TileShape = Shape<Int<block_M>, Int<block_N>, Int<block_K>>;"), "{cu}");
}

/// Every `using Element<Name> = ...;` a kernel declares is used by it: a fragment whose element
/// type is its MMA's accumulator (spelled by the MMA atom) gets no alias, and the rest keep theirs.
#[test]
fn generated_kernels_declare_only_the_element_aliases_they_use() {
    let mut specs: Vec<std::path::PathBuf> = Vec::new();
    for dir in ["specs", "tests/golden/specs"] {
        let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{dir}: {e}"));
        specs.extend(entries.map(|e| e.expect("a directory entry").path()).filter(|p| p.extension().is_some_and(|x| x == "yaml")));
    }
    specs.sort();
    let mut rendered = 0;
    for path in &specs {
        let text = std::fs::read_to_string(path).expect("a readable spec");
        for target in Target::ALL {
            let Ok(c) = tilegen::compile(SourceFile::new(path.display().to_string(), text.clone()), target) else { continue };
            let Ok(files) = tilegen::back::render(&c) else { continue };
            for f in files {
                rendered += 1;
                let code: String = f.contents.lines().map(|l| l.split("//").next().unwrap_or_default()).collect::<Vec<_>>().join("\n");
                for alias in code.lines().filter_map(|l| l.strip_prefix("using Element")?.split_once(" =").map(|(n, _)| format!("Element{n}"))) {
                    let uses = code.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).filter(|w| *w == alias).count();
                    assert!(uses > 1, "{} for {}: `{alias}` is declared and never used", f.name, target.name());
                }
            }
        }
    }
    assert!(rendered > 100, "only {rendered} files rendered");
    // Linear attention's f32 fragments are MMA accumulators; its bf16 `P_f` is built by the code.
    let la = std::fs::read_to_string("specs/linear_attention_causal_bf16.yaml").expect("the bundled spec");
    let cu = rendered_cu(&compile_for(la, Target::Sm80).expect("compiles"));
    assert!(cu.contains("using ElementP_f = cute::bfloat16_t;") && !cu.contains("ElementO_f"), "{cu}");
}

/// A gemm whose MMA type equals an earlier gemm's (atom, warps, tile) names that type.
#[test]
fn equal_mma_types_are_declared_once() {
    let la = std::fs::read_to_string("specs/linear_attention_causal_bf16.yaml").expect("the bundled spec");
    let cu = rendered_cu(&compile_for(la, Target::Sm80).expect("compiles"));
    for alias in ["using TiledMma1 = TiledMma0;", "using TiledMma2 = TiledMma0;"] {
        assert!(cu.contains(alias), "no `{alias}` in\n{cu}");
    }
    // Kᵀ·V splits its 128x64 tile 2x2: a type of its own, checked against the block's threads.
    assert!(squashed(&cu).contains("using TiledMma3 = TiledMMA< MMA_Atom<SM80_16x8x16_F32BF16BF16F32_TN>, Layout<Shape<Int<2>, Int<2>, _1>>"), "{cu}");
    assert_eq!(cu.matches("static_assert(size(TiledMma").count(), 2, "{cu}");
}

#[test]
fn a_gemm_reuses_the_a_registers_an_earlier_gemm_loaded_while_nothing_writes_the_tile() {
    // Q·Kᵀ (spec 40) and Q·S (spec 45) read Q_s through one MMA type and view: on sm80 the
    // second multiplies the first's registers; its own ldmatrix copies of Q_s are gone.
    let reuse = |c: &tilegen::Compiled| c.plan.mmas.values().map(|m| m.a_from.map(|g| c.line(c.spec.stmt(g).unwrap().span))).collect::<Vec<_>>();
    let c = compile(linear_attention()).unwrap();
    assert_eq!(reuse(&c), [None, Some(40), None, None]);
    let cu = squashed(&rendered_cu(&c));
    assert!(cu.contains(&squashed("gemm(tiled_mma1, O_f, tCrQ_s(_, _, k_block), tCrS_s(_, _, k_block), O_f);")), "spec 45 multiplies spec 40's registers");
    assert_eq!(cu.matches("partition_fragment_A(sQ_s").count(), 1, "one partition of Q_s");
    assert!(!cu.contains("s2r_copy_Q_s1") && !cu.contains("tCrQ_s1"));
    // A write to Q_s between them (here a clear, at the top of the block or inside a nested
    // loop) makes the registers stale: each loads its own.
    for write in ["      - clear(Q_s)\n", "      - serial(u, 1):\n          - clear(Q_s)\n"] {
        let c = compile(linear_attention().replacen("      - clear(O_f)\n", &format!("      - clear(O_f)\n{write}"), 1)).unwrap();
        assert_eq!(reuse(&c), [None, None, None, None], "{write}");
        assert!(squashed(&rendered_cu(&c)).contains("tCrQ_s1"));
    }
    // Warpgroup MMAs read shared operands through descriptors: sm90a's linear attention takes
    // them, so nothing is reused there.
    let c = compile_for(linear_attention(), Target::Sm90a).unwrap();
    assert!(c.plan.mmas.values().all(|m| m.a_from.is_none()));
}

/// CK's tile lowering names a loop's trip count that is too long for the `for` line, once per
/// loop: a second loop over the same variable takes the next free name.
#[test]
fn amd_long_trip_counts_are_named_before_their_loop() {
    let text = std::fs::read_to_string("tests/golden/specs/attention_window_bf16.yaml").expect("the golden spec");
    let render = |text: String| {
        let c = compile_for(text, Target::Gfx942).expect("compiles");
        let files = tilegen::back::render(&c).expect("renders");
        files.into_iter().find(|f| f.name.ends_with(".hip")).expect("a .hip file").contents
    };
    let hip = render(text.clone());
    assert!(hip.contains("  int const num_t = (((S + block_N - 1) / block_N) < ") && hip.contains("for (int t = 0; t < num_t; ++t) {"), "{hip}");
    assert!(hip.lines().all(|l| l.chars().count() <= 120), "{hip}");
    let again = "  - serial(t, min(ceildiv(S, block_N), ceildiv((bx + 1) * block_M, block_N))):\n      - parallel(i):\n          - l[i] *= 1.0\n";
    let anchor = "  - parallel(i):\n      - l[i] = 1.0 / l[i]\n";
    assert!(text.contains(anchor));
    let hip = render(text.replacen(anchor, &format!("{again}{anchor}"), 1));
    assert!(hip.contains("for (int t = 0; t < num_t; ++t) {") && hip.contains("for (int t = 0; t < num_t2; ++t) {"), "{hip}");
    assert_eq!((hip.matches("int const num_t = ").count(), hip.matches("int const num_t2 = ").count()), (1, 1));
    // An unrolled loop's long count, `num_u` being a spec constant: named `num_u2`, before the
    // `#pragma unroll`, which stays right above its `for`.
    let unrolled = "  - unroll(u, min(ceildiv(block_N, 16), ceildiv(block_M, 16)) + min(ceildiv(block_N, 32), ceildiv(block_M, 32))):\n      - parallel(i):\n          - l[i] *= 1.0\n";
    assert!(text.contains("constants:\n"));
    let with_constant = text.replacen("constants:\n", "constants:\n  num_u: 3\n", 1);
    let hip = render(with_constant.replacen(anchor, &format!("{unrolled}{anchor}"), 1));
    let lines: Vec<&str> = hip.lines().map(str::trim).collect();
    let pragma = lines.iter().position(|l| l.starts_with("int const num_u2 = ")).expect("the count named num_u2");
    assert_eq!(lines[pragma + 1..pragma + 3], ["#pragma unroll", "for (int u = 0; u < num_u2; ++u) {"], "{hip}");
    // A short count stays in the header.
    let la = render(std::fs::read_to_string("specs/linear_attention_causal_bf16.yaml").expect("the bundled spec"));
    assert!(la.contains("for (int t = 0; t < ((S + chunk - 1) / chunk); ++t) {") && !la.contains("num_t"));
}

#[test]
fn ck_gemm_launchers_refuse_tensors_beyond_32_bit_offsets() {
    // CK addresses A, B and C with 32-bit byte offsets and its IsSupportedArgument does not
    // check that: the launcher refuses tensors of 2^31 bytes or more, and says so.
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/specs/gemm_bf16.yaml")).unwrap();
    for target in [Target::Gfx942, Target::Gfx90a] {
        let c = compile_for(text.clone(), target).unwrap();
        let files = tilegen::back::render(&c).unwrap_or_else(|_| panic!("renders"));
        let file = |ext: &str| files.iter().find(|f| f.name.ends_with(ext)).unwrap().contents.clone();
        assert!(squashed(&file(".hip")).contains("if (int64_t(M) * K * int64_t(sizeof(ElementA)) > INT32_MAX || int64_t(K) * N * int64_t(sizeof(ElementB)) > INT32_MAX || int64_t(M) * N * int64_t(sizeof(ElementC)) > INT32_MAX) {"), "{target}");
        assert!(squashed(&file(".h")).contains("a tensor spans 2^31 bytes or more (M * K, K * N, M * N elements)"), "{target}");
        assert!(!file(".hip").contains("using Col ="), "{target}: B is row-major, no Col alias");
    }
}

#[test]
fn a_buffer_named_like_a_block_can_be_assigned() {
    // `serial[i, j] = ...` is an assignment, not a block header without its colon.
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/golden/specs/rms_norm_bf16.yaml")).unwrap();
    let renamed = text.replace("sq:", "serial:").replace("sq[", "serial[").replace("reduce_sum(sq,", "reduce_sum(serial,");
    assert!(renamed.contains("- serial[i, j] = xs[i, j] * xs[i, j]"), "{renamed}");
    compile(renamed).unwrap();
}

#[test]
fn barriers_before_and_after_shared_copies_only_where_shared_memory_was_or_will_be_used() {
    let read = |path: &str| std::fs::read_to_string(format!("{}/{path}", env!("CARGO_MANIFEST_DIR"))).unwrap();
    // Attention's copy of Q is the kernel's first use of shared memory: no earlier readers to
    // wait for. After the loop only register work and the staged store (which opens with a
    // barrier) follow, so the loop closes without one.
    let fa = read("specs/flash_attention_fwd_bf16.yaml");
    let cu = rendered_cu(&compile(fa.clone()).unwrap());
    assert!(cu.contains("// spec 34: copy(Q[bz, bx*block_M:, by, :], Q_s)"), "{cu}");
    assert!(!cu.contains("earlier readers of sQ_s"), "{cu}");
    assert!(!cu.contains("even if it ran no tile"), "{cu}");
    assert!(cu.contains("the shared buffers are free: reuse them as the staging tile"), "{cu}");
    // A statement after the loop that may use shared memory keeps the loop's closing barrier:
    // were the loop to run no tile, Q's copy would be waited for only there.
    let reduced = fa.replace("  - parallel(i):\n      - l[i] = 1.0", "  - reduce_max(O_f, m, dim=1)\n  - parallel(i):\n      - l[i] = 1.0");
    assert_ne!(reduced, fa);
    let cu = rendered_cu(&compile(reduced).unwrap());
    assert!(cu.contains("cp_async_wait<0>();\n    __syncthreads();  // the copies before the loop have landed even if it ran no tile"), "{cu}");
    // The first copy waits for no one; the second (shared memory was used before it) and the
    // one inside a loop (its own earlier iterations read the tile) keep their barriers.
    let cu = rendered_cu(&compile(read("tests/golden/specs/w4_stationary_bf16.yaml")).unwrap());
    assert!(!cu.contains("earlier readers of sWq_s"), "{cu}");
    assert_eq!(cu.matches("__syncthreads();  // earlier readers of sS_s are done").count(), 1, "{cu}");
    assert_eq!(cu.matches("__syncthreads();  // earlier readers of sA_s are done").count(), 1, "{cu}");
}

#[test]
fn launch_grids_are_computed_in_64_bits_from_the_sizes_up() {
    let cu = rendered_cu(&compile(spec((128, 128, 32), 3, 128, "row_major", false)).unwrap());
    // `int64_t(N + block_N - 1)` would overflow in int for N near INT_MAX before widening.
    assert!(cu.contains("int64_t const grid_x = ((int64_t(N) + block_N - 1) / block_N);"), "{cu}");
    assert!(cu.contains("int64_t const grid_y = ((int64_t(M) + block_M - 1) / block_M);"), "{cu}");
}

#[test]
fn stores_into_one_tensor_share_its_staging_tile_or_say_why_not() {
    let fa = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/specs/flash_attention_fwd_bf16.yaml")).unwrap();
    let store = "  - copy(O_f, O[bz, bx*block_M:, by, :])\n";
    assert!(fa.ends_with(store) || fa.contains(&format!("{store}targets:")), "the spec ends with its store");
    // A second store of the same accumulator (before the epilogue) reuses the staging tile:
    // one layout, one shared member, both stores through it.
    let twice = fa.replacen("  - parallel(i):\n      - l[i] = 1.0", &format!("{store}  - parallel(i):\n      - l[i] = 1.0"), 1);
    assert_ne!(twice, fa);
    let cu = rendered_cu(&compile(twice).unwrap());
    assert_eq!(cu.matches("using SmemLayoutO = ").count(), 1, "{cu}");
    assert_eq!(cu.matches("cosize_v<SmemLayoutO>, 128> O;").count(), 1, "{cu}");
    assert_eq!(cu.matches("make_smem_ptr(smem.O.data())").count(), 2, "{cu}");
    // A store of another accumulator shape into the same tensor would need a second tile
    // under the same names: an error at that store, naming the first.
    let other = fa.replacen("  - parallel(i):\n      - l[i] = 1.0", "  - copy(S_f, O[bz, bx*block_M:, by, :])\n  - parallel(i):\n      - l[i] = 1.0", 1);
    let errs = compile(other.clone()).map(|c| tilegen::back::render(&c).map(|_| ()).map_err(|d| d.iter().map(|d| d.message.clone()).collect::<Vec<_>>().join("\n"))).unwrap();
    let errs = errs.unwrap_err();
    assert!(errs.contains("this store into `O` stages its tile unlike the store at spec"), "{errs}");
}

#[test]
fn reads_of_buffers_before_any_write_are_errors_unless_a_branch_may_skip_them() {
    let read_early = "`m_prev` is read here before any statement writes it";
    // The running max's previous value, saved only after its use: the first iteration reads
    // undefined registers, and the error points at the write that comes too late.
    let late = attention().replace("      - parallel(i):\n          - m_prev[i] = m[i]\n", "").replace("      - parallel(i, j):\n          - O_f[i, j] *= alpha[i]", "      - parallel(i):\n          - m_prev[i] = m[i]\n      - parallel(i, j):\n          - O_f[i, j] *= alpha[i]");
    assert!(late != attention());
    let errs = compile(late.clone()).unwrap_err().join("\n");
    assert!(errs.contains(read_early) && errs.contains("written here, later in the loop"), "{errs}");
    // Under `if t > 0` the read may be what the branch keeps out of the first iteration.
    let guarded = late.replace("      - parallel(i):\n          - alpha[i] = exp2((m_prev[i] - m[i]) * scale_log2)", "      - if t > 0:\n          - parallel(i):\n              - alpha[i] = exp2((m_prev[i] - m[i]) * scale_log2)");
    assert!(guarded != late);
    let errs = compile(guarded).err().unwrap_or_default().join("\n");
    assert!(!errs.contains("before any statement writes it"), "{errs}");
    // So may an `if` around an inner loop.
    let nested = late.replace("      - parallel(i):\n          - alpha[i] = exp2((m_prev[i] - m[i]) * scale_log2)", "      - if t > 0:\n          - serial(u, 1):\n              - parallel(i):\n                  - alpha[i] = exp2((m_prev[i] - m[i]) * scale_log2)");
    assert!(nested != late);
    let errs = compile(nested).err().unwrap_or_default().join("\n");
    assert!(!errs.contains("before any statement writes it"), "{errs}");
    // A write under an `if` before the loop may have happened: no error.
    let maybe = attention().replace("  - clear(l)\n", "  - clear(l)\n  - if bx > 0:\n      - parallel(i):\n          - m_prev[i] = m[i]\n");
    assert!(maybe != attention());
    compile(maybe).unwrap();
    // A gemm into an accumulator nobody cleared.
    let errs = compile(attention().replace("  - clear(O_f)\n", "")).unwrap_err().join("\n");
    assert!(errs.contains("`O_f` is read here before any statement writes it"), "{errs}");
}

/// `order=interleaved` changes only how a pair of values is found in a word: every NVIDIA
/// lowering of the bundled 4-bit specs (thin tile, its TMA flavour, the wide tile, the general
/// lowering) carries the one-shift `int4x2_pair` instead of the byte permute, and the AMD one
/// shifts each value by its interleaved position; `explain` says which order and what it costs.
#[test]
fn interleaved_words_are_unpacked_without_byte_permutes_in_every_lowering() {
    let interleaved = |text: String| {
        let t = text.replace("zero=8)", "zero=8, order=interleaved)").replace("zeros=Z_s)", "zeros=Z_s, order=interleaved)");
        assert_ne!(t, text);
        t
    };
    let general = w4a16().replace("threads: 256", "threads: 64");
    for (name, text) in [("thin", w4a16()), ("zero points", w4a16_zp()), ("prefill", w4a16_prefill()), ("general", general)] {
        for target in [Target::Sm80, Target::Sm90a] {
            let seq = rendered_cu(&compile_for(text.clone(), target).unwrap());
            let c = compile_for(interleaved(text.clone()), target).unwrap();
            let il = rendered_cu(&c);
            assert!(seq.contains("return __byte_perm(word, word >> 4, 0x0400u + 0x0101u * p);"), "{name} {target}");
            assert!(il.contains("CUTE_DEVICE uint32_t int4x2_pair(uint32_t word, uint32_t p) {\n  return word >> (4 * p);\n}"), "{name} {target}");
            assert!(!il.contains("__byte_perm"), "{name} {target}");
            assert!(tilegen::explain::explain(&c).contains("packed words: interleaved order (value 2i of a word in bits 4i..4i+3, value 2i+1 in bits 16+4i..16+4i+3); each pair of values is a shift and a lop3"), "{name} {target}");
            // The header tells the caller how to pack `Wq` (and what `zeros` holds).
            let doc = tilegen::back::launcher::launcher(&c).doc_packed;
            assert!(doc[0].starts_with("`Wq` (read by the dequant_int4 at spec ") && doc[0].ends_with("in interleaved order (value 2i of a word in bits 4i..4i+3, value 2i+1 in bits 16+4i..16+4i+3)"), "{name} {target}: {doc:?}");
            assert_eq!(doc.len(), if name == "zero points" { 2 } else { 1 }, "{doc:?}");
            let seq_doc = tilegen::back::launcher::launcher(&compile_for(text.clone(), target).unwrap()).doc_packed;
            assert!(seq_doc[0].ends_with("packs eight 4-bit values into each 32-bit word along its last dimension, in sequential order (value i of a word in bits 4i..4i+3)"), "{seq_doc:?}");
        }
    }
    let hip = |text: String| {
        let c = compile_for(text, Target::Gfx942).unwrap();
        tilegen::back::render(&c).unwrap_or_else(|_| panic!("renders")).into_iter().find(|f| f.name.ends_with(".hip")).unwrap().contents
    };
    let general = w4a16().replace("threads: 256", "threads: 64");
    assert!(hip(general.clone()).contains("(word >> (4 * nib)) & 15u"));
    assert!(hip(interleaved(general)).contains("(word >> (4 * (nib / 2) + 16 * (nib % 2))) & 15u"));
}
