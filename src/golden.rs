//! Golden cases: `tests/golden/<kernel>/cases.yaml` and the `.npy` files it names, written by
//! `scripts/golden_outputs.py`, and the comparison every consumer (the CPU interpreter, the
//! GPU validator) applies to them.

use crate::ast::{DType, Spec};
use crate::interp::npy::{Array, NpyError};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// A kernel's golden cases.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CaseSet {
    /// The kernel they belong to.
    pub kernel: String,
    /// The cases.
    pub cases: Vec<Case>,
}

/// One case: sizes, input files, expected outputs and the tolerance.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Case {
    /// Name (also its folder).
    pub name: String,
    /// Runtime sizes.
    pub sizes: BTreeMap<String, i64>,
    /// Input tensor → `.npy` path relative to `cases.yaml`.
    pub inputs: BTreeMap<String, String>,
    /// Output tensor → expected `.npy` (float32) relative to `cases.yaml`.
    pub expected: BTreeMap<String, String>,
    /// Bound on ||out - expected|| / ||expected||.
    pub rtol: f64,
}

/// Errors loading golden cases.
#[derive(Debug, thiserror::Error)]
pub enum GoldenError {
    /// cases.yaml unreadable or malformed.
    #[error("{path}: {message}")]
    Cases {
        /// The file.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// A .npy file.
    #[error("{path}: {source}")]
    Npy {
        /// The file.
        path: String,
        /// What is wrong.
        source: NpyError,
    },
}

/// Where a kernel's cases live.
pub fn cases_path(root: &Path, kernel: &str) -> PathBuf {
    root.join("tests/golden").join(kernel).join("cases.yaml")
}

/// Reads a `cases.yaml`.
pub fn load_cases(path: &Path) -> Result<CaseSet, GoldenError> {
    let err = |message: String| GoldenError::Cases { path: path.display().to_string(), message };
    let text = std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
    serde_yaml::from_str(&text).map_err(|e| err(e.to_string()))
}

/// Loads a case's input arrays, typed by the spec's tensors.
pub fn load_inputs(spec: &Spec, dir: &Path, case: &Case) -> Result<BTreeMap<String, Array>, GoldenError> {
    let mut out = BTreeMap::new();
    for (name, file) in &case.inputs {
        let dtype = spec.tensors.iter().find(|t| t.name.name == *name).map(|t| t.dtype.0).ok_or_else(|| GoldenError::Cases {
            path: dir.display().to_string(),
            message: format!("case `{}` has an input `{name}` the spec does not declare", case.name),
        })?;
        let path = dir.join(file);
        let a = Array::read(&path, dtype).map_err(|source| GoldenError::Npy { path: path.display().to_string(), source })?;
        out.insert(name.clone(), a);
    }
    Ok(out)
}

/// Loads a case's expected outputs (float32 arrays).
pub fn load_expected(dir: &Path, case: &Case) -> Result<BTreeMap<String, Array>, GoldenError> {
    let mut out = BTreeMap::new();
    for (name, file) in &case.expected {
        let path = dir.join(file);
        let a = Array::read(&path, DType::F32).map_err(|source| GoldenError::Npy { path: path.display().to_string(), source })?;
        out.insert(name.clone(), a);
    }
    Ok(out)
}

/// How an output compares with its expected value.
#[derive(Clone, Debug, PartialEq)]
pub struct Comparison {
    /// Largest absolute difference.
    pub max_abs: f64,
    /// ||out - expected|| / ||expected||.
    pub rel: f64,
    /// Elements that are NaN or infinite (unwritten outputs stay NaN).
    pub non_finite: usize,
    /// Whether it passes: all finite, shapes equal and `rel <= rtol`.
    pub pass: bool,
}

/// Compares `out` with `expected` under `rtol`.
pub fn compare(out: &Array, expected: &Array, rtol: f64) -> Comparison {
    if out.shape != expected.shape {
        return Comparison { max_abs: f64::INFINITY, rel: f64::INFINITY, non_finite: 0, pass: false };
    }
    let (mut diff2, mut ref2, mut max_abs, mut non_finite) = (0.0f64, 0.0f64, 0.0f64, 0usize);
    for (&o, &e) in out.data.iter().zip(&expected.data) {
        if !o.is_finite() {
            non_finite += 1;
            continue;
        }
        let d = o - e;
        diff2 += d * d;
        ref2 += e * e;
        max_abs = max_abs.max(d.abs());
    }
    let rel = if ref2 > 0.0 { (diff2 / ref2).sqrt() } else { diff2.sqrt() };
    Comparison { max_abs, rel, non_finite, pass: non_finite == 0 && rel <= rtol }
}

/// Runs one golden case through the CPU interpreter and compares each output.
pub fn interpret_case(c: &crate::Compiled, dir: &Path, case: &Case) -> Result<Vec<(String, Comparison)>, String> {
    let mut tensors = load_inputs(&c.spec, dir, case).map_err(|e| e.to_string())?;
    let sizes = crate::interp::infer_sizes(&c.spec, &c.info, &tensors, &case.sizes).map_err(|e| e.to_string())?;
    let line_of = |span: crate::diag::Span| c.file.line_col(span.start).0;
    crate::interp::run(&c.spec, &c.info, &line_of, &sizes, &mut tensors).map_err(|e| e.to_string())?;
    let expected = load_expected(dir, case).map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    for (name, exp) in &expected {
        let got = tensors.get(name).ok_or_else(|| format!("the spec has no output `{name}`"))?;
        out.push((name.clone(), compare(got, exp, case.rtol)));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comparison_catches_unwritten_and_wrong_values() {
        let e = Array { shape: vec![2], dtype: DType::F32, data: vec![3.0, 4.0] };
        let good = Array { shape: vec![2], dtype: DType::F32, data: vec![3.0, 4.01] };
        assert!(compare(&good, &e, 1e-2).pass);
        let nan = Array { shape: vec![2], dtype: DType::F32, data: vec![3.0, f64::NAN] };
        let c = compare(&nan, &e, 1e-2);
        assert!(!c.pass && c.non_finite == 1);
        let off = Array { shape: vec![2], dtype: DType::F32, data: vec![3.0, 5.0] };
        assert!(!compare(&off, &e, 1e-2).pass);
    }
}
