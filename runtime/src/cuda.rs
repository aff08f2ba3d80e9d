//! Kernel fatbins embedded by the crates' build scripts (`cuda-build`; sm_90 machine code, no JIT),
//! each loaded at most once per CUDA context and its functions looked up once. A process may drive
//! several devices: a module belongs to the context it was loaded in, so the cache is keyed by context.
use candle_core::cuda::cudarc::driver::{CudaContext, CudaFunction, CudaModule, DriverError};
use candle_core::cuda::cudarc::nvrtc::Ptx;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

/// `fatbin!("name")`: the [`Fatbin`] that the calling crate's build script made of `kernels/name.cu`.
#[macro_export]
macro_rules! fatbin {
    ($name:literal) => {
        $crate::cuda::Fatbin::new(
            $name,
            include_bytes!(concat!(env!("OUT_DIR"), "/", $name, ".fatbin")),
        )
    };
}

/// One kernel family: the fatbin of one `kernels/<name>.cu`.
pub struct Fatbin {
    name: &'static str,
    image: &'static [u8],
}

/// Loading a fatbin or finding a kernel in it failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("loading the {fatbin} kernels: {source:?}")]
    Load {
        fatbin: &'static str,
        source: DriverError,
    },
    #[error("kernel {kernel} missing from the {fatbin} fatbin: {source:?}")]
    Missing {
        fatbin: &'static str,
        kernel: String,
        source: DriverError,
    },
}

impl From<Error> for candle_core::Error {
    fn from(e: Error) -> Self {
        candle_core::Error::Msg(format!("CUDA: {e}"))
    }
}

/// A loaded module and the functions fetched from it so far.
struct Loaded {
    module: Arc<CudaModule>,
    functions: HashMap<String, CudaFunction>,
}

/// Keyed by (context, fatbin image). A cached module holds its context alive, so a context's address
/// is never reused while its modules are cached.
type Cache = HashMap<(usize, usize), Loaded>;

impl Fatbin {
    /// `name` names the family in errors; `image` is `include_bytes!` of the built fatbin ([`fatbin!`]).
    pub const fn new(name: &'static str, image: &'static [u8]) -> Self {
        Fatbin { name, image }
    }

    /// The kernel `kernel` of this fatbin in `ctx`, loading the fatbin there on first use.
    pub fn function(&self, ctx: &Arc<CudaContext>, kernel: &str) -> Result<CudaFunction, Error> {
        static CACHE: OnceLock<Mutex<Cache>> = OnceLock::new();
        let key = (ctx.cu_ctx() as usize, self.image.as_ptr() as usize);
        let mut cache = CACHE
            .get_or_init(Default::default)
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let loaded = match cache.entry(key) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(e) => {
                let module = ctx
                    .load_module(Ptx::from_binary(self.image.to_vec()))
                    .map_err(|source| Error::Load {
                        fatbin: self.name,
                        source,
                    })?;
                e.insert(Loaded {
                    module,
                    functions: HashMap::new(),
                })
            }
        };
        if let Some(f) = loaded.functions.get(kernel) {
            return Ok(f.clone());
        }
        let f = loaded
            .module
            .load_function(kernel)
            .map_err(|source| Error::Missing {
                fatbin: self.name,
                kernel: kernel.to_string(),
                source,
            })?;
        loaded.functions.insert(kernel.to_string(), f.clone());
        Ok(f)
    }
}
