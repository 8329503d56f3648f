//! The reference pages in `docs/` say what the code does: the metrics table
//! (`docs/metrics.md`) names exactly the families `src/metrics.rs`
//! registers, and the key layout (`docs/keys.md`) names exactly the
//! bookkeeping keys and hash tags `src/keys.rs` documents. The README stays
//! a page for users, at most 650 lines, its commands on the first screen.

use std::collections::BTreeSet;

fn read(path: &str) -> String {
    std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(path)).unwrap()
}

/// The table rows (lines starting with `|`) of a text, first column only.
fn first_cells(text: &str) -> Vec<String> {
    text.lines()
        .map(|l| l.trim_start_matches("//!").trim())
        .filter(|l| l.starts_with('|') && !l.starts_with("|---"))
        .filter_map(|l| l.split('|').nth(1).map(|c| c.trim().to_string()))
        .collect()
}

/// Words of the form `<start>name` in `cells`: a `rankflow_` family, a
/// `_bookkeeping` key segment, a `{.tag}`.
fn words(cells: &[String], starts: &[char], prefix: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for cell in cells {
        for (i, _) in cell.match_indices(prefix) {
            let before = cell[..i].chars().last();
            if !before.is_none_or(|c| starts.contains(&c)) {
                continue;
            }
            let word: String = cell[i..]
                .chars()
                .enumerate()
                .take_while(|(k, c)| *k < prefix.len() || c.is_ascii_lowercase() || *c == '_' || *c == '}')
                .map(|(_, c)| c)
                .collect();
            out.insert(word);
        }
    }
    out
}

#[test]
fn the_metrics_page_names_exactly_the_registered_families() {
    let page = first_cells(&read("docs/metrics.md"));
    let documented = words(&page, &['`', ' '], "rankflow_");
    let registered: BTreeSet<String> = rankflow::metrics::FAMILIES.iter().map(|f| f.to_string()).collect();
    let missing: Vec<&String> = registered.difference(&documented).collect();
    let unknown: Vec<&String> = documented.difference(&registered).collect();
    assert!(missing.is_empty(), "families docs/metrics.md does not list: {missing:?}");
    assert!(unknown.is_empty(), "docs/metrics.md lists families nothing registers: {unknown:?}");
}

#[test]
fn the_key_page_names_exactly_the_keys_the_layout_documents() {
    let page = first_cells(&read("docs/keys.md"));
    let code = first_cells(&read("src/keys.rs"));
    for (prefix, starts) in [("_", &[':', '`'][..]), ("{.", &[':'][..])] {
        let documented = words(&page, starts, prefix);
        let coded = words(&code, starts, prefix);
        assert!(coded.len() >= 4, "read src/keys.rs's table: {coded:?}");
        assert_eq!(documented, coded, "docs/keys.md and src/keys.rs name different keys ({prefix}...)");
    }
}

#[test]
fn the_readme_stays_a_users_page_of_at_most_650_lines() {
    let readme = read("README.md");
    let lines = readme.lines().count();
    assert!(lines <= 650, "README.md is {lines} lines: move reference detail to docs/");
    // Its first screen says how to run the demo and the tests.
    let top: String = readme.lines().take(20).collect::<Vec<_>>().join("\n");
    assert!(top.contains("scripts/demo.sh") && top.contains("scripts/test.sh"), "{top}");
}
