//! Pipelined loops of the CuTe kernels: the producers' copies (cp.async or TMA), the gemm
//! steps on the current stage, and the software-pipelined (overlapped) loop of sm90a's
//! warp-specialised programs.

use super::*;

impl Lower<'_> {
    /// `mQ(bz, _, by, _)`: the tensor sliced at a copy's fixed indices, if it has any.
    pub(super) fn sliced(&self, cp: &crate::layout::CopyPlan) -> Option<String> {
        let t = &self.c.spec.tensors[cp.tensor.filter(|_| !cp.fixed.is_empty())?];
        let idx: Vec<String> = (0..t.shape.len()).map(|d| match cp.fixed.iter().find(|(f, _)| *f == d) {
            Some((_, e)) => self.conv.expr(e, &PlainEnv),
            None => "_".into(),
        }).collect();
        Some(format!("m{}({})", t.name.name, idx.join(", ")))
    }

    pub(super) fn producer(&mut self, id: StmtId, var: Option<&str>) -> Option<ProducerCtx> {
        let c = self.c;
        let cp = c.plan.copies.get(&id)?;
        let s = c.spec.stmt(id)?;
        let t = &c.spec.tensors[cp.tensor?];
        let buf = &c.spec.buffers[cp.buffer];
        let key = t.name.name.clone();
        let transposed = cp.cute_dims == [1, 0];
        let sliced = self.sliced(cp);
        let slice_comment = if sliced.is_some() { format!("the 2-D slice of `{}` the tile lies in", t.name.name) } else { String::new() };
        let (view, view_decl, view_comment) = if transposed {
            let base = sliced.clone().unwrap_or_else(|| format!("m{}", t.name.name));
            (format!("m{}_t", t.name.name),
             format!("make_tensor({base}.data(), select<1, 0>({base}.layout()))"),
             format!("{}`{}` with its dims swapped: CuTe's ({}, K) operand order",
                if sliced.is_some() { format!("{slice_comment}, ") } else { String::new() },
                t.name.name, if c.plan.mmas.values().any(|m| m.a == cp.buffer) { "M" } else { "N" }))
        } else if let Some(slice) = sliced {
            (format!("m{}_tile", t.name.name), slice, slice_comment)
        } else {
            (format!("m{}", t.name.name), String::new(), String::new())
        };
        let coords: Vec<String> = cp.cute_dims.iter().map(|d| {
            let e = &cp.tile_coords[*d];
            match (var, &e.kind) {
                (Some(v), ExprKind::Name(n)) if n == v => "_".to_string(),
                _ => self.conv.expr(e, &PlainEnv),
            }
        }).collect();
        let layout = &c.plan.shared[&cp.buffer];
        let active = cp.active_threads();
        let b = &buf.name.name;
        let (tma_view_decl, tma_slice) = match &cp.tma {
            Some(load) => {
                let modes: Vec<String> = load.tensor_modes.iter().map(|m| m.to_string()).collect();
                let mut idx = vec!["_".to_string(), "_".to_string()];
                idx.extend(cp.fixed.iter().map(|(_, e)| self.conv.expr(e, &PlainEnv)));
                (format!("tma_{b}.get_tma_tensor(shape(select<{}>(m{}.layout())))", modes.join(", "), t.name.name),
                 if cp.fixed.is_empty() { format!("m{key}_tma") } else { format!("m{key}_tma({})", idx.join(", ")) })
            }
            None => (String::new(), String::new()),
        };
        Some(ProducerCtx {
            line: c.line(s.span),
            text: c.file.snippet(s.span).to_string(),
            copy_type: format!("G2SCopy{}", upper_first(&buf.name.name)),
            copy_var: format!("g2s_copy_{key}"),
            thr: format!("g2s_thr_{key}"),
            view,
            view_decl,
            view_comment,
            tile_shape: static_extents(c, cp.buffer, &cp.cute_dims).join(", "),
            coord: coords.join(", "),
            g: format!("g{key}"),
            id: format!("id{key}"),
            tg: format!("t{key}g{key}"),
            ts: format!("t{key}s{key}"),
            tc: format!("t{key}c{key}"),
            smem: format!("s{}", buf.name.name),
            pipelined: layout.staged,
            active: if active < c.spec.threads.0 && cp.tma.is_none() { active } else { 0 },
            ind: if active < c.spec.threads.0 && cp.tma.is_none() { "  ".into() } else { String::new() },
            tma: cp.tma.is_some(),
            tma_var: format!("tma_{b}"),
            tma_view: format!("m{key}_tma"),
            tma_view_decl,
            tma_slice,
            tma_thr: format!("tma_thr_{key}"),
            barrier: full_barrier(b),
            tma_bytes: format!("kTmaBytes{}", upper_first(b)),
            odd_rows: if cp.odd_rows { self.odd_rows_copy(cp) } else { Vec::new() },
            odd_pad: if cp.odd_rows { "  ".into() } else { String::new() },
        })
    }

    /// The odd-rows instantiation's copy of a tile of 16-bit rows that may start mid-word
    /// (`CopyPlan::odd_rows`), inside `load_tile(tile, stage)`: the `cp_async_rows_from_words`
    /// helper moves each row from the word holding its first element; the readers add the
    /// row's parity to the column.
    fn odd_rows_copy(&self, cp: &crate::layout::CopyPlan) -> Vec<String> {
        let c = self.c;
        let Some(t) = cp.tensor else { return Vec::new() };
        let (tensor, buf) = (&c.spec.tensors[t], &c.spec.buffers[cp.buffer]);
        let rows = self.conv.expr(&buf.shape[0], &PlainEnv);
        let cols = format!("({})", self.conv.expr(&buf.shape[1], &PlainEnv));
        let row_tile = self.conv.expr(&cp.tile_coords[0], &PlainEnv);
        let (tn, bn) = (&tensor.name.name, &buf.name.name);
        vec![
            format!("// An odd number of `{tn}` per row: rows start mid-word every other row (see the helper)."),
            format!("cp_async_rows_from_words<kThreads>(s{bn}(_, _, stage), {tn}, int64_t({row_tile}) * {rows}, {}, {}, int64_t(tile) * {cols}, tid);",
                tensor.shape[0].text(), tensor.shape[1].text()),
        ]
    }

    pub(super) fn gemm_step(&mut self, s: &Stmt, stage: Option<&str>) -> Option<GemmCtx> {
        let c = self.c;
        let m = c.plan.mmas.get(&s.id)?;
        let sfx = mma_suffix(c, s.id);
        let (a, b) = (operand_key(c, s.id, m.a), operand_key(c, s.id, m.b));
        let stage_of = |buf: usize| {
            if c.plan.shared.get(&buf).is_some_and(|l| l.staged) { format!(", {}", stage.unwrap_or("0")) } else { String::new() }
        };
        Some(GemmCtx {
            line: c.line(s.span),
            text: c.file.snippet(s.span).to_string(),
            tiled_mma: format!("tiled_mma{sfx}"),
            thr_mma: format!("thr_mma{sfx}"),
            acc: c.spec.buffers[m.c].name.name.clone(),
            frag_a: super::super::context::a_fragment(c, s.id, m),
            frag_b: format!("tCr{b}"),
            src_a: format!("tXs{a}"),
            src_b: format!("tXs{b}"),
            dst_a: format!("tXr{a}"),
            dst_b: format!("tXr{b}"),
            s2r_copy_a: format!("s2r_copy_{a}"),
            s2r_copy_b: format!("s2r_copy_{b}"),
            stage_a: stage_of(m.a),
            stage_b: stage_of(m.b),
            k_blocks: m.k_blocks,
            a_in_registers: m.a_in_registers,
            loads_a: m.loads_a(),
            a_note: if m.a_in_registers { "A is already in registers.".into() } else { super::super::context::a_reuse_note(c, m) },
            wgmma: m.wgmma.is_some(),
            packed_b: self.packed_b(s.id, stage),
        })
    }

    /// The fused dequant feeding gemm `gemm`'s B, if any.
    fn packed_b(&self, gemm: StmtId, stage: Option<&str>) -> Option<PackedBCtx> {
        let c = self.c;
        let (&dq, plan) = c.plan.dequants.iter().find(|(_, d)| d.fused_into == Some(gemm))?;
        let s = c.spec.stmt(dq)?;
        let StmtKind::Dequant { src, scales, zero, order, .. } = &s.kind else { return None };
        let scale_elem = element_alias(&scales.name);
        let m = c.plan.mmas.get(&gemm)?;
        let at = |name: &str, idx: &str| shared_at(c, name, idx, stage);
        let kb_per_scale = plan.group / 16;
        let scale_col = if plan.group == plan.words_per_row * 8 { "0".to_string() } else { format!("k_block / {kb_per_scale}") };
        Some(PackedBCtx {
            line: c.line(s.span),
            text: c.file.snippet(s.span).to_string(),
            why: plan.why.clone(),
            b_shape: static_extents(c, m.b, &[m.b_dims.0, m.b_dims.1]).join(", "),
            coords: format!("tCc{}", c.spec.buffers[m.b].name.name),
            words: format!("*reinterpret_cast<uint4 const*>(&{})", at(&src.name, "b_row, 2 * k_block")),
            scale: at(&scales.name, &format!("b_row, {scale_col}{}", odd_rows_shift(c, &scales.name, "b_row"))),
            neg_bias: neg_bias_expr(zero, &scale_elem, |zeros| at(&zeros.name, &format!("b_row, {scale_col}{}", odd_rows_shift(c, &zeros.name, "b_row")))),
            neg_bias_why: match zero {
                ZeroPoint::Constant(z, _) => format!("the zero point {z}, as dequant_int4x2 takes it"),
                ZeroPoint::PerGroup(zeros) => format!("the row's zero point from `{}`, as dequant_int4x2 takes it", zeros.name),
            },
            scale_elem,
            order: order.name(),
        })
    }

    pub(super) fn pipelined(&mut self, s: &Stmt, depth: usize) {
        let StmtKind::Loop { var, count, stages, body, .. } = &s.kind else { return };
        let Some(plan) = self.c.plan.pipelines.get(&s.id) else { return };
        let mut producers = Vec::new();
        for p in &plan.producers {
            if let Some(pc) = self.producer(*p, Some(&var.name)) {
                producers.push(pc);
            }
        }
        let stages_text = stages.as_ref().map(|e| self.c.file.snippet(e.span).to_string()).unwrap_or_else(|| "1".into());
        let multistage = plan.mode == PipelineMode::Multistage;
        let overlap = self.c.plan.overlap.as_ref().filter(|o| o.pipeline == s.id);
        let tma = producers.iter().any(|p| p.tma);
        let tma_bytes = producers.iter().map(|p| p.tma_bytes.clone()).collect::<Vec<_>>().join(" + ");
        let tma_waits = if tma {
            plan.covers.iter().filter_map(|id| {
                let cp = self.c.plan.copies.get(id)?;
                let b = &self.c.spec.buffers[cp.buffer].name.name;
                let line = self.c.spec.stmt(*id).map(|s| self.c.line(s.span)).unwrap_or(0);
                Some(format!("wait_barrier({}, 0);  // `{b}` (spec {line}, issued before the loop) has landed", full_barrier(b)))
            }).collect()
        } else {
            Vec::new()
        };
        self.items.push(BodyItem::PipelineOpen(Box::new(PipelineCtx {
            pad: pad(depth),
            line: self.c.line(s.span),
            text: self.text(s),
            why: plan.why.clone(),
            var: var.name.clone(),
            count: self.conv.expr(count, &PlainEnv),
            stages: stages_text.clone(),
            multistage,
            producers,
            tma,
            barrier: full_barrier(&var.name),
            empty: empty_barrier(&var.name),
            tma_bytes,
            tma_waits,
            overlap: overlap.is_some(),
            in_flight: plan.mma_in_flight,
        })));
        if let Some(o) = overlap {
            self.overlapped(s, o, depth);
            return;
        }
        // The loop body: every statement but the producers, on the stage just landed.
        let outer = self.stage.replace("read_stage");
        self.in_flight = plan.mma_in_flight;
        for st in body {
            if plan.consumers.contains(&st.id) {
                self.stmt(st, depth + 2);
            }
        }
        self.in_flight = false;
        self.stage = outer;
        let acc = plan.consumers.first().and_then(|id| self.c.plan.mmas.get(id)).map(|m| self.c.spec.buffers[m.c].name.name.clone()).unwrap_or_default();
        let tma = plan.producers.iter().any(|p| self.c.plan.copies.get(p).is_some_and(|cp| cp.tma.is_some()));
        let sync_after = !plan.covers.is_empty() && self.shared_used_after(s.id);
        self.items.push(BodyItem::PipelineClose { pad: pad(depth), var: var.name.clone(), stages: stages_text, multistage, sync_after, tma, empty: empty_barrier(&var.name), in_flight: plan.mma_in_flight, acc });
    }

    /// The body of an overlapped pipeline (`layout::MmaOverlap`): the two gemms as issuing
    /// lambdas, the statements between them as two lambdas (while the previous tile's second
    /// gemm runs, and after it), then the loop that calls them.
    pub(super) fn overlapped(&mut self, s: &Stmt, o: &crate::layout::MmaOverlap, depth: usize) {
        let c = self.c;
        let StmtKind::Loop { var, body, stages, count, .. } = &s.kind else { return };
        let may_be_empty = crate::check::lower_bound(count, &c.info.symbols).is_none_or(|n| n < 1);
        let line = |id: StmtId| c.spec.stmt(id).map_or(0, |s| c.line(s.span));
        let text = |id: StmtId| c.spec.stmt(id).map_or(String::new(), |s| c.file.snippet(s.span).to_string());
        let acc = |id: StmtId| c.plan.mmas.get(&id).map_or(String::new(), |m| c.spec.buffers[m.c].name.name.clone());
        let (s_acc, o_acc) = (acc(o.first), acc(o.deferred));
        let inner = depth + 1;
        for (id, zero) in [(o.first, true), (o.deferred, false)] {
            let Some(g) = c.spec.stmt(id) else { return };
            if let Some(step) = self.gemm_step(g, Some("stage")) {
                self.items.push(BodyItem::GemmIssue {
                    pad: pad(inner), line: line(id), text: text(id), name: format!("issue_{}", step.acc), step, zero,
                    zero_line: line(o.clear), zero_text: text(o.clear),
                });
            }
        }
        let span = |ids: &[StmtId]| match (ids.first(), ids.last()) {
            (Some(a), Some(b)) if a != b => format!("spec {}-{}", line(*a), line(*b)),
            (Some(a), _) => format!("spec {}", line(*a)),
            _ => String::new(),
        };
        let outer = self.stage.replace("read_stage");
        let v = var.name.clone();
        self.items.push(BodyItem::LambdaOpen {
            pad: pad(inner), name: "during_mma".into(), param: v.clone(),
            comment: vec![format!("{}: tile {v}'s work on `{s_acc}`, which runs while tile {v} - 1's gemm (spec {}) is in flight.", span(&o.during), line(o.deferred))],
        });
        for st in body.iter().filter(|b| o.during.contains(&b.id)) {
            match &st.kind {
                StmtKind::Parallel { vars, body: assigns } if assigns.iter().any(|a| o.moved.contains(&a.id)) => {
                    let kept: Vec<Stmt> = assigns.iter().filter(|a| !o.moved.contains(&a.id)).cloned().collect();
                    if !kept.is_empty() {
                        self.parallel(st, vars, &kept, inner + 1);
                    }
                }
                _ => self.stmt(st, inner + 1),
            }
        }
        self.items.push(BodyItem::LambdaClose { pad: pad(inner) });
        let lines = |ids: &[StmtId]| ids.iter().map(|i| format!("spec {}", line(*i))).collect::<Vec<_>>().join(", ");
        let operand = c.plan.mmas.get(&o.deferred).map_or(String::new(), |m| c.spec.buffers[m.a].name.name.clone());
        let moved = if o.moved.is_empty() { String::new() } else { format!(", then the assignment to `{operand}` at {}, moved here", lines(&o.moved)) };
        self.items.push(BodyItem::LambdaOpen {
            pad: pad(inner), name: "after_mma".into(), param: if o.after_reads_var { v.clone() } else { String::new() },
            comment: vec![format!("{}{moved}: what waits for tile {v} - 1's gemm (spec {}), which reads `{operand}` and accumulates into `{o_acc}`.",
                lines(&o.after), line(o.deferred))],
        });
        for st in body.iter().filter(|b| o.after.contains(&b.id)) {
            self.stmt(st, inner + 1);
        }
        for st in body.iter().filter(|b| o.during.contains(&b.id)) {
            if let StmtKind::Parallel { vars, body: assigns } = &st.kind {
                let moved: Vec<Stmt> = assigns.iter().filter(|a| o.moved.contains(&a.id)).cloned().collect();
                if !moved.is_empty() {
                    self.parallel(st, vars, &moved, inner + 1);
                }
            }
        }
        self.items.push(BodyItem::LambdaClose { pad: pad(inner) });
        self.stage = outer;
        self.items.push(BodyItem::OverlapLoop(Box::new(OverlapCtx {
            pad: pad(depth),
            var: v.clone(),
            stages: stages.as_ref().map(|e| c.file.snippet(e.span).to_string()).unwrap_or_else(|| "1".into()),
            barrier: full_barrier(&v),
            empty: empty_barrier(&v),
            issue_first: format!("issue_{s_acc}"),
            issue_deferred: format!("issue_{o_acc}"),
            during: "during_mma".into(),
            after: "after_mma".into(),
            after_arg: o.after_reads_var,
            first_line: line(o.first),
            deferred_line: line(o.deferred),
            s_acc,
            o_acc,
            may_be_empty,
            edge_pad: pad(depth) + if may_be_empty { "  " } else { "" },
        })));
    }
}
