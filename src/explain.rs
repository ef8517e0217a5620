//! `tilegen explain`: what inference decided, for a reviewer.

use crate::layout::{CopyKind, FragmentLayout};
use crate::Compiled;
use std::fmt::Write as _;

/// A human-readable account of every decision in the plan.
pub fn explain(c: &Compiled) -> String {
    let spec = &c.spec;
    let plan = &c.plan;
    let line = |span: crate::diag::Span| c.line(span);
    let heading = |id: crate::ast::StmtId| stmt_heading(c, id);
    let line_of_stmt = |id: crate::ast::StmtId| spec.stmt(id).map_or(0, |s| line(s.span));
    let mut o = String::new();
    let _ = writeln!(o, "kernel {} ({}), target {}", spec.kernel.name, c.file.path, plan.target);
    let grid = spec.grid.iter().map(|g| format!("{} = {}{}", g.var.name, c.file.snippet(g.extent.span), if g.descending { " (descending)" } else { "" })).collect::<Vec<_>>().join(", ");
    if (plan.collective.is_some() || plan.attention.is_some()) && plan.target.is_amd() {
        let _ = writeln!(o, "  threads: {} ({} waves of 64), set by the CK instance (the spec's `threads: {}` are for the other lowerings); grid: chosen by CK over the spec's tiles {grid}", crate::layout::CK_THREADS, crate::layout::CK_THREADS / 64, spec.threads.0);
    } else if let Some(t) = &plan.tile {
        let _ = writeln!(o, "  threads: {} ({} waves of 64); grid: {grid}", spec.threads.0, t.waves);
    } else if plan.rows.is_some() && plan.target.is_amd() {
        let _ = writeln!(o, "  threads: {} ({} waves of 64); grid: {grid}", spec.threads.0, spec.threads.0 / 64);
    } else if plan.collective.is_some() {
        let _ = writeln!(o, "  threads: {}, set by the kernel schedule (the spec's `threads: {}` are for the other lowerings); grid: persistent, covering the spec's tiles {grid}", crate::layout::COLLECTIVE_THREADS, spec.threads.0);
    } else {
        let groups = if plan.mmas.values().any(|m| m.wgmma.is_some()) { format!(", {} warpgroup(s)", spec.threads.0 / 128) } else { String::new() };
        // A producer warp(group) comes on top of the spec's threads (see "Warp roles").
        let producer = plan.producer().map_or(String::new(), |(n, what)| format!(", plus a producer {what}: {} launched", spec.threads.0 + n));
        let _ = writeln!(o, "  threads: {} ({} warps{groups}){producer}; grid: {grid}", spec.threads.0, spec.threads.0 / 32);
        if let Some(r) = &plan.raster {
            let _ = writeln!(o, "  block order: grouped rasterization, {} rows of tiles per group\n    why: {}", r.group, r.why);
        } else if let Some(why) = &plan.raster_reason {
            let _ = writeln!(o, "  block order: the hardware's ({why})");
        }
    }
    let _ = writeln!(o, "  launcher: tilegen_{}({}{}{}Stream_t)", spec.kernel.name,
        spec.tensors.iter().map(|t| format!("{}{}", if t.output { "void* " } else { "const void* " }, t.name.name)).collect::<Vec<_>>().join(", ") + ", ",
        c.info.runtime_dims.iter().map(|d| format!("int {d}, ")).collect::<String>(),
        if plan.target.is_amd() { "hip" } else { "cuda" });

    if let (Some(p), true) = (&plan.collective, plan.target.is_amd()) {
        let _ = writeln!(o, "\ncomposable_kernel device GEMM (explicit instance, every template argument named in the source)");
        let _ = writeln!(o, "  why: {}", p.why);
        let acc = if p.accumulator == crate::ast::DType::I32 { "i32 (i8 MFMAs, exact)" } else { "f32 (MFMA)" };
        let _ = writeln!(o, "  layouts: A (`{}`) {}, B (`{}`) {}, output (`{}`) {}; accumulator {acc}",
            spec.tensors[p.a].name.name, p.layouts.0, spec.tensors[p.b].name.name, p.layouts.1, spec.tensors[p.d].name.name, p.layouts.2);
        let _ = writeln!(o, "  epilogue: {}", if matches!(p.epilogue, crate::layout::EvtNode::Acc) { "none (PassThrough)".to_string() } else { format!("the CDE operator computes {}", evt_text(c, &p.epilogue)) });
        amd_resources(&mut o, c, &format!("{} bytes of {} allowed per workgroup", plan.smem.total, plan.smem.budget), &[]);
        return o;
    }
    if let Some(a) = &plan.attention {
        let name = |t: usize| &spec.tensors[t].name.name;
        let _ = writeln!(o, "\ncomposable_kernel fused attention (DeviceBatchedGemmSoftmaxGemmPermute_Xdl_CShuffle, every template argument named in the source)");
        let _ = writeln!(o, "  recognised as softmax attention{}: Q = `{}`, K = `{}`, V = `{}`, O = `{}`, [{}] {}, head dim {} = {}",
            if a.causal { ", causal" } else { "" }, name(a.q), name(a.k), name(a.v), name(a.o), a.dims.join(", "), a.dtype, a.dims[3], a.head_dim);
        let _ = writeln!(o, "  structure: Q·Kᵀ at spec {}, reduce_max / reduce_sum over the scores, exp2 of the scores times `{}` (= {}), P·V at spec {}",
            line(a.lines.scores), a.scale_log2.name, a.scale_log2.spelling, line(a.lines.output));
        let (pb, ps, ph) = crate::layout::attention::PROBE;
        let _ = writeln!(o, "  probe: the interpreter ran the spec at B = {pb}, S = {ps}, H = {ph}; relative error {:.1e} against f64 softmax attention{} with scale {} * ln 2",
            a.probe_error, if a.causal { " with the causal mask (keys j <= query i)" } else { " without a mask" }, a.scale_log2.name);
        let _ = writeln!(o, "  instance: 256 threads (4 waves of 64), 128 queries x 128 keys per step, Gemm1 N = {} (the head dim), 32x32x8 MFMAs; mask {}",
            a.head_dim, if a.causal { "MaskOutUpperTriangle" } else { "MaskDisabled" });
        let _ = writeln!(o, "  the spec's tiles, stages, buffers and thread count are not used on this target");
        amd_resources(&mut o, c, &format!("chosen by the CK instance (within the {} bytes allowed per workgroup)", plan.smem.budget),
            &[format!("{} * {} * {} * {} < 2^31 (CK's 32-bit offsets)", a.dims[0], a.dims[1], a.dims[2], a.dims[3])]);
        return o;
    }
    if let Some(p) = &plan.collective {
        explain_collective(&mut o, c, p);
        return o;
    }
    if let Some(p) = &plan.tile {
        explain_tile(&mut o, c, p);
        return o;
    }
    if let Some(p) = &plan.dequant_gemm {
        explain_dequant_gemm(&mut o, c, p);
        return o;
    }
    if let Some(p) = &plan.dequant_wgmma {
        explain_dequant_wgmma(&mut o, c, p);
        return o;
    }
    if let Some(p) = &plan.rows {
        explain_rows(&mut o, c, p);
        return o;
    }
    if let Some(why) = &plan.collective_reason {
        let _ = writeln!(o, "  lowering: tilegen's CuTe-level code, not a CUTLASS collective: GEMM-shaped, but the collective cannot take it: {why}");
    }
    let _ = writeln!(o, "\nMMA");
    if plan.mmas.is_empty() {
        let _ = writeln!(o, "  (no gemm)");
    }
    if let Some(why) = &plan.mma_sync_reason {
        let _ = writeln!(o, "  mma.sync (the sm80 lowering built for sm_90a), not warpgroup MMAs: {why}");
    }
    for (id, m) in &plan.mmas {
        let _ = writeln!(o, "  {}", heading(*id));
        if let Some(w) = &m.wgmma {
            let _ = writeln!(o, "    warpgroup MMA {}; tile {}x{}x{} in {} k-block(s) of 16; {} warpgroup(s) along M, {} 64-row MMA(s) each per k-block, issued as one batch (wgmma.mma_async), then waited for",
                w.op, m.mnk.0, m.mnk.1, m.mnk.2, m.k_blocks, w.warpgroups, w.m_steps);
            let _ = writeln!(o, "    why: {}", m.why);
            if m.a_in_registers {
                let _ = writeln!(o, "    A = `{}`: read from registers (the producing warpgroup MMA's accumulator layout: every 16 accumulator columns are one k16 block of A, no shared round trip)", spec.buffers[m.a].name.name);
            }
            for (role, buf, major) in [("A", m.a, w.major.0), ("B", m.b, w.major.1)] {
                let Some(l) = plan.shared.get(&buf) else { continue };
                let view = if m.transposed_view(role == "A", l) { " through a view with its modes swapped" } else { "" };
                let _ = writeln!(o, "    {role} = `{}`: {major}-major, {} tile read{view} by the tensor cores through a shared-memory descriptor per k-block{}",
                    spec.buffers[buf].name.name, l.gmma_atom.unwrap_or("GMMA"), if l.staged { " and stage" } else { "" });
            }
            continue;
        }
        let _ = writeln!(o, "    atom {}; tile {}x{}x{} in {} k-block(s) of {}", m.atom, m.mnk.0, m.mnk.1, m.mnk.2, m.k_blocks, m.tile.2);
        let _ = writeln!(o, "    warps {}x{} (M x N); TiledMma permutation {}x{}x{}", m.warps.0, m.warps.1, m.tile.0, m.tile.1, m.tile.2);
        let _ = writeln!(o, "    why: {}", m.why);
        if m.a_in_registers {
            let _ = writeln!(o, "    A = `{}`: read from registers (the producing gemm's accumulator layout; two m16n8 accumulator blocks form one m16k16 A operand, no shared round trip)", spec.buffers[m.a].name.name);
        }
        if let Some(g) = m.a_from {
            let line = spec.stmt(g).map_or(0, |s| c.line(s.span));
            let _ = writeln!(o, "    A = `{}`: the registers the gemm at spec {line} loaded (the same MMA and view, and nothing writes the tile in between), no second ldmatrix pass",
                spec.buffers[m.a].name.name);
        }
        for (role, buf) in [("A", m.a), ("B", m.b)] {
            let Some(l) = plan.shared.get(&buf).filter(|_| role == "B" || m.a_from.is_none()) else { continue };
            if l.registers_only {
                let _ = writeln!(o, "    {role} = `{}`: unpacked in registers from packed words (the dequant fused into this gemm), no shared-memory load", spec.buffers[buf].name.name);
                continue;
            }
            let narrow = role == "B" && m.tile.1 == 8 * m.warps.1;
            let k_major = m.k_major(role == "A", l);
            let ldsm = match (k_major, narrow) {
                (true, false) => "SM75_U32x4_LDSM_N (ldmatrix.x4)",
                (false, false) => "SM75_U16x8_LDSM_T (ldmatrix.x4.trans)",
                (true, true) => "SM75_U32x2_LDSM_N (ldmatrix.x2: one 8-wide MMA column per warp)",
                (false, true) => "SM75_U16x4_LDSM_T (ldmatrix.x2.trans: one 8-wide MMA column per warp)",
            };
            let view = if m.transposed_view(role == "A", l) { ", read through a view with its modes swapped" } else { "" };
            let _ = writeln!(o, "    {role} = `{}`: {}{view} -> registers via {ldsm}", spec.buffers[buf].name.name, if k_major { "K-major" } else { "MN-major" });
        }
    }

    let _ = writeln!(o, "\nBuffers");
    for (i, b) in spec.buffers.iter().enumerate() {
        let shape = &c.info.buffer_shapes[i];
        let _ = write!(o, "  {} ({}, {}, {:?}, spec {}): ", b.name.name, b.scope.0.name(), b.dtype.0, shape, line(b.span));
        if let Some(l) = plan.shared.get(&i).filter(|l| l.registers_only) {
            let _ = writeln!(o, "not materialised, 0 bytes\n    why: {}", l.why());
        } else if let Some(l) = plan.shared.get(&i) {
            let _ = writeln!(o, "Swizzle<{},{},{}> over a {}x{} atom, dim {} contiguous, {} stage(s), {} bytes",
                l.swizzle.bits, l.swizzle.base, l.swizzle.shift, l.atom_shape.0, l.atom_shape.1, l.contiguous_dim, l.stages, l.bytes);
            let _ = writeln!(o, "    why: {}", l.why());
        } else if let Some(f) = plan.fragments.get(&i) {
            match f {
                FragmentLayout::MmaAccumulator { gemm } => {
                    let m = &plan.mmas[gemm];
                    let per_thread: i64 = shape.iter().product::<i64>() / spec.threads.0.max(1);
                    let _ = writeln!(o, "MMA accumulator layout of the gemm at spec {} ({} per thread, {} warps {}x{})",
                        line_of_stmt(*gemm), per_thread, m.warps.0 * m.warps.1, m.warps.0, m.warps.1);
                }
                FragmentLayout::Striped { per_thread } => {
                    let _ = writeln!(o, "striped over threads ({per_thread} per thread)");
                }
                FragmentLayout::RowStats { gemm } => {
                    let m = &plan.mmas[gemm];
                    let _ = writeln!(o, "row statistics of the gemm at spec {}: {} rows per thread (2 per 16-row MMA tile), each value held by the 4 lanes of a quad",
                        line_of_stmt(*gemm), m.rows_per_thread());
                }
            }
        } else {
            let _ = writeln!(o, "unused");
        }
    }

    // Register work: reductions, element-wise blocks (and the masks among them).
    let buffer = |n: &str| match c.info.symbols.get(n) {
        Some(crate::check::Symbol::Buffer(b)) => Some(*b),
        _ => None,
    };
    let mut reg_lines = Vec::new();
    spec.walk(&mut |s| match &s.kind {
        crate::ast::StmtKind::Reduce { src, dst, clear, .. } => {
            let rows = match plan.fragments.get(&buffer(&dst.name).unwrap_or(usize::MAX)) {
                Some(FragmentLayout::RowStats { gemm }) => plan.mmas[gemm].rows_per_thread(),
                _ => 0,
            };
            let per_row = buffer(&src.name).map(|b| c.info.buffer_shapes[b][1] / 4).unwrap_or(0);
            reg_lines.push(format!("  {}\n    row reduction: each thread folds its {per_row} values of each of its {rows} rows, then xor-shuffles over lanes 1 and 2 combine the quad that shares the rows{}",
                heading(s.id), if *clear { String::new() } else { format!("; the result is combined with `{}`'s previous value", dst.name) }));
        }
        crate::ast::StmtKind::Parallel { vars, body } => {
            let Some(domain) = c.info.parallel_domains.get(&s.id) else { return };
            let mut reads = Vec::new();
            let mut uses_index = false;
            for st in body {
                if let crate::ast::StmtKind::Assign { value, .. } = &st.kind {
                    index_uses(value, vars, &mut uses_index, &mut reads);
                }
            }
            let stats: Vec<&String> = reads.iter().filter(|n| matches!(buffer(n).and_then(|b| plan.fragments.get(&b)), Some(FragmentLayout::RowStats { .. }))).collect();
            let form = match plan.fragments.get(domain) {
                Some(FragmentLayout::RowStats { .. }) => "over the row statistics each thread holds".to_string(),
                Some(FragmentLayout::MmaAccumulator { .. }) if !stats.is_empty() => format!(
                    "by (row, col) of the accumulator values each thread holds, reading row statistics {} once per row",
                    stats.iter().map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", ")),
                Some(FragmentLayout::MmaAccumulator { .. }) => "register by register over the accumulator values each thread holds".to_string(),
                _ => "not lowered on this target".to_string(),
            };
            let mask = if uses_index { "; element coordinates come from the MMA partition of an identity tensor (a mask or index-dependent value)" } else { "" };
            reg_lines.push(format!("  {}\n    element-wise {form}{mask}", heading(s.id)));
        }
        _ => {}
    });
    if !reg_lines.is_empty() {
        let _ = writeln!(o, "\nRegister work");
        for l in reg_lines {
            let _ = writeln!(o, "{l}");
        }
    }

    if !plan.dequants.is_empty() {
        let _ = writeln!(o, "\nUnpacking");
        let _ = writeln!(o, "  packed words: {}", packed_words(c));
        if let Some(why) = &plan.dequant_gemm_reason {
            let _ = writeln!(o, "  not the thin-tile dequant GEMM lowering: {why}");
        }
        for (id, d) in &plan.dequants {
            if let Some(g) = d.fused_into {
                let _ = writeln!(o, "  {}\n    fused into the gemm at spec {}\n    why: {}", heading(*id), line_of_stmt(g), d.why);
                continue;
            }
            let _ = writeln!(o, "  {}\n    {} words in {} rows of {}; {} per thread{}; one scale per {} values\n    why: {}",
                heading(*id), d.words, d.words / d.words_per_row, d.words_per_row, d.per_thread,
                if d.guarded { " (the last round guarded)" } else { "" }, d.group, d.why);
        }
    }

    let _ = writeln!(o, "\nCopies");
    if let Some(why) = &plan.cp_async_reason {
        let _ = writeln!(o, "  cp.async, not TMA loads: {why}");
    }
    for (id, cp) in &plan.copies {
        let _ = writeln!(o, "  {}", heading(*id));
        let kind = match cp.kind {
            CopyKind::GlobalToShared => "global -> shared",
            CopyKind::AccumulatorToGlobal => "accumulator -> shared staging -> global",
            CopyKind::AccumulatorToShared => "accumulator -> shared (converted in registers)",
        };
        match &cp.tma {
            Some(t) => {
                let _ = writeln!(o, "    {kind}; TMA (SM90_TMA_LOAD): {} box(es) of {}x{} elements (contiguous extent first), {} bytes per tile, on an mbarrier; tensor map modes in tensor dims {}",
                    t.boxes, t.box_shape.0, t.box_shape.1, t.bytes, t.tensor_modes.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", "));
            }
            None => {
                let _ = writeln!(o, "    {kind}; atom {}; {} elements ({} bits) per vector; threads {}x{}",
                    cp.atom, cp.vector_elems, cp.vector_bits, cp.threads.shape.0, cp.threads.shape.1);
            }
        }
        if let (false, Some(t)) = (cp.fixed.is_empty(), cp.tensor) {
            let t = &spec.tensors[t];
            let _ = writeln!(o, "    a {}-D tile of the {}-D `{}`: dims {} fixed at {}", cp.cute_shape.len(), t.shape.len(), t.name.name,
                cp.fixed.iter().map(|(d, _)| d.to_string()).collect::<Vec<_>>().join(", "),
                cp.fixed.iter().map(|(_, e)| c.file.snippet(e.span).to_string()).collect::<Vec<_>>().join(", "));
        }
        let _ = writeln!(o, "    why: {}", cp.why);
    }

    let _ = writeln!(o, "\nPipelines");
    if plan.pipelines.is_empty() {
        let _ = writeln!(o, "  (none)");
    }
    for (id, p) in &plan.pipelines {
        let _ = writeln!(o, "  {}", heading(*id));
        let _ = writeln!(o, "    {:?}, {} stage(s); producers at spec {}; consumers at spec {}", p.mode, p.stages,
            p.producers.iter().map(|i| line_of_stmt(*i).to_string()).collect::<Vec<_>>().join(", "),
            p.consumers.iter().map(|i| line_of_stmt(*i).to_string()).collect::<Vec<_>>().join(", "));
        let tma = p.producers.iter().any(|i| plan.copies.get(i).is_some_and(|cp| cp.tma.is_some()));
        if tma && !p.covers.is_empty() {
            let _ = writeln!(o, "    it waits for the copy at spec {} issued just before it after issuing its first stages, so that their loads overlap",
                p.covers.iter().map(|i| line_of_stmt(*i).to_string()).collect::<Vec<_>>().join(", "));
        } else if !p.covers.is_empty() {
            let _ = writeln!(o, "    its first wait also covers the copy at spec {} issued just before it (cp.async groups complete in order), so that copy does not wait on its own",
                p.covers.iter().map(|i| line_of_stmt(*i).to_string()).collect::<Vec<_>>().join(", "));
        }
        let _ = writeln!(o, "    why: {}", p.why);
    }

    if !plan.unit_scale_skips.is_empty() {
        let _ = writeln!(o, "\nRow scales a warp may skip");
        for (id, stats) in &plan.unit_scale_skips {
            let names = stats.iter().map(|b| format!("`{}`", spec.buffers[*b].name.name)).collect::<Vec<_>>().join(" and ");
            let _ = writeln!(o, "  {}", heading(*id));
            let _ = writeln!(o, "    skipped by a warp when every {names} value it holds is 1: the block only multiplies accumulators by row statistics, and x * 1 is x (at least {} values per thread)",
                crate::layout::UNIT_SCALE_MIN_VALUES);
        }
    }

    if let Some(w) = &plan.warp_specialization {
        let threads = spec.threads.0;
        let _ = writeln!(o, "\nWarp roles");
        let _ = writeln!(o, "  consumers: threads 0..{} ({} warpgroups), setmaxnreg {} registers: every statement of the spec; barriers among them are named barrier 1 (consumer_sync), never __syncthreads",
            threads - 1, threads / 128, w.consumer_regs);
        let _ = writeln!(o, "  producer: threads {}..{} (one warpgroup), setmaxnreg {} registers: one thread issues every TMA load, in program order",
            threads, threads + w.producer_threads - 1, w.producer_regs);
        let _ = writeln!(o, "  why: {}", w.why);
    } else if let Some(why) = &plan.ws_reason {
        let _ = writeln!(o, "\nWarp roles");
        let _ = writeln!(o, "  every thread computes, one issues the TMA loads (no producer warpgroup: {why})");
    }
    if let Some(ov) = &plan.overlap {
        let lines = |ids: &[crate::ast::StmtId]| ids.iter().map(|i| format!("spec {}", line_of_stmt(*i))).collect::<Vec<_>>().join(", ");
        let _ = writeln!(o, "\nSoftware pipelining");
        let _ = writeln!(o, "  {}: tile t's gemm at spec {} and tile t-1's gemm at spec {} are issued together; the first k-block's MMAs zero the accumulator (for spec {})",
            heading(ov.pipeline), line_of_stmt(ov.first), line_of_stmt(ov.deferred), line_of_stmt(ov.clear));
        let _ = writeln!(o, "    while tile t-1's gemm runs: {}", lines(&ov.during));
        let _ = writeln!(o, "    after it (they use what it reads or writes): {}{}", lines(&ov.after),
            if ov.moved.is_empty() { String::new() } else { format!(", and the assignment at {} (moved out of its block: the gemm in flight reads its registers)", lines(&ov.moved)) });
    } else if let Some((at, why)) = &plan.overlap_reason {
        let _ = writeln!(o, "\nSoftware pipelining");
        let _ = writeln!(o, "  none: {}{why}", at.map_or(String::new(), |i| format!("{}: ", heading(i))));
    }

    let _ = writeln!(o, "\nResources");
    let _ = writeln!(o, "  shared memory: {} bytes of buffers, {} bytes of epilogue staging ({}){} -> {} of {} bytes allowed",
        plan.smem.buffers, plan.smem.staging,
        if plan.smem.staging_reuses_buffers { "reusing them" } else { "its own space: a store inside a loop" },
        if plan.smem.barriers > 0 { format!(", {} bytes of TMA mbarriers", plan.smem.barriers) } else { String::new() },
        plan.smem.total, plan.smem.budget);
    // The estimate adds every fragment as if all were live at once; past what a thread may
    // hold, say so rather than print an impossible count as if it were the kernel's.
    let (limit, whose) = plan.warp_specialization.as_ref().map_or((255, "a thread may hold"), |w| (w.consumer_regs as u64, "setmaxnreg gives a consumer thread"));
    if plan.regs_per_thread > limit {
        let _ = writeln!(o, "  registers: about {} per thread if every fragment and MMA operand were live at once (accumulators, double-buffered MMA operands, addressing), more than the {limit} {whose}: ptxas keeps fragments whose lifetimes do not overlap in the same registers and spills the rest (`nvcc -Xptxas -v` reports both)", plan.regs_per_thread);
    } else {
        let _ = writeln!(o, "  registers: about {} per thread (accumulators, double-buffered MMA operands, addressing)", plan.regs_per_thread);
    }
    if !plan.alignment.is_empty() {
        let _ = writeln!(o, "  launcher checks:");
        alignment_lines(&mut o, c);
    }
    o
}

