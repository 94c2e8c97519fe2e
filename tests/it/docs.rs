//! The README and the reference under `docs/`: the README stays short, every reference page is
//! reachable from it, every relative link and anchor resolves, and every page's examples are
//! compiled as doctests (`src/lib.rs`, `doc_examples`).

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::fs;
use std::path::{Path, PathBuf};

/// The README's budget: the pitch, install, usage, URLs, a short CLI section and links.
const README_MAX_LINES: usize = 200;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The pages: the README and every `docs/*.md`, as paths relative to the crate root.
fn pages() -> Vec<String> {
    let mut pages = vec!["README.md".to_owned()];
    let mut docs: Vec<String> = fs::read_dir(root().join("docs"))
        .unwrap()
        .map(|entry| entry.unwrap().file_name().into_string().unwrap())
        .filter(|name| name.ends_with(".md"))
        .map(|name| format!("docs/{name}"))
        .collect();
    docs.sort();
    pages.extend(docs);
    pages
}

/// The lines of a page outside fenced code blocks, with inline code spans removed: what
/// Markdown renders as headings and links.
fn prose(text: &str) -> Vec<String> {
    let mut fenced = false;
    let mut lines = Vec::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        // A code span opened by a run of n backticks ends at the next run of exactly n.
        let mut out = String::new();
        let mut rest = line;
        while let Some(start) = rest.find('`') {
            out.push_str(&rest[..start]);
            let run = rest[start..].chars().take_while(|&c| c == '`').count();
            let after = &rest[start + run..];
            let fence = "`".repeat(run);
            match after.find(&fence) {
                Some(end) => rest = &after[end + run..],
                None => {
                    rest = after;
                }
            }
        }
        out.push_str(rest);
        lines.push(out);
    }
    lines
}

/// GitHub's anchor for a heading: lowercase, letters, digits, `-` and `_` kept, spaces to
/// `-`, everything else dropped; a repeated anchor gets `-1`, `-2`, ….
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut anchors = BTreeSet::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        let Some(heading) = line.strip_prefix('#') else {
            continue;
        };
        if fenced {
            continue;
        }
        let heading = heading.trim_start_matches('#').trim();
        let slug: String = heading
            .to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
            .map(|c| if c == ' ' { '-' } else { c })
            .collect();
        let count = seen.entry(slug.clone()).or_default();
        anchors.insert(if *count == 0 {
            slug.clone()
        } else {
            format!("{slug}-{count}")
        });
        *count += 1;
    }
    anchors
}

/// The targets of the inline links `[text](target)` of a page.
fn links(text: &str) -> Vec<String> {
    let mut links = Vec::new();
    for line in prose(text) {
        let mut rest = line.as_str();
        while let Some(start) = rest.find("](") {
            let after = &rest[start + 2..];
            let Some(end) = after.find(')') else { break };
            links.push(after[..end].to_owned());
            rest = &after[end..];
        }
    }
    links
}

/// A relative link's page (relative to the crate root) and anchor.
fn resolve(from: &str, target: &str) -> (String, Option<String>) {
    let (path, anchor) = match target.split_once('#') {
        Some((path, anchor)) => (path, Some(anchor.to_owned())),
        None => (target, None),
    };
    if path.is_empty() {
        return (from.to_owned(), anchor);
    }
    let dir = Path::new(from).parent().unwrap_or(Path::new(""));
    let mut parts: Vec<String> = Vec::new();
    for part in dir.join(path).components() {
        match part.as_os_str().to_str().unwrap() {
            "." => {}
            ".." => {
                assert!(
                    parts.pop().is_some(),
                    "{from}: {target} leaves the repository"
                );
            }
            other => parts.push(other.to_owned()),
        }
    }
    (parts.join("/"), anchor)
}

#[test]
fn the_readme_is_short() {
    let readme = fs::read_to_string(root().join("README.md")).unwrap();
    let lines = readme.lines().count();
    assert!(
        lines <= README_MAX_LINES,
        "the README has {lines} lines; the reference belongs in docs/"
    );
}

