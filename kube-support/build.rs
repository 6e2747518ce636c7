//! The compiler's version and the source revision, for the `xcc_build_info` metric.

fn main() {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let version = std::process::Command::new(rustc)
        .arg("--version")
        .output()
        .ok()
        .and_then(|out| String::from_utf8(out.stdout).ok())
        .and_then(|text| text.split_whitespace().nth(1).map(str::to_string))
        .unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=XCC_RUSTC_VERSION={version}");
    println!("cargo:rerun-if-env-changed=XCC_REVISION");
    println!("cargo:rerun-if-changed=build.rs");
}
