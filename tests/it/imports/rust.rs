//! A Rust crate's modules and the references between them: every path that
//! starts with `crate::`, `super::` or `self::`, in `use` declarations and
//! anywhere else (`crate::x::f()`), resolved to the file of the module that
//! defines what it names, through `use` re-exports (`pub use crate::types::X`
//! in `dataset` makes `crate::dataset::X` a reference to `types`).

use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};

use super::lex::{tokens, Kind, Token};

/// A module's path from its crate's root (`[]` is the root).
pub type ModPath = Vec<String>;

/// One source file of a crate: the module it holds.
#[derive(Debug)]
pub struct File {
    /// The file, relative to the repository.
    pub rel: String,
    /// The module it holds.
    pub module: ModPath,
    /// Compiled only for tests (`#[cfg(test)] mod x;`, or inside such a module).
    pub test: bool,
}

/// A reference from one file to another module's file.
#[derive(Debug)]
pub struct Edge {
    /// The referring file.
    pub from: usize,
    /// The file of the module that defines what the path names.
    pub to: usize,
    /// The path's line in `from`.
    pub line: usize,
    /// The path as written (`crate::dataset::DatasetOptions`).
    pub written: String,
    /// Written in test code.
    pub test: bool,
}

/// A crate: its files and the references between them.
#[derive(Debug)]
pub struct Crate {
    /// Every file, the root (`lib.rs`) first.
    pub files: Vec<File>,
    /// Every reference to another file's module, in file and line order.
    pub edges: Vec<Edge>,
}

/// A `mod name;` declaration.
struct Child {
    scope: Vec<String>,
    name: String,
    path_attr: Option<String>,
    test: bool,
}

/// A path written in a file: a `use` leaf or a path in code.
struct Written {
    /// The inline modules it is written in (`mod tests { ... }`), outermost first.
    scope: Vec<String>,
    /// Its segments as written, `crate`, `super` and `self` included.
    segments: Vec<String>,
    /// The name a `use` gives it (`None`: a glob, or not a `use`).
    alias: Option<String>,
    line: usize,
    test: bool,
}

/// What one file declares and writes.
#[derive(Default)]
struct Parsed {
    children: Vec<Child>,
    inline: Vec<Vec<String>>,
    uses: Vec<Written>,
    paths: Vec<Written>,
    test: bool,
}

/// A block being read: an inline module (its name) or an item under
/// `#[cfg(test)]` (none), the brace depth inside it, and whether it is test
/// code.
struct Open {
    name: Option<String>,
    depth: usize,
    test: bool,
}

/// Attributes read before the next item.
#[derive(Default)]
struct Pending {
    path: Option<String>,
    test: bool,
}

/// Reads one attribute (`#[...]` or `#![...]`) at `i`: what the import graph
/// needs of it (`path = "..."`, `cfg(test)`) goes into `pending`. Returns the
/// index after it, and whether it was an inner `#![cfg(test)]`.
fn attribute(toks: &[Token], mut i: usize, pending: &mut Pending) -> (usize, bool) {
    let inner = toks.get(i + 1).is_some_and(|t| t.punct("!"));
    i += if inner { 3 } else { 2 };
    let start = i;
    let mut depth = 1;
    while i < toks.len() && depth > 0 {
        if toks[i].punct("[") {
            depth += 1;
        } else if toks[i].punct("]") {
            depth -= 1;
        }
        i += 1;
    }
    let body = &toks[start..i.saturating_sub(1)];
    let words: Vec<&str> = body.iter().map(|t| t.text.as_str()).collect();
    let test = words == ["cfg", "(", "test", ")"];
    if words.len() == 3 && words[0] == "path" && words[1] == "=" && body[2].kind == Kind::Str {
        pending.path = Some(body[2].text.clone());
    }
    if test && !inner {
        pending.test = true;
    }
    (i, inner && test)
}