fn evt_text(c: &Compiled, n: &crate::layout::EvtNode) -> String {
    use crate::layout::EvtNode;
    match n {
        EvtNode::Acc => "acc".into(),
        EvtNode::RowBroadcast { tensor } | EvtNode::ColBroadcast { tensor } => {
            let t = &c.spec.tensors[*tensor];
            let kind = if matches!(n, EvtNode::RowBroadcast { .. }) { "row_broadcast" } else { "col_broadcast" };
            format!("{kind}({}{})", t.name.name, if crate::layout::is_per_batch_vector(t) { ", per batch" } else { "" })
        }
        EvtNode::Scalar { value } => value.clone(),
        EvtNode::Compute { op, children } => format!(
            "{}({})", op.name(),
            children.iter().map(|ch| evt_text(c, ch)).collect::<Vec<_>>().join(", ")),
    }
}

/// "spec N: <statement text>" for a statement id.
fn stmt_heading(c: &Compiled, id: crate::ast::StmtId) -> String {
    c.spec.stmt(id).map_or_else(String::new, |s| format!("spec {}: {}", c.line(s.span), c.file.snippet(s.span)))
}

/// One line per alignment check the launcher makes.
fn alignment_lines(o: &mut String, c: &Compiled) {
    for a in &c.plan.alignment {
        if a.whole_rows {
            let _ = writeln!(o, "    `{}`: {}-element vectors ({})", c.spec.tensors[a.tensor].name.name, a.vector_elems, a.why);
        } else {
            let _ = writeln!(o, "    `{}`: base aligned to {} elements ({})", c.spec.tensors[a.tensor].name.name, a.vector_elems, a.why);
        }
    }
}

