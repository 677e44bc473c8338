//! Compiles our CUDA kernels (`src/backend/cuda/kernels.cu` and the headers it includes) to PTX when the `cuda` feature is
//! on. nvcc comes from `$NVCC`, `$CUDA_HOME/bin` or `PATH` (scripts/build-cuda.sh puts the CUDA
//! 13.0 wheels' nvcc there); the target is `sm_$CUDA_COMPUTE_CAP` (default 90, the H200).
//! `DSPARK_PTX_STUB=1` writes an empty module instead (the kernels then refuse to load).

use std::path::PathBuf;
use std::process::Command;

fn main() {
    const SRC: &str = "src/backend/cuda/kernels.cu";
    // kernels.cu includes the family headers beside it (a new header also changes kernels.cu)
    for e in std::fs::read_dir("src/backend/cuda")
        .expect("src/backend/cuda")
        .flatten()
    {
        let p = e.path();
        if matches!(p.extension().and_then(|x| x.to_str()), Some("cu" | "cuh")) {
            println!("cargo:rerun-if-changed={}", p.display());
        }
    }
    for v in ["DSPARK_PTX_STUB", "NVCC", "CUDA_HOME", "CUDA_COMPUTE_CAP"] {
        println!("cargo:rerun-if-env-changed={v}");
    }
    if std::env::var_os("CARGO_FEATURE_CUDA").is_none() {
        return;
    }
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR")).join("dspark_kernels.ptx");
    if std::env::var_os("DSPARK_PTX_STUB").is_some() {
        std::fs::write(&out, "").expect("write the PTX stub");
        return;
    }
    let nvcc = std::env::var_os("NVCC")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("CUDA_HOME").map(|h| PathBuf::from(h).join("bin/nvcc")))
        .unwrap_or_else(|| PathBuf::from("nvcc"));
    let cap = std::env::var("CUDA_COMPUTE_CAP").unwrap_or_else(|_| "90".into());
    let cap: String = cap.chars().filter(|c| c.is_ascii_digit()).collect();
    let res = Command::new(&nvcc)
        .args(["--ptx", "-O3", "-std=c++17", "-lineinfo"])
        .arg(format!("-arch=sm_{cap}"))
        .arg(SRC)
        .arg("-o")
        .arg(&out)
        .output();
    match res {
        Ok(o) if o.status.success() => {}
        Ok(o) => panic!(
            "nvcc failed on {SRC}:\n{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        ),
        Err(e) => panic!(
            "the cuda feature compiles {SRC} with nvcc, which could not be started ({}: {e}); \
             set NVCC or CUDA_HOME, or DSPARK_PTX_STUB=1 for a type-check",
            nvcc.display()
        ),
    }
}
