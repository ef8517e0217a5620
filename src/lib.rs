//! tilegen: a source-to-source translator from tile-model kernel specs to CUTLASS/CuTe C++.
#![deny(missing_docs)]

pub mod ast;
pub mod check;
pub mod diag;
pub mod front;
pub mod layout;
pub mod target;
pub mod back;
pub mod build;
pub mod explain;
pub mod golden;
pub mod interp;
pub mod output;
pub mod validate;

use diag::{Diagnostic, SourceFile};

/// A spec that passed every stage up to the backend: parsed, checked and planned.
#[derive(Clone, Debug)]
pub struct Compiled {
    /// The spec's text and display path.
    pub file: SourceFile,
    /// Its syntax tree.
    pub spec: ast::Spec,
    /// What checking proved.
    pub info: check::Info,
    /// What inference decided for the target.
    pub plan: layout::Plan,
    /// How the generated files' banners name the spec: its display path, unless the caller
    /// sets one that does not depend on the working directory ([`output::banner_path`]).
    pub source_name: String,
}

impl Compiled {
    /// The 1-based spec line a span starts on.
    pub fn line(&self, span: diag::Span) -> usize {
        self.file.line_col(span.start).0
    }
}

/// The pipeline, in order; each stage needs what the one before it guarantees:
/// 1. `front` — text → spanned syntax tree (structure and statement grammar);
/// 2. `check` — names, types, shapes and scopes, so that inference may assume them;
/// 3. `layout` — layout inference and pipeline planning for the target (strict →
///    common → free), which also enforces the target's limits.
///
/// Rendering ([`back::render`]) takes the result. Every error of a stage is reported
/// before stopping; later stages do not run on a spec that failed an earlier one.
pub fn compile(file: SourceFile, target: target::Target) -> Result<Compiled, (SourceFile, Vec<Diagnostic>)> {
    let Checked { file, spec, info } = parse_and_check(file, Some(target))?;
    let plan = match layout::infer(&spec, &info, target) {
        Ok(p) => p,
        Err(d) => return Err((file, d)),
    };
    let source_name = file.path.clone();
    Ok(Compiled { file, spec, info, plan, source_name })
}

/// A spec that parsed and checked, with no target applied: what the CPU interpreter runs.
#[derive(Clone, Debug)]
pub struct Checked {
    /// The spec's text and display path.
    pub file: SourceFile,
    /// Its syntax tree, with the spec's own constants (no `targets:` override applied).
    pub spec: ast::Spec,
    /// What checking proved.
    pub info: check::Info,
}

/// The first two stages of [`compile`], without a target: the spec's meaning does not depend
/// on one, so the interpreter runs specs that no target lowers yet.
pub fn check_spec(file: SourceFile) -> Result<Checked, (SourceFile, Vec<Diagnostic>)> {
    parse_and_check(file, None)
}

fn parse_and_check(file: SourceFile, target: Option<target::Target>) -> Result<Checked, (SourceFile, Vec<Diagnostic>)> {
    let parsed = front::parse_spec_partial(&file);
    let Some(mut spec) = parsed.spec else { return Err((file, parsed.errors)) };
    let mut target_errors = target.map(|t| front::apply_target(&mut spec, t)).unwrap_or_default();
    // Constants computed from the ones before them, with the target's values in place.
    target_errors.extend(check::consts::fold(&mut spec));
    if !target_errors.is_empty() {
        let mut errors = parsed.errors;
        errors.extend(target_errors);
        return Err((file, errors));
    }
    if !parsed.errors.is_empty() {
        // Statements that failed to parse are left out; checking the rest still finds
        // real errors (a broken declaration would only cause noise, so stop there).
        let mut errors = parsed.errors;
        if parsed.errors_only_in_body && let Err(more) = check::check_partial(&spec) {
            errors.extend(more);
        }
        return Err((file, errors));
    }
    match check::check(&spec) {
        Ok(info) => Ok(Checked { file, spec, info }),
        Err(d) => Err((file, d)),
    }
}
