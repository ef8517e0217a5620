//! Targets: what each code generator can emit and the budgets it must respect.

use std::fmt;

/// A code-generation target.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Target {
    /// NVIDIA Ampere-class code: cp.async, ldmatrix, mma.sync. Runs on sm_80 and later.
    Sm80,
    /// NVIDIA Hopper code: TMA, WGMMA, warp-specialised producer/consumer pipelines.
    /// Runs on sm_90a (H100, H200) only.
    Sm90a,
    /// AMD CDNA3 (MI300X): composable_kernel device operations on MFMA, built with hipcc.
    Gfx942,
    /// AMD CDNA2 (MI250): as gfx942.
    Gfx90a,
}

impl Target {
    /// Every target, in CLI order.
    pub const ALL: [Target; 4] = [Target::Sm80, Target::Sm90a, Target::Gfx942, Target::Gfx90a];

    /// The CLI and folder name.
    pub fn name(self) -> &'static str {
        match self {
            Target::Sm80 => "sm80",
            Target::Sm90a => "sm90a",
            Target::Gfx942 => "gfx942",
            Target::Gfx90a => "gfx90a",
        }
    }

    /// Parses a CLI name.
    pub fn from_name(s: &str) -> Option<Target> {
        Target::ALL.into_iter().find(|t| t.name() == s)
    }

    /// The target a misspelt name most likely means: the same letters without `_` and case
    /// (`SM_80`), a target it begins (`sm90` for `sm90a`, `gfx94` for `gfx942`), else the
    /// nearest by edit distance.
    pub fn suggest(s: &str) -> Option<Target> {
        let norm = s.to_ascii_lowercase().replace('_', "");
        Target::ALL.into_iter().find(|t| t.name() == norm)
            .or_else(|| (norm.len() >= 3).then(|| Target::ALL.into_iter().find(|t| t.name().starts_with(&norm))).flatten())
            .or_else(|| crate::diag::nearest(s, Target::ALL.map(|t| t.name())).and_then(Target::from_name))
    }

    /// Largest dynamic shared memory one block may use, in bytes. sm80 code must fit the
    /// A100's opt-in limit (163 KB) so that it runs on every sm_80-class part it is built
    /// for; sm90a has Hopper's 227 KB.
    pub fn smem_budget(self) -> u64 {
        match self {
            Target::Sm80 => 166_912,
            Target::Sm90a => 232_448,
            // LDS: 64 KB per workgroup on CDNA2 and CDNA3.
            Target::Gfx942 | Target::Gfx90a => 65_536,
        }
    }

    /// Shared memory of one SM, in bytes, which the blocks resident on it share (each also
    /// has 1 KB of it reserved by the system): the A100's 164 KB, Hopper's 228 KB, and the
    /// CDNA compute units' 64 KB of LDS.
    pub fn smem_per_sm(self) -> u64 {
        match self {
            Target::Sm80 => 167_936,
            Target::Sm90a => 233_472,
            Target::Gfx942 | Target::Gfx90a => 65_536,
        }
    }

    /// The default GPU architectures `tilegen build` emits machine code for.
    pub fn default_sms(self) -> &'static [u32] {
        match self {
            Target::Sm80 => &[80, 90],
            Target::Sm90a => &[90],
            Target::Gfx942 | Target::Gfx90a => &[],
        }
    }

    /// Extension of the generated translation unit.
    pub fn source_extension(self) -> &'static str {
        if self.is_amd() { "hip" } else { "cu" }
    }

    /// Whether this is an AMD target (composable_kernel, hipcc).
    pub fn is_amd(self) -> bool {
        matches!(self, Target::Gfx942 | Target::Gfx90a)
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn misspelt_targets_suggest_the_one_meant() {
        for (typo, want) in [("sm90", Target::Sm90a), ("SM_80", Target::Sm80), ("sm_90a", Target::Sm90a), ("gfx94", Target::Gfx942), ("sm81", Target::Sm80), ("gfx90", Target::Gfx90a)] {
            assert_eq!(Target::suggest(typo), Some(want), "{typo}");
        }
        assert_eq!(Target::suggest("cuda"), None);
    }
}
