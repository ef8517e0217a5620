//! `tilegen validate`: runs built kernels on the GPU against their golden cases.
//!
//! For each spec: a small generated harness (C++ with a `main`) is linked with the kernel;
//! for each golden case, tilegen writes the inputs in device layout, the harness poisons
//! the outputs, launches, and writes the outputs back; tilegen then checks that every
//! element was written and compares with the expected values under the case's tolerance.

use crate::ast::Order;
use crate::build::{self, Built, Toolchain};
use crate::golden::{self, Comparison};
use crate::interp::npy::{self, Array};
use crate::Compiled;
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

const HARNESS_TEMPLATE: &str = include_str!("../templates/sm80/harness.cu.tera");

#[derive(Serialize)]
struct TensorArg {
    name: String,
    elems: String,
    width: usize,
    /// An output the kernel also reads (updated in place): its initial contents are uploaded
    /// rather than poisoned.
    in_place: bool,
}

#[derive(Serialize)]
struct HarnessCtx {
    kernel: String,
    launcher: String,
    sizes: Vec<String>,
    inputs: Vec<TensorArg>,
    outputs: Vec<TensorArg>,
    call_args: Vec<String>,
    argc: usize,
}

/// The harness translation unit for a compiled spec.
pub fn harness_source(c: &Compiled) -> Result<String, String> {
    let spec = &c.spec;
    let elems = |t: &crate::ast::Tensor| {
        t.shape.iter().map(|d| match d.eval(|n| c.info.const_int(n)) {
            Some(v) => format!("size_t({v})"),  // a spec constant: not a name in the harness
            None => format!("size_t({})", d.text()),
        }).collect::<Vec<_>>().join(" * ")
    };
    let arg = |t: &crate::ast::Tensor| TensorArg { name: t.name.name.clone(), elems: elems(t), width: npy::width(t.dtype.0), in_place: spec.is_in_place(t) };
    let inputs: Vec<TensorArg> = spec.tensors.iter().filter(|t| spec.starts_from(t)).map(arg).collect();
    let outputs: Vec<TensorArg> = spec.tensors.iter().filter(|t| t.output).map(arg).collect();
    let mut call_args: Vec<String> = spec.tensors.iter().map(|t| format!("dev_{}", t.name.name)).collect();
    call_args.extend(c.info.runtime_dims.iter().cloned());
    let ctx = HarnessCtx {
        kernel: spec.kernel.name.clone(),
        launcher: format!("tilegen_{}", spec.kernel.name),
        sizes: c.info.runtime_dims.clone(),
        argc: 1 + c.info.runtime_dims.len() + inputs.len() + outputs.len(),
        inputs,
        outputs,
        call_args,
    };
    let mut tera = tera::Tera::new();
    tera.autoescape_on(Vec::<&str>::new());
    tera.add_raw_template("harness.cu", HARNESS_TEMPLATE).map_err(|e| e.to_string())?;
    let context = tera::Context::from_serialize(&ctx).map_err(|e| e.to_string())?;
    tera.render("harness.cu", &context).map_err(|e| e.to_string())
}

/// Transposes a row-major `rows` x `cols` array.
fn transpose(rows: usize, cols: usize, data: &[f64]) -> Vec<f64> {
    let mut out = vec![0.0; rows * cols];
    for i in 0..rows {
        for j in 0..cols {
            out[j * rows + i] = data[i * cols + j];
        }
    }
    out
}

/// Whether a tensor's device memory order differs from the logical row-major order of the
/// golden arrays (column-major 2-D tensors).
fn is_col_major(t: &crate::ast::Tensor) -> bool {
    t.shape.len() == 2 && t.order.0 == Order::ColMajor
}

/// One row of the validation table.
#[derive(Clone, Debug)]
pub struct Row {
    /// Kernel.
    pub kernel: String,
    /// Case name.
    pub case: String,
    /// Sizes, e.g. `M=77 N=136 K=264`.
    pub shape: String,
    /// Output tensor.
    pub output: String,
    /// The comparison, or why the case could not run.
    pub result: Result<Comparison, String>,
}

