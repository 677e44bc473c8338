//! `dspark bench`: placeholder until the speculative modes land.

use anyhow::Result;
use clap::Args;

#[derive(Args, Debug)]
pub struct BenchArgs {}

pub fn run(_a: BenchArgs) -> Result<()> {
    anyhow::bail!("bench is not implemented yet")
}