/// The resources section of an AMD plan: LDS, the launcher's checks (the alignment ones and
/// `extra_checks`), and what is and is not verified.
fn amd_resources(o: &mut String, c: &Compiled, lds: &str, extra_checks: &[String]) {
    let _ = writeln!(o, "\nResources");
    let _ = writeln!(o, "  LDS: {lds}");
    let _ = writeln!(o, "  launcher checks:");
    alignment_lines(o, c);
    for x in extra_checks {
        let _ = writeln!(o, "    {x}");
    }
    if c.plan.tile.is_none() {
        let _ = writeln!(o, "  CK's IsSupportedArgument is checked at launch");
    }
    let _ = writeln!(o, "  nothing is run on an AMD GPU by tilegen's tests (compile and MFMA checks only){}",
        if c.plan.tile.is_some() { "; the test suite runs this lowering's code on a CPU emulation of HIP and MFMAs (tests/amd_emulation.rs)" } else { "" });
}

fn explain_tile(o: &mut String, c: &Compiled, p: &crate::layout::mfma::TilePlan) {
    let spec = &c.spec;
    let name = |b: usize| &spec.buffers[b].name.name;
    let _ = writeln!(o, "\nTile lowering on MFMAs (tilegen's own HIP code on composable_kernel's element types)");
    let _ = writeln!(o, "  why: {}", p.why);
    let _ = writeln!(o, "  fragment layout: 16x16 blocks, lane l holding row l % 16, columns 4*(l/16) .. +3 (the swapped MFMA product's result, and the MFMA operand layout)");
    let _ = writeln!(o, "\nMFMA");
    if p.gemms.is_empty() {
        let _ = writeln!(o, "  (no gemm)");
    }
    for (id, g) in &p.gemms {
        let _ = writeln!(o, "  {}", stmt_heading(c, *id));
        let (m, n, k) = g.mnk;
        let _ = writeln!(o, "    {}: {m}x{n}x{k} in {} k-step(s) of 16", g.instr, k / 16);
        let reads = |row: bool| if row { "one 8-byte LDS read per lane (k contiguous)" } else { "4 LDS reads down a column per lane" };
        if g.a_in_registers {
            let _ = writeln!(o, "    A: from registers (the fragment is already in the MFMA operand layout; no LDS round trip)");
        } else {
            let _ = writeln!(o, "    A: {}", reads(g.a_row_reads));
        }
        let _ = writeln!(o, "    B: {}", reads(g.b_row_reads));
    }
    let mut reductions = Vec::new();
    spec.walk(&mut |s| if matches!(s.kind, crate::ast::StmtKind::Reduce { .. }) {
        reductions.push(s.id);
    });
    if !reductions.is_empty() {
        let _ = writeln!(o, "\nReductions");
        for id in reductions {
            let _ = writeln!(o, "  {}: each lane folds its 4 columns of every block of a row, then the row's 4 lanes (l, l^16, l^32, l^48) trade with 2 shuffles (__shfl_xor 16, 32)", stmt_heading(c, id));
        }
    }
    let _ = writeln!(o, "\nFragments");
    for (b, g) in &p.fragments {
        let buf = &spec.buffers[*b];
        if g.cols == 0 {
            let _ = writeln!(o, "  {} ({}, [{}], spec {}): row statistics, {} value(s) per lane (one per row block of 16 it holds), waves {} along the rows", name(*b), buf.dtype.0, g.rows, c.line(buf.span), g.row_blocks(), g.wm);
            continue;
        }
        let _ = writeln!(o, "  {} ({}, [{}, {}], spec {}): waves {}x{} (rows x columns), {}x{} blocks each{}", name(*b), buf.dtype.0, g.rows, g.cols, c.line(buf.span), g.wm, g.wn, g.row_blocks(), g.col_blocks(),
            if g.ks > 1 { format!("; {} wave groups split the k steps, partial sums added through LDS before the first read", g.ks) } else { String::new() });
    }
    let _ = writeln!(o, "\nShared buffers (LDS)");
    for (b, l) in &p.shared {
        let buf = &spec.buffers[*b];
        let _ = writeln!(o, "  {} ({}, spec {}): {} bytes; {}", name(*b), buf.dtype.0, c.line(buf.span), l.bytes, l.why);
    }
    if p.scratch_bytes > 0 {
        let _ = writeln!(o, "  k-split partial sums: {} bytes", p.scratch_bytes);
    }
    let _ = writeln!(o, "\nStatements");
    let _ = writeln!(o, "  copies: every thread a strided share of the tile, zero past the tensors' edges; fragments store their own registers");
    for (id, v) in &p.vectors {
        let what = if *v > 1 { format!("{v} elements per access (a launcher check aligns the tensor)") } else { "element by element (no vector width divides the tile, its origin, the LDS pitch and the tensor's contiguous extent)".to_string() };
        let _ = writeln!(o, "    {}: {what}", stmt_heading(c, *id));
    }
    let _ = writeln!(o, "  loops: in order (pipelined loops too: no asynchronous global → LDS copies on this path; the spec's stages apply to the NVIDIA targets)");
    let _ = writeln!(o, "  barriers: __syncthreads() before a statement that reads a shared buffer another thread wrote, or overwrites one another thread read, since the last barrier");
    amd_resources(o, c, &format!("{} of {} bytes per workgroup (each array rounded up to 128 bytes)", p.lds_total, c.plan.target.smem_budget()),
        &["sizes >= 1, no null pointers, the grid within HIP's limits".to_string()]);
}

