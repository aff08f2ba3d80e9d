//! The kernel fatbins built by build.rs, loaded through `runtime::cuda` (once per CUDA context).
use candle_core::cuda::cudarc::driver::{CudaContext, CudaFunction};
use runtime::cuda::Fatbin;
use std::sync::Arc;

use crate::{Error, Result};

/// A kernel family: one `.cu` file (the order of `fatbin`'s table).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Family {
    Sample,
    Filter,
    Select,
    Baselines,
    Accumulate,
    Rows,
    Output,
    RankList,
}

impl Family {
    fn fatbin(self) -> &'static Fatbin {
        static FATBINS: [Fatbin; 8] = [
            runtime::fatbin!("sample"),
            runtime::fatbin!("filter"),
            runtime::fatbin!("select"),
            runtime::fatbin!("baselines"),
            runtime::fatbin!("accumulate"),
            runtime::fatbin!("rows"),
            runtime::fatbin!("output"),
            runtime::fatbin!("rank_list"),
        ];
        &FATBINS[self as usize]
    }
}

/// The kernel `name` of `family` in `ctx`.
pub fn function(ctx: &Arc<CudaContext>, family: Family, name: &str) -> Result<CudaFunction> {
    family
        .fatbin()
        .function(ctx, name)
        .map_err(|e| Error::Param(e.to_string()))
}