/// Reads a use tree at `i` under `prefix`, pushing its leaves; returns the
/// index after it.
fn use_tree(
    toks: &[Token],
    mut i: usize,
    prefix: Vec<String>,
    out: &mut Vec<(Option<String>, Vec<String>, usize)>,
) -> usize {
    let mut segments = prefix;
    while let Some(tok) = toks.get(i) {
        if tok.punct("{") {
            i += 1;
            while toks.get(i).is_some_and(|t| !t.punct("}")) {
                i = use_tree(toks, i, segments.clone(), out);
                if toks.get(i).is_some_and(|t| t.punct(",")) {
                    i += 1;
                }
            }
            return i + 1;
        }
        if tok.punct("*") {
            out.push((None, segments, tok.line));
            return i + 1;
        }
        if tok.kind != Kind::Ident {
            return i;
        }
        let next_is_path = toks.get(i + 1).is_some_and(|t| t.punct("::"));
        if !(tok.is("self") && !next_is_path && !segments.is_empty()) {
            segments.push(tok.text.clone());
        }
        i += 1;
        if next_is_path {
            i += 1;
            continue;
        }
        let mut alias = segments.last().cloned();
        if toks.get(i).is_some_and(|t| t.is("as")) {
            alias = toks.get(i + 1).map(|t| t.text.clone());
            i += 2;
        }
        out.push((alias, segments, tok.line));
        return i;
    }
    i
}

/// Reads a path in code that starts at `i` with `crate`, `super` or `self`;
/// returns its segments and the index after it.
fn code_path(toks: &[Token], mut i: usize) -> (Vec<String>, usize) {
    let mut segments = Vec::new();
    while let Some(tok) = toks.get(i).filter(|t| t.kind == Kind::Ident) {
        segments.push(tok.text.clone());
        i += 1;
        let more = toks.get(i).is_some_and(|t| t.punct("::"))
            && toks.get(i + 1).is_some_and(|t| t.kind == Kind::Ident);
        if !more {
            break;
        }
        i += 1;
    }
    (segments, i)
}

/// Whether `tok` at `i` starts a path of the crate's own (`crate::`,
/// `super::`, `self::`), not the tail of a longer path or a macro's `$crate`.
fn starts_path(toks: &[Token], i: usize) -> bool {
    let tok = &toks[i];
    let base = tok.is("crate") || tok.is("super") || tok.is("self");
    let before = i.checked_sub(1).map(|k| &toks[k]);
    base && toks.get(i + 1).is_some_and(|t| t.punct("::"))
        && !before.is_some_and(|t| t.punct("::") || t.punct("$"))
}

/// One file being read: what it declared and wrote so far, the blocks open
/// at the cursor, and the attributes read before the next item.
struct Reader {
    toks: Vec<Token>,
    parsed: Parsed,
    open: Vec<Open>,
    pending: Pending,
    depth: usize,
}

impl Reader {
    /// The inline modules open at the cursor, outermost first.
    fn scope(&self) -> Vec<String> {
        self.open.iter().filter_map(|o| o.name.clone()).collect()
    }

    /// Whether the cursor is in test code (the item after `#[cfg(test)]`
    /// included).
    fn test(&self) -> bool {
        self.parsed.test || self.pending.test || self.open.iter().any(|o| o.test)
    }

    /// `mod name;` or `mod name {` at `i`; returns the index after it.
    fn module(&mut self, i: usize) -> usize {
        let (scope, test) = (self.scope(), self.test());
        let name = self.toks[i + 1].text.clone();
        let next = if self.toks.get(i + 2).is_some_and(|t| t.punct("{")) {
            self.depth += 1;
            let mut inline = scope;
            inline.push(name.clone());
            self.parsed.inline.push(inline);
            let (name, depth) = (Some(name), self.depth);
            self.open.push(Open { name, depth, test });
            i + 3
        } else {
            let path_attr = self.pending.path.take();
            let child = Child {
                scope,
                name,
                path_attr,
                test,
            };
            self.parsed.children.push(child);
            i + 2
        };
        self.pending = Pending::default();
        next
    }

    /// A `use` declaration at `i`; returns the index after it.
    fn use_declaration(&mut self, i: usize) -> usize {
        let (scope, test) = (self.scope(), self.test());
        let mut leaves = Vec::new();
        let start = if self.toks.get(i + 1).is_some_and(|t| t.punct("::")) {
            i + 2
        } else {
            i + 1
        };
        let next = use_tree(&self.toks, start, Vec::new(), &mut leaves);
        for (alias, segments, line) in leaves {
            let scope = scope.clone();
            let written = Written {
                scope,
                segments,
                alias,
                line,
                test,
            };
            self.parsed.uses.push(written);
        }
        self.pending = Pending::default();
        next
    }

    /// A path in code at `i`; returns the index after it.
    fn path(&mut self, i: usize) -> usize {
        let (scope, test) = (self.scope(), self.test());
        let (segments, next) = code_path(&self.toks, i);
        let line = self.toks[i].line;
        let alias = None;
        let written = Written {
            scope,
            segments,
            alias,
            line,
            test,
        };
        self.parsed.paths.push(written);
        next
    }

