//! The engine's layers import only downward (docs/architecture.md): a file of a lower layer
//! that names a module of a higher one, or of a sibling on its own level, fails here; so does
//! a circle of files that import each other through `crate::` paths inside one layer.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Each top-level module of engine/ and its level; a file may import only modules of a
/// strictly lower level (and its own module).
const LEVELS: &[(&str, u8)] = &[
    ("http", 7),
    ("pay", 6),
    ("machines", 5),
    ("providers", 4),
    ("web", 4),
    ("chain", 3),
    ("net", 2),
    ("catalog", 1),
    ("config", 1),
    ("evidence", 1),
    ("support", 0),
];

fn level(module: &str) -> Option<u8> {
    LEVELS
        .iter()
        .find(|(name, _)| *name == module)
        .map(|(_, level)| *level)
}

fn engine() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("engine")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("engine/ is readable") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The top-level module a file belongs to (`engine/pay/gate.rs` → `pay`); None for the crate
/// root and the binary, which may import anything.
fn module_of(path: &Path) -> Option<String> {
    let relative = path.strip_prefix(engine()).ok()?;
    let first = relative.components().next()?.as_os_str().to_str()?;
    let name = first.strip_suffix(".rs").unwrap_or(first);
    (name != "lib" && name != "main").then(|| name.to_string())
}

