//! Front end: spec text → [`crate::ast::Spec`].
//!
//! Requires: UTF-8 text. Guarantees: either a spec whose every node has a span into the
//! file, or every structural error found (unknown and duplicate keys, malformed entries,
//! unparsable statements), each with its span. Names, types and shapes are not checked
//! here; that is [`crate::check`]'s job.

pub mod expr;
pub mod yaml;

mod spec;

pub use spec::{apply_target, is_identifier, parse_spec, parse_spec_partial, Parsed};
