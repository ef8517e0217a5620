//! Lowers the spec body to a flat list of template items, one per emitted block of code.

use super::context::{element_alias, static_extents, PlainEnv};
use crate::ast::*;
use crate::back::conv::{Conv, Env};
use crate::check::Symbol;
use crate::diag::Diagnostic;
use crate::layout::{CopyKind, FragmentLayout, PipelineMode};
use crate::Compiled;
use serde::Serialize;

/// One block of emitted code.
#[derive(Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum BodyItem {
    Clear { pad: String, line: usize, text: String, target: String },
    Fill { pad: String, line: usize, text: String, target: String, value: String },
    Open { pad: String, line: usize, text: String, header: String },
    Else { pad: String },
    Close { pad: String },
    Pipelined(Box<PipelineCtx>),
    CopyToShared { pad: String, line: usize, text: String, producer: ProducerCtx },
    Gemm { pad: String, line: usize, text: String, step: GemmCtx },
    Parallel { pad: String, line: usize, text: String, thr_mma: String, frag: String, coords: String, shape: String, var_decls: Vec<String>, assigns: Vec<AssignCtx> },
    Store(Box<StoreItem>),
}

#[derive(Serialize)]
pub struct PipelineCtx {
    pub pad: String,
    pub line: usize,
    pub text: String,
    pub why: String,
    pub var: String,
    pub count: String,
    pub stages: String,
    pub multistage: bool,
    pub producers: Vec<ProducerCtx>,
    pub gemms: Vec<GemmCtx>,
}

#[derive(Serialize)]
pub struct ProducerCtx {
    pub line: usize,
    pub text: String,
    pub copy_type: String,
    pub copy_var: String,
    pub thr: String,
    pub view: String,
    pub view_decl: String,
    pub view_comment: String,
    pub tile_shape: String,
    pub coord: String,
    pub g: String,
    pub id: String,
    pub tg: String,
    pub ts: String,
    pub tc: String,
    pub smem: String,
    pub pipelined: bool,
}

#[derive(Serialize)]
pub struct GemmCtx {
    pub line: usize,
    pub text: String,
    pub tiled_mma: String,
    pub acc: String,
    pub frag_a: String,
    pub frag_b: String,
    pub src_a: String,
    pub src_b: String,
    pub dst_a: String,
    pub dst_b: String,
    pub s2r_copy_a: String,
    pub s2r_copy_b: String,
    pub stage_a: String,
    pub stage_b: String,
    pub k_blocks: i64,
}

#[derive(Serialize)]
pub struct AssignCtx {
    pub line: usize,
    pub text: String,
    pub code: String,
}

#[derive(Serialize)]
pub struct StoreItem {
    pub pad: String,
    pub line: usize,
    pub text: String,
    pub why: String,
    pub key: String,
    pub acc: String,
    pub acc_converted: String,
    pub elem: String,
    pub tiled_mma: String,
    pub view: String,
    pub tile_shape: String,
    pub coord: String,
}

struct Lower<'a> {
    c: &'a Compiled,
    conv: Conv<'a>,
    items: Vec<BodyItem>,
    errors: &'a mut Vec<Diagnostic>,
}

pub fn build(c: &Compiled, errors: &mut Vec<Diagnostic>) -> Vec<BodyItem> {
    let mut l = Lower { c, conv: Conv { spec: &c.spec, info: &c.info }, items: Vec::new(), errors };
    l.block(&c.spec.body, 1);
    l.items
}

fn pad(depth: usize) -> String {
    "  ".repeat(depth)
}

/// Inside `parallel` over an MMA fragment, element (i, j) of any fragment sharing the
/// layout is register `e` of that fragment.
struct FragmentEnv<'a> {
    c: &'a Compiled,
    vars: &'a [Ident],
}

impl Env for FragmentEnv<'_> {
    fn buffer_element(&self, buffer: usize, idx: &[Expr]) -> Option<String> {
        let plain = idx.len() == self.vars.len() && idx.iter().zip(self.vars).all(|(e, v)| matches!(&e.kind, ExprKind::Name(n) if *n == v.name));
        if !plain {
            return None;
        }
        let b = &self.c.spec.buffers[buffer];
        Some(if b.dtype.0 == DType::F32 { format!("{}(e)", b.name.name) } else { format!("static_cast<float>({}(e))", b.name.name) })
    }
}

