//! Compiles Kubernetes' protobuf definitions (proto/) into one descriptor
//! set, embedded in the library. protox is a protobuf compiler written in
//! Rust: no protoc, and $PROTOC is never read.

use std::path::{Path, PathBuf};

fn protos(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            protos(&path, out)?;
        } else if path.extension().is_some_and(|e| e == "proto") {
            out.push(path);
        }
    }
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    const ROOT: &str = "proto";
    println!("cargo:rerun-if-changed={ROOT}");
    let mut files = Vec::new();
    protos(Path::new(ROOT), &mut files)?;
    files.sort();
    let mut compiler = protox::Compiler::new([ROOT])?;
    // Comments are most of the text; the descriptors need none of them.
    compiler.include_source_info(false).include_imports(true);
    compiler.open_files(files.iter().map(|f| f.strip_prefix(ROOT).unwrap_or(f)))?;
    let out = PathBuf::from(std::env::var("OUT_DIR")?).join("kubernetes.bin");
    std::fs::write(out, compiler.encode_file_descriptor_set())?;
    Ok(())
}
