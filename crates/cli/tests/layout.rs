//! The source tree keeps the shape docs/architecture.md "Map" describes:
//! inside each crate, no files that import each other in a circle of more
//! than two. A file imports another when one of its `use crate::…`,
//! `super::…` or `self::…` paths (in `use` lines or written out in the
//! code) names the other's module; the crate root's `mod` lines and the
//! `#[cfg(test)] mod tests` at the end of a file do not count.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

type Module = Vec<String>;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

fn module_of(src: &Path, file: &Path) -> Module {
    let relative = file.strip_prefix(src).expect("file under src");
    let mut parts: Module = relative
        .with_extension("")
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts
}

/// The code of a file without comments and without its unit tests.
fn code(text: &str) -> String {
    let text = text
        .find("#[cfg(test)]\nmod tests")
        .map_or(text, |end| &text[..end]);
    text.lines()
        .map(|line| line.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every path a `use` item names, its brace groups expanded.
fn expand(prefix: &str, tree: &str, out: &mut Vec<String>) {
    let tree = tree.trim();
    let Some(open) = tree.find('{') else {
        if !tree.is_empty() {
            out.push(format!("{prefix}{tree}"));
        }
        return;
    };
    let head = &tree[..open];
    let inner = tree[open + 1..]
        .strip_suffix('}')
        .unwrap_or(&tree[open + 1..]);
    let (mut depth, mut start) = (0, 0);
    for (i, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                expand(&format!("{prefix}{head}"), &inner[start..i], out);
                start = i + 1;
            }
            _ => {}
        }
    }
    expand(&format!("{prefix}{head}"), &inner[start..], out);
}

fn paths(code: &str) -> Vec<String> {
    let mut found = Vec::new();
    for item in code.split(';') {
        if let Some(at) = item.find("use ")
            && (at == 0 || !item.as_bytes()[at - 1].is_ascii_alphanumeric())
        {
            expand("", &item[at + 4..], &mut found);
        }
    }
    let bytes = code.as_bytes();
    for start in ["crate::", "super::", "self::"] {
        let mut from = 0;
        while let Some(at) = code[from..].find(start) {
            let at = from + at;
            from = at + start.len();
            if at > 0 && (bytes[at - 1].is_ascii_alphanumeric() || bytes[at - 1] == b'_') {
                continue;
            }
            let end = code[at..]
                .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
                .map_or(code.len(), |e| at + e);
            found.push(code[at..end].to_string());
        }
    }
    found
}

fn imports(
    module: &Module,
    is_dir: bool,
    path: &str,
    modules: &BTreeSet<Module>,
) -> Option<Module> {
    let path = path.split_whitespace().next()?;
    let mut parts = path.split("::").map(str::trim).peekable();
    let mut base: Module = match parts.peek().copied() {
        Some("crate") => {
            parts.next();
            Vec::new()
        }
        Some("super" | "self") => {
            let mut base = module.clone();
            if !is_dir {
                base.pop();
            }
            while let Some(step @ ("super" | "self")) = parts.peek().copied() {
                if step == "super" {
                    base.pop();
                }
                parts.next();
            }
            base
        }
        _ => return None,
    };
    let rest: Vec<&str> = parts.filter(|p| !p.is_empty()).collect();
    let mut best = None;
    for part in rest {
        base.push(part.to_string());
        if modules.contains(&base) {
            best = Some(base.clone());
        }
    }
    best.filter(|m| m != module && !m.is_empty())
}

