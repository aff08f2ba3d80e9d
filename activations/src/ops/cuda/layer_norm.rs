//! Launch of the layer-norm kernel (`kernels/layer_norm.cu`): one warp per row, one read and one
//! write of the row from memory (candle's kernel ran at about a tenth of the bandwidth here).
use super::{address, alloc, drv, function};
use candle_core::backend::BackendStorage;
use candle_core::cuda::cudarc::driver::{LaunchConfig, PushKernelArg};
use candle_core::op::BackpropOp;
use candle_core::{DType, Result, Storage, Tensor};

const FATBIN: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/layer_norm.fatbin"));
const ROWS_PER_BLOCK: usize = 8;

/// `x` [rows, d], `weight` and `bias` [d], all contiguous with one dtype.
pub fn layer_norm(x: &Tensor, weight: &Tensor, bias: &Tensor, eps: f32) -> Result<Tensor> {
    let (rows, d) = x.dims2()?;
    let name = match x.dtype() {
        DType::F32 => "layer_norm_f32",
        DType::BF16 => "layer_norm_bf16",
        DType::F16 => "layer_norm_f16",
        other => {
            return Err(candle_core::Error::UnsupportedDTypeForOp(
                other,
                "layer_norm",
            ))
        }
    };
    let addr = |t: &Tensor| -> Result<u64> {
        let (s, l) = t.storage_and_layout();
        let Storage::Cuda(cs) = &*s else {
            return Err(candle_core::Error::Msg(
                "layer_norm: expected a CUDA tensor".into(),
            ));
        };
        address(cs, l, &cs.device.cuda_stream())
    };
    let (x_ptr, w_ptr, b_ptr) = (addr(x)?, addr(weight)?, addr(bias)?);
    let (storage, _) = x.storage_and_layout();
    let Storage::Cuda(cs) = &*storage else {
        return Err(candle_core::Error::Msg(
            "layer_norm: expected a CUDA tensor".into(),
        ));
    };
    let (out, y_ptr) = alloc(cs, cs.dtype(), rows * d)?;
    if rows > 0 {
        let stream = cs.device.cuda_stream();
        let f = function(cs, "layer_norm", FATBIN, name)?;
        let (rows_i, d_i) = (rows as i32, d as i32);
        let cfg = LaunchConfig {
            grid_dim: (rows.div_ceil(ROWS_PER_BLOCK) as u32, 1, 1),
            block_dim: (32 * ROWS_PER_BLOCK as u32, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut args = stream.launch_builder(&f);
        args.arg(&x_ptr)
            .arg(&w_ptr)
            .arg(&b_ptr)
            .arg(&y_ptr)
            .arg(&rows_i)
            .arg(&d_i)
            .arg(&eps);
        // SAFETY: the arguments match the kernel's parameters; x and y hold rows x d elements, w
        // and b d elements, all alive until the stream reaches the launch.
        unsafe { args.launch(cfg) }.map_err(|e| drv("layer_norm launch", e))?;
    }
    drop(storage);
    Ok(Tensor::from_storage(
        Storage::Cuda(out),
        (rows, d),
        BackpropOp::none(),
        false,
    ))
}