impl Lower<'_> {
    fn text(&self, s: &Stmt) -> String {
        self.c.file.snippet(s.span).to_string()
    }

    fn unsupported(&mut self, s: &Stmt, what: &str) {
        self.errors.push(Diagnostic::error(s.span, format!("the sm80 backend does not lower {what} yet"))
            .hint("see the README's list of supported statements per target"));
    }

    fn block(&mut self, stmts: &[Stmt], depth: usize) {
        for s in stmts {
            self.stmt(s, depth);
        }
    }

    fn stmt(&mut self, s: &Stmt, depth: usize) {
        let line = self.c.line(s.span);
        let text = self.text(s);
        match &s.kind {
            StmtKind::Clear { buf } => self.items.push(BodyItem::Clear { pad: pad(depth), line, text, target: self.fragment_or_shared(buf) }),
            StmtKind::Fill { buf, value } => {
                let v = self.conv.expr(value, &PlainEnv);
                self.items.push(BodyItem::Fill { pad: pad(depth), line, text, target: self.fragment_or_shared(buf), value: v });
            }
            StmtKind::Loop { kind: LoopKind::Pipelined, .. } => self.pipelined(s, depth),
            StmtKind::Loop { kind, var, count, body, .. } => {
                let n = self.conv.expr(count, &PlainEnv);
                let unroll = if *kind == LoopKind::Unroll { "CUTE_UNROLL\n".to_string() + &pad(depth) } else { String::new() };
                self.items.push(BodyItem::Open { pad: pad(depth), line, text, header: format!("{unroll}for (int {v} = 0; {v} < {n}; ++{v})", v = var.name) });
                self.block(body, depth + 1);
                self.items.push(BodyItem::Close { pad: pad(depth) });
            }
            StmtKind::If { cond, then_body, else_body } => {
                let cnd = self.conv.expr(cond, &PlainEnv);
                self.items.push(BodyItem::Open { pad: pad(depth), line, text, header: format!("if ({cnd})") });
                self.block(then_body, depth + 1);
                if !else_body.is_empty() {
                    self.items.push(BodyItem::Else { pad: pad(depth) });
                    self.block(else_body, depth + 1);
                }
                self.items.push(BodyItem::Close { pad: pad(depth) });
            }
            StmtKind::Parallel { vars, body } => self.parallel(s, vars, body, depth),
            StmtKind::Copy { .. } => match self.c.plan.copies.get(&s.id).map(|c| c.kind) {
                Some(CopyKind::GlobalToShared) => {
                    if let Some(producer) = self.producer(s.id, None) {
                        self.items.push(BodyItem::CopyToShared { pad: pad(depth), line, text, producer });
                    }
                }
                Some(CopyKind::AccumulatorToGlobal) => self.store(s, depth),
                None => {}
            },
            StmtKind::Gemm { .. } => {
                if let Some(step) = self.gemm_step(s, None) {
                    self.items.push(BodyItem::Gemm { pad: pad(depth), line, text, step });
                }
            }
            StmtKind::Assign { .. } => self.unsupported(s, "assignments outside parallel blocks"),
        }
    }

    fn fragment_or_shared(&self, buf: &Ident) -> String {
        match self.c.info.symbols.get(&buf.name) {
            Some(Symbol::Buffer(b)) if self.c.spec.buffers[*b].scope.0 == Scope::Shared => format!("s{}", buf.name),
            _ => buf.name.clone(),
        }
    }

    fn producer(&mut self, id: StmtId, var: Option<&str>) -> Option<ProducerCtx> {
        let c = self.c;
        let cp = c.plan.copies.get(&id)?;
        let s = c.spec.stmt(id)?;
        let t = &c.spec.tensors[cp.tensor];
        let buf = &c.spec.buffers[cp.buffer];
        let key = t.name.name.clone();
        let transposed = cp.cute_dims == [1, 0];
        let (view, view_decl, view_comment) = if transposed {
            (format!("m{}_t", t.name.name),
             format!("make_tensor(m{n}.data(), select<1, 0>(m{n}.layout()))", n = t.name.name),
             format!("`{}` with its dims swapped: CuTe's ({}, K) operand order", t.name.name, if c.plan.mmas.values().any(|m| m.a == cp.buffer) { "M" } else { "N" }))
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
        Some(ProducerCtx {
            line: c.line(s.span),
            text: c.file.snippet(s.span).to_string(),
            copy_type: format!("G2SCopy{}", upper(&buf.name.name)),
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
        })
    }

    fn gemm_step(&mut self, s: &Stmt, stage: Option<&str>) -> Option<GemmCtx> {
        let c = self.c;
        let m = c.plan.mmas.get(&s.id)?;
        let idx = c.plan.mmas.keys().position(|k| *k == s.id).unwrap_or(0);
        let sfx = if c.plan.mmas.len() == 1 { String::new() } else { format!("{idx}") };
        let (a, b) = (&c.spec.buffers[m.a].name.name, &c.spec.buffers[m.b].name.name);
        let stage_of = |buf: usize| {
            if c.plan.shared[&buf].staged { format!(", {}", stage.unwrap_or("0")) } else { String::new() }
        };
        Some(GemmCtx {
            line: c.line(s.span),
            text: c.file.snippet(s.span).to_string(),
            tiled_mma: format!("tiled_mma{sfx}"),
            acc: c.spec.buffers[m.c].name.name.clone(),
            frag_a: format!("tCr{a}"),
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
        })
    }

    fn pipelined(&mut self, s: &Stmt, depth: usize) {
        let StmtKind::Loop { var, count, stages, body, .. } = &s.kind else { return };
        let Some(plan) = self.c.plan.pipelines.get(&s.id) else { return };
        let mut producers = Vec::new();
        for p in &plan.producers {
            if let Some(pc) = self.producer(*p, Some(&var.name)) {
                producers.push(pc);
            }
        }
        let mut gemms = Vec::new();
        for st in body {
            if plan.consumers.contains(&st.id) {
                match &st.kind {
                    StmtKind::Gemm { .. } => {
                        if let Some(g) = self.gemm_step(st, Some("read_stage")) {
                            gemms.push(g);
                        }
                    }
                    _ => self.unsupported(st, "statements other than gemm inside a pipelined loop"),
                }
            }
        }
        let stages_text = stages.as_ref().map(|e| self.c.file.snippet(e.span).to_string()).unwrap_or_else(|| "1".into());
        self.items.push(BodyItem::Pipelined(Box::new(PipelineCtx {
            pad: pad(depth),
            line: self.c.line(s.span),
            text: self.text(s),
            why: plan.why.clone(),
            var: var.name.clone(),
            count: self.conv.expr(count, &PlainEnv),
            stages: stages_text,
            multistage: plan.mode == PipelineMode::Multistage,
            producers,
            gemms,
        })));
    }

    fn parallel(&mut self, s: &Stmt, vars: &[Ident], body: &[Stmt], depth: usize) {
        let c = self.c;
        let Some(&domain) = c.info.parallel_domains.get(&s.id) else { return };
        let Some(FragmentLayout::MmaAccumulator { gemm }) = c.plan.fragments.get(&domain) else {
            self.unsupported(s, "parallel blocks over shared buffers or gemm-less fragments");
            return;
        };
        let idx = c.plan.mmas.keys().position(|k| k == gemm).unwrap_or(0);
        let sfx = if c.plan.mmas.len() == 1 { String::new() } else { format!("{idx}") };
        let frag = c.spec.buffers[domain].name.name.clone();
        let env = FragmentEnv { c, vars };
        let mut used = vec![false; vars.len()];
        let mut assigns = Vec::new();
        for st in body {
            let StmtKind::Assign { target, op, value, .. } = &st.kind else { continue };
            mark_used(value, vars, &mut used, &c.info);
            let v = self.conv.expr(value, &env);
            let tb = match c.info.symbols.get(&target.name) {
                Some(Symbol::Buffer(b)) => *b,
                _ => continue,
            };
            let dtype = c.spec.buffers[tb].dtype.0;
            let rhs = if dtype == DType::F32 { v.clone() } else { format!("static_cast<{}>({v})", element_alias(&target.name)) };
            let code = if dtype == DType::F32 || *op == AssignOp::Set {
                format!("{}(e) {} {rhs};", target.name, op.symbol())
            } else {
                // Narrow accumulators: compute in f32, round once.
                format!("{t}(e) = static_cast<{}>(static_cast<float>({t}(e)) {} {v});", element_alias(&target.name), &op.symbol()[..1], t = target.name)
            };
            assigns.push(AssignCtx { line: c.line(st.span), text: c.file.snippet(st.span).to_string(), code });
        }
        let var_decls = vars.iter().enumerate().filter(|(i, _)| used[*i])
            .map(|(i, v)| format!("int const {} = get<{i}>(tCc{frag}(e));", v.name)).collect();
        self.items.push(BodyItem::Parallel {
            pad: pad(depth),
            line: c.line(s.span),
            text: self.text(s),
            thr_mma: format!("thr_mma{sfx}"),
            frag: frag.clone(),
            coords: format!("tCc{frag}"),
            shape: static_extents(c, domain, &[0, 1]).join(", "),
            var_decls,
            assigns,
        });
    }

    fn store(&mut self, s: &Stmt, depth: usize) {
        let c = self.c;
        let Some(cp) = c.plan.copies.get(&s.id) else { return };
        let Some(FragmentLayout::MmaAccumulator { gemm }) = c.plan.fragments.get(&cp.buffer) else { return };
        let idx = c.plan.mmas.keys().position(|k| k == gemm).unwrap_or(0);
        let sfx = if c.plan.mmas.len() == 1 { String::new() } else { format!("{idx}") };
        let t = &c.spec.tensors[cp.tensor];
        let acc = c.spec.buffers[cp.buffer].name.name.clone();
        let coords: Vec<String> = cp.tile_coords.iter().map(|e| self.conv.expr(e, &PlainEnv)).collect();
        self.items.push(BodyItem::Store(Box::new(StoreItem {
            pad: pad(depth),
            line: c.line(s.span),
            text: self.text(s),
            why: cp.why.clone(),
            key: t.name.name.clone(),
            acc: acc.clone(),
            acc_converted: format!("{acc}_{}", t.name.name),
            elem: element_alias(&t.name.name),
            tiled_mma: format!("tiled_mma{sfx}"),
            view: format!("m{}", t.name.name),
            tile_shape: static_extents(c, cp.buffer, &[0, 1]).join(", "),
            coord: coords.join(", "),
        })));
    }
}

