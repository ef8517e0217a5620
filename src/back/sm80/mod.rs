//! The sm80 backend: CuTe C++ with cp.async multistage pipelines, ldmatrix and mma.sync.
//!
//! Requires: a spec planned for [`Target::Sm80`](crate::target::Target::Sm80).
//! Guarantees: a `.cu` translation unit (kernel + `extern "C"` launcher) and a `.h` with the
//! launcher's prototype and contract, or diagnostics for constructs this backend does not
//! lower; the text depends only on the spec, its display path and tilegen's version.

mod body;
mod context;
pub use context::find_stmt;

use super::{template_error, OutputFile};
use crate::diag::Diagnostic;
use crate::Compiled;

const KERNEL_TEMPLATE: &str = include_str!("../../../templates/sm80/kernel.cu.tera");
const HEADER_TEMPLATE: &str = include_str!("../../../templates/sm80/launcher.h.tera");

/// Renders the `.cu` and `.h` for a spec planned for sm80.
pub fn render(c: &Compiled) -> Result<Vec<OutputFile>, Vec<Diagnostic>> {
    let ctx = context::build(c)?;
    let mut tera = tera::Tera::new();
    tera.autoescape_on(Vec::<&str>::new());
    tera.add_raw_template("kernel.cu", KERNEL_TEMPLATE).map_err(|e| template_error(c, &e))?;
    tera.add_raw_template("launcher.h", HEADER_TEMPLATE).map_err(|e| template_error(c, &e))?;
    let context = tera::Context::from_serialize(&ctx).map_err(|e| template_error(c, &e))?;
    let cu = tera.render("kernel.cu", &context).map_err(|e| template_error(c, &e))?;
    let h = tera.render("launcher.h", &context).map_err(|e| template_error(c, &e))?;
    Ok(vec![
        OutputFile { name: format!("{}.cu", ctx.kernel), contents: tidy(&cu) },
        OutputFile { name: format!("{}.h", ctx.kernel), contents: tidy(&h) },
    ])
}

/// Strips trailing spaces and collapses runs of blank lines left by template control flow.
fn tidy(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut blank = 0;
    for line in text.lines() {
        let line = line.trim_end();
        if line.is_empty() {
            blank += 1;
            if blank > 1 {
                continue;
            }
        } else {
            blank = 0;
        }
        out.push_str(line);
        out.push('\n');
    }
    while out.ends_with("\n\n") {
        out.pop();
    }
    out
}