/// The packed words' order and what unpacking a pair costs in it.
fn packed_words(c: &Compiled) -> String {
    use crate::ast::NibbleOrder;
    let order = c.spec.nibble_order();
    let cost = match (order, c.plan.target.is_amd()) {
        (NibbleOrder::Sequential, false) => "each pair of values is a byte permute and a lop3 (`int4x2_pair`), plus one shift per word",
        (NibbleOrder::Interleaved, false) => "each pair of values is a shift and a lop3 (`int4x2_pair`), no byte permute",
        (_, true) => "each value a shift and a mask",
    };
    format!("{} order ({}); {cost}", order.name(), order.layout())
}

fn explain_dequant_gemm(o: &mut String, c: &Compiled, p: &crate::layout::DequantGemmPlan) {
    let spec = &c.spec;
    let heading = |id: crate::ast::StmtId| stmt_heading(c, id);
    let (bm, bn, bk) = p.block;
    let name = |b: usize| &spec.buffers[b].name.name;
    let [a_s, wq_s, s_s, w_s, acc] = p.buffers;
    let _ = writeln!(o, "\nThin-tile dequant GEMM (weights as the MMA's A operand)");
    if let Some(why) = &c.plan.mma_sync_reason {
        let _ = writeln!(o, "  mma.sync, not warpgroup MMAs: {why}");
    }
    let _ = writeln!(o, "  {}\n  {}", heading(p.dequant), heading(p.gemm));
    let _ = writeln!(o, "    MMA SM80_16x8x16 (mma.sync), Cᵀ = W · Aᵀ: 16 weight rows x {} rows of A per MMA; `{}` is never stored: each thread unpacks its A registers from whole packed words ({}; one scale per {} values) {}",
        bm.min(8), name(w_s), match p.zero {
            crate::layout::DequantZero::Constant(z) => format!("zero {z}"),
            crate::layout::DequantZero::PerGroup { buffer, .. } => format!("one zero point per group from `{}`, read beside its scale", name(buffer)),
        }, p.group, if p.scale_per_step() {
            "as value - zero, exact; the MMAs sum each 128-deep step (one group: a quad's threads own consecutive 32-value chunks of it) in f32, and the weight row's scale multiplies the step's sums into the accumulator"
        } else {
            "as (value - zero) * scale, rounded once: a quad's threads own chunks 64 apart across a 256-deep span, so an MMA's k's span two groups"
        });
    let _ = writeln!(o, "    packed words: {}", packed_words(c));
    let _ = writeln!(o, "    why: {}", p.why);
    let _ = writeln!(o, "  row tiles: {} of 8 rows per block{}", p.m_tiles, if p.small_m { "; the launcher runs a one-tile instantiation when M <= 8" } else { "" });
    match &p.tma {
        Some(t) => {
            let producers = c.plan.producer().map_or(0, |(n, _)| n);
            let _ = writeln!(o, "\nWarp roles ({} threads)", spec.threads.0 + producers);
            let _ = writeln!(o, "  producer: threads {}..{} (one warp): lane 0 issues the TMA loads, every lane copies scales; __launch_bounds__ minimum {} block(s) per SM", spec.threads.0, spec.threads.0 + producers - 1, t.min_blocks);
            let _ = writeln!(o, "  consumers: threads 0..{} (the spec's), waiting on the stages, unpacking and multiplying", spec.threads.0 - 1);
        }
        None => {
            let _ = writeln!(o, "\nWarps ({} threads)", spec.threads.0);
        }
    }
    let _ = writeln!(o, "  {} row group(s) of 16 weight rows x {} k share(s): each warp takes {} of the {} 128-deep step(s) of every {bn}x{bk} tile",
        p.row_groups, p.k_split, p.k_steps / p.k_split, p.k_steps);
    let _ = writeln!(o, "  the k shares' partial sums of `{}` meet in shared memory ({} bytes, in the stages' place) before the store", name(acc), p.partial_bytes);
    let _ = writeln!(o, "\nShared layouts");
    // With TMA, a span's row holds `span` 16-bit values of A, or words of eight 4-bit weights.
    for (b, l, why, (per_unit, unit)) in [(a_s, p.a_layout, &p.why_a, (1, "values")), (wq_s, p.w_layout, &p.why_w, (8, "words"))] {
        if let Some(t) = &p.tma {
            let span_row = format!("{} {unit}", t.span / per_unit);
            let _ = writeln!(o, "  `{}`: {} span(s) of {} k per tile, each [row][{span_row}], 128-byte swizzle (Swizzle<3,4,3> on byte addresses)\n    why: {why}", name(b), t.spans, t.span);
            continue;
        }
        let cols = spec.buffers[b].shape.get(1).map_or(String::new(), |e| c.file.snippet(e.span).to_string());
        let pad = if l.pad > 0 { format!(" + {} (padding)", l.pad) } else { String::new() };
        let _ = writeln!(o, "  `{}`: rows of {cols}{pad} elements, Swizzle<{},{},{}>\n    why: {why}", name(b), l.swizzle.bits, l.swizzle.base, l.swizzle.shift);
    }
    let _ = writeln!(o, "  `{}`: row-major, {} scale(s) per weight row per tile; with an odd number of scales per row (K / {} odd) the launcher runs a second instantiation whose rows have {} spare slots: every other row starts 2 bytes into a word and is copied from one scale earlier, one more 4-byte copy, and read one slot later",
        name(s_s), bk / p.group, p.group, crate::layout::SCALE_SLACK);
    let zeros = match p.zero {
        crate::layout::DequantZero::PerGroup { copy, buffer, .. } => {
            let _ = writeln!(o, "  `{}`: laid out like `{}`, at a fixed distance from it in shared memory, so that its reads reuse the scales' offsets", name(buffer), name(s_s));
            Some(copy)
        }
        crate::layout::DequantZero::Constant(_) => None,
    };
    if let Some(t) = &p.tma {
        let _ = writeln!(o, "\nCopies (TMA, completing on the stage's full mbarrier; rows past the tensors arrive as zeros)");
        let _ = writeln!(o, "  {}: {} box(es) of (64, {pieces}, rows, 1) per tile, one per span, from a 4-D tensor map (64 values, {pieces} pieces, rows, spans); the launcher gives the box as many rows as a tile has rows of A (1 for a decode step); kept in L2 (EVICT_LAST)", heading(p.copies[0]), t.spans, pieces = t.span / 64);
        let _ = writeln!(o, "  {}: 1 box of ({} words, {bn} rows, {}) per tile from a 3-D tensor map (words, rows, spans); read once (EVICT_FIRST)", heading(p.copies[1]), t.span / 8, t.spans);
        let _ = writeln!(o, "  K % {} == {}: the odd-rows instantiation's maps are (64 values, K / 64 pieces, rows) and (K / 8 words, rows), one box of each per span, so that a last span past K arrives as zeros", t.span, t.span / 2);
        for id in std::iter::once(p.copies[2]).chain(zeros) {
            let _ = writeln!(o, "  {}: cp.async by the producer's lanes, up to {} copies of 4 bytes each (a row's pairs, and one more for rows that start mid-word), zero-filled past the rows", heading(id), t.scale_copies);
        }
        let _ = writeln!(o, "\nPipeline");
        let _ = writeln!(o, "  {}: TMA multistage, warp-specialised, {} stages: each stage has a full mbarrier (lane 0's expected bytes and every producer lane's scale copies) and an empty one (every consumer thread read it); the producer refills a stage as soon as it is empty, the consumers never meet at a block barrier inside the loop", heading(p.pipeline), p.stages);
        let _ = writeln!(o, "  launch: programmatic dependent launch: the grid may start while the kernel before it in the stream finishes (its launch and set-up overlap that kernel's last blocks); the producer waits for that kernel (griddepcontrol.wait) before its first load, having first asked L2 for its first {} tiles of {} (TMA prefetches, hints that take no stage), and every block lets the next kernel launch once set up", p.stages, spec.tensors[p.tensors[1]].name.name);
    } else {
        let _ = writeln!(o, "\nCopies (cp.async, 16-byte chunks zero-filled past the tensors; the scales 4 bytes at a time; A's chunks through L1, where the blocks on an SM share its tiles)");
        for (id, per) in [(p.copies[0], format!("{} chunk(s) per thread{}", p.a_chunks, if p.small_m { format!(" ({} with one row tile)", p.a_chunks * 8 / bm) } else { String::new() })), (p.copies[1], format!("{} chunk(s) per thread", p.w_chunks)), (p.copies[2], format!("the first {} threads (one per pair of a row's scales, and one more for rows that start mid-word), 4 bytes each", p.scale_pairs))].into_iter().chain(zeros.map(|id| (id, "the scales' threads, 4 bytes each".to_string()))) {
            let _ = writeln!(o, "  {}: {per}", heading(id));
        }
        let _ = writeln!(o, "\nPipeline");
        let _ = writeln!(o, "  {}: cp.async multistage on mbarriers, {} stages: each stage has a full mbarrier (every thread's copies landed) and an empty one (every thread read it); before computing a k-tile a thread issues the copies of the tile {} ahead, into the stage read {} tile(s) before, so warps need not meet at every tile; the ring unrolled so that stage offsets are constants", heading(p.pipeline), p.stages, p.prefetch, p.stages - p.prefetch);
        let _ = writeln!(o, "  launch: in machine code built from sm_90 or later PTX, programmatic dependent launch: the grid may start while the kernel before it in the stream finishes (its launch and set-up overlap that kernel's last blocks); every block lets the next kernel launch once set up, asks L2 for the first {} tiles of its rows of {} (bulk prefetches, hints), then waits for that kernel (griddepcontrol.wait) before its first copy; the launcher asks for it only for such code (cudaFuncGetAttributes' ptxVersion, asked once per device)", p.prefetch, spec.tensors[p.tensors[1]].name.name);
    }
    let _ = writeln!(o, "\nResources");
    let parts = p.stage_bytes.iter().filter(|b| **b > 0).map(|b| b.to_string()).collect::<Vec<_>>().join(" + ");
    let _ = writeln!(o, "  shared memory: up to {} bytes ({} per stage: {parts}, and {} bytes of mbarriers; the scales' rows as the odd-rows instantiation has them) of {} allowed", c.plan.smem.total, p.stage_bytes.iter().sum::<u64>(), c.plan.smem.barriers, c.plan.smem.budget);
    let _ = writeln!(o, "  registers: about {} per thread (estimate)", c.plan.regs_per_thread);
    let _ = writeln!(o, "  launcher checks:");
    alignment_lines(o, c);
}