/// Builds the validation harness for a built kernel; returns the executable.
pub fn build_harness(b: &Built, tc: &Toolchain) -> Result<PathBuf, String> {
    let kernel = &b.kernel;
    let src = b.dir.join(format!("{kernel}_harness.cu"));
    std::fs::write(&src, harness_source(&b.compiled)?).map_err(|e| format!("{}: {e}", src.display()))?;
    let obj = b.dir.join(format!("{kernel}_harness.o"));
    let exe = b.dir.join(format!("{kernel}_harness"));
    build::compile(tc, b.compiled.plan.target, &[], &format!("{kernel} harness"), &src, &obj, &[&b.dir]).map_err(|e| e.to_string())?;
    build::link(tc, kernel, &[obj, b.object.clone()], &exe, false).map_err(|e| e.to_string())?;
    Ok(exe)
}

/// Builds the harness for a built kernel and runs every golden case (needs a GPU). `wrap`
/// is a command the harness runs under (e.g. `compute-sanitizer --tool memcheck`).
pub fn validate_built(b: &Built, tc: &Toolchain, root: &Path, wrap: &[String], only: Option<&str>) -> Result<Vec<Row>, String> {
    let exe = build_harness(b, tc)?;
    run_golden_cases(&b.compiled, &exe, wrap, root, only)
}

/// Runs every golden case (those whose name contains `only`, if given) through a harness
/// executable made from [`harness_source`], under `wrap`, and compares the outputs.
pub fn run_golden_cases(c: &Compiled, exe: &Path, wrap: &[String], root: &Path, only: Option<&str>) -> Result<Vec<Row>, String> {
    let kernel = &c.spec.kernel.name;
    let cases_path = golden::cases_path(root, kernel);
    let set = golden::load_cases(&cases_path).map_err(|e| e.to_string())?;
    let case_dir = cases_path.parent().unwrap_or(Path::new("."));
    let scratch = tempfile::tempdir().map_err(|e| e.to_string())?;
    let mut rows = Vec::new();
    for case in set.cases.iter().filter(|c| only.is_none_or(|o| c.name.contains(o))) {
        let shape = case.sizes.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(" ");
        let row = |output: &str, result| Row { kernel: kernel.clone(), case: case.name.clone(), shape: shape.clone(), output: output.into(), result };
        match run_case(c, exe, wrap, case_dir, case, scratch.path()) {
            Ok(results) => rows.extend(results.into_iter().map(|(o, cmp)| row(&o, Ok(cmp)))),
            Err(e) => rows.push(row("-", Err(e))),
        }
    }
    Ok(rows)
}

fn run_case(c: &Compiled, exe: &Path, wrap: &[String], case_dir: &Path, case: &golden::Case, scratch: &Path) -> Result<Vec<(String, Comparison)>, String> {
    let inputs = golden::load_inputs(&c.spec, case_dir, case).map_err(|e| e.to_string())?;
    let sizes = crate::interp::infer_sizes(&c.spec, &c.info, &inputs, &case.sizes).map_err(|e| e.to_string())?;
    let outputs = run_harness(c, exe, wrap, &inputs, &sizes, scratch)?;
    let expected = golden::load_expected(case_dir, case).map_err(|e| e.to_string())?;
    Ok(outputs.iter().filter_map(|(name, got)| expected.get(name).map(|exp| (name.clone(), golden::compare(got, exp, case.rtol)))).collect())
}