    /// Any other token: braces open and close blocks, and an item's end
    /// drops the attributes read before it.
    fn other(&mut self, i: usize) -> usize {
        let tok = &self.toks[i];
        if tok.punct("{") {
            self.depth += 1;
            if self.pending.test {
                let (name, depth, test) = (None, self.depth, true);
                self.open.push(Open { name, depth, test });
            }
        } else if tok.punct("}") {
            if self.open.last().is_some_and(|o| o.depth == self.depth) {
                self.open.pop();
            }
            self.depth = self.depth.saturating_sub(1);
        }
        if [";", ",", "{", "}"].iter().any(|p| tok.punct(p)) {
            self.pending = Pending::default();
        }
        i + 1
    }
}

/// The declarations and paths of one file.
fn parse(source: &str) -> Parsed {
    let mut reader = Reader {
        toks: tokens(source),
        parsed: Parsed::default(),
        open: Vec::new(),
        pending: Pending::default(),
        depth: 0,
    };
    let mut i = 0;
    while i < reader.toks.len() {
        let tok = &reader.toks[i];
        let named = reader
            .toks
            .get(i + 1)
            .is_some_and(|t| t.kind == Kind::Ident);
        i = if tok.punct("#") {
            let (next, inner_test) = attribute(&reader.toks, i, &mut reader.pending);
            reader.parsed.test |= inner_test;
            next
        } else if tok.is("mod") && named {
            reader.module(i)
        } else if tok.is("use") {
            reader.use_declaration(i)
        } else if starts_path(&reader.toks, i) {
            reader.path(i)
        } else {
            reader.other(i)
        };
    }
    reader.parsed
}

/// The file a `mod` declaration names, relative to the repository.
fn child_file(repo: &Path, parent: &str, child: &Child) -> Option<String> {
    let parent = Path::new(parent);
    let dir = parent.parent()?;
    if let Some(path) = &child.path_attr {
        return Some(dir.join(path).to_string_lossy().into_owned());
    }
    let stem = parent.file_stem()?.to_string_lossy();
    let mut base: PathBuf = match stem.as_ref() {
        "mod" | "lib" | "main" => dir.to_path_buf(),
        _ => dir.join(stem.as_ref()),
    };
    for inline in &child.scope {
        base.push(inline);
    }
    let flat = base.join(format!("{}.rs", child.name));
    let nested = base.join(&child.name).join("mod.rs");
    [flat, nested]
        .into_iter()
        .find(|p| repo.join(p).is_file())
        .map(|p| p.to_string_lossy().into_owned())
}

/// Reads every file of the crate whose root is `root` (relative to `repo`),
/// following `mod` declarations.
fn read_files(repo: &Path, root: &str) -> Result<Vec<(File, Parsed)>, String> {
    let mut files = Vec::new();
    let mut queue = VecDeque::from([(root.to_string(), ModPath::new(), false)]);
    while let Some((rel, module, test)) = queue.pop_front() {
        let text = std::fs::read_to_string(repo.join(&rel))
            .map_err(|e| format!("cannot read {rel}: {e}"))?;
        let parsed = parse(&text);
        let test = test || parsed.test;
        for child in &parsed.children {
            let file = child_file(repo, &rel, child)
                .ok_or_else(|| format!("{rel}: no file for `mod {};`", child.name))?;
            let mut path = module.clone();
            path.extend(child.scope.iter().cloned());
            path.push(child.name.clone());
            queue.push_back((file, path, test || child.test));
        }
        files.push((File { rel, module, test }, parsed));
    }
    Ok(files)
}

/// The crate's modules (inline ones included) and what their `use`s name.
struct Scopes {
    /// Every module, inline ones included, and the file it is in.
    modules: BTreeMap<ModPath, usize>,
    /// Per module, the names its `use` declarations bring in and the absolute
    /// path each names (`None`: outside the crate).
    names: BTreeMap<ModPath, BTreeMap<String, Option<ModPath>>>,
}

impl Scopes {
    /// The absolute path of `segments`, written in module `scope`: from the
    /// root after `crate`, up after `super`, inside after `self`; a `use`
    /// path that starts with a name starts in `scope` where that is a child
    /// module. `None`: a path outside the crate.
    fn absolute(&self, scope: &[String], segments: &[String], is_use: bool) -> Option<ModPath> {
        let first = segments.first()?;
        let mut base: ModPath = match first.as_str() {
            "crate" => Vec::new(),
            "self" | "super" => scope.to_vec(),
            _ => {
                let mut child = scope.to_vec();
                child.push(first.clone());
                if !is_use || !self.modules.contains_key(&child) {
                    return None;
                }
                scope.to_vec()
            }
        };
        let mut rest = segments;
        if matches!(first.as_str(), "crate" | "self") {
            rest = &rest[1..];
        }
        while rest.first().is_some_and(|s| s == "super") {
            base.pop()?;
            rest = &rest[1..];
        }
        base.extend(rest.iter().cloned());
        Some(base)
    }

