//! `RANKFLOW_` environment overrides: each variable replaces or adds one
//! value in the TOML tree before it is deserialised.

/// Applies one `RANKFLOW_` variable to the TOML tree. Path segments are
/// matched case-insensitively; under `kafka.options` a segment's underscores
/// become dots (`SASL_PASSWORD` -> `sasl.password`).
pub fn apply_override(tree: &mut toml::Value, path: &str, value: &str) -> Result<(), String> {
    let segments: Vec<String> = path.split("__").map(|s| s.to_ascii_lowercase()).collect();
    if segments.iter().any(|s| s.is_empty()) {
        return Err("empty path segment in variable name (use __ between segments)".into());
    }
    let mut node = tree;
    let last = segments.len() - 1;
    for (i, seg) in segments.iter().enumerate() {
        let in_options = i == 2 && segments[0] == "kafka" && segments[1] == "options";
        let key = if in_options { seg.replace('_', ".") } else { seg.clone() };
        // `board` is an array of tables in the file.
        let key = if i == 0 && key == "board" { "board".to_string() } else { key };
        match node {
            toml::Value::Array(items) => {
                let idx: usize = seg.parse().map_err(|_| format!("segment '{seg}' must be an array index"))?;
                if idx >= items.len() {
                    return Err(format!("index {idx} is past the {} configured items", items.len()));
                }
                if i == last {
                    items[idx] = parse_env_value(&key, value, Some(&items[idx]));
                    return Ok(());
                }
                node = &mut items[idx];
            }
            toml::Value::Table(table) => {
                if i == last {
                    let parsed = parse_env_value(&key, value, table.get(&key));
                    table.insert(key, parsed);
                    return Ok(());
                }
                node = table.entry(key).or_insert_with(|| toml::Value::Table(Default::default()));
            }
            _ => return Err(format!("'{seg}' is inside a value that is not a table")),
        }
    }
    Ok(())
}

/// An override keeps the type of the value it replaces where that is a
/// string, and a secret (`...PASSWORD`, `...SECRET`, see
/// [`super::secrets::is_secret_name`]) is always a string; otherwise it is
/// read as a TOML value (`true`, `42`, `["a","b"]`) and falls back to a string.
fn parse_env_value(key: &str, text: &str, existing: Option<&toml::Value>) -> toml::Value {
    if matches!(existing, Some(toml::Value::String(_))) || super::secrets::is_secret_name(key) {
        return toml::Value::String(text.to_string());
    }
    match toml::from_str::<toml::Table>(&format!("v = {text}")) {
        Ok(mut t) => t.remove("v").unwrap_or_else(|| toml::Value::String(text.to_string())),
        Err(_) => toml::Value::String(text.to_string()),
    }
}
