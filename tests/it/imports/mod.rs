//! Imports run one way (ARCHITECTURE.md): no module imports one that imports
//! it back, in either crate or in the Python package.
//!
//! Three graphs are checked for circles:
//! - files: a file refers to the module of another (`use crate::x::Y`,
//!   `super::x::f()`, `crate::x::y::z()` in code, test code included),
//!   resolved through `use` re-exports to the file that defines the item;
//!   a module's references to its own submodules are not imports (declaring
//!   and using one's children is how a Rust module is built);
//! - folders: within each module that has submodules (the crate root
//!   included), its submodules with everything under each as one node, so
//!   `config/` and `exit.rs` are two nodes of the root's graph, and
//!   `trainer/exec/` and `trainer/model/` two of `trainer/`'s;
//! - the Python package `sluice_trainer`: `from . import x`, `from .x import y`.
//!
//! A failure names every circle with each reference inside it (file, line and
//! the path as written). ARCHITECTURE.md shows each crate's top-level graph
//! in a block this test compares with the code; after a change to the
//! imports, `SLUICE_WRITE_IMPORTS=1 cargo test --test it imports::` writes
//! the blocks anew.

mod graph;
mod lex;
mod python;
mod rust;

use std::path::Path;

use graph::{Graph, Site};
use rust::{Crate, ModPath};

/// The crates checked: a name (as ARCHITECTURE.md's blocks are marked) and
/// the root file.
const CRATES: [(&str, &str); 2] = [
    ("sluice", "src/lib.rs"),
    ("sluice-connectors", "connectors/src/lib.rs"),
];
/// The page that shows each crate's top-level graph.
const ARCHITECTURE: &str = "ARCHITECTURE.md";
/// Set, the blocks of ARCHITECTURE.md are written anew instead of compared.
const WRITE: &str = "SLUICE_WRITE_IMPORTS";
/// Where a line of a block wraps.
const WIDTH: usize = 78;
/// The Python package checked: its directory and the name it is imported by.
const PACKAGE: (&str, &str) = ("python/sluice_trainer/sluice_trainer", "sluice_trainer");

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn read(root: &str) -> Crate {
    rust::read_crate(repo(), root).unwrap_or_else(|e| panic!("{e}"))
}

/// Whether `module` lies inside `outer` (or is it).
fn under(module: &[String], outer: &[String]) -> bool {
    module.starts_with(outer)
}

/// The file graph of a crate: one node per file, an edge where a file refers
/// to another's module, except to its own submodules.
fn file_graph(krate: &Crate) -> Graph {
    let mut graph = Graph::default();
    for file in &krate.files {
        graph.node(&file.rel);
    }
    for edge in krate.edges.iter().filter(|e| !e.test) {
        let (from, to) = (&krate.files[edge.from], &krate.files[edge.to]);
        if under(&to.module, &from.module) {
            continue;
        }
        let site = Site {
            at: format!("{}:{}", from.rel, edge.line),
            written: edge.written.clone(),
        };
        graph.edge(edge.from, edge.to, site);
    }
    graph
}

/// How a submodule is shown: its file, or its folder where it has submodules.
fn shown(krate: &Crate, module: &ModPath) -> String {
    let file = krate.files.iter().find(|f| &f.module == module);
    let rel = file.map(|f| f.rel.as_str()).unwrap_or("?");
    let has_children = krate
        .files
        .iter()
        .any(|f| f.module.len() > module.len() && under(&f.module, module));
    if !has_children {
        return rel.to_string();
    }
    let folder = rel
        .strip_suffix("/mod.rs")
        .or_else(|| rel.strip_suffix(".rs"))
        .unwrap_or(rel);
    format!("{folder}/")
}

/// The graph among the submodules of `parent`: each with everything under it
/// as one node, named as `name` says.
fn level_graph(krate: &Crate, parent: &[String], name: impl Fn(&ModPath) -> String) -> Graph {
    let mut graph = Graph::default();
    let child_of = |module: &ModPath| -> Option<ModPath> {
        (module.len() > parent.len() && under(module, parent))
            .then(|| module[..=parent.len()].to_vec())
    };
    for file in &krate.files {
        if let Some(child) = child_of(&file.module) {
            graph.node(&name(&child));
        }
    }
    for edge in krate.edges.iter().filter(|e| !e.test) {
        let (from, to) = (&krate.files[edge.from], &krate.files[edge.to]);
        if let (Some(a), Some(b)) = (child_of(&from.module), child_of(&to.module)) {
            let (a, b) = (graph.node(&name(&a)), graph.node(&name(&b)));
            let site = Site {
                at: format!("{}:{}", from.rel, edge.line),
                written: edge.written.clone(),
            };
            graph.edge(a, b, site);
        }
    }
    graph
}

