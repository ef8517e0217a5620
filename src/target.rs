//! Targets: what each code generator can emit and the budgets it must respect.

use std::fmt;

/// A code-generation target.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Target {
    /// NVIDIA Ampere-class code: cp.async, ldmatrix, mma.sync. Runs on sm_80 and later.
    Sm80,
}

impl Target {
    /// Every target, in CLI order.
    pub const ALL: [Target; 1] = [Target::Sm80];

    /// The CLI and folder name.
    pub fn name(self) -> &'static str {
        match self {
            Target::Sm80 => "sm80",
        }
    }

    /// Parses a CLI name.
    pub fn from_name(s: &str) -> Option<Target> {
        Target::ALL.into_iter().find(|t| t.name() == s)
    }

    /// Largest dynamic shared memory one block may use, in bytes. sm80 code must fit the
    /// A100's opt-in limit (163 KB) so that it runs on every sm_80-class part it is built for.
    pub fn smem_budget(self) -> u64 {
        match self {
            Target::Sm80 => 166_912,
        }
    }

    /// The architecture flags nvcc needs.
    pub fn nvcc_arch_flags(self) -> &'static [&'static str] {
        match self {
            Target::Sm80 => &["-gencode=arch=compute_80,code=sm_80"],
        }
    }

    /// Extension of the generated translation unit.
    pub fn source_extension(self) -> &'static str {
        "cu"
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
