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
