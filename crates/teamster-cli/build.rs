//! Links the `teamster` binary with the functions the server runs (at start-up, idle and in its
//! turns) placed together at the start of `.text`, from `symbol-order.txt`, or for the `dist`
//! profile (opt-level "s", whose fat LTO names functions differently) `symbol-order-dist.txt`
//! (both written by `bench/profiles/symbol-order`). The kernel maps an executable's page cache in large folios,
//! so the pages a process counts follow how widely the code it runs is spread, not how much of
//! it runs: without the order the server's few megabytes of code touch nearly every folio of
//! `.text` (bench/README.md, "Idle memory and cold start").
//!
//! Only where the link is known to be LLD (rustc's own `rust-lld`, the default for
//! `x86_64-unknown-linux-gnu`), in optimised builds, and unless `TEAMSTER_NO_SYMBOL_ORDER` is
//! set. A function missing from the binary (renamed since the list was made) is skipped.

use std::path::Path;

fn main() {
    println!("cargo:rerun-if-changed=symbol-order.txt");
    println!("cargo:rerun-if-changed=symbol-order-dist.txt");
    println!("cargo:rerun-if-env-changed=TEAMSTER_NO_SYMBOL_ORDER");
    let var = |name: &str| std::env::var(name).unwrap_or_default();
    // A linker of the operator's choosing may not be LLD.
    let custom_linker = std::env::var_os("RUSTC_LINKER").is_some()
        || var("CARGO_ENCODED_RUSTFLAGS").split('\x1f').any(|flag| flag.contains("linker") || flag.contains("link-self-contained"));
    if var("TARGET") != "x86_64-unknown-linux-gnu"
        || var("PROFILE") != "release"
        || custom_linker
        || std::env::var_os("TEAMSTER_NO_SYMBOL_ORDER").is_some()
    {
        return;
    }
    let list = if var("OPT_LEVEL") == "s" { "symbol-order-dist.txt" } else { "symbol-order.txt" };
    let order = Path::new(&var("CARGO_MANIFEST_DIR")).join(list);
    if order.exists() {
        println!("cargo:rustc-link-arg-bin=teamster=-Wl,--symbol-ordering-file={}", order.display());
        println!("cargo:rustc-link-arg-bin=teamster=-Wl,--no-warn-symbol-ordering");
    }
    // The release profile (opt-level 3, what the benchmarks measure) packs its relative
    // relocations (DT_RELR): 1 MB of `.rela.dyn` that the loader reads on every start becomes a
    // few kilobytes. It needs glibc 2.36 or later to load, so `dist` (opt-level "s"), the binary
    // to ship, keeps the plain table.
    if var("OPT_LEVEL") == "3" {
        println!("cargo:rustc-link-arg-bin=teamster=-Wl,-z,pack-relative-relocs");
    }
}
