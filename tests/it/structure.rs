//! The crate's file structure: no circle of imports between the files of `src/`.
//!
//! Data flows one way (key → validation → backend → lease → guard → heartbeat); a file that
//! imports from a file which imports from it, directly or around a loop, is a type kept in the
//! wrong file. This reads the `use` lines (and `pub use` re-exports) of every `.rs` file,
//! resolves each imported name to the file that defines it (following re-exports), and fails
//! with every circle it finds. Lines rustfmt formats; no parser beyond that.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// Circles tolerated for now, each as its files in sorted order: none since the restructuring
/// of issue 24. Any other circle fails the test, and so does one of these once it has changed
/// or gone (update it here then).
const KNOWN_CIRCLES: &[&[&str]] = &[];

/// One `.rs` file of a crate (keyed by its module path): its path under `src/` and its `use`
/// declarations.
struct Module {
    file: String,
    uses: Vec<Use>,
}

/// One `use` declaration.
struct Use {
    /// The module the declaration sits in, from the crate root.
    scope: Vec<String>,
    /// The imported paths, expanded from the use tree, each with the name it binds.
    paths: Vec<(Vec<String>, String)>,
    /// Whether it re-exports (`pub`, `pub(crate)`, `pub(super)`): other files may import
    /// through it.
    public: bool,
}

#[test]
fn no_file_level_import_circles() {
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src");
    let (mut found, mut imports) = (BTreeSet::new(), BTreeMap::new());
    for files in crates(&src) {
        let edges = edges(&read_modules(&src, &files));
        found.extend(circles(&edges));
        imports.extend(edges);
    }
    let known: BTreeSet<Vec<String>> = KNOWN_CIRCLES
        .iter()
        .map(|circle| circle.iter().map(|file| (*file).to_owned()).collect())
        .collect();
    let new: Vec<_> = found.difference(&known).collect();
    let gone: Vec<_> = known.difference(&found).collect();
    assert!(
        new.is_empty() && gone.is_empty(),
        "file-level import circles in src/ (each file, then the files of its circle it imports \
         from):\n{}\nknown circles no longer found as listed (update KNOWN_CIRCLES):\n{}",
        show(&new, &imports),
        show(&gone, &imports)
    );
}

/// Each circle as its files, each followed by those of the circle it imports from.
fn show(circles: &[&Vec<String>], imports: &BTreeMap<String, BTreeSet<String>>) -> String {
    let mut lines = Vec::new();
    for circle in circles {
        lines.push(format!("  {circle:?}"));
        for file in *circle {
            let within: Vec<&String> = imports
                .get(file)
                .into_iter()
                .flatten()
                .filter(|target| circle.contains(target))
                .collect();
            lines.push(format!("    {file} -> {within:?}"));
        }
    }
    if lines.is_empty() {
        lines.push("  (none)".to_owned());
    }
    lines.join("\n")
}

/// Each crate under `src/`: the library (`lib.rs`) and each binary (`bin/NAME/main.rs`,
/// `bin/NAME.rs`), with its files and their module paths.
fn crates(src: &Path) -> Vec<BTreeMap<Vec<String>, PathBuf>> {
    let mut crates = Vec::new();
    let bin = src.join("bin");
    let mut lib = BTreeMap::new();
    collect(src, &[], &mut lib, Some(&bin));
    crates.push(lib);
    if let Ok(entries) = fs::read_dir(&bin) {
        for entry in entries {
            let path = entry.unwrap().path();
            let mut files = BTreeMap::new();
            if path.is_dir() {
                collect(&path, &[], &mut files, None);
                files.insert(Vec::new(), path.join("main.rs"));
            } else {
                files.insert(Vec::new(), path.clone());
            }
            crates.push(files);
        }
    }
    crates
}