fn explain_dequant_wgmma(o: &mut String, c: &Compiled, p: &crate::layout::DequantWgmmaPlan) {
    let spec = &c.spec;
    let heading = |id: crate::ast::StmtId| stmt_heading(c, id);
    let (bm, bn, bk) = p.block;
    let name = |b: usize| &spec.buffers[b].name.name;
    let [a_s, wq_s, s_s, w_s, acc] = p.buffers;
    let producers = c.plan.producer().map_or(0, |(n, _)| n);
    let _ = writeln!(o, "\nWide-tile dequant GEMM (warpgroup MMAs, the unpacked weights as their register A operand)");
    let _ = writeln!(o, "  {}\n  {}", heading(p.dequant), heading(p.gemm));
    let _ = writeln!(o, "    MMA {} (wgmma.mma_async), Cᵀ = W · Aᵀ: 64 weight rows x {bm} rows of A per MMA and warpgroup; `{}` is never stored: each thread unpacks its A registers from the packed words in shared memory (one scale per {} values, {})",
        p.op, name(w_s), p.group, match p.zero {
            crate::layout::DequantZero::Constant(z) => format!("zero {z}"),
            crate::layout::DequantZero::PerGroup { buffer, .. } => format!("one zero point per group, read with its scale instead of through `{}`", name(buffer)),
        });
    let _ = writeln!(o, "    packed words: {}", packed_words(c));
    let _ = writeln!(o, "    why: {}", p.why);
    let _ = writeln!(o, "  accumulators: `{}` transposed ({bn}x{bm}), {} f32 registers per consumer thread", name(acc), bm / 2);
    match &p.half_op {
        Some(op) => {
            let _ = writeln!(o, "  row tiles: {bm} rows of A per block; the launcher runs an instantiation with {} ({op}) when the spec's grid would occupy at most half the device's SMs{}, with twice the blocks along A's rows", bm / 2,
                if p.split_k.is_ok() { " and its last row tile is at most half used (else splitting k pays more)" } else { "" });
        }
        None => {
            let _ = writeln!(o, "  row tiles: {bm} rows of A per block{}", if bm >= 128 { " (no half-height instantiation: no grid dimension steps A's row tiles)" } else { "" });
        }
    }
    match &p.split_k {
        Ok(bytes) => {
            let _ = writeln!(o, "  k split: when the grid (after any halving) would occupy at most half the device's SMs and there are two k-tiles or more, the launcher runs clusters of two blocks along z: block 0 takes the first half of the k-tiles (rounded up), block 1 the rest; block 1 writes its f32 accumulators ({bytes} bytes) into block 0's free stages through distributed shared memory between two cluster barriers (every thread of both blocks, the producers included), and block 0 adds them and stores C (no workspace, one kernel)");
        }
        Err(why) => {
            let _ = writeln!(o, "  k split: not available: {why}");
        }
    }
    let _ = writeln!(o, "\nWarp roles ({} threads)", spec.threads.0 + producers);
    let _ = writeln!(o, "  producer: threads {}..{} (one warpgroup, setmaxnreg down to {} registers): one thread issues the TMA loads", spec.threads.0, spec.threads.0 + producers - 1, p.regs.0);
    let _ = writeln!(o, "  consumers: threads 0..{} (the spec's: {} warpgroup(s) of 64 weight rows, setmaxnreg up to {} registers): read their scales, wait on the stages, unpack and issue the MMAs", spec.threads.0 - 1, p.warpgroups, p.regs.1);
    let _ = writeln!(o, "\nShared layouts");
    let _ = writeln!(o, "  `{}`: {}<{}> tiled over [{bm}, {bk}] and the stages (the MMA's B operand, K-major; TMA writes the same swizzle)", name(a_s), p.a_atom, spec.buffers[a_s].dtype.0);
    let _ = writeln!(o, "  `{}`: {}<i32> tiled over [{bn}, {}] and the stages: TMA writes rows of {} bytes swizzled; each thread reads 16 bytes (four words) of its two rows per 32 k", name(wq_s), p.w_atom, bk / 8, bk / 2);
    let _ = writeln!(o, "  `{}`: not allocated: each consumer thread loads the scales of its two weight rows from global memory a k-tile ahead (2-byte values fit neither a TMA box nor a cp.async)", name(s_s));
    if let crate::layout::DequantZero::PerGroup { buffer, .. } = p.zero {
        let _ = writeln!(o, "  `{}`: not allocated: its zero points are loaded with the scales", name(buffer));
    }
    let _ = writeln!(o, "  C's tile: {bm} rows of {} elements ({} of padding) in the stages' place after the loop, written through a transposed view from the accumulators, read as 16-byte vectors", p.c_pitch, p.c_pitch - bn);
    let _ = writeln!(o, "\nCopies (TMA from tensor maps the launcher builds, completing on the stage's full mbarrier; rows and k's past the tensors arrive as zeros)");
    let _ = writeln!(o, "  {}: one {bm}x{bk} tile per stage, {} bytes", heading(p.copies[0]), p.stage_bytes[0]);
    let _ = writeln!(o, "  {}: one {bn}x{} tile of words per stage, {} bytes", heading(p.copies[1]), bk / 8, p.stage_bytes[1]);
    let _ = writeln!(o, "  {}: per consumer thread from global memory, see `{}` above", heading(p.copies[2]), name(s_s));
    let _ = writeln!(o, "\nPipeline");
    let _ = writeln!(o, "  {}: TMA multistage, warp-specialised, {} stages: each stage has a full mbarrier (the producer's expected bytes) and an empty one (every consumer thread read it); a consumer issues a k-tile's MMAs step by step as it unpacks them, waits for them at the tile's end and releases the stage", heading(p.pipeline), p.stages);
    let _ = writeln!(o, "\nResources");
    let _ = writeln!(o, "  shared memory: {} bytes ({} per stage: {} + {}; the C tile's {} bytes{} reuse them; {} bytes of mbarriers; rounded up to 1024) of {} allowed",
        c.plan.smem.total, p.stage_bytes.iter().sum::<u64>(), p.stage_bytes[0], p.stage_bytes[1], p.epilogue_bytes,
        p.split_k.as_ref().map(|b| format!(" and the split's {b}-byte partial tile")).unwrap_or_default(), c.plan.smem.barriers, c.plan.smem.budget);
    let _ = writeln!(o, "  registers: {} per consumer thread, {} per producer thread (setmaxnreg)", p.regs.1, p.regs.0);
    let _ = writeln!(o, "  launcher checks:");
    alignment_lines(o, c);
}

