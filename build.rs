//! Sets the `Py_3_x` cfgs of the interpreter the extension is built for, and writes the fork
//! constants of `python/asyncagents/constants.py`, their one home, as Rust constants for the
//! crate's own tests (`config.rs`; Python always passes the extension a config).
use std::{env, fs, path::Path};

const CONSTANTS: &str = "python/asyncagents/constants.py";

fn main() {
    pyo3_build_config::use_pyo3_cfgs();
    println!("cargo:rerun-if-changed={CONSTANTS}");
    let root = env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let path = Path::new(&root).join(CONSTANTS);
    let source = fs::read_to_string(path).unwrap_or_else(|err| panic!("{CONSTANTS}: {err}"));
    let out_dir = env::var("OUT_DIR").expect("cargo sets OUT_DIR for build scripts");
    let written = fs::write(
        Path::new(&out_dir).join("constants.rs"),
        rust_constants(&source),
    );
    written.unwrap_or_else(|err| panic!("writing constants.rs: {err}"));
}

/// Each `NAME: Final = value` statement as a `pub const`: an int as `usize`, a float as `f64`,
/// a string as `&str`, a tuple of strings (over several lines) as `&[&str]`. Anything else
/// stops the build, naming the statement.
fn rust_constants(source: &str) -> String {
    let mut out = String::new();
    let mut lines = source.lines();
    while let Some(line) = lines.next() {
        let Some((name, value)) = line.split_once(": Final = ") else {
            continue;
        };
        let mut value = value.trim().to_owned();
        if value.starts_with('(') {
            while !value.ends_with(')') {
                let next = lines
                    .next()
                    .unwrap_or_else(|| panic!("{name}: unclosed tuple"));
                value.push_str(next.trim());
            }
            let items: Vec<&str> = value[1..value.len() - 1]
                .split(',')
                .map(str::trim)
                .filter(|item| !item.is_empty())
                .collect();
            for item in &items {
                string_literal(name, item);
            }
            out += &format!("pub const {name}: &[&str] = &[{}];\n", items.join(", "));
        } else if value.starts_with('"') {
            out += &format!(
                "pub const {name}: &str = {};\n",
                string_literal(name, &value)
            );
        } else if value.chars().all(|c| c.is_ascii_digit() || c == '_') {
            out += &format!("pub const {name}: usize = {value};\n");
        } else if value.parse::<f64>().is_ok() {
            out += &format!("pub const {name}: f64 = {value};\n");
        } else {
            panic!("{CONSTANTS}: {name} = {value}: not an int, float, string or tuple of strings");
        }
    }
    out
}

/// `literal` when it is a plain double-quoted string (no quote or backslash inside), whose
/// Python and Rust spellings are the same.
fn string_literal<'a>(name: &str, literal: &'a str) -> &'a str {
    let inner = literal
        .strip_prefix('"')
        .and_then(|rest| rest.strip_suffix('"'));
    match inner {
        Some(inner) if !inner.contains(['"', '\\']) => literal,
        _ => panic!("{CONSTANTS}: {name}: {literal} is not a plain double-quoted string"),
    }
}