/// The `.rs` files under `dir`, by module path (`x.rs` and `x/mod.rs` are module `x`; the
/// crate root has the empty path).
fn collect(
    dir: &Path,
    prefix: &[String],
    files: &mut BTreeMap<Vec<String>, PathBuf>,
    skip: Option<&Path>,
) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if Some(path.as_path()) == skip {
            continue;
        }
        let name = path.file_name().unwrap().to_str().unwrap().to_owned();
        if path.is_dir() {
            let mut inner = prefix.to_vec();
            inner.push(name);
            collect(&path, &inner, files, skip);
        } else if let Some(stem) = name.strip_suffix(".rs") {
            let mut module = prefix.to_vec();
            if !matches!(stem, "mod" | "lib" | "main") || !prefix.is_empty() && stem != "mod" {
                module.push(stem.to_owned());
            }
            files.insert(module, path);
        }
    }
}

/// Reads each file of a crate.
fn read_modules(
    src: &Path,
    files: &BTreeMap<Vec<String>, PathBuf>,
) -> BTreeMap<Vec<String>, Module> {
    files
        .iter()
        .map(|(module, path)| {
            let text = fs::read_to_string(path).unwrap();
            let file = path.strip_prefix(src).unwrap_or(path).display().to_string();
            let uses = parse_uses(&text, module);
            (module.clone(), Module { file, uses })
        })
        .collect()
}

/// The `use` declarations of a file, outside comments, with the inline module each sits in
/// (tracked by rustfmt's indentation: `mod name {` opens one, a `}` at its indent closes it).
fn parse_uses(text: &str, module: &[String]) -> Vec<Use> {
    let mut uses = Vec::new();
    let mut inline: Vec<(usize, String)> = Vec::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        let code = line.trim_start();
        let indent = line.len() - code.len();
        if code.starts_with("//") {
            continue;
        }
        if inline
            .last()
            .is_some_and(|(at, _)| *at == indent && code.starts_with('}'))
        {
            inline.pop();
            continue;
        }
        let declaration = ["pub use ", "pub(crate) use ", "pub(super) use ", "use "]
            .iter()
            .find_map(|start| {
                code.strip_prefix(start)
                    .map(|rest| (start.starts_with("pub"), rest))
            });
        if let Some((public, rest)) = declaration {
            let mut tree = rest.to_owned();
            while !tree.contains(';') {
                tree.push_str(lines.next().expect("a use declaration ends").trim());
            }
            let tree = tree.split(';').next().unwrap();
            let mut scope = module.to_vec();
            scope.extend(inline.iter().map(|(_, name)| name.clone()));
            let mut paths = Vec::new();
            expand(tree, &[], &mut paths);
            uses.push(Use {
                scope,
                paths,
                public,
            });
            continue;
        }
        let opened = code
            .strip_prefix("pub ")
            .or(code.strip_prefix("pub(crate) "))
            .unwrap_or(code)
            .strip_prefix("mod ")
            .and_then(|rest| rest.strip_suffix(" {"));
        if let Some(name) = opened {
            inline.push((indent, name.to_owned()));
        }
    }
    uses
}

/// Expands a use tree (`a::{b, c::d as e, f::*}`) into its paths, each with the name it binds.
fn expand(tree: &str, prefix: &[String], out: &mut Vec<(Vec<String>, String)>) {
    let tree: String = tree.split_whitespace().collect::<Vec<_>>().join(" ");
    let tree = tree.trim().trim_start_matches("::");
    if let Some(open) = tree.find('{') {
        let mut path = prefix.to_vec();
        path.extend(segments(&tree[..open]));
        let inner = &tree[open + 1..tree.rfind('}').expect("a use group closes")];
        for part in split_top_level(inner) {
            expand(part, &path, out);
        }
        return;
    }
    if tree.is_empty() {
        return;
    }
    let (path, alias) = match tree.split_once(" as ") {
        Some((path, alias)) => (path, Some(alias.trim())),
        None => (tree, None),
    };
    let mut full = prefix.to_vec();
    full.extend(segments(path));
    if full.last().is_some_and(|last| last == "self") {
        full.pop();
    }
    let name = alias.map_or_else(|| full.last().cloned().unwrap_or_default(), str::to_owned);
    out.push((full, name));
}

