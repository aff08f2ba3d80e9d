//! The kernel fatbins built by build.rs, loaded once per CUDA context (no JIT: sm_90 machine code).
use candle_core::cuda::cudarc::driver::{CudaContext, CudaFunction, CudaModule};
use candle_core::cuda::cudarc::nvrtc::Ptx;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

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

impl Family {
    fn image(self) -> &'static [u8] {
        match self {
            Family::Sample => include_bytes!(concat!(env!("OUT_DIR"), "/sample.fatbin")),
            Family::Filter => include_bytes!(concat!(env!("OUT_DIR"), "/filter.fatbin")),
            Family::Select => include_bytes!(concat!(env!("OUT_DIR"), "/select.fatbin")),
            Family::Baselines => include_bytes!(concat!(env!("OUT_DIR"), "/baselines.fatbin")),
            Family::Accumulate => include_bytes!(concat!(env!("OUT_DIR"), "/accumulate.fatbin")),
        }
    }
}

type Key = (usize, Family);

fn modules() -> &'static Mutex<HashMap<Key, Arc<CudaModule>>> {
    static M: OnceLock<Mutex<HashMap<Key, Arc<CudaModule>>>> = OnceLock::new();
    M.get_or_init(|| Mutex::new(HashMap::new()))
}

fn functions() -> &'static Mutex<HashMap<(usize, String), CudaFunction>> {
    static F: OnceLock<Mutex<HashMap<(usize, String), CudaFunction>>> = OnceLock::new();
    F.get_or_init(|| Mutex::new(HashMap::new()))
}

/// The kernel `name` of `family` in `ctx`, looked up once.
pub fn function(ctx: &Arc<CudaContext>, family: Family, name: &str) -> Result<CudaFunction> {
    let fkey = (ctx.cu_ctx() as usize, name.to_string());
    if let Some(f) = functions()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(&fkey)
    {
        return Ok(f.clone());
    }
    let f = load(ctx, family, name)?;
    functions()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(fkey, f.clone());
    Ok(f)
}

fn load(ctx: &Arc<CudaContext>, family: Family, name: &str) -> Result<CudaFunction> {
    let key = (ctx.cu_ctx() as usize, family);
    let module = {
        let mut map = modules().lock().unwrap_or_else(|e| e.into_inner());
        match map.get(&key) {
            Some(m) => m.clone(),
            None => {
                let m = ctx
                    .load_module(Ptx::from_binary(family.image().to_vec()))
                    .map_err(|e| Error::Param(format!("loading the {family:?} kernels: {e:?}")))?;
                map.insert(key, m.clone());
                m
            }
        }
    };
    module.load_function(name).map_err(|e| {
        Error::Param(format!(
            "kernel {name} missing from the {family:?} fatbin: {e:?}"
        ))
    })
}