fn explain_rows(o: &mut String, c: &Compiled, p: &crate::layout::rows::RowsPlan) {
    let spec = &c.spec;
    let name = |b: usize| &spec.buffers[b].name.name;
    let list = |bs: &[usize]| bs.iter().map(|b| format!("`{}`", name(*b))).collect::<Vec<_>>().join(", ");
    let amd = c.plan.target.is_amd();
    let _ = writeln!(o, "\nRow-wise lowering (no gemm: the rows in registers, no shared tiles, no MMAs{})", match c.plan.target {
        crate::target::Target::Sm90a => "; sm80's code built for sm_90a",
        _ if amd => "; HIP on composable_kernel's element types, 64-lane waves",
        _ => "",
    });
    let _ = writeln!(o, "  row tile: [{}, {}], the layout of {} ({} values per thread each; arithmetic in f32)", p.rows, p.cols, list(&p.tiles), p.values_per_thread());
    let _ = writeln!(o, "  threads: {} row(s) at a time x {} threads per row; thread (g, l) = (tid / {tpr}, tid % {tpr}) holds rows g + {} * r (r < {}) and, of each, the {}-element vectors l + {tpr} * v (v < {})",
        p.row_groups, p.threads_per_row, p.row_groups, p.rows_per_thread, p.vector, p.vectors_per_row, tpr = p.threads_per_row);
    let _ = writeln!(o, "    why: {}", p.why);
    if !p.stats.is_empty() {
        let _ = writeln!(o, "  row values: {} (one value per row a thread holds, the same in every thread of the row)", list(&p.stats));
    }
    if !p.column_vectors.is_empty() {
        let names = p.column_vectors.iter().map(|t| format!("`{}`", spec.tensors[*t].name.name)).collect::<Vec<_>>().join(", ");
        let _ = writeln!(o, "  column vectors: {names}, read at the column index: each thread loads its {} vector(s) of each once, at the start", p.vectors_per_row);
    }
    let _ = writeln!(o, "\nStatements");
    rows_statements(o, c, p, &spec.body, 1);
    let _ = writeln!(o, "\nResources");
    let _ = writeln!(o, "  {}: {} bytes (static; the cross-{} reductions' partials)", if amd { "LDS" } else { "shared memory" }, c.plan.smem.total, if amd { "wave" } else { "warp" });
    let _ = writeln!(o, "  registers: {} per thread for fragments and column vectors (at most {})", c.plan.regs_per_thread, crate::layout::rows::MAX_ROW_VALUES);
    let _ = writeln!(o, "  launcher checks:");
    alignment_lines(o, c);
}

