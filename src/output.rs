//! Generating, writing and checking output files.
//!
//! Writes are atomic: each file is written to a temporary file in its folder and renamed
//! over the target, so a failed or interrupted run never leaves half-written output. A run
//! that finds errors in any spec writes nothing at all.

use crate::back::{self, OutputFile};
use crate::diag::{render_all, SourceFile};
use crate::target::Target;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Component, Path, PathBuf};

/// Why a generation run failed.
#[derive(Debug, thiserror::Error)]
pub enum GenError {
    /// One or more specs have errors; the rendered reports.
    #[error("{0}")]
    Spec(String),
    /// Reading or writing failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// What went wrong.
        source: std::io::Error,
    },
}

impl GenError {
    fn io(path: &Path, source: std::io::Error) -> GenError {
        GenError::Io { path: path.display().to_string(), source }
    }
}

/// The path shown in diagnostics and by `explain`: relative to the working directory where the
/// spec lies under it (with `/` separators and no `./`, so that a checkout's diagnostics read the
/// same on every machine), else absolute as given, so that two specs of one name in different
/// folders are told apart. Generated files name their spec by [`banner_path`] instead.
pub fn display_path(path: &Path) -> String {
    let cwd = std::env::current_dir().unwrap_or_default();
    let shown = if path.is_absolute() { path.strip_prefix(&cwd).unwrap_or(path) } else { path };
    let mut prefix = String::new();  // a Windows drive or share (`C:`), kept before the root
    let parts: Vec<String> = shown.components().filter_map(|c| match c {
        Component::Normal(s) => Some(s.to_string_lossy().into_owned()),
        Component::ParentDir => Some("..".into()),
        Component::RootDir => Some(String::new()),  // joined, the leading `/`
        Component::Prefix(p) => {
            prefix = p.as_os_str().to_string_lossy().into_owned();
            None
        }
        Component::CurDir => None,
    }).collect();
    prefix + &parts.join("/")
}

/// Reads a spec file.
pub fn read_spec(path: &Path) -> Result<SourceFile, GenError> {
    if path.is_dir() {
        let source = std::io::Error::other(format!("a folder, not a spec file: name the specs in it (e.g. `{}`)", path.join("*.yaml").display()));
        return Err(GenError::Io { path: path.display().to_string(), source });
    }
    let bytes = std::fs::read(path).map_err(|e| GenError::io(path, e))?;
    match String::from_utf8(bytes) {
        // A byte-order mark (some Windows editors write one) is not part of the spec's text.
        Ok(text) => Ok(SourceFile::new(display_path(path), match text.strip_prefix('\u{feff}') {
            Some(rest) => rest.to_string(),
            None => text,
        })),
        Err(e) => {
            // Shown at the first bad byte: the text before it is the same in the lossy copy,
            // where the byte became one 3-byte replacement character.
            let at = e.utf8_error().valid_up_to();
            let byte = e.as_bytes()[at];
            let file = SourceFile::new(display_path(path), String::from_utf8_lossy(e.as_bytes()).into_owned());
            let d = crate::diag::Diagnostic::error(crate::diag::Span { start: at, end: at + '\u{FFFD}'.len_utf8() }, format!("the spec is not UTF-8 text: byte 0x{byte:02X} here"))
                .hint("save the spec as UTF-8");
            Err(GenError::Spec(crate::diag::render_all(&[d], &file)))
        }
    }
}

/// How generated files under the output root `out` name the spec at `spec`, the same from any
/// working directory: its path relative to the folder that holds `out` (`specs/gemm.yaml` for
/// `-o generated` in the repository), or relative to `out` itself when the spec lies inside it
/// (`-o .`), or its file name when it lies outside both.
pub fn banner_path(spec: &Path, out: &Path) -> String {
    let cwd = std::env::current_dir().unwrap_or_default();
    let spec = resolve(&cwd.join(spec));
    let out = resolve(&cwd.join(out));
    let base = if spec.starts_with(&out) { out.as_path() } else { out.parent().unwrap_or(&out) };
    match spec.strip_prefix(base) {
        Ok(rel) if rel.components().next().is_some() => {
            rel.components().map(|c| c.as_os_str().to_string_lossy().into_owned()).collect::<Vec<_>>().join("/")
        }
        _ => spec.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
    }
}

