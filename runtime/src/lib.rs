//! What every crate of the workspace shares at run time, below all of them in the crate graph:
//! - [`fs`]: crash-safe file writes (temporary sibling, fsync, rename, directory fsync);
//! - `cuda` (feature `cuda`): embedded kernel fatbins, loaded once per CUDA context;
//! - [`test_device!`]: one test body run on the CPU and, with the caller's `cuda` feature, on the GPU;
//! - [`workspace_file`]: the workspace's fixtures and tools, found without a build-time path.
#[cfg(feature = "cuda")]
pub mod cuda;
pub mod fs;
mod workspace;

pub use workspace::{workspace_file, ROOT_ENV};

/// `test_device!(name, body)`: the test `name::cpu`, and `name::cuda` under the calling crate's `cuda`
/// feature. `body` is a `fn(&candle_core::Device) -> anyhow::Result<()>`.
/// `test_device!(module::{a, b})` is `test_device!(a, module::a)` and `test_device!(b, module::b)`.
#[macro_export]
macro_rules! test_device {
    ($module:ident :: { $($name:ident),+ $(,)? }) => {
        $($crate::test_device!($name, $module::$name);)+
    };
    ($name:ident, $body:path) => {
        mod $name {
            #[allow(unused_imports)]
            use super::*;

            #[test]
            fn cpu() -> anyhow::Result<()> {
                $body(&candle_core::Device::Cpu)
            }

            #[cfg(feature = "cuda")]
            #[test]
            fn cuda() -> anyhow::Result<()> {
                $body(&candle_core::Device::new_cuda(0)?)
            }
        }
    };
}
