//! The tile lowering's copies: global ↔ LDS ↔ fragments, vectorised where the extents prove
//! each vector wholly inside or wholly outside the tensor.

use super::*;

impl<'a> Lower<'a> {
    pub(super) fn copy(&mut self, s: &Stmt, src: &Operand, dst: &Operand) {
        let (sb, db) = (self.buffer(&src.name), self.buffer(&dst.name));
        let scope = |b: Option<usize>| b.map(|b| self.c.spec.buffers[b].scope.0);
        match (scope(sb), scope(db)) {
            // Global → LDS: element-wise, zero past the tensor's edges.
            (None, Some(Scope::Shared)) => {
                let (Some(t), Some(b)) = (self.tensor(&src.name), db) else { return };
                let v = self.vector(s);
                let (tn, dt) = (self.c.spec.tensors[t].name.name.clone(), self.c.spec.buffers[b].dtype.0);
                if v > 1 {
                    self.comment(s, &format!("every thread a strided share of the tile, {v} elements ({} bytes) per access; vectors past the tensor's edges read as zero", v * dt.bytes() as i64));
                    self.sync_for(&[], &[b]);
                    let elem = format!("Element{}", upper_first(&self.c.spec.buffers[b].name.name));
                    self.for_each_vector(b, v, |l, co| {
                        let (lin, bounds) = l.tile_address(t, src, co);
                        l.line(format!("store_vec<{v}>(&{}, ({bounds}) ? load_vec<{v}>(&{tn}[{lin}]) : Vec<{elem}, {v}>{{}});", l.lds_ref(b, co)));
                    });
                    return;
                }
                self.comment(s, "every thread a strided share of the tile; elements past the tensor's edges read as zero");
                self.sync_for(&[], &[b]);
                let same = self.c.spec.tensors[t].dtype.0 == dt;
                self.for_each_shared(b, |l, co| {
                    let (lin, bounds) = l.tile_address(t, src, co);
                    let v = if same { format!("{tn}[{lin}]") } else { from_float(dt, &to_float(l.c.spec.tensors[t].dtype.0, &format!("{tn}[{lin}]"))) };
                    l.line(format!("{} = ({bounds}) ? {v} : {};", l.lds_ref(b, co), zero(dt)));
                });
            }
            // LDS → global.
            (Some(Scope::Shared), None) => {
                let (Some(b), Some(t)) = (sb, self.tensor(&dst.name)) else { return };
                let v = self.vector(s);
                let tn = self.c.spec.tensors[t].name.name.clone();
                let (st, tt) = (self.c.spec.buffers[b].dtype.0, self.c.spec.tensors[t].dtype.0);
                if v > 1 {
                    self.comment(s, &format!("every thread a strided share of the tile, {v} elements per access; vectors past the tensor's edges are not stored"));
                    self.sync_for(&[b], &[]);
                    self.for_each_vector(b, v, |l, co| {
                        let (lin, bounds) = l.tile_address(t, dst, co);
                        l.open(format!("if ({bounds})"));
                        l.line(format!("store_vec<{v}>(&{tn}[{lin}], load_vec<{v}>(&{}));", l.lds_ref(b, co)));
                        l.close();
                    });
                    return;
                }
                self.comment(s, "every thread a strided share of the tile; elements past the tensor's edges are not stored");
                self.sync_for(&[b], &[]);
                self.for_each_shared(b, |l, co| {
                    let (lin, bounds) = l.tile_address(t, dst, co);
                    let v = if st == tt { l.lds_ref(b, co) } else { from_float(tt, &to_float(st, &l.lds_ref(b, co))) };
                    l.open(format!("if ({bounds})"));
                    l.line(format!("{tn}[{lin}] = {v};"));
                    l.close();
                });
            }
            // LDS → LDS.
            (Some(Scope::Shared), Some(Scope::Shared)) => {
                let (Some(from), Some(to)) = (sb, db) else { return };
                self.comment(s, "every thread a strided share of the tile");
                self.sync_for(&[from], &[to]);
                let (ft, tt) = (self.c.spec.buffers[from].dtype.0, self.c.spec.buffers[to].dtype.0);
                self.for_each_shared(to, |l, co| {
                    let v = if ft == tt { l.lds_ref(from, co) } else { from_float(tt, &to_float(ft, &l.lds_ref(from, co))) };
                    l.line(format!("{} = {v};", l.lds_ref(to, co)));
                });
            }
            // Fragment → LDS or global: each lane stores its own registers.
            (Some(Scope::Fragment), to) => {
                let Some(f) = sb else { return };
                self.whole(f);
                let g = self.grid(f);
                let (n, ft) = (self.name(f), self.c.spec.buffers[f].dtype.0);
                let (row, col) = self.coords(f);
                let only_group = if g.ks > 1 { format!("if ({n}_group == 0) ") } else { String::new() };
                match to {
                    Some(Scope::Shared) => {
                        let Some(d) = db else { return };
                        self.comment(s, "each lane stores its own registers");
                        self.sync_for(&[], &[d]);
                        let dt = self.c.spec.buffers[d].dtype.0;
                        let dn = self.name(d);
                        if !only_group.is_empty() {
                            self.open(only_group.trim_end());
                        }
                        self.for_each_element(g, |l| l.line(format!("{dn}[{row}][{col}] = {};", from_float(dt, &to_float(ft, &format!("{n}[bi][bj][r]"))))));
                        if !only_group.is_empty() {
                            self.close();
                        }
                    }
                    None => {
                        let Some(t) = self.tensor(&dst.name) else { return };
                        let tn = self.c.spec.tensors[t].name.name.clone();
                        let tt = self.c.spec.tensors[t].dtype.0;
                        if !only_group.is_empty() {
                            self.open(only_group.trim_end());
                        }
                        if self.vector(s) == 4 {
                            // A lane's 4 columns of a block are contiguous in the tensor: one store.
                            self.comment(s, "each lane stores its 4 columns of a block as one vector; vectors past the tensor's edges are not stored");
                            let elem = format!("Element{}", upper_first(&self.c.spec.tensors[t].name.name));
                            let col0 = format!("{n}_col + bj * 16 + lane_col");
                            let values = (0..4).map(|i| from_float(tt, &to_float(ft, &format!("{n}[bi][bj][{i}]")))).collect::<Vec<_>>().join(", ");
                            self.line("#pragma unroll");
                            self.open(format!("for (int bi = 0; bi < {}; ++bi)", g.row_blocks()));
                            self.line("#pragma unroll");
                            self.open(format!("for (int bj = 0; bj < {}; ++bj)", g.col_blocks()));
                            let (lin, bounds) = self.tile_address_named(t, dst, &[row.clone(), col0]);
                            self.open(format!("if ({bounds})"));
                            self.line(format!("store_vec<4>(&{tn}[{lin}], Vec<{elem}, 4>{{{values}}});"));
                            self.close();
                            self.close();
                            self.close();
                            if !only_group.is_empty() {
                                self.close();
                            }
                            return;
                        }
                        self.comment(s, "each lane stores its own registers; elements past the tensor's edges are not stored");
                        self.for_each_element(g, |l| {
                            let (lin, bounds) = l.tile_address_named(t, dst, &[row.clone(), col.clone()]);
                            l.open(format!("if ({bounds})"));
                            l.line(format!("{tn}[{lin}] = {};", from_float(tt, &to_float(ft, &format!("{n}[bi][bj][r]")))));
                            l.close();
                        });
                        if !only_group.is_empty() {
                            self.close();
                        }
                    }
                    Some(Scope::Fragment) => self.unsupported(s, "a copy between fragments"),
                }
            }
            _ => self.unsupported(s, "this copy"),
        }
    }
}