/// The absolute `path` with symbolic links resolved, so that two spellings of one folder
/// compare equal: the longest existing prefix is canonicalised (an output root need not
/// exist yet) and the rest appended, `.` and `dir/..` removed.
fn resolve(path: &Path) -> PathBuf {
    let path = normalise(path);
    let mut existing = path.as_path();
    let mut rest = Vec::new();
    loop {
        if let Ok(real) = existing.canonicalize() {
            return rest.iter().rev().fold(real, |p, c| p.join(c));
        }
        match (existing.parent(), existing.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_os_string());
                existing = parent;
            }
            _ => return path,
        }
    }
}

/// `path` with `.` and `dir/..` removed, without touching the file system.
fn normalise(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

/// The note for a spec that `target` has no lowering for (`diags`, every one
/// [`unsupported`](crate::diag::Diagnostic::unsupported)): the first reason (whose message
/// leaves the pointer to the reasons that follow it to its hint) and how to see them all.
pub fn skip_note(path: &str, target: Target, diags: &[crate::diag::Diagnostic]) -> String {
    let message = diags.first().map_or("", |d| d.message.as_str());
    format!("{path}: skipped for {target}: {message} (`--target {target}` gives every reason)")
}

/// The checker's warnings for a spec (an unused buffer, a result never read), rendered with
/// their count, or `None` when it has none. They depend only on the body, so the spec's own
/// constants are checked once for every target; a spec that does not check has its errors
/// reported by the command that compiles it, and no warnings here.
pub fn spec_warnings(path: &Path) -> Result<Option<String>, GenError> {
    Ok(crate::check_spec(read_spec(path)?).ok().and_then(|c| render_warnings(&c)))
}

/// A checked spec's warnings, rendered with their count, or `None` when it has none.
pub fn render_warnings(c: &crate::Checked) -> Option<String> {
    (!c.info.warnings.is_empty()).then(|| render_all(&c.info.warnings, &c.file))
}

/// The bundled specs: `specs/*.yaml`, sorted by name.
pub fn default_specs(root: &Path) -> Result<Vec<PathBuf>, GenError> {
    let dir = root.join("specs");
    if !dir.is_dir() {
        let source = std::io::Error::other("no spec files were named and there is no specs/ folder here: name them (e.g. `path/to/*.yaml`) or run tilegen where specs/ is");
        return Err(GenError::Io { path: display_path(&dir), source });
    }
    let mut specs: Vec<PathBuf> = std::fs::read_dir(&dir).map_err(|e| GenError::io(&dir, e))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml" || x == "yml"))
        .collect();
    specs.sort();
    Ok(specs.into_iter().map(|p| p.strip_prefix(root).map(Path::to_path_buf).unwrap_or(p)).collect())
}

/// Compiles and renders every spec for `target`; files are keyed by their path under `out`.
/// A spec the target has no lowering for is an error, with every reason (`gen --target`).
pub fn generate(specs: &[PathBuf], target: Target, out: &Path) -> Result<BTreeMap<PathBuf, String>, GenError> {
    generate_for(specs, target, out, false).map(|(files, _)| files)
}

/// As [`generate`], but a spec the target has no lowering for (every diagnostic marked
/// [`Diagnostic::unsupported`](crate::diag::Diagnostic::unsupported)) is skipped with a
/// note instead of failing the run (`gen` over every target); returns the files and the notes.
pub fn generate_with_notes(specs: &[PathBuf], target: Target, out: &Path) -> Result<(BTreeMap<PathBuf, String>, Vec<String>), GenError> {
    generate_for(specs, target, out, true)
}

fn generate_for(specs: &[PathBuf], target: Target, out: &Path, skip_unsupported: bool) -> Result<(BTreeMap<PathBuf, String>, Vec<String>), GenError> {
    let mut files = BTreeMap::new();
    let mut notes = Vec::new();
    let mut reports = String::new();
    let mut kernels: BTreeMap<String, String> = BTreeMap::new();
    for path in specs {
        let file = read_spec(path)?;
        match crate::compile(file, target) {
            Err((file, diags)) if skip_unsupported && !diags.is_empty() && diags.iter().all(|d| d.unsupported) => {
                notes.push(skip_note(&file.path, target, &diags));
            }
            Err((file, diags)) => reports.push_str(&render_all(&diags, &file)),
            Ok(mut c) => {
                c.source_name = banner_path(path, out);
                if let Some(first) = kernels.insert(c.spec.kernel.name.clone(), c.file.path.clone()) {
                    let d = crate::diag::Diagnostic::error(c.spec.kernel.span, format!("kernel `{}` is also defined by {first}", c.spec.kernel.name))
                        .hint("kernel names must be unique: each one owns its output files");
                    reports.push_str(&render_all(&[d], &c.file));
                    continue;
                }
                match back::render(&c) {
                    Ok(outs) => {
                        for OutputFile { name, contents } in outs {
                            files.insert(out.join(target.name()).join(name), contents);
                        }
                    }
                    Err(diags) => reports.push_str(&render_all(&diags, &c.file)),
                }
            }
        }
    }
    if reports.is_empty() { Ok((files, notes)) } else { Err(GenError::Spec(reports)) }
}

/// Writes files atomically (temp file in the same folder, then rename), in three passes so
/// that a folder that cannot be made or a file that cannot be written stops the run before
/// any output changes: make the folders, write every changed file's temporary copy, then
/// rename them all into place.
/// Returns the files written: those already holding their contents are left alone.
pub fn write_files(files: &BTreeMap<PathBuf, String>) -> Result<Vec<PathBuf>, GenError> {
    let dirs: std::collections::BTreeSet<&Path> = files.keys().map(|p| p.parent().unwrap_or(Path::new("."))).collect();
    if let Some(dir) = dirs.iter().find(|d| file_in_the_way(d).is_some()) {
        return Err(folder_error(dir, std::io::ErrorKind::AlreadyExists.into()));
    }
    if let Some(path) = files.keys().find(|p| p.is_dir()) {
        return Err(GenError::Io { path: path.display().to_string(), source: std::io::Error::other("a folder is where this file goes: move it away") });
    }
    for dir in dirs {
        make_folder(dir)?;
    }
    let mut staged = Vec::new();
    for (path, contents) in files {
        if std::fs::read_to_string(path).is_ok_and(|old| old == *contents) {
            continue;
        }
        staged.push((path, staged_copy(path, contents.as_bytes()).map_err(|e| GenError::io(path, e))?));
    }
    let mut written = Vec::new();
    for (path, tmp) in staged {
        if let Err(e) = tmp.persist(path) {
            let done = if written.is_empty() { String::new() } else {
                format!(" (already written: {})", written.iter().map(|p: &PathBuf| p.display().to_string()).collect::<Vec<_>>().join(", "))
            };
            return Err(GenError::Io { path: format!("{}{done}", path.display()), source: e.error });
        }
        written.push(path.clone());
    }
    Ok(written)
}

/// `bytes` in a temporary file beside `path`, readable as an ordinary output file, ready to
/// be renamed onto `path` (`persist`): what every atomic write here goes through.
pub fn staged_copy(path: &Path, bytes: &[u8]) -> std::io::Result<tempfile::NamedTempFile> {
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    tmp.write_all(bytes)?;
    readable(tmp.as_file())?;
    Ok(tmp)
}

/// Gives a temporary file the permissions of an ordinary output file (rw-r--r--): tempfile
/// makes it private (rw-------), and the rename keeps them.
fn readable(file: &std::fs::File) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        file.set_permissions(std::fs::Permissions::from_mode(0o644))?;
    }
    #[cfg(not(unix))]
    let _ = file;
    Ok(())
}