#[test]
fn every_link_and_anchor_resolves() {
    let mut broken = Vec::new();
    for page in pages() {
        let text = fs::read_to_string(root().join(&page)).unwrap();
        for target in links(&text) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (path, anchor) = resolve(&page, &target);
            let file = root().join(&path);
            if !file.exists() {
                broken.push(format!("{page}: {target}: no file {path}"));
                continue;
            }
            if let Some(anchor) = anchor {
                let target_text = fs::read_to_string(&file).unwrap_or_default();
                if !anchors(&target_text).contains(&anchor) {
                    broken.push(format!("{page}: {target}: no heading #{anchor} in {path}"));
                }
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn every_reference_page_is_reachable_from_the_readme() {
    let mut reached = BTreeSet::from(["README.md".to_owned()]);
    let mut queue = VecDeque::from(["README.md".to_owned()]);
    while let Some(page) = queue.pop_front() {
        // A link to a missing page is every_link_and_anchor_resolves's to report.
        let Ok(text) = fs::read_to_string(root().join(&page)) else {
            continue;
        };
        for target in links(&text) {
            let (path, _) = resolve(&page, &target);
            if !target.contains("://") && path.ends_with(".md") && reached.insert(path.clone()) {
                queue.push_back(path);
            }
        }
    }
    let unreached: Vec<String> = pages()
        .into_iter()
        .filter(|page| !reached.contains(page))
        .collect();
    assert!(
        unreached.is_empty(),
        "not reachable from the README: {unreached:?}"
    );
}

#[test]
fn every_reference_page_is_compiled_as_doctests() {
    let lib = fs::read_to_string(root().join("src/lib.rs")).unwrap();
    let missing: Vec<String> = pages()
        .into_iter()
        .filter(|page| !lib.contains(&format!("#[doc = include_str!(\"../{page}\")]")))
        .collect();
    assert!(
        missing.is_empty(),
        "pages whose examples no doctest compiles (add them to doc_examples in src/lib.rs): \
         {missing:?}"
    );
}

#[test]
fn anchors_follow_github() {
    let page = "# The `syncguard` command (cron and shell scripts)\n## Errors\n## Errors\n\
                ```sh\n# not a heading\n```\n### `connect(url)` and `SYNCGUARD_URL`\n";
    assert_eq!(
        anchors(page),
        BTreeSet::from([
            "the-syncguard-command-cron-and-shell-scripts".to_owned(),
            "errors".to_owned(),
            "errors-1".to_owned(),
            "connecturl-and-syncguard_url".to_owned(),
        ])
    );
    assert_eq!(
        links("see [a](b.md#c), `[not](a link)` and ``[nor](this)``"),
        ["b.md#c"]
    );
}

/// The names of the functions defined in the Rust files under `dir`, recursively.
fn functions_under(dir: &Path, names: &mut BTreeSet<String>) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            functions_under(&path, names);
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            let text = fs::read_to_string(&path).unwrap_or_default();
            for piece in text.split("fn ").skip(1) {
                let name: String = piece
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                names.insert(name);
            }
        }
    }
}

/// Whether `name` matches `pattern`, where `*` stands for any run of characters.
fn matches_pattern(pattern: &str, name: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if parts.len() == 1 {
        return name == pattern;
    }
    if !name.starts_with(first) || !name[first.len()..].ends_with(last) {
        return false;
    }
    let mut rest = &name[first.len()..name.len() - last.len()];
    for part in &parts[1..parts.len() - 1] {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    true
}

/// Every test docs/reliability.md's table names in its "tested by" column exists: a function
/// of that name (`*` standing for any run of characters; a `module::` path counts by its last
/// name) in `src/` or `tests/`, or a file of that path. A renamed or removed test fails here
/// instead of leaving a guarantee untested in silence.
#[test]
fn every_test_the_reliability_table_names_exists() {
    let page = fs::read_to_string(root().join("docs/reliability.md")).unwrap();
    let mut functions = BTreeSet::new();
    functions_under(&root().join("src"), &mut functions);
    functions_under(&root().join("tests"), &mut functions);
    let rows: Vec<&str> = page
        .lines()
        .skip_while(|line| !line.starts_with("| guarantee | tested by |"))
        .skip(2)
        .take_while(|line| line.starts_with('|'))
        .collect();
    assert!(rows.len() >= 10, "the table was not found");
    let mut missing = Vec::new();
    for row in rows {
        let cells: Vec<&str> = row.trim_matches('|').split(" | ").collect();
        let tested_by = cells.last().copied().unwrap_or_default();
        assert!(tested_by.contains('`'), "a guarantee names no test: {row}");
        for (at, span) in tested_by.split('`').enumerate() {
            if at % 2 == 0 {
                continue;
            }
            if span.contains('/') {
                if span.ends_with(".rs") && !root().join(span).exists() {
                    missing.push(span.to_owned());
                }
                continue;
            }
            let name = span.rsplit("::").next().unwrap_or(span);
            let is_test_name = name.contains('_')
                && name
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '*');
            if is_test_name && !functions.iter().any(|f| matches_pattern(name, f)) {
                missing.push(span.to_owned());
            }
        }
    }
    assert!(
        missing.is_empty(),
        "tests docs/reliability.md names that do not exist: {missing:?}"
    );
    assert!(matches_pattern("racing_*", "racing_acquires"));
    assert!(matches_pattern("*_deadline", "redis_ends_at_its_deadline"));
    assert!(!matches_pattern("*_deadline", "deadline_passed"));
}