/// Runs a harness made from [`harness_source`] (under `wrap`) on `inputs` (logical
/// row-major arrays) at `sizes`, with files in `scratch`; returns every output tensor.
pub fn run_harness(c: &Compiled, exe: &Path, wrap: &[String], inputs: &BTreeMap<String, Array>, sizes: &BTreeMap<String, i64>, scratch: &Path) -> Result<BTreeMap<String, Array>, String> {
    let spec = &c.spec;
    let mut cmd = match wrap.split_first() {
        Some((tool, args)) => {
            let mut cmd = Command::new(tool);
            cmd.args(args).arg(exe);
            cmd
        }
        None => Command::new(exe),
    };
    for d in &c.info.runtime_dims {
        cmd.arg(sizes.get(d).ok_or_else(|| format!("no size for `{d}`"))?.to_string());
    }
    let mut outs: Vec<(&crate::ast::Tensor, PathBuf, Vec<usize>)> = Vec::new();
    for t in spec.tensors.iter().filter(|t| spec.starts_from(t)) {
        let a = inputs.get(&t.name.name).ok_or_else(|| format!("no input `{}`{}", t.name.name, if t.output { " (an output the kernel also reads, updated in place)" } else { "" }))?;
        let path = scratch.join(format!("{}.bin", t.name.name));
        let device = if is_col_major(t) { transpose(a.shape[0], a.shape[1], &a.data) } else { a.data.clone() };
        std::fs::write(&path, npy::encode(t.dtype.0, &device)).map_err(|e| e.to_string())?;
        cmd.arg(&path);
    }
    for t in spec.tensors.iter().filter(|t| t.output) {
        let path = scratch.join(format!("{}.out", t.name.name));
        let shape: Vec<usize> = t.shape.iter().map(|d| d.eval(|n| c.info.const_int(n).or_else(|| sizes.get(n).copied())).unwrap_or(0) as usize).collect();
        cmd.arg(&path);
        outs.push((t, path, shape));
    }
    let out = cmd.output().map_err(|e| format!("running {}: {e}", exe.display()))?;
    if !out.status.success() {
        let text = String::from_utf8_lossy(&out.stderr).to_string() + &String::from_utf8_lossy(&out.stdout);
        return Err(format!("harness failed ({}): {}", out.status, text.trim()));
    }
    let mut results = BTreeMap::new();
    for (t, path, shape) in outs {
        let bytes = std::fs::read(&path).map_err(|e| e.to_string())?;
        let data = npy::decode(t.dtype.0, &bytes);
        // Column-major memory holds the transpose: (cols x rows) row-major.
        let data = if is_col_major(t) { transpose(shape[1], shape[0], &data) } else { data };
        results.insert(t.name.name.clone(), Array { shape, dtype: t.dtype.0, data });
    }
    Ok(results)
}

/// Prints the validation table; returns whether every row passed.
pub fn print_table(rows: &[Row]) -> bool {
    let mut ok = true;
    println!("{:<24} {:<20} {:<22} {:<6} {:>12} {:>10} {:>9}  result", "kernel", "case", "sizes", "output", "max abs err", "rel err", "unwritten");
    for r in rows {
        match &r.result {
            Ok(c) => {
                ok &= c.pass;
                println!("{:<24} {:<20} {:<22} {:<6} {:>12.3e} {:>10.3e} {:>9}  {}", r.kernel, r.case, r.shape, r.output, c.max_abs, c.rel, c.non_finite, if c.pass { "pass" } else { "FAIL" });
            }
            Err(e) => {
                ok = false;
                println!("{:<24} {:<20} {:<22} {:<6} {:>12} {:>10} {:>9}  FAIL: {e}", r.kernel, r.case, r.shape, r.output, "-", "-", "-");
            }
        }
    }
    let failed = rows.iter().filter(|r| !matches!(&r.result, Ok(c) if c.pass)).count();
    println!("{} passed, {} failed", rows.len() - failed, failed);
    ok
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An output the spec also reads is uploaded from its `.bin` (its initial contents), not
    /// poisoned, and still written back; the usage line and argument count include it twice.
    #[test]
    fn outputs_read_in_place_start_from_their_inputs() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/golden/specs/fused_add_rms_norm_bf16.yaml");
        let text = std::fs::read_to_string(path).unwrap();
        let c = crate::compile(crate::diag::SourceFile::new(path, text), crate::target::Target::Sm80).map_err(|_| "compiles").unwrap();
        let r = c.spec.tensors.iter().find(|t| t.name.name == "R").unwrap();
        let y = c.spec.tensors.iter().find(|t| t.name.name == "Y").unwrap();
        assert!(c.spec.is_in_place(r) && !c.spec.is_in_place(y));
        let src = harness_source(&c).unwrap();
        assert!(src.contains("// Usage: fused_add_rms_norm_bf16_harness M N X.bin W.bin R.bin R.out Y.out"), "{src}");
        assert!(src.contains("if (argc != 8)"));
        assert!(src.contains("CHECK(cudaMemcpy(dev_R, host_R.data(), bytes_R, cudaMemcpyHostToDevice));"));
        assert!(!src.contains("cudaMemset(dev_R") && src.contains("CHECK(cudaMemset(dev_Y, 0xFF, bytes_Y));"));
        assert!(src.contains("host_R.assign(bytes_R, 0);") && src.contains("CHECK(cudaMemcpy(host_R.data(), dev_R, bytes_R, cudaMemcpyDeviceToHost));"));
    }
}
