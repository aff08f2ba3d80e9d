//! The kernel fatbins built by build.rs, loaded through `runtime::cuda` (once per CUDA context).
use candle_core::cuda::cudarc::driver::{CudaContext, CudaFunction};
use runtime::cuda::Fatbin;
use std::sync::Arc;

use crate::{Error, Result};

/// A kernel family: one `.cu` file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Family {
    Sample,
    Filter,
    Select,
    Baselines,
    Accumulate,
}

static SAMPLE: Fatbin = Fatbin::new(
    "sample",
    include_bytes!(concat!(env!("OUT_DIR"), "/sample.fatbin")),
);
static FILTER: Fatbin = Fatbin::new(
    "filter",
    include_bytes!(concat!(env!("OUT_DIR"), "/filter.fatbin")),
);
static SELECT: Fatbin = Fatbin::new(
    "select",
    include_bytes!(concat!(env!("OUT_DIR"), "/select.fatbin")),
);
static BASELINES: Fatbin = Fatbin::new(
    "baselines",
    include_bytes!(concat!(env!("OUT_DIR"), "/baselines.fatbin")),
);
static ACCUMULATE: Fatbin = Fatbin::new(
    "accumulate",
    include_bytes!(concat!(env!("OUT_DIR"), "/accumulate.fatbin")),
);

impl Family {
    fn fatbin(self) -> &'static Fatbin {
        match self {
            Family::Sample => &SAMPLE,
            Family::Filter => &FILTER,
            Family::Select => &SELECT,
            Family::Baselines => &BASELINES,
            Family::Accumulate => &ACCUMULATE,
        }
    }
}

/// The kernel `name` of `family` in `ctx`.
pub fn function(ctx: &Arc<CudaContext>, family: Family, name: &str) -> Result<CudaFunction> {
    family
        .fatbin()
        .function(ctx, name)
        .map_err(|e| Error::Param(e.to_string()))
}
