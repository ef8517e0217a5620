//! Block rasterization: the order in which a GEMM's output tiles are given to blocks.
//!
//! Requires the copy plans (which global tile each shared operand is filled from). With the
//! hardware's order (`bx` fastest) the blocks in flight at once cover one or two rows of
//! output tiles: between them they read every column panel of B, which for a wide B is far
//! more than L2 holds, so each panel comes from device memory once per row of tiles.
//! Grouped rasterization hands out `RASTER_GROUP` rows of tiles at a time, walking down the
//! columns inside the group: the blocks in flight then read a few panels of each operand,
//! and those stay in L2 while the group's other blocks read them. A third grid dimension that
//! both operands' tiles step along (a batch index on z, which the hardware walks last) keeps
//! its place: the groups form inside each z slice. Guarantees: the mapping is a bijection of
//! the launch grid onto the spec's block indices, so the kernel computes the same tiles, in
//! another order.

use super::{CopyKind, Infer};

/// Rows of tiles per group. Measured on the H200 with the sm80 GEMM (128x128 tiles, two
/// blocks per SM): 8 rows gained 4% at 8192³ and 16% at 4096x28672x8192 and lost nothing at
/// 4096³, where 16 and 32 rows lost 8% (notes/PERF.md).
pub const RASTER_GROUP: i64 = 8;

/// Grouped rasterization of a GEMM's two tile dimensions (the grid's x and y).
#[derive(Clone, Debug, PartialEq)]
pub struct RasterPlan {
    /// The grid dimension (0 = x, 1 = y) of the rows of tiles, which the groups split: the
    /// one the gemm's A operand is indexed by.
    pub group_dim: usize,
    /// The other grid dimension, walked inside a group: the one B is indexed by.
    pub walk_dim: usize,
    /// Rows of tiles per group.
    pub group: i64,
    /// Why.
    pub why: String,
}

impl Infer<'_> {
    /// Plans grouped rasterization where the grid is a GEMM's two tile dimensions, or says
    /// why the hardware's order stays (`Plan::raster_reason`).
    pub(super) fn rasterization(&mut self) {
        match self.raster_fit() {
            Ok(p) => self.plan.raster = Some(p),
            Err(why) => self.plan.raster_reason = Some(why),
        }
    }

    fn raster_fit(&self) -> Result<RasterPlan, String> {
        let spec = self.spec;
        if !(2..=3).contains(&spec.grid.len()) {
            return Err(format!("the grid has {} dimension(s); tiles are regrouped only for the two tile dimensions of a GEMM", spec.grid.len()));
        }
        if let Some(g) = spec.grid.iter().find(|g| g.descending) {
            return Err(format!("`{}` runs in descending order, which the spec asked for", g.var.name));
        }
        let vars: Vec<&str> = spec.grid.iter().map(|g| g.var.name.as_str()).collect();
        // A gemm among a pipelined loop's consumers whose two shared operands are filled by
        // the loop's producers from global tiles that step along one grid variable each of
        // their own; a variable both tiles step along (a batch index) keeps its place.
        let mut found = None;
        for p in self.plan.pipelines.values() {
            // The grid variables the global tile copied into `buffer` steps along, and the
            // tensor it reads.
            let along = |buffer: usize| -> Option<(Vec<usize>, String)> {
                let cp = p.producers.iter().filter_map(|id| self.plan.copies.get(id))
                    .find(|cp| cp.buffer == buffer && cp.kind == CopyKind::GlobalToShared)?;
                let used: Vec<usize> = (0..vars.len()).filter(|&v| cp.tile_coords.iter().any(|e| e.mentions(vars[v]))).collect();
                Some((used, spec.tensors[cp.tensor?].name.name.clone()))
            };
            found = p.consumers.iter().filter_map(|id| self.plan.mmas.get(id)).find_map(|m| {
                let ((ua, ta), (ub, tb)) = (along(m.a)?, along(m.b)?);
                let only = |mine: &[usize], other: &[usize]| -> Option<usize> {
                    let own: Vec<usize> = mine.iter().copied().filter(|v| !other.contains(v)).collect();
                    (own.len() == 1).then(|| own[0])
                };
                Some((only(&ua, &ub)?, only(&ub, &ua)?, ta, tb))
            });
            if found.is_some() {
                break;
            }
        }
        let Some((group_dim, walk_dim, a, b)) = found else {
            return Err("no pipelined gemm reads two shared tiles whose global tiles step along different grid dimensions".into());
        };
        if group_dim.max(walk_dim) > 1 {
            return Err(format!(
                "the gemm's tile dimensions `{}` and `{}` include the grid's z, which the hardware walks last; tiles are regrouped in x and y only",
                vars[group_dim], vars[walk_dim]));
        }
        let (gv, wv) = (vars[group_dim], vars[walk_dim]);
        let slice = vars.get(2).map(|z| format!(" (inside each `{z}` slice)")).unwrap_or_default();
        Ok(RasterPlan {
            group_dim,
            walk_dim,
            group: RASTER_GROUP,
            why: format!(
                "blocks take the tiles in groups of {RASTER_GROUP} `{gv}` rows{slice}, walking `{wv}` inside a group: the blocks in flight at once read {RASTER_GROUP} panels of `{a}` and a few of `{b}`, which stay in L2 for the group's other blocks, instead of every panel of `{b}`"),
        })
    }
}
