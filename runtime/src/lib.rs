//! What every crate of the workspace shares at run time, below all of them in the crate graph:
//! - [`config`]: a command's TOML config with `--set` overrides, errors naming the user's line, and
//!   the `device` and dtype values; [`device`]: the one device opener;
//! - [`lock`]: one process per directory; [`signal`]: SIGINT/SIGTERM as a request to stop;
//! - [`build_info`]: the version, git commit and cargo features a binary was built with;
//! - [`fs`]: crash-safe file writes (temporary sibling, fsync, rename, directory fsync);
//! - `cuda` (feature `cuda`): embedded kernel fatbins, loaded once per CUDA context;
//! - `to_host` (feature `cuda`): device tensors copied to the host on a stream of their own;
//! - [`test_device!`]: one test body run on the CPU and, with the caller's `cuda` feature, on the GPU;
//! - [`cpu_fwd!`] and [`cuda_fwd!`]: the forward methods of candle's custom ops, without their
//!   signatures written out for each op;
//! - [`workspace_file`]: the workspace's fixtures and tools, found without a build-time path.
pub mod build_info;
pub mod config;
#[cfg(feature = "cuda")]
pub mod cuda;
pub mod device;
pub mod error;
pub mod fs;
pub mod host;
pub mod lock;
pub mod signal;
#[cfg(feature = "cuda")]
pub mod to_host;
mod workspace;

pub use error::{Error, Result};
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

/// The `cpu_fwd` or `cuda_fwd` method `$method` of a candle custom op (`CustomOp1`, `2` or `3`) on
/// `$storage`: `|op, (s1, l1), (s2, l2)| body` binds the op to `op` and each input's storage and
/// layout to the names given, and `body` gives the output storage and shape.
#[macro_export]
#[doc(hidden)]
macro_rules! fwd_method {
    ($method:ident, $storage:ty, |$op:pat $(, ($s:ident, $l:ident))+| $body:expr) => {
        fn $method(
            &self,
            $($s: &$storage, $l: &candle_core::Layout),+
        ) -> candle_core::Result<($storage, candle_core::Shape)> {
            let $op = self;
            $body
        }
    };
}

/// `cpu_fwd!(|op, (s1, l1), ..| body)`: the `cpu_fwd` method of a candle custom op.
#[macro_export]
macro_rules! cpu_fwd {
    ($($closure:tt)+) => {
        $crate::fwd_method!(cpu_fwd, candle_core::CpuStorage, $($closure)+);
    };
}

/// `cuda_fwd!(|op, (s1, l1), ..| body)`: the `cuda_fwd` method of a candle custom op, compiled under
/// the calling crate's `cuda` feature.
#[macro_export]
macro_rules! cuda_fwd {
    ($($closure:tt)+) => {
        #[cfg(feature = "cuda")]
        $crate::fwd_method!(cuda_fwd, candle_core::CudaStorage, $($closure)+);
    };
}
