//! Our own CPU kernels behind the candle backend, one file per kernel family, wired in as
//! candle custom ops (`ops.rs`) so that the `Backend` seam and candle itself stay unchanged.
//!
//! All kernels are batch-invariant: a row's result never depends on how many rows share the
//! call, so a verify block reproduces one-token decode steps bit for bit.

pub mod affine;
pub mod attention;
pub mod gemv;
pub mod ops;
pub mod qgemv;
pub mod swiglu;
