//! The names generated code declares for itself are refused as spec names.
//!
//! Each bundled and golden spec is rendered for every target that lowers it, twice: as written, and with every spec
//! name given a marker suffix. Every identifier the second rendering declares without the
//! marker belongs to the generated code, or is a library name it uses unqualified (CuTe's
//! functions, CUDA's types); a spec spelling it would clash with it, shadow it or be
//! shadowed by it, so the checker (`tilegen::check::refused_name`) or the target
//! (`tilegen::back::is_reserved`) must refuse it. A template that gains a local, or a
//! library call, fails here until the reserved names cover it.

use std::collections::BTreeSet;
use std::path::Path;

use tilegen::diag::SourceFile;
use tilegen::target::Target;

const MARK: &str = "_zq9";

/// Attribute names (`[[maybe_unused]]`): no declaration can hide them.
const ATTRIBUTES: [&str; 1] = ["maybe_unused"];

/// Counters of the generated copy loops (`for (int i ...) for (int j ...)` over a copy's
/// partitions): their bodies name only generated tensors, so a spec's `i` and `j` (the
/// usual `parallel` variables) are neither shadowed by them nor shadow them.
const SELF_CONTAINED: [&str; 2] = ["i", "j"];

/// Identifiers and punctuation of C++ text, comments, strings and preprocessor lines dropped.
fn tokens(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in text.lines().filter(|l| !l.trim_start().starts_with('#')) {
        let line = line.split("//").next().unwrap_or("");
        let mut chars = line.chars().peekable();
        while let Some(ch) = chars.next() {
            if ch == '"' {
                let mut prev = ' ';
                for c in chars.by_ref() {
                    if c == '"' && prev != '\\' {
                        break;
                    }
                    prev = c;
                }
                out.push("\"\"".into());
            } else if ch.is_ascii_alphanumeric() || ch == '_' {
                let mut word = ch.to_string();
                while let Some(&c) = chars.peek().filter(|c| c.is_ascii_alphanumeric() || **c == '_') {
                    word.push(c);
                    chars.next();
                }
                out.push(word);
            } else if !ch.is_whitespace() {
                out.push(ch.to_string());
            }
        }
    }
    out
}

fn is_ident(t: &str) -> bool {
    t.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
}

/// Identifiers a token run declares: `Type name =|[|;|(|,|)|{|:`, `Type* name`, `Type& name`,
/// `Type<...> name`, `using name`, `struct name`, `namespace name`, `auto name`.
fn declared_in(t: &[String]) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for i in 1..t.len().saturating_sub(1) {
        let (prev, name, next) = (&t[i - 1], &t[i], &t[i + 1]);
        if !is_ident(name) {
            continue;
        }
        let after_type = (is_ident(prev) && !["return", "else", "case", "goto", "throw", "new", "delete", "do"].contains(&prev.as_str()))
            || [">", "*", "&"].contains(&prev.as_str());
        let ends = ["=", "[", ";", "(", ",", ")", "{", ":"].contains(&next.as_str());
        let keyword_decl = ["using", "struct", "namespace", "class", "union"].contains(&prev.as_str());
        if (after_type && ends) || keyword_decl {
            names.insert(name.clone());
        }
    }
    names
}

/// Unqualified identifiers a token run uses (declared there or looked up outside: CuTe's
/// functions and types, CUDA's intrinsics): not after `.`, `->` or `::`, and not followed by
/// `::` (a namespace or class qualifying a name).
fn used_in(t: &[String]) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for i in 0..t.len() {
        let name = &t[i];
        if !is_ident(name) {
            continue;
        }
        let prev = if i > 0 { t[i - 1].as_str() } else { "" };
        let prev2 = if i > 1 { t[i - 2].as_str() } else { "" };
        let member = prev == "." || (prev == ">" && prev2 == "-") || (prev == ":" && prev2 == ":");
        let qualifier = t.get(i + 1).is_some_and(|n| n == ":") && t.get(i + 2).is_some_and(|n| n == ":");
        if !member && !qualifier {
            names.insert(name.clone());
        }
    }
    names
}