    /// The file of the module that defines what `path` names: its longest
    /// prefix that is a module, followed through that module's `use`s.
    fn resolve(&self, path: &[String], hops: usize) -> usize {
        let mut k = path.len();
        while k > 0 && !self.modules.contains_key(&path[..k]) {
            k -= 1;
        }
        let module = &path[..k];
        if let Some(name) = path.get(k).filter(|_| hops < 16) {
            let target = self.names.get(module).and_then(|n| n.get(name));
            if let Some(Some(target)) = target {
                let mut next = target.clone();
                next.extend(path[k + 1..].iter().cloned());
                if next != path {
                    return self.resolve(&next, hops + 1);
                }
            }
        }
        self.modules.get(module).copied().unwrap_or(0)
    }
}

/// Every module and `use` name of the files read.
fn scopes(files: &[(File, Parsed)]) -> Scopes {
    let mut scopes = Scopes {
        modules: BTreeMap::new(),
        names: BTreeMap::new(),
    };
    for (index, (file, parsed)) in files.iter().enumerate() {
        scopes.modules.insert(file.module.clone(), index);
        for inline in &parsed.inline {
            let mut path = file.module.clone();
            path.extend(inline.iter().cloned());
            scopes.modules.insert(path, index);
        }
    }
    for (file, parsed) in files {
        for written in &parsed.uses {
            let Some(alias) = written.alias.clone().filter(|a| a != "_") else {
                continue;
            };
            let mut scope = file.module.clone();
            scope.extend(written.scope.iter().cloned());
            let target = scopes.absolute(&scope, &written.segments, true);
            scopes.names.entry(scope).or_default().insert(alias, target);
        }
    }
    scopes
}

/// Reads the crate rooted at `root` (say `src/lib.rs`) under `repo`.
pub fn read_crate(repo: &Path, root: &str) -> Result<Crate, String> {
    let files = read_files(repo, root)?;
    let scopes = scopes(&files);
    let mut edges = Vec::new();
    for (from, (file, parsed)) in files.iter().enumerate() {
        let uses = parsed.uses.iter().map(|w| (w, true));
        for (written, is_use) in uses.chain(parsed.paths.iter().map(|w| (w, false))) {
            let mut scope = file.module.clone();
            scope.extend(written.scope.iter().cloned());
            let Some(path) = scopes.absolute(&scope, &written.segments, is_use) else {
                continue;
            };
            let to = scopes.resolve(&path, 0);
            if to != from {
                edges.push(Edge {
                    from,
                    to,
                    line: written.line,
                    written: written.segments.join("::"),
                    test: written.test || file.test,
                });
            }
        }
    }
    edges.sort_by_key(|e| (e.from, e.line));
    let files = files.into_iter().map(|(file, _)| file).collect();
    Ok(Crate { files, edges })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uses_and_paths_are_read() {
        let parsed = parse(
            "use crate::a::{self, b::C as D, e::*};\n\
             pub(crate) use super::f::G;\n\
             #[cfg(test)]\nmod tests {\n    use super::*;\n    fn t() { crate::h::i(); }\n}\n\
             #[path = \"x_tests.rs\"]\nmod x;\nfn f() -> Self::T { self::y::z() }",
        );
        let uses: Vec<(Option<String>, String)> = parsed
            .uses
            .iter()
            .map(|w| (w.alias.clone(), w.segments.join("::")))
            .collect();
        let some = |a: &str, p: &str| (Some(a.to_string()), p.to_string());
        assert_eq!(
            uses,
            [
                some("a", "crate::a"),
                some("D", "crate::a::b::C"),
                (None, "crate::a::e".to_string()),
                some("G", "super::f::G"),
                (None, "super".to_string()),
            ]
        );
        assert!(parsed.uses[4].test && parsed.uses[4].scope == ["tests"]);
        let paths: Vec<String> = parsed.paths.iter().map(|w| w.segments.join("::")).collect();
        assert_eq!(paths, ["crate::h::i", "self::y::z"]);
        assert!(parsed.paths[0].test && !parsed.paths[1].test);
        assert_eq!(parsed.children.len(), 1);
        assert_eq!(parsed.children[0].path_attr.as_deref(), Some("x_tests.rs"));
    }
}