fn upper(name: &str) -> String {
    let mut ch = name.chars();
    ch.next().map(|f| f.to_ascii_uppercase().to_string() + ch.as_str()).unwrap_or_default()
}

fn mark_used(e: &Expr, vars: &[Ident], used: &mut [bool], info: &crate::check::Info) {
    match &e.kind {
        ExprKind::Name(n) => {
            if let Some(i) = vars.iter().position(|v| v.name == *n) {
                used[i] = true;
            }
        }
        ExprKind::Index(name, idx) => {
            // Plain reads of fragments at (i, j) need no coordinates; any other index does.
            let buffer = matches!(info.symbols.get(&name.name), Some(Symbol::Buffer(_)));
            let plain = idx.len() == vars.len() && idx.iter().zip(vars).all(|(x, v)| matches!(&x.kind, ExprKind::Name(n) if *n == v.name));
            if !(plain && buffer) {
                for i in idx {
                    mark_used(i, vars, used, info);
                }
            }
        }
        ExprKind::Call(_, args) => args.iter().for_each(|a| mark_used(&a.value, vars, used, info)),
        ExprKind::Unary(_, x) => mark_used(x, vars, used, info),
        ExprKind::Binary(_, a, b) => {
            mark_used(a, vars, used, info);
            mark_used(b, vars, used, info);
        }
        _ => {}
    }
}
