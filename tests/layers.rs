//! The shape the code keeps. The layering `src/lib.rs` states holds: every
//! module named in its "Layers" section imports (`crate::...`) only modules
//! of its own layer or of the layers below, and no two modules import each
//! other, directly or round a longer cycle (the layers are read from
//! `lib.rs` itself, so the documentation and this check cannot drift
//! apart). Redis is called from `store` only (commands, scripts, the raw
//! connection). A batch travels through the pipeline as one vector of
//! records, and period ids are taken apart in `src/period/id.rs` alone. No Rust file of the product, its tools or its tests is over
//! 650 lines, and no function over 120.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The layers of `lib.rs`'s "Layers" section, top (wiring) first: each
/// bullet `- **Name** — ...` and the modules it links as [`name`].
fn layers(lib: &str) -> Vec<(String, BTreeSet<String>)> {
    let section =
        lib.split("//! # Layers").nth(1).and_then(|s| s.split("//! # ").next()).expect("lib.rs has a Layers section");
    let mut out: Vec<(String, BTreeSet<String>)> = Vec::new();
    for line in section.lines() {
        let text = line.trim_start_matches("//!").trim();
        if let Some(rest) = text.strip_prefix("- **") {
            let name = rest.split("**").next().unwrap_or_default().to_string();
            out.push((name, BTreeSet::new()));
        }
        if let Some((_, modules)) = out.last_mut() {
            for link in text.split("[`").skip(1) {
                let name = link.split('`').next().unwrap_or_default();
                if name.chars().all(|c| c.is_ascii_lowercase() || c == '_') {
                    modules.insert(name.to_string());
                }
            }
        }
    }
    out
}

/// Every `.rs` file of a module: `src/name.rs` and everything under `src/name/`.
fn files(src: &Path, module: &str) -> Vec<PathBuf> {
    let mut out = rust_files(&src.join(module));
    let file = src.join(format!("{module}.rs"));
    if file.exists() {
        out.push(file);
    }
    out
}

/// The top-level modules a source file names with `crate::` (comments left out).
fn imports(source: &str) -> BTreeSet<String> {
    names_after(source, "crate::")
}

/// The first name of every path that starts with `prefix` (`crate::`,
/// `super::`), grouped paths (`prefix{a::b, c}`) included, comments left out.
fn names_after(source: &str, prefix: &str) -> BTreeSet<String> {
    let code: String = source.lines().map(|l| l.split("//").next().unwrap_or_default()).collect::<Vec<_>>().join("\n");
    let ident = |s: &str| s.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect::<String>();
    let mut out = BTreeSet::new();
    for rest in code.split(prefix).skip(1) {
        match rest.strip_prefix('{') {
            // `crate::{a::b, c}`: the first name of each item of the group.
            Some(group) => {
                let mut depth = 0;
                let mut item_start = true;
                for (i, ch) in group.char_indices() {
                    match ch {
                        '{' => depth += 1,
                        '}' if depth == 0 => break,
                        '}' => depth -= 1,
                        ',' if depth == 0 => item_start = true,
                        c if item_start && !c.is_whitespace() => {
                            item_start = false;
                            out.insert(ident(&group[i..]));
                        }
                        _ => {}
                    }
                }
            }
            None => {
                out.insert(ident(rest));
            }
        }
    }
    out.retain(|m| !m.is_empty());
    out
}

#[test]
fn no_module_imports_a_layer_above_its_own_and_no_modules_import_each_other_in_a_cycle() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let lib = std::fs::read_to_string(src.join("lib.rs")).unwrap();
    let layers = layers(&lib);
    assert!(layers.len() >= 4, "lib.rs names its layers: {layers:?}");
    let layer_of: BTreeMap<&str, usize> =
        layers.iter().enumerate().flat_map(|(i, (_, ms))| ms.iter().map(move |m| (m.as_str(), i))).collect();

    // Every module of the crate has its layer.
    let declared: Vec<&str> =
        lib.lines().filter_map(|l| l.strip_prefix("pub mod ")).map(|l| l.trim_end_matches(';')).collect();
    for m in &declared {
        assert!(layer_of.contains_key(m), "module {m} is in no layer of lib.rs's Layers section");
    }

    let mut graph: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    let mut upward = Vec::new();
    for &m in &declared {
        let mut deps = BTreeSet::new();
        for f in files(&src, m) {
            deps.extend(imports(&std::fs::read_to_string(&f).unwrap()));
        }
        deps.remove(m);
        for d in &deps {
            let Some(&dl) = layer_of.get(d.as_str()) else { continue };
            if dl < layer_of[m] {
                upward.push(format!("{m} ({}) imports {d} ({})", layers[layer_of[m]].0, layers[dl].0));
            }
        }
        graph.insert(m, deps);
    }
    assert!(upward.is_empty(), "imports up the layers:\n{}", upward.join("\n"));

    let graph = graph.into_iter().map(|(m, deps)| (m.to_string(), deps)).collect();
    if let Some(cycle) = first_cycle(&graph) {
        panic!("a cycle of imports: {cycle}");
    }
}