/// Makes folder `dir` and its parents; the error names a part of the path that is a file.
pub fn make_folder(dir: &Path) -> Result<(), GenError> {
    std::fs::create_dir_all(dir).map_err(|e| folder_error(dir, e))
}

/// The part of folder `dir`'s path that exists as something other than a folder.
fn file_in_the_way(dir: &Path) -> Option<&Path> {
    dir.ancestors().find(|a| !a.as_os_str().is_empty() && a.exists() && !a.is_dir())
}

/// Why folder `dir` could not be made, naming the part of its path that is a file when one is.
fn folder_error(dir: &Path, e: std::io::Error) -> GenError {
    match file_in_the_way(dir) {
        Some(f) => GenError::Io { path: dir.display().to_string(), source: std::io::Error::other(format!("cannot make this folder: {} is a file, not a folder", f.display())) },
        None => GenError::io(dir, e),
    }
}

/// What every generated file says in its leading comment (see the templates' banners).
const GENERATED_MARK: &str = "// Generated by tilegen ";

/// Files tilegen generated (`.cu`, `.hip`, `.h` carrying its banner) in the folders that
/// `files` live in, that `files` does not hold: outputs of specs since removed or renamed.
/// Other files there are the user's and are not stale.
pub fn stale_files(files: &BTreeMap<PathBuf, String>) -> Vec<PathBuf> {
    let dirs: std::collections::BTreeSet<&Path> = files.keys().filter_map(|p| p.parent()).collect();
    let mut stale = Vec::new();
    for dir in dirs {
        let Ok(entries) = std::fs::read_dir(dir) else { continue };
        let mut extra: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "cu" || x == "hip" || x == "h") && !files.contains_key(p))
            .filter(|p| std::fs::read_to_string(p).is_ok_and(|t| t.lines().take_while(|l| l.starts_with("//")).any(|l| l.starts_with(GENERATED_MARK))))
            .collect();
        extra.sort();
        stale.extend(extra);
    }
    stale
}