/// The names generated C++ declares where a spec name could meet them: at namespace scope
/// (constants, aliases, helper and type names) and anywhere in the kernel and the launcher
/// (parameters, locals, lambdas), which use spec names, and in any function whose signature
/// names one. A helper's parameters and locals and a struct's members live in scopes no spec
/// name reaches, so only their names count.
fn reachable_names(text: &str) -> BTreeSet<String> {
    let t = tokens(text);
    let mut names = BTreeSet::new();
    let mut i = 0;
    while i < t.len() {
        // `namespace x {` and its closing brace are transparent.
        if t[i] == "namespace" {
            names.extend(t.get(i + 1).filter(|n| is_ident(n)).cloned());
            while i < t.len() && t[i] != "{" && t[i] != ";" {
                i += 1;
            }
            i += 1;
            continue;
        }
        if t[i] == "}" {
            i += 1;
            continue;
        }
        // One top-level item: up to `;` at depth 0, or the `}` that closes its body.
        let start = i;
        let mut depth = 0i32;
        let mut body = None;
        while i < t.len() {
            match t[i].as_str() {
                "(" | "[" => depth += 1,
                ")" | "]" => depth -= 1,
                "{" => {
                    if depth == 0 && body.is_none() {
                        body = Some(i);
                    }
                    depth += 1;
                }
                "}" => {
                    depth -= 1;
                    if depth == 0 && body.is_some() {
                        // A struct's body is followed by `;`.
                        if t.get(i + 1).is_some_and(|n| n == ";") {
                            i += 1;
                        }
                        i += 1;
                        break;
                    }
                }
                ";" if depth == 0 => {
                    i += 1;
                    break;
                }
                _ => {}
            }
            i += 1;
        }
        let mut item = &t[start..i.min(t.len())];
        // A template's parameters are its own: the names before each `,`, `=`, `...` or the
        // closing `>` of its parameter list.
        let mut params = BTreeSet::new();
        if item.first().is_some_and(|x| x == "template") {
            let mut angle = 0;
            let close = item.iter().position(|x| {
                angle += (x == "<") as i32 - (x == ">") as i32;
                x == ">" && angle == 0
            });
            let skip = close.map_or(0, |c| c + 1);
            for w in item[..skip].windows(2) {
                if is_ident(&w[0]) && [",", ">", "=", "."].contains(&w[1].as_str()) {
                    params.insert(w[0].clone());
                }
            }
            item = &item[skip..];
            body = body.map(|b| b - skip);
        }
        let mut found = BTreeSet::new();
        let head_end = body.map_or(item.len(), |b| b - start);
        let head = &item[..head_end.min(item.len())];
        // Kernels, launchers, and any function whose signature names a spec name (a tensor map
        // builder taking the tensor and its extents): spec names reach their bodies.
        let scanned = head.iter().any(|x| x == "__global__" || x.contains(MARK)) || (head.first().is_some_and(|x| x == "extern") && head.get(1).is_some_and(|x| x == "\"\""));
        let record = head.iter().position(|x| x == "struct" || x == "union" || x == "class").filter(|_| !head.contains(&"(".to_string()));
        if scanned {
            found.extend(declared_in(item));
            found.extend(used_in(item));
        } else if let Some(k) = record {
            found.extend(head.get(k + 1).filter(|n| is_ident(n)).cloned());
        } else if body.is_some() {
            // A helper: its name is the identifier before its parameter list.
            let paren = head.iter().position(|x| x == "(");
            found.extend(paren.and_then(|p| head.get(p.wrapping_sub(1))).filter(|n| is_ident(n)).cloned());
        } else {
            found.extend(declared_in(item));
            found.extend(used_in(item));
        }
        names.extend(found.into_iter().filter(|n| !params.contains(n)));
    }
    names
}

/// `text` with every whole-word occurrence of each name suffixed with the marker, except
/// keyword arguments (`scales=`), which are part of the statement's grammar.
fn mark(text: &str, names: &BTreeSet<String>) -> String {
    let mut out = String::new();
    let bytes: Vec<char> = text.chars().collect();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        if c.is_ascii_alphabetic() || c == '_' {
            let start = i;
            while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == '_') {
                i += 1;
            }
            let word: String = bytes[start..i].iter().collect();
            let kwarg = bytes.get(i) == Some(&'=') && bytes.get(i + 1) != Some(&'=');
            out.push_str(&word);
            if names.contains(&word) && !kwarg {
                out.push_str(MARK);
            }
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

fn spec_names(c: &tilegen::Compiled) -> BTreeSet<String> {
    let mut names: BTreeSet<String> = c.info.symbols.keys().cloned().collect();
    c.spec.walk(&mut |s| match &s.kind {
        tilegen::ast::StmtKind::Parallel { vars, .. } => names.extend(vars.iter().map(|v| v.name.clone())),
        tilegen::ast::StmtKind::Loop { var, .. } => {
            names.insert(var.name.clone());
        }
        _ => {}
    });
    names.insert(c.spec.kernel.name.clone());
    names
}

#[test]
fn every_name_the_generated_code_declares_is_reserved() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files: Vec<_> = ["specs", "tests/golden/specs"].iter()
        .flat_map(|d| std::fs::read_dir(root.join(d)).unwrap().map(|e| e.unwrap().path()))
        .filter(|p| p.extension().is_some_and(|e| e == "yaml")).collect();
    files.sort();
    assert!(files.len() >= 19, "the bundled and golden specs");
    let mut missing = Vec::new();
    let mut paths = 0;
    for path in &files {
        let text = std::fs::read_to_string(path).unwrap();
        for target in Target::ALL {
            let shown = path.display().to_string();
            // A golden spec a target has no lowering for is skipped there.
            let Ok(c) = tilegen::compile(SourceFile::new(shown.clone(), text.clone()), target) else { continue };
            if tilegen::back::render(&c).is_err() {
                continue;
            }
            let names = spec_names(&c);
            let marked_text = mark(&text, &names);
            let marked = tilegen::compile(SourceFile::new(shown.clone(), marked_text), target).unwrap_or_else(|(_, e)| panic!("{shown} marked ({target}): {e:?}"));
            assert_eq!(format!("{:?}", marked.plan.target), format!("{:?}", c.plan.target));
            let files = tilegen::back::render(&marked).unwrap_or_else(|e| panic!("{shown} marked ({target}): {e:?}"));
            paths += 1;
            for f in files {
                for name in reachable_names(&f.contents) {
                    if !name.contains(MARK) && !tilegen::check::refused_name(&name) && !ATTRIBUTES.contains(&name.as_str()) && !SELF_CONTAINED.contains(&name.as_str()) && !tilegen::back::is_reserved(&marked, &name) {
                        missing.push(format!("{target} {} declares `{name}`", f.name.replace(MARK, "")));
                    }
                }
            }
        }
    }
    missing.sort();
    missing.dedup();
    assert!(paths >= 60, "rendered {paths} spec and target pairs");
    assert!(missing.is_empty(), "names the generated code declares that a spec may still use ({}):\n{}", missing.len(), missing.join("\n"));
}

