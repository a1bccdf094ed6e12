//! A Python package's modules and their imports of each other: `from . import
//! x`, `from .x import y`, and the same through the package's own name,
//! wherever written (an import inside a function counts as one at the top).
//! `__init__.py` is a module like the others: what it imports runs when the
//! package is imported.

use std::path::Path;

use super::graph::{Graph, Site};

/// The module a relative import names: `x` of `.x`, or `__init__` for `.`
/// itself; `None` for one that leaves the package (`..`).
fn named(dotted: &str) -> Option<&str> {
    let rest = dotted.strip_prefix('.')?;
    if rest.starts_with('.') {
        return None;
    }
    Some(
        rest.split('.')
            .next()
            .filter(|s| !s.is_empty())
            .unwrap_or("__init__"),
    )
}

/// The modules one import statement names, relative to the package
/// `package` whose modules are `modules`.
fn imported(statement: &str, package: &str, modules: &[String]) -> Vec<String> {
    let own = |dotted: &str| -> Option<String> {
        if dotted.starts_with('.') {
            return Some(dotted.to_string());
        }
        let rest = dotted.strip_prefix(package)?;
        (rest.is_empty() || rest.starts_with('.'))
            .then(|| format!(".{}", rest.trim_start_matches('.')))
    };
    let module_or_init = |name: &str| {
        if modules.iter().any(|m| m == name) {
            name.to_string()
        } else {
            "__init__".to_string()
        }
    };
    let words: Vec<&str> = statement.split_whitespace().collect();
    match words.as_slice() {
        ["from", from, "import", names @ ..] => match own(from).as_deref().and_then(named) {
            Some("__init__") => names
                .join(" ")
                .split(',')
                .filter_map(|n| n.split_whitespace().next())
                .map(|n| module_or_init(n.trim_matches(|c| c == '(' || c == ')')))
                .collect(),
            Some(module) => vec![module.to_string()],
            None => Vec::new(),
        },
        ["import", names @ ..] => names
            .join(" ")
            .split(',')
            .filter_map(|n| n.split_whitespace().next())
            .filter_map(|n| own(n).as_deref().and_then(named).map(str::to_string))
            .collect(),
        _ => Vec::new(),
    }
}

/// The import statements of a file and their lines: docstrings and comments
/// skipped, a parenthesized list joined onto its first line.
fn statements(text: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    let mut in_string: Option<&str> = None;
    let mut open: Option<(usize, String)> = None;
    for (index, line) in text.lines().enumerate() {
        let code = line.split('#').next().unwrap_or("").trim();
        if let Some((start, mut joined)) = open.take() {
            joined.push(' ');
            joined.push_str(code);
            if code.contains(')') {
                found.push((start, joined));
            } else {
                open = Some((start, joined));
            }
            continue;
        }
        for quote in ["\"\"\"", "'''"] {
            let count = line.matches(quote).count();
            if in_string == Some(quote) && count % 2 == 1 {
                in_string = None;
            } else if in_string.is_none() && count % 2 == 1 {
                in_string = Some(quote);
            }
        }
        if in_string.is_some() || !(code.starts_with("from ") || code.starts_with("import ")) {
            continue;
        }
        if code.contains('(') && !code.contains(')') {
            open = Some((index + 1, code.to_string()));
        } else {
            found.push((index + 1, code.to_string()));
        }
    }
    found
}

/// The import graph of the package in `dir` (relative to `repo`), imported
/// as `package`: one node per module file.
pub fn read_package(repo: &Path, dir: &str, package: &str) -> Result<Graph, String> {
    let entries =
        std::fs::read_dir(repo.join(dir)).map_err(|e| format!("cannot list {dir}: {e}"))?;
    let mut modules: Vec<String> = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| format!("cannot list {dir}: {e}"))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if let Some(module) = name.strip_suffix(".py") {
            modules.push(module.to_string());
        }
    }
    modules.sort();
    let mut graph = Graph::default();
    for module in &modules {
        graph.node(&format!("{dir}/{module}.py"));
    }
    for module in &modules {
        let rel = format!("{dir}/{module}.py");
        let text = std::fs::read_to_string(repo.join(&rel))
            .map_err(|e| format!("cannot read {rel}: {e}"))?;
        let from = graph.node(&rel);
        for (line, statement) in statements(&text) {
            for target in imported(&statement, package, &modules) {
                let to = graph.node(&format!("{dir}/{target}.py"));
                let site = Site {
                    at: format!("{rel}:{line}"),
                    written: statement.clone(),
                };
                graph.edge(from, to, site);
            }
        }
    }
    Ok(graph)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn imports_name_modules() {
        let modules = ["__init__", "_message", "_protocol"].map(String::from);
        let of = |s: &str| imported(s, "pkg", &modules);
        assert_eq!(of("from . import _message"), ["_message"]);
        assert_eq!(
            of("from . import (_message, Thing)"),
            ["_message", "__init__"]
        );
        assert_eq!(of("from ._protocol import SluiceError"), ["_protocol"]);
        assert_eq!(of("from pkg._protocol import X"), ["_protocol"]);
        assert_eq!(of("import pkg._message as m, os"), ["_message"]);
        assert_eq!(of("import pkg"), ["__init__"]);
        assert!(of("from .. import x").is_empty());
        assert!(of("import os").is_empty());
        assert!(of("from pkgx import y").is_empty());
    }

    #[test]
    fn docstrings_and_lists() {
        let text = "\"\"\"Use it so:\n\n    import pkg\n\"\"\"\nimport os\n\
                    def f():\n    from ._a import (b,\n        c)\n";
        let found = statements(text);
        assert_eq!(
            found,
            [
                (5, "import os".to_string()),
                (7, "from ._a import (b, c)".to_string())
            ]
        );
    }
}
