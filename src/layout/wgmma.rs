//! sm90a: gemms of fused programs as warpgroup MMAs (`wgmma.mma_async`).
//!
//! Runs after the sm80-style planning, which fixed accumulator layouts, shared majorness,
//! copies and pipelines. A WGMMA accumulator holds, in each warp of the warpgroup, the same
//! 16 rows and the same m16n8 value pattern as a 4x1 mma.sync arrangement, so row
//! statistics, element-wise blocks, masks and stores keep their meaning; what changes is
//! the MMA (64xNx16 per warpgroup, operands read from shared memory through descriptors or
//! A from registers) and how the shared tiles' layout atoms are spelled (CuTe's GMMA atoms:
//! the same rows and 128-byte swizzle, in a form descriptors can be made from). Either every
//! gemm of the program fits, or none changes and `Plan::mma_sync_reason` says why.

use super::{FragmentLayout, Infer, Wgmma};
use crate::ast::*;

/// The 128-byte GMMA swizzle in 2-byte elements: `Swizzle<3,3,3>` over an 8x64 atom.
const SW128: super::Swizzle = super::Swizzle { bits: 3, base: 3, shift: 3 };

impl Infer<'_> {
    pub(super) fn plan_wgmma(&mut self) {
        match self.wgmma_fit() {
            Ok((gemms, tiles)) => {
                for (id, w) in gemms {
                    let m = self.plan.mmas.get_mut(&id).expect("planned gemm");
                    m.why = format!(
                        "{} issues {} 64x{}x16 warpgroup MMA{} per 16-deep k-block, A {}, B {}-major in shared memory; each warp holds 16 of every 64 accumulator rows, in the m16n8 pattern of mma.sync",
                        if w.warpgroups == 1 { "one warpgroup (128 threads)".to_string() } else { format!("each of {} warpgroups (stacked along M, {} rows each)", w.warpgroups, m.mnk.0 / w.warpgroups) },
                        w.m_steps, m.mnk.1, if w.m_steps == 1 { "" } else { "s" },
                        if m.a_in_registers { "from registers".to_string() } else { format!("{}-major in shared memory", w.major.0) },
                        w.major.1);
                    m.warps = (4 * w.warpgroups, 1);
                    m.wgmma = Some(w);
                }
                // An unpacked tile is written with generic stores and read by the async proxy.
                for d in self.plan.dequants.values_mut() {
                    d.why.push_str("; warpgroup MMAs read the tile through the async proxy, so the stores are fenced (fence.proxy.async) before the barrier that publishes it");
                }
                for (b, atom) in tiles {
                    let l = self.plan.shared.get_mut(&b).expect("planned tile");
                    l.gmma_atom = Some(atom);
                    // The same 8x64 rows and Swizzle<3,3,3> (on 2-byte elements; the 128-byte
                    // swizzle, Swizzle<3,4,3> on byte addresses) as the sm80 plan chose, spelled
                    // as CuTe's GMMA atom so that descriptors can be made from it. The sm80
                    // reason for the swizzle (ldmatrix's reads) no longer applies.
                    debug_assert_eq!(l.swizzle, SW128);
                    // K-major atoms are 8x64 in (MN, K) order, MN-major ones 64x8: either way 8
                    // stretches of 64 contiguous elements (128 bytes).
                    let shape = if atom.contains("_MN_") { "64x8 in (MN, K) order" } else { "8x64 in (MN, K) order" };
                    l.why_swizzle = format!("{atom}: {shape}, 8 stretches of 64 contiguous elements (128 bytes each) with the 128-byte swizzle (Swizzle<3,3,3> on elements), the layout warpgroup MMAs read through shared-memory descriptors");
                }
            }
            Err(why) => self.plan.mma_sync_reason = Some(why),
        }
    }

    /// Every gemm as a warpgroup MMA with the GMMA atom of each shared operand, or why not.
    #[allow(clippy::type_complexity)]
    fn wgmma_fit(&self) -> Result<(Vec<(StmtId, Wgmma)>, Vec<(usize, &'static str)>), String> {
        let spec = self.spec;
        if self.plan.mmas.is_empty() {
            return Err("the spec has no gemm".into());
        }
        if spec.threads.0 % 128 != 0 {
            return Err(format!("warpgroup MMAs need whole warpgroups (threads a multiple of 128); the spec has {}", spec.threads.0));
        }
        let groups = spec.threads.0 / 128;
        // A dequant fused into mma.sync's B fragments has no shared tile to read; an unfused
        // one writes its tile with generic stores, fenced for the async proxy before the
        // barrier that publishes it, and the checks below take that tile as any other.
        if self.plan.dequants.values().any(|d| d.fused_into.is_some()) {
            return Err("its dequant_int4 unpacks weights into mma.sync's B fragments, which warpgroup MMAs read from shared memory".into());
        }
        let mut gemms = Vec::new();
        let mut tiles = Vec::new();
        for (&id, m) in &self.plan.mmas {
            let line = format!("gemm({}, {}, {})", spec.buffers[m.a].name.name, spec.buffers[m.b].name.name, spec.buffers[m.c].name.name);
            let ty = if m.atom.contains("F32BF16BF16F32") {
                "F32BF16BF16"
            } else if m.atom.contains("F32F16F16F32") {
                "F32F16F16"
            } else if m.atom.contains("S32S8S8S32") {
                return Err(format!("{line} multiplies 8-bit operands; this WGMMA lowering takes 16-bit ones (the CUTLASS collective takes int8 GEMMs)"));
            } else {
                return Err(format!("{line} accumulates in f16; the WGMMA lowering takes f32 accumulators"));
            };
            let (mm, n, _) = m.mnk;
            if mm % (64 * groups) != 0 || n % 8 != 0 || !(8..=256).contains(&n) {
                return Err(format!("{line} has a {mm}x{n} tile; {groups} warpgroup(s) of 64-row MMAs need M a multiple of {} and N a multiple of 8 up to 256", 64 * groups));
            }
            let mut major = ("K", "K");
            for (is_a, buf) in [(true, m.a), (false, m.b)] {
                if is_a && m.a_in_registers {
                    // The register operand reuses an accumulator's registers: 16 of its columns
                    // per k-block, so the producing accumulator must be whole 16-column blocks.
                    match self.plan.fragments.get(&buf) {
                        Some(FragmentLayout::MmaAccumulator { gemm }) if self.plan.mmas[gemm].mnk.1 % 16 == 0 && self.plan.mmas[gemm].mnk.0 == mm => {}
                        _ => return Err(format!("{line} reads `{}` from registers in a layout warpgroup MMAs cannot take", spec.buffers[buf].name.name)),
                    }
                    continue;
                }
                let name = &spec.buffers[buf].name.name;
                let Some(l) = self.plan.shared.get(&buf) else {
                    return Err(format!("{line} reads `{name}` from registers as its B operand"));
                };
                if !matches!(spec.buffers[buf].dtype.0, DType::BF16 | DType::F16) {
                    return Err(format!("`{name}` is not a 16-bit tile"));
                }
                // The atom follows the tile's storage order (which mode is contiguous); each
                // gemm reads it K-major or MN-major by where its own K lies, through a view
                // with the modes swapped where its (MN, K) order is the other one. So one tile
                // can be K-major for one gemm and MN-major for another (K in Q·Kᵀ and Kᵀ·V).
                let fits = l.swizzle == SW128 && if l.atom_first_contiguous { l.atom_shape == (64, 8) } else { l.atom_shape == (8, 64) };
                if !fits {
                    return Err(format!("`{name}` is {} wide along its contiguous dimension; the 128-byte GMMA swizzle needs multiples of 64 elements",
                        l.cute_shape[if l.atom_first_contiguous { 0 } else { 1 }]));
                }
                let atom = if l.atom_first_contiguous { "GMMA::Layout_MN_SW128_Atom" } else { "GMMA::Layout_K_SW128_Atom" };
                let maj = if m.k_major(is_a, l) { "K" } else { "MN" };
                if is_a { major.0 = maj } else { major.1 = maj }
                if !tiles.contains(&(buf, atom)) {
                    tiles.push((buf, atom));
                }
            }
            let kind = if m.a_in_registers { "RS" } else { "SS" };
            gemms.push((id, Wgmma {
                op: format!("SM90_64x{n}x16_{ty}_{kind}<GMMA::Major::{}, GMMA::Major::{}>", major.0, major.1),
                major,
                warpgroups: groups,
                m_steps: mm / (64 * groups),
            }));
        }
        Ok((gemms, tiles))
    }
}