/// The strongly connected components of `edges` (Tarjan's algorithm).
fn circles(edges: &BTreeMap<Module, BTreeSet<Module>>) -> Vec<Vec<Module>> {
    struct Walk<'a> {
        edges: &'a BTreeMap<Module, BTreeSet<Module>>,
        index: BTreeMap<Module, usize>,
        low: BTreeMap<Module, usize>,
        stack: Vec<Module>,
        on_stack: BTreeSet<Module>,
        found: Vec<Vec<Module>>,
    }
    impl Walk<'_> {
        fn visit(&mut self, v: &Module) {
            let i = self.index.len();
            self.index.insert(v.clone(), i);
            self.low.insert(v.clone(), i);
            self.stack.push(v.clone());
            self.on_stack.insert(v.clone());
            for w in self.edges.get(v).into_iter().flatten() {
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let low = self.low[v].min(self.low[w]);
                    self.low.insert(v.clone(), low);
                } else if self.on_stack.contains(w) {
                    let low = self.low[v].min(self.index[w]);
                    self.low.insert(v.clone(), low);
                }
            }
            if self.low[v] == self.index[v] {
                let mut component = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack.remove(&w);
                    let done = &w == v;
                    component.push(w);
                    if done {
                        break;
                    }
                }
                self.found.push(component);
            }
        }
    }
    let mut walk = Walk {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for v in edges.keys() {
        if !walk.index.contains_key(v) {
            walk.visit(v);
        }
    }
    walk.found
}

fn crate_circles(src: &Path) -> Vec<Vec<Module>> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let modules: BTreeMap<Module, PathBuf> = files
        .iter()
        .map(|f| (module_of(src, f), f.clone()))
        .collect();
    let names: BTreeSet<Module> = modules.keys().cloned().collect();
    let mut edges: BTreeMap<Module, BTreeSet<Module>> = BTreeMap::new();
    for (module, file) in &modules {
        let is_dir = matches!(
            file.file_stem().and_then(|s| s.to_str()),
            Some("mod" | "lib" | "main")
        );
        let text = std::fs::read_to_string(file).expect("source file reads");
        let targets = paths(&code(&text))
            .iter()
            .filter_map(|p| imports(module, is_dir, p, &names))
            .collect();
        edges.insert(module.clone(), targets);
    }
    circles(&edges)
        .into_iter()
        .filter(|c| c.len() > 2)
        .collect()
}

#[test]
fn no_crate_has_files_importing_each_other_in_a_circle_of_more_than_two() {
    let crates = workspace().join("crates");
    let mut wrong = Vec::new();
    let mut seen = 0;
    for entry in std::fs::read_dir(&crates).expect("crates/ lists") {
        let dir = entry.expect("entry").path();
        let src = dir.join("src");
        if !src.is_dir() {
            continue;
        }
        seen += 1;
        let name = dir
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        for circle in crate_circles(&src) {
            let files: Vec<String> = circle.iter().map(|m| m.join("/")).collect();
            wrong.push(format!(
                "{name}: {} files: {}",
                circle.len(),
                files.join(", ")
            ));
        }
    }
    assert!(
        seen >= 10,
        "only {seen} crates found under {}",
        crates.display()
    );
    assert!(wrong.is_empty(), "import circles:\n{}", wrong.join("\n"));
}

#[test]
fn the_check_finds_a_circle_of_three_files() {
    let dir = tempfile::tempdir().expect("tempdir");
    let src = dir.path().join("src");
    std::fs::create_dir_all(src.join("c")).expect("mkdir");
    std::fs::write(src.join("lib.rs"), "mod a;\nmod b;\nmod c;\n").expect("write");
    std::fs::write(src.join("a.rs"), "use crate::b::B;\npub struct A;\n").expect("write");
    std::fs::write(src.join("b.rs"), "pub struct B(crate::c::C);\n").expect("write");
    std::fs::write(
        src.join("c/mod.rs"),
        "use crate::{a::A, b};\npub struct C;\n#[cfg(test)]\nmod tests {\n use super::*;\n}\n",
    )
    .expect("write");
    let found = crate_circles(&src);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].len(), 3);
    // A circle of two is allowed: b no longer names c.
    std::fs::write(src.join("b.rs"), "pub struct B;\n").expect("write");
    assert!(crate_circles(&src).is_empty());
}