/// A cycle of the graph (`a -> b -> a`), if it has one.
fn first_cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<String> {
    for start in graph.keys() {
        let mut stack: Vec<Vec<&str>> = vec![vec![start.as_str()]];
        let mut seen = BTreeSet::new();
        while let Some(path) = stack.pop() {
            let last = *path.last().unwrap();
            for d in graph.get(last).into_iter().flatten() {
                if d == start {
                    return Some(format!("{} -> {start}", path.join(" -> ")));
                }
                if seen.insert(d.as_str()) {
                    let mut next = path.clone();
                    next.push(d.as_str());
                    stack.push(next);
                }
            }
        }
    }
    None
}

#[test]
fn no_two_files_of_a_folder_import_each_other_in_a_cycle() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut folders: BTreeSet<PathBuf> =
        rust_files(&src).iter().filter_map(|f| f.parent().map(Path::to_path_buf)).collect();
    folders.remove(&src);
    let mut cycles = Vec::new();
    for dir in folders {
        let module = dir.strip_prefix(&src).unwrap().to_string_lossy().replace('/', "::");
        // The folder's files but its `mod.rs`, which declares them (an
        // edge to it is the folder's own, not a sibling's).
        let files: BTreeMap<String, PathBuf> = std::fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "rs") && !p.ends_with("mod.rs"))
            .map(|p| (p.file_stem().unwrap().to_string_lossy().into_owned(), p))
            .collect();
        let graph: BTreeMap<String, BTreeSet<String>> = files
            .iter()
            .map(|(name, path)| {
                let text = std::fs::read_to_string(path).unwrap();
                let mut deps = names_after(&text, "super::");
                deps.extend(names_after(&text, &format!("crate::{module}::")));
                deps.retain(|d| files.contains_key(d) && d != name);
                (name.clone(), deps)
            })
            .collect();
        if let Some(cycle) = first_cycle(&graph) {
            cycles.push(format!("src/{}: {cycle}", module.replace("::", "/")));
        }
    }
    assert!(cycles.is_empty(), "files of a folder importing each other in a cycle:\n{}", cycles.join("\n"));
    let pair = BTreeMap::from([
        ("a".to_string(), BTreeSet::from(["b".to_string()])),
        ("b".to_string(), BTreeSet::from(["a".to_string()])),
    ]);
    assert_eq!(first_cycle(&pair).as_deref(), Some("a -> b -> a"));
}

#[test]
fn grouped_and_inline_crate_paths_are_read_as_imports() {
    let got =
        imports("use crate::{board::Router, config::{self, Settings}};\nlet x = crate::keys::base(); // crate::nope\n");
    assert_eq!(got, BTreeSet::from(["board".to_string(), "config".to_string(), "keys".to_string()]));
    let lib = "//! # Layers\n//!\n//! - **Top** — [`app`] and [`http`].\n//! - **Low** — [`keys`]:\n//!   and [`score`].\n//!\n//! # Flow\n//! [`other`]\n";
    let l = layers(lib);
    assert_eq!(l.len(), 2);
    assert_eq!(l[1].1, BTreeSet::from(["keys".to_string(), "score".to_string()]));
}

#[test]
fn only_store_sends_redis_commands() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let calls = ["redis::cmd", "redis::pipe", "query_async", "invoke_async", "redis::Script", ".eval(", ".conn()"];
    let mut offenders = BTreeSet::new();
    for f in rust_files(&root.join("src")) {
        let rel = f.strip_prefix(root).unwrap().to_string_lossy().replace('\\', "/");
        if rel.starts_with("src/store/") {
            continue;
        }
        let text = std::fs::read_to_string(&f).unwrap_or_default();
        let code = text.lines().filter(|l| !l.trim_start().starts_with("//")).collect::<Vec<_>>().join("\n");
        if calls.iter().any(|c| code.contains(c)) {
            offenders.insert(rel);
        }
    }
    assert!(offenders.is_empty(), "Redis called outside store (add a typed call to store instead): {offenders:?}");
}

#[test]
fn only_store_reads_redis_replies() {
    // A script's reply is taken apart in `store`, by a parser per op; the
    // rest of the crate sees typed values only.
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let reads = ["redis::Value", "from_redis_value", "FromRedisValue"];
    let mut offenders = BTreeSet::new();
    for f in rust_files(&root.join("src")) {
        let rel = f.strip_prefix(root).unwrap().to_string_lossy().replace('\\', "/");
        let text = std::fs::read_to_string(&f).unwrap_or_default();
        if !rel.starts_with("src/store/") && reads.iter().any(|r| text.contains(r)) {
            offenders.insert(rel);
        }
    }
    assert!(offenders.is_empty(), "Redis replies read outside store (parse them in store): {offenders:?}");
}

/// Each `needle` found in a Rust file under `dir` (a path in the
/// repository), but for the file `except`: "<file>: <needle>".
fn spelled(dir: &str, needles: &[&str], except: &str) -> Vec<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut found = Vec::new();
    for f in rust_files(&root.join(dir)) {
        let rel = f.strip_prefix(root).unwrap().to_string_lossy().replace('\\', "/");
        let text = std::fs::read_to_string(&f).unwrap_or_default();
        if rel != except {
            found.extend(needles.iter().filter(|n| text.contains(*n)).map(|n| format!("{rel}: {n}")));
        }
    }
    found
}