/// Every module of the crate that has submodules, the root first.
fn parents(krate: &Crate) -> Vec<ModPath> {
    let mut found: Vec<ModPath> = krate
        .files
        .iter()
        .filter_map(|f| f.module.split_last().map(|(_, up)| up.to_vec()))
        .collect();
    found.sort();
    found.dedup();
    found
}

/// Every circle of `graph`, told.
fn circles(graph: &Graph) -> Vec<String> {
    graph.circles().iter().map(|c| graph.describe(c)).collect()
}

#[test]
fn no_file_imports_a_file_that_imports_it_back() {
    let mut found = Vec::new();
    for (_, root) in CRATES {
        found.extend(circles(&file_graph(&read(root))));
    }
    let (dir, package) = PACKAGE;
    let python = python::read_package(repo(), dir, package).unwrap_or_else(|e| panic!("{e}"));
    found.extend(circles(&python));
    assert!(
        found.is_empty(),
        "import circles between files:\n{}",
        found.join("")
    );
}

#[test]
fn no_folder_imports_one_that_imports_it_back() {
    let mut found = Vec::new();
    for (_, root) in CRATES {
        let krate = read(root);
        for parent in parents(&krate) {
            let graph = level_graph(&krate, &parent, |m| shown(&krate, m));
            found.extend(circles(&graph));
        }
    }
    assert!(
        found.is_empty(),
        "import circles between folders:\n{}",
        found.join("")
    );
}

/// The block ARCHITECTURE.md shows for a crate: its top-level modules from
/// the top layer down, each with every module it imports, so that each line
/// names only modules below it.
fn block(graph: &Graph) -> Result<String, String> {
    let layers = graph.layers().ok_or_else(|| {
        "its top-level modules import in a circle (see the test of folders)".to_string()
    })?;
    let width = graph.nodes.iter().map(String::len).max().unwrap_or(0);
    let mut text = String::from("```text\n");
    for node in layers.into_iter().flatten() {
        let mut line = format!("{:width$}", graph.nodes[node]);
        let imports = graph.imports_of(node);
        if imports.is_empty() {
            line = format!("{line}    (imports none)");
        }
        for (i, name) in imports.iter().enumerate() {
            let joint = if i == 0 { " ─► " } else { " " };
            if line.chars().count() + joint.len() + name.len() > WIDTH {
                text += line.trim_end();
                text.push('\n');
                line = " ".repeat(width + 3);
            }
            line += joint;
            line += name;
        }
        text += line.trim_end();
        text.push('\n');
    }
    text += "```\n";
    Ok(text)
}

/// The markers around a crate's block in ARCHITECTURE.md.
fn markers(name: &str) -> (String, String) {
    (
        format!("<!-- imports of {name}: written by tests/it/imports ({WRITE}=1 cargo test --test it imports::) -->\n"),
        format!("<!-- end of the imports of {name} -->\n"),
    )
}

/// `page` with the lines between the line that ends with `begin` and the
/// line that ends with `end` replaced by `block`, each of its lines indented
/// as the `begin` line is (a block inside a list item); an error where the
/// markers are not there.
fn replaced(page: &str, begin: &str, end: &str, block: &str) -> Result<String, String> {
    let at = page
        .find(begin)
        .ok_or_else(|| format!("no line {begin:?}"))?;
    let indent = &page[page[..at].rfind('\n').map_or(0, |n| n + 1)..at];
    if !indent.chars().all(|c| c == ' ') {
        return Err(format!("{begin:?} must start its line"));
    }
    let start = at + begin.len();
    let stop = start
        + page[start..]
            .find(end)
            .ok_or_else(|| format!("no line {end:?}"))?;
    let stop = page[..stop].rfind('\n').map_or(stop, |n| n + 1);
    let block: String = block.lines().map(|l| format!("{indent}{l}\n")).collect();
    Ok(format!("{}{block}{}", &page[..start], &page[stop..]))
}

#[test]
fn architecture_shows_the_import_graph_of_the_code() {
    let path = repo().join(ARCHITECTURE);
    let page = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{ARCHITECTURE}: {e}"));
    let mut written = page.clone();
    let mut shown = String::new();
    for (name, root) in CRATES {
        let krate = read(root);
        let graph = level_graph(&krate, &[], |m| m.join("::"));
        let block = block(&graph).unwrap_or_else(|e| panic!("{name}: {e}"));
        let (begin, end) = markers(name);
        written = replaced(&written, &begin, &end, &block)
            .unwrap_or_else(|e| panic!("{ARCHITECTURE}: {e}"));
        shown += &format!("{begin}{block}{end}");
    }
    if written == page {
        return;
    }
    if std::env::var_os(WRITE).is_some() {
        std::fs::write(&path, written).unwrap_or_else(|e| panic!("{ARCHITECTURE}: {e}"));
        return;
    }
    panic!(
        "{ARCHITECTURE}'s import graphs differ from the code's; \
         `{WRITE}=1 cargo test --test it imports::` writes them anew. The code's:\n{shown}"
    );
}