/// The segments of a path (`a::b` → `a`, `b`).
fn segments(path: &str) -> impl Iterator<Item = String> + '_ {
    path.split("::")
        .map(str::trim)
        .filter(|segment| !segment.is_empty())
        .map(str::to_owned)
}

/// Splits a use group's contents at the commas outside nested braces.
fn split_top_level(group: &str) -> Vec<&str> {
    let (mut parts, mut depth, mut start) = (Vec::new(), 0, 0);
    for (at, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&group[start..at]);
                start = at + 1;
            }
            _ => {}
        }
    }
    parts.push(&group[start..]);
    parts
}

/// Which file imports from which: each imported name resolved to the file defining it.
fn edges(modules: &BTreeMap<Vec<String>, Module>) -> BTreeMap<String, BTreeSet<String>> {
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (module, source) in modules {
        for declaration in &source.uses {
            for (path, _) in &declaration.paths {
                let Some(absolute) = absolute(path, &declaration.scope, module, modules) else {
                    continue;
                };
                if let Some(target) = resolve(&absolute, modules, 0) {
                    let file = &modules[&target].file;
                    if *file != source.file {
                        edges
                            .entry(source.file.clone())
                            .or_default()
                            .insert(file.clone());
                    }
                }
            }
        }
    }
    edges
}

/// `path` from the crate root, or `None` for another crate's (`std::…`, a dependency).
fn absolute(
    path: &[String],
    scope: &[String],
    module: &[String],
    modules: &BTreeMap<Vec<String>, Module>,
) -> Option<Vec<String>> {
    let first = path.first()?;
    let mut base: Vec<String> = match first.as_str() {
        "crate" => Vec::new(),
        "self" | "super" => scope.to_vec(),
        // A child module named without `self::` (2018 paths).
        _ => {
            let mut child = module.to_vec();
            child.push(first.clone());
            if modules.contains_key(&child) && scope == module {
                module.to_vec()
            } else {
                return None;
            }
        }
    };
    let mut rest = path;
    if matches!(first.as_str(), "crate" | "self") {
        rest = &path[1..];
    }
    while rest.first().is_some_and(|segment| segment == "super") {
        base.pop()?;
        rest = &rest[1..];
    }
    base.extend(rest.iter().cloned());
    Some(base)
}

/// The file module defining what `path` names: the longest module prefix that is a file, then
/// through that file's re-export of the next name, if it has one.
fn resolve(
    path: &[String],
    modules: &BTreeMap<Vec<String>, Module>,
    depth: usize,
) -> Option<Vec<String>> {
    let length = (0..=path.len())
        .rev()
        .find(|length| modules.contains_key(&path[..*length]))?;
    let module = path[..length].to_vec();
    let Some(name) = path.get(length) else {
        return Some(module);
    };
    if depth < 16 {
        for declaration in modules[&module].uses.iter().filter(|u| u.public) {
            for (target, bound) in &declaration.paths {
                if bound != name {
                    continue;
                }
                let absolute = absolute(target, &declaration.scope, &module, modules);
                if let Some(mut absolute) = absolute {
                    absolute.extend(path[length + 1..].iter().cloned());
                    return resolve(&absolute, modules, depth + 1);
                }
            }
        }
    }
    Some(module)
}

/// The circles: each set of two or more files that all reach one another through imports (a
/// strongly connected component), as its sorted files.
fn circles(edges: &BTreeMap<String, BTreeSet<String>>) -> BTreeSet<Vec<String>> {
    let reach: BTreeMap<&String, BTreeSet<&String>> = edges
        .keys()
        .map(|file| {
            let mut seen = BTreeSet::new();
            let mut stack = vec![file];
            while let Some(next) = stack.pop() {
                for target in edges.get(next).into_iter().flatten() {
                    if seen.insert(target) {
                        stack.push(target);
                    }
                }
            }
            (file, seen)
        })
        .collect();
    reach
        .iter()
        .filter(|(file, reached)| reached.contains(*file))
        .map(|(file, reached)| {
            reached
                .iter()
                .filter(|other| reach.get(*other).is_some_and(|back| back.contains(*file)))
                .map(|other| (*other).clone())
                .collect()
        })
        .collect()
}