/// A batch is one vector of records, each carrying what it parsed to, what
/// each board decided and answered, and the moves it made
/// (`pipeline/record.rs`): nothing in the pipeline keeps a second vector of
/// a batch's items, decisions or results to match with it by index.
#[test]
fn a_batch_travels_as_one_vector_of_records() {
    let parallel = ["Vec<Item>", "[Item]", "Vec<(usize, Decision)>", "Vec<Option<ApplyResult>>", "tp_of"];
    let offenders = spelled("src/pipeline", &parallel, "");
    assert!(offenders.is_empty(), "a batch's parts kept beside its records, matched by index: {offenders:?}");
}

/// Period ids are written and taken apart in `src/period/id.rs` only: no
/// other file of the product spells a prefix or suffix of one.
#[test]
fn period_ids_are_taken_apart_in_one_place() {
    let literals = ["\":final\"", "\"r:\"", "\"s:\"", "\"c:\"", "'r:'", "'s:'", "'c:'"];
    let offenders = spelled("src", &literals, "src/period/id.rs");
    assert!(offenders.is_empty(), "period ids taken apart outside src/period/id.rs (use PeriodRef): {offenders:?}");
}

/// Every `.rs` file under `dir`.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(d) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else { continue };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    out
}

/// Each function of rustfmt-formatted source: (name, lines from its `fn`
/// line to the `}` at its indentation).
fn function_lengths(source: &str) -> Vec<(String, usize)> {
    let lines: Vec<&str> = source.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        let indent = line.len() - line.trim_start().len();
        let head = line.trim_start();
        let after = ["pub(crate) ", "pub(super) ", "pub ", "async ", "const ", "unsafe "]
            .iter()
            .fold(head, |h, p| h.strip_prefix(p).unwrap_or(h));
        let after = after.strip_prefix("async ").unwrap_or(after);
        if let Some(rest) = after.strip_prefix("fn ").filter(|_| !line.trim_end().ends_with(';')) {
            let name: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
            let end = (i + 1..lines.len())
                .find(|&j| {
                    let l = lines[j];
                    l.len() - l.trim_start().len() == indent && l.trim_start().starts_with('}')
                })
                .unwrap_or(i);
            out.push((name, end - i + 1));
            i = end;
        }
        i += 1;
    }
    out
}

#[test]
fn no_rust_file_is_over_650_lines_and_no_function_over_120() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut long = Vec::new();
    for dir in ["src", "tools/src", "tests"] {
        for f in rust_files(&root.join(dir)) {
            let text = std::fs::read_to_string(&f).unwrap();
            let rel = f.strip_prefix(root).unwrap().display().to_string();
            if text.lines().count() > 650 {
                long.push(format!("{rel}: {} lines", text.lines().count()));
            }
            for (name, n) in function_lengths(&text).into_iter().filter(|(_, n)| *n > 120) {
                long.push(format!("{rel}: fn {name} is {n} lines"));
            }
        }
    }
    assert!(long.is_empty(), "too long:\n{}", long.join("\n"));
    let sample = "fn a() {\n    x();\n}\n\n    pub async fn b(\n        y: u8,\n    ) {\n        z();\n    }\n";
    assert_eq!(function_lengths(sample), [("a".to_string(), 3), ("b".to_string(), 5)]);
}

#[test]
fn every_test_the_write_order_names_exists() {
    // store/write/writer.rs names the test that holds each assumption the write
    // order rests on; a renamed or deleted test must not leave it pointing nowhere.
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let doc = std::fs::read_to_string(root.join("src/store/write/writer.rs")).unwrap();
    let contract = doc.split("What the order rests on").nth(1).expect("writer.rs states what the order rests on");
    let named: Vec<&str> = contract
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|w| w.len() > 30 && w.chars().all(|c| c.is_ascii_lowercase() || c == '_'))
        .collect();
    assert!(named.len() >= 6, "{named:?}");
    let mut code = String::new();
    for dir in ["src", "tests"] {
        for f in rust_files(&root.join(dir)) {
            code.push_str(&std::fs::read_to_string(f).unwrap());
        }
    }
    for name in named {
        assert!(code.contains(&format!("fn {name}(")), "writer.rs names a test '{name}' that does not exist");
    }
}

#[test]
fn only_the_layout_module_sends_a_read_by_its_layout() {
    // http/layout.rs maps each read to the reader of its layout (http/target.rs
    // builds the layout and gives its keys); no handler matches on it.
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut offenders = BTreeSet::new();
    for f in rust_files(&root.join("src")) {
        let rel = f.strip_prefix(root).unwrap().to_string_lossy().replace('\\', "/");
        let text = std::fs::read_to_string(&f).unwrap_or_default();
        if !["src/http/layout.rs", "src/http/target.rs"].contains(&rel.as_str()) && text.contains("Layout::") {
            offenders.insert(rel);
        }
    }
    assert!(offenders.is_empty(), "a read matched on its layout outside http/layout.rs: {offenders:?}");
}