#[test]
fn the_scanner_finds_declarations() {
    let code = "namespace ns {\nconstexpr int kX = 2;\nusing Mma = X<int>;\nstruct Storage { float member[4]; };\n\
        template <class T> CUTE_DEVICE T helper(T a) { int local = 1; return a; }\n\
        __global__ void kern(int p) {\nint const tid = threadIdx.x;\nauto load = [&](int stage) {};\nfloat accum[2][4];\nfoo(x); thr.slice(tid); cute::copy(x); // int hidden = 1;\n}\n}\n\
        extern \"C\" int launch(int q) { int const grid_x = 1; return 0; }";
    let found = reachable_names(code);
    // Declared at namespace scope or in the kernel and launcher, or used there unqualified.
    for name in ["ns", "kX", "Mma", "X", "Storage", "helper", "kern", "p", "tid", "load", "stage", "accum", "foo", "x", "launch", "q", "grid_x"] {
        assert!(found.contains(name), "{name} in {found:?}");
    }
    // A struct's members, a helper's template parameters, parameters and locals, member and
    // qualified names, comments.
    for name in ["member", "T", "a", "local", "slice", "copy", "hidden"] {
        assert!(!found.contains(name), "{name} in {found:?}");
    }
    let names: BTreeSet<String> = ["A".to_string(), "scales".to_string()].into();
    assert_eq!(mark("copy(A[k], A_s); dequant(scales=S, x=scales)", &names), format!("copy(A{MARK}[k], A_s); dequant(scales=S, x=scales{MARK})"));
}

#[test]
fn names_of_the_generated_conventions_are_refused_with_the_reason() {
    let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("specs/w4a16_gemm_bf16.yaml")).unwrap();
    let text = text.replace("constants: {", "constants: {kThreads: 4, ");
    let (file, errors) = tilegen::compile(SourceFile::new("w.yaml", text), Target::Sm80).and_then(|c| tilegen::back::render(&c).map_err(|e| (c.file, e))).unwrap_err();
    let shown: Vec<String> = errors.iter().map(|e| e.render(&file)).collect();
    assert_eq!(errors.len(), 1, "{shown:?}");
    assert!(shown[0].contains("`kThreads` collides with a name in the generated sm80 code") && shown[0].contains("kName"), "{shown:?}");
}

#[test]
fn a_tensor_named_like_a_local_of_a_function_taking_tensors_is_refused() {
    // sm90a's wide-tile GEMM launches through a `launch()` that takes the tensors and declares
    // `kernel`: an output named so would redeclare it (nvcc: "kernel" has already been
    // declared); the spec gets the error at the tensor instead.
    let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("specs/w4a16_prefill_gemm_bf16.yaml")).unwrap();
    let renamed = text.replace("C:", "kernel:").replace("C[", "kernel[");
    assert_ne!(renamed, text);
    let (file, errors) = tilegen::compile(SourceFile::new("p.yaml", renamed), Target::Sm90a).and_then(|c| tilegen::back::render(&c).map_err(|e| (c.file, e))).unwrap_err();
    let shown: Vec<String> = errors.iter().map(|e| e.render(&file)).collect();
    assert_eq!(errors.len(), 1, "{shown:?}");
    assert!(shown[0].contains("p.yaml:") && shown[0].contains("`kernel` collides with a name in the generated sm90a code"), "{shown:?}");
}
