//! Embeds the web UI: lists every file under `web/` (the committed Vite build of
//! `clients/web`) as a table of `include_bytes!`, with an ETag of each file's contents, for
//! `routes::web` to serve. Node is never needed here: the build output is committed.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

fn main() {
    let manifest_dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let web = manifest_dir.join("web");
    println!("cargo:rerun-if-changed=web");
    let mut files = Vec::new();
    collect(&web, &mut files);
    files.sort();
    let mut table = String::from("&[\n");
    for file in &files {
        println!("cargo:rerun-if-changed={}", file.display());
        let relative = file.strip_prefix(&web).expect("under web/").to_string_lossy().replace('\\', "/");
        let bytes = std::fs::read(file).expect("a file of web/ is readable");
        writeln!(
            table,
            "    Asset {{ path: {relative:?}, bytes: include_bytes!({:?}), etag: \"\\\"{:016x}\\\"\" }},",
            file.display().to_string(),
            fnv1a(&bytes)
        )
        .expect("writing to a String");
    }
    table.push(']');
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR")).join("web_assets.rs");
    std::fs::write(out, table).expect("OUT_DIR is writable");
}

/// Every file under `dir`, recursively (none when it does not exist).
fn collect(dir: &Path, files: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            collect(&path, files);
        } else {
            files.push(path);
        }
    }
}

/// The 64-bit FNV-1a hash: enough to tell two builds of a file apart for caching.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, byte| (hash ^ u64::from(*byte)).wrapping_mul(0x0000_0100_0000_01b3))
}