/// The row-wise plan's statements, a loop's nested under it.
fn rows_statements(o: &mut String, c: &Compiled, p: &crate::layout::rows::RowsPlan, stmts: &[crate::ast::Stmt], depth: usize) {
    let spec = &c.spec;
    let amd = c.plan.target.is_amd();
    let pad = "  ".repeat(depth);
    for s in stmts {
        let what = match &s.kind {
            crate::ast::StmtKind::Loop { .. } => "loop: its statements run once per trip on the same registers (a row longer than the tile is read in chunks)".to_string(),
            crate::ast::StmtKind::Copy { .. } => match p.copies.iter().find(|cp| cp.stmt == s.id) {
                Some(cp) if cp.row_values && cp.load => "load of row values: each thread reads the value of each row it holds (zero past the tensor)".to_string(),
                Some(cp) if cp.row_values => "store of row values: the first thread of each row writes it, converted to the tensor's type".to_string(),
                Some(cp) if cp.load => format!("load: {} vectors per thread (16-byte loads of whole vectors inside the tensor, zeros outside), converted to the fragment's type", p.rows_per_thread * p.vectors_per_row),
                Some(_) => format!("store: {} vectors per thread, converted to the tensor's type; vectors outside the tensor are skipped", p.rows_per_thread * p.vectors_per_row),
                None => continue,
            },
            crate::ast::StmtKind::Reduce { .. } => if p.cross_warp {
                format!("row reduction: each thread folds its {} values of a row, xor-shuffles combine the {}'s {} lanes, then the row's {} {}s add their partials through {} bytes of {} between two barriers",
                    p.vectors_per_row * p.vector, if amd { "wave" } else { "warp" }, p.warp, p.threads_per_row / p.warp, if amd { "wave" } else { "warp" },
                    p.scratch_bytes(spec.threads.0), if amd { "LDS" } else { "shared memory" })
            } else {
                format!("row reduction: each thread folds its {} values of a row, then xor-shuffles over the row's {} lanes", p.vectors_per_row * p.vector, p.threads_per_row)
            },
            crate::ast::StmtKind::Parallel { vars, .. } if vars.len() == 2 => {
                let chunks: Vec<String> = p.chunk_vectors.iter().filter(|cv| cv.block == s.id)
                    .map(|cv| format!("`{}[{} + j]`", spec.tensors[cv.tensor].name.name, c.file.snippet(cv.offset.span))).collect();
                format!("element-wise over each thread's values of the row tile; (i, j) from the thread's row and vector{}",
                    if chunks.is_empty() { String::new() } else { format!("; {} loaded first as {} vector(s) per thread", chunks.join(", "), p.vectors_per_row) })
            }
            crate::ast::StmtKind::Parallel { .. } => "element-wise over each thread's row values".to_string(),
            _ => "element-wise over the fragment's values".to_string(),
        };
        let _ = writeln!(o, "{pad}{}\n{pad}  {what}", stmt_heading(c, s.id));
        if let crate::ast::StmtKind::Loop { body, .. } = &s.kind {
            rows_statements(o, c, p, body, depth + 1);
        }
    }
}