/// Deletes `stale` files (from [`stale_files`]).
pub fn remove_files(stale: &[PathBuf]) -> Result<(), GenError> {
    for path in stale {
        std::fs::remove_file(path).map_err(|e| GenError::io(path, e))?;
    }
    Ok(())
}

/// The result of comparing expected output with what is on disk.
#[derive(Debug, Default)]
pub struct Drift {
    /// Unified diffs of files whose contents differ.
    pub changed: Vec<(PathBuf, String)>,
    /// Expected files that do not exist.
    pub missing: Vec<PathBuf>,
    /// Files tilegen generated in the output folders that no spec produces now.
    pub stale: Vec<PathBuf>,
}

impl Drift {
    /// Whether everything matches.
    pub fn is_clean(&self) -> bool {
        self.changed.is_empty() && self.missing.is_empty() && self.stale.is_empty()
    }

    /// A report for the terminal.
    pub fn report(&self) -> String {
        let mut out = String::new();
        for (path, diff) in &self.changed {
            let _ = writeln!(out, "changed: {}", path.display());
            out.push_str(diff);
        }
        for path in &self.missing {
            let _ = writeln!(out, "missing: {}", path.display());
        }
        for path in &self.stale {
            let _ = writeln!(out, "stale: {} (generated by tilegen, but no spec generates it now; `tilegen gen` removes it)", path.display());
        }
        let _ = writeln!(out, "{} changed, {} missing, {} stale; run `tilegen gen` to update", self.changed.len(), self.missing.len(), self.stale.len());
        out
    }
}

/// A unified diff of `old` (on disk) against `new` (expected).
pub fn unified_diff(path: &Path, old: &str, new: &str) -> String {
    let name = path.display().to_string();
    // git's a/ and b/ prefixes, for relative paths only (`a//tmp/...` reads as a typo).
    let (a, b) = if path.is_absolute() { ("", "") } else { ("a/", "b/") };
    similar::TextDiff::from_lines(old, new)
        .unified_diff()
        .context_radius(3)
        .header(&format!("{a}{name} (on disk)"), &format!("{b}{name} (from the spec)"))
        .to_string()
}