fn without_comment_lines(source: &str) -> String {
    source
        .lines()
        .filter(|line| !line.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The top-level modules a source text names through `crate::`, with `crate::{a, b::c}`
/// groups expanded. Comment lines are skipped.
fn crate_imports(source: &str) -> Vec<String> {
    let code = without_comment_lines(source);
    let mut names = Vec::new();
    for (at, _) in code.match_indices("crate::") {
        let rest = &code[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            names.extend(
                top_level_items(group)
                    .iter()
                    .map(|item| identifier(item.trim())),
            );
        } else {
            names.push(identifier(rest));
        }
    }
    names.retain(|n| !n.is_empty());
    names
}

/// The items of a `{...}` group (its opening brace already consumed) at its own depth.
fn top_level_items(group: &str) -> Vec<&str> {
    let (mut depth, mut start, mut items) = (0usize, 0usize, Vec::new());
    for (i, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => {
                items.push(&group[start..i]);
                return items;
            }
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&group[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    items
}

fn identifier(text: &str) -> String {
    text.chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect()
}

fn violations() -> Vec<String> {
    let mut files = Vec::new();
    rust_files(&engine(), &mut files);
    files.sort();
    let mut found = Vec::new();
    for file in files {
        let Some(module) = module_of(&file) else {
            continue;
        };
        let own = level(&module)
            .unwrap_or_else(|| panic!("{} is in no layer; add {module} to LEVELS", file.display()));
        let source = std::fs::read_to_string(&file).expect("a readable source file");
        for imported in crate_imports(&source) {
            if imported == module {
                continue;
            }
            match level(&imported) {
                Some(theirs) if theirs < own => {}
                Some(_) => found.push(format!(
                    "{} ({module}) imports {imported}",
                    file.strip_prefix(engine()).unwrap_or(&file).display()
                )),
                None => {}
            }
        }
    }
    found
}

#[test]
fn no_file_imports_a_higher_layer_or_a_sibling() {
    let found = violations();
    assert!(
        found.is_empty(),
        "imports against the layering:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_scanner_sees_plain_and_grouped_imports() {
    let source = "use crate::pay::gate;\n// use crate::http::x;\nuse crate::{machines::{Work, Entry}, net};\nlet x = crate::support::now();";
    assert_eq!(crate_imports(source), ["pay", "machines", "net", "support"]);
}

#[test]
fn every_engine_module_has_a_level() {
    let mut files = Vec::new();
    rust_files(&engine(), &mut files);
    for file in files {
        if let Some(module) = module_of(&file) {
            assert!(level(&module).is_some(), "{module} has no level");
        }
    }
}

/// Every `crate::` path a source text names, as segments, with `{a, b::{c, d}}` groups
/// expanded (`crate::x::{y, z::w}` → `x::y`, `x::z::w`). Comment lines are skipped.
fn crate_paths(source: &str) -> Vec<Vec<String>> {
    let code = without_comment_lines(source);
    let mut paths = Vec::new();
    for (at, _) in code.match_indices("crate::") {
        expand(&code[at + "crate::".len()..], Vec::new(), &mut paths);
    }
    paths
}

fn expand(rest: &str, prefix: Vec<String>, out: &mut Vec<Vec<String>>) {
    let mut segments = prefix;
    let mut rest = rest;
    loop {
        if let Some(group) = rest.strip_prefix('{') {
            for item in top_level_items(group) {
                expand(item.trim(), segments.clone(), out);
            }
            return;
        }
        let name = identifier(rest);
        if name.is_empty() {
            break;
        }
        rest = &rest[name.len()..];
        segments.push(name);
        match rest.strip_prefix("::") {
            Some(next) => rest = next,
            None => break,
        }
    }
    if !segments.is_empty() {
        out.push(segments);
    }
}

/// The engine file a path names: the longest prefix that is a module file.
fn file_of(segments: &[String]) -> Option<PathBuf> {
    (1..=segments.len()).rev().find_map(|len| {
        let base = segments[..len]
            .iter()
            .fold(engine(), |dir, segment| dir.join(segment));
        let file = base.with_extension("rs");
        let module_root = base.join("mod.rs");
        [file, module_root]
            .into_iter()
            .find(|candidate| candidate.is_file())
    })
}

/// Which engine files each engine file imports through `crate::` paths.
fn import_graph() -> BTreeMap<PathBuf, BTreeSet<PathBuf>> {
    let mut files = Vec::new();
    rust_files(&engine(), &mut files);
    files
        .into_iter()
        .map(|file| {
            let source = std::fs::read_to_string(&file).expect("a readable source file");
            let imported = crate_paths(&source)
                .iter()
                .filter_map(|path| file_of(path))
                .filter(|target| *target != file)
                .collect();
            (file, imported)
        })
        .collect()
}

/// One circle of the graph as a list of files (the first repeated at the end), if any.
fn a_circle(graph: &BTreeMap<PathBuf, BTreeSet<PathBuf>>) -> Option<Vec<PathBuf>> {
    fn visit(
        file: &PathBuf,
        graph: &BTreeMap<PathBuf, BTreeSet<PathBuf>>,
        stack: &mut Vec<PathBuf>,
        done: &mut BTreeSet<PathBuf>,
    ) -> Option<Vec<PathBuf>> {
        if let Some(at) = stack.iter().position(|f| f == file) {
            let mut circle = stack[at..].to_vec();
            circle.push(file.clone());
            return Some(circle);
        }
        if done.contains(file) {
            return None;
        }
        stack.push(file.clone());
        for next in graph.get(file).into_iter().flatten() {
            if let Some(circle) = visit(next, graph, stack, done) {
                return Some(circle);
            }
        }
        stack.pop();
        done.insert(file.clone());
        None
    }
    let (mut stack, mut done) = (Vec::new(), BTreeSet::new());
    graph
        .keys()
        .find_map(|file| visit(file, graph, &mut stack, &mut done))
}

#[test]
fn no_files_import_each_other_in_a_circle() {
    let circle = a_circle(&import_graph()).map(|files| {
        files
            .iter()
            .map(|f| f.strip_prefix(engine()).unwrap_or(f).display().to_string())
            .collect::<Vec<_>>()
            .join(" -> ")
    });
    assert_eq!(circle, None, "files that import each other");
}

#[test]
fn the_circle_finder_sees_a_loop_through_grouped_imports() {
    let source = "use crate::{http::{state::AppState, admin}, pay::gate::{self, Run}};";
    let paths: Vec<String> = crate_paths(source).iter().map(|p| p.join("::")).collect();
    assert_eq!(
        paths,
        [
            "http::state::AppState",
            "http::admin",
            "pay::gate::self",
            "pay::gate::Run"
        ]
    );
    let (a, b, c) = (PathBuf::from("a"), PathBuf::from("b"), PathBuf::from("c"));
    let mut graph = BTreeMap::new();
    graph.insert(a.clone(), BTreeSet::from([b.clone()]));
    graph.insert(b.clone(), BTreeSet::from([c.clone()]));
    graph.insert(c.clone(), BTreeSet::new());
    assert_eq!(a_circle(&graph), None);
    graph.insert(c.clone(), BTreeSet::from([a.clone()]));
    assert_eq!(a_circle(&graph), Some(vec![a.clone(), b, c, a]));
}