fn explain_collective(o: &mut String, c: &Compiled, p: &crate::layout::CollectivePlan) {
    let spec = &c.spec;
    let (bm, bn, bk) = p.tile;
    let _ = writeln!(o, "\nCUTLASS 3.x collective (GemmUniversal + CollectiveBuilder, explicit choices)");
    let _ = writeln!(o, "  why: {}", p.why);
    let (kernel, epilogue) = match p.schedule {
        crate::layout::GemmSchedule::Cutlass { kernel, epilogue, .. } => (kernel, epilogue),
        crate::layout::GemmSchedule::Ck { pipeline, scheduler } => (pipeline, scheduler),
    };
    let _ = writeln!(o, "  tile {bm}x{bn}x{bk}, cluster {}x{}, {} stages, swizzle {}; kernel schedule {kernel}, epilogue schedule {epilogue}", p.cluster.0, p.cluster.1, p.stages, p.swizzle);
    let _ = writeln!(o, "  layouts: A ({}) {}, B ({}) {}, D ({}) {}; accumulator {}",
        spec.tensors[p.a].name.name, p.layouts.0, spec.tensors[p.b].name.name, p.layouts.1, spec.tensors[p.d].name.name, p.layouts.2, p.accumulator);
    if let Some(b) = &p.batch {
        use crate::layout::BatchForm;
        let line = match b.form {
            BatchForm::FoldedIntoM => format!("B is shared by every batch, so A's and the output's leading dimension (`{}`, stepped by `{}`) folds into M: one ({}·M)×N GEMM over the packed batches", b.extent, b.var, b.extent),
            BatchForm::Batched => format!("the leading dimension (`{}`, stepped by `{}`) is the collective's batch mode L; each batch is packed after the previous one", b.extent, b.var),
            BatchForm::SharedA => format!("the output's and B's leading dimension (`{}`, stepped by `{}`) is the collective's batch mode L, packed; A is shared by every batch (batch stride 0)", b.extent, b.var),
            BatchForm::SharedB => format!("the output's and A's leading dimension (`{}`, stepped by `{}`) is the collective's batch mode L, packed; B is shared by every batch (batch stride 0), not folded into M because an epilogue vector is not one value per folded row", b.extent, b.var),
        };
        let _ = writeln!(o, "  batch: {line}");
    }
    let _ = writeln!(o, "\nWarp roles ({} threads)", crate::layout::COLLECTIVE_THREADS);
    let _ = writeln!(o, "  warpgroup 0: producer; one warp issues the TMA loads of A and B into the {} shared stages (setmaxnreg down to 40 registers)", p.stages);
    let (cm, cn) = p.consumer_tile;
    if (cm, cn) == (bm, bn) {
        let _ = writeln!(o, "  warpgroups 1-2: consumers taking whole tiles in turn (ping-pong); each runs WGMMA on its {cm}x{cn} tile from shared memory, then the fused epilogue while the other multiplies (setmaxnreg up to 232 registers)");
    } else {
        let _ = writeln!(o, "  warpgroups 1-2: consumers; each runs WGMMA on {cm}x{cn} of the tile from shared memory and the fused epilogue (setmaxnreg up to 232 registers)");
    }
    let _ = writeln!(o, "\nTMA boxes");
    let _ = writeln!(o, "  A: {bm}x{bk} per stage{}", if p.cluster.1 > 1 { format!(", multicast across the {} CTAs of a cluster row", p.cluster.1) } else { String::new() });
    let _ = writeln!(o, "  B: {bn}x{bk} per stage{}", if p.cluster.0 > 1 { format!(", multicast across the {} CTAs of a cluster column", p.cluster.0) } else { String::new() });
    if let crate::layout::GemmSchedule::Cutlass { epilogue_tile: (em, en), .. } = p.schedule {
        let _ = writeln!(o, "  D: stored through shared memory in {em}x{en} subtiles");
    }
    let _ = writeln!(o, "\nEpilogue visitor tree");
    let _ = writeln!(o, "  D = {}", evt_text(c, &p.epilogue));
    let _ = writeln!(o, "\nResources");
    let _ = writeln!(o, "  shared memory: about {} bytes ({} of mainloop stages, {} of epilogue) of {} allowed", p.smem_bytes, c.plan.smem.buffers, c.plan.smem.staging, c.plan.smem.budget);
    let promoted = if p.accumulator_registers > cm * cn / 128 { ", in two f32 sets: FP8 accumulation is promoted" } else { "" };
    let _ = writeln!(o, "  registers: accumulators {} per consumer thread ({} of the tile per warpgroup{promoted}; at most 128 without spilling)", p.accumulator_registers, cm * cn);
    if !c.plan.alignment.is_empty() {
        let _ = writeln!(o, "  launcher checks:");
        alignment_lines(o, c);
    }
}

/// Buffers and tensors `e` reads (into `reads`), and whether it uses the block's index
/// variables other than as a whole index of an element read (a mask or an index-dependent
/// value, which needs element coordinates).
fn index_uses(e: &crate::ast::Expr, vars: &[crate::ast::Ident], uses: &mut bool, reads: &mut Vec<String>) {
    use crate::ast::ExprKind;
    let is_var = |x: &crate::ast::Expr| matches!(&x.kind, ExprKind::Name(n) if vars.iter().any(|v| v.name == *n));
    let (mut all, mut as_index) = (0, 0);
    e.visit(&mut |x| {
        match &x.kind {
            ExprKind::Index(name, idx) => {
                reads.push(name.name.clone());
                as_index += idx.iter().filter(|i| is_var(i)).count();
            }
            _ if is_var(x) => all += 1,
            _ => {}
        }
        true
    });
    *uses |= all > as_index;
}