/// Compares expected files with the disk. `scan_stale`: look for extra files in the
/// folders the expected files live in.
pub fn check_files(files: &BTreeMap<PathBuf, String>, scan_stale: bool) -> Result<Drift, GenError> {
    let mut drift = Drift::default();
    for (path, contents) in files {
        match std::fs::read_to_string(path) {
            Ok(old) if old == *contents => {}
            Ok(old) => drift.changed.push((path.clone(), unified_diff(path, &old, contents))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => drift.missing.push(path.clone()),
            Err(e) => return Err(GenError::io(path, e)),
        }
    }
    if scan_stale {
        drift.stale = stale_files(files);
    }
    Ok(drift)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn banner_paths_are_relative_to_the_output_roots_folder() {
        let cwd = std::env::current_dir().unwrap();
        assert_eq!(banner_path(Path::new("specs/a.yaml"), Path::new("generated")), "specs/a.yaml");
        assert_eq!(banner_path(Path::new("./specs/../specs/a.yaml"), Path::new("./generated/")), "specs/a.yaml");
        // From inside specs/, writing to ../generated: the same name.
        assert_eq!(banner_path(&cwd.join("specs/a.yaml"), &cwd.join("specs/../generated")), "specs/a.yaml");
        assert_eq!(banner_path(Path::new("specs/a.yaml"), Path::new("build/gen")), "a.yaml");
        assert_eq!(banner_path(Path::new("/elsewhere/k.yaml"), Path::new("generated")), "k.yaml");
        // Writing into the folder that holds the specs (`-o .`): relative to it, so that the
        // checkout's folder name does not enter the output.
        assert_eq!(banner_path(Path::new("specs/a.yaml"), Path::new(".")), "specs/a.yaml");
        assert_eq!(banner_path(Path::new("a.yaml"), Path::new("")), "a.yaml");
    }

    #[test]
    fn display_paths_are_relative_and_normalised() {
        assert_eq!(display_path(Path::new("./specs/a.yaml")), "specs/a.yaml");
        assert_eq!(display_path(Path::new("specs//b.yaml")), "specs/b.yaml");
        let cwd = std::env::current_dir().unwrap();
        assert_eq!(display_path(&cwd.join("specs").join("c.yaml")), "specs/c.yaml");
        // Outside the working directory: the whole path, so that same-named specs differ.
        assert_eq!(display_path(Path::new("/tilegen-no-such-dir/./x//d.yaml")), "/tilegen-no-such-dir/x/d.yaml");
    }

    /// Windows only (paths have no drive elsewhere): the drive stays in front of the root.
    #[cfg(windows)]
    #[test]
    fn display_paths_keep_the_drive() {
        assert_eq!(display_path(Path::new(r"Z:\tilegen-no-such-dir\.\x\d.yaml")), "Z:/tilegen-no-such-dir/x/d.yaml");
    }

    #[test]
    fn writes_are_atomic_and_checks_see_drift() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sm80").join("k.cu");
        let mut files = BTreeMap::new();
        files.insert(path.clone(), "a\nb\n".to_string());
        assert_eq!(check_files(&files, true).unwrap().missing, vec![path.clone()]);
        write_files(&files).unwrap();
        assert!(check_files(&files, true).unwrap().is_clean());
        std::fs::write(&path, "a\nc\n").unwrap();
        // A file of a spec since removed, and one of the user's beside it.
        let old = dir.path().join("sm80").join("old.h");
        std::fs::write(&old, "// old: a kernel\n//\n// Generated by tilegen 0.1.0 from specs/old.yaml -- do not edit\n").unwrap();
        std::fs::write(dir.path().join("sm80").join("mine.h"), "#pragma once\n").unwrap();
        let drift = check_files(&files, true).unwrap();
        assert_eq!(drift.changed.len(), 1);
        assert!(drift.changed[0].1.contains("-c\n+b\n"), "{}", drift.changed[0].1);
        assert_eq!(drift.stale, vec![old.clone()]);
        // Writing again rewrites only the changed file; the stale one can then go.
        assert_eq!(write_files(&files).unwrap(), vec![path.clone()]);
        assert_eq!(write_files(&files).unwrap(), Vec::<PathBuf>::new());
        remove_files(&drift.stale).unwrap();
        assert!(check_files(&files, true).unwrap().is_clean());
        // No temporary files are left behind.
        let mut names: Vec<_> = std::fs::read_dir(dir.path().join("sm80")).unwrap().map(|e| e.unwrap().file_name()).collect();
        names.sort();
        assert_eq!(names, ["k.cu", "mine.h"], "{names:?}");
    }
}
