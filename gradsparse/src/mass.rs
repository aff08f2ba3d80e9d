//! The squared L2 mass `Σ x²` of a flat f32 buffer, for the error-feedback metrics
//! (`ef_residual_norm`, `ef_kept_share`).
use crate::error::Result;
use candle_core::{DType, Storage, Tensor};

/// Elements one device reduction squares at a time: bounds its temporary to 64 MiB.
const DEVICE_CHUNK: usize = 1 << 24;

/// `Σ x²` over every element of `t`, accumulated in f64 (on the CPU in one pass, in element order).
pub fn sum_of_squares(t: &Tensor) -> Result<f64> {
    let t = t.flatten_all()?.to_dtype(DType::F32)?.contiguous()?;
    if t.device().is_cpu() {
        let (storage, layout) = t.storage_and_layout();
        if let (Storage::Cpu(cpu), Some((start, end))) = (&*storage, layout.contiguous_offsets()) {
            let data = &cpu.as_slice::<f32>()?[start..end];
            return Ok(data.iter().map(|&x| (x as f64) * (x as f64)).sum());
        }
    }
    let n = t.elem_count();
    let mut total = 0f64;
    for start in (0..n).step_by(DEVICE_CHUNK) {
        let part = t.narrow(0, start, DEVICE_CHUNK.min(n - start))?;
        total += part
            .sqr()?
            .sum_all()?
            .to_dtype(DType::F64)?
            .to_scalar::<f64>()?;
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::sum_of_squares;
    use candle_core::{Device, Tensor};

    #[test]
    fn matches_the_plain_sum() {
        let v: Vec<f32> = (0..1001).map(|i| (i as f32 * 0.37).sin() * 3.0).collect();
        let want: f64 = v.iter().map(|&x| (x as f64).powi(2)).sum();
        let t = Tensor::from_vec(v, (7, 143), &Device::Cpu).unwrap();
        let got = sum_of_squares(&t).unwrap();
        assert!((got - want).abs() <= 1e-12 * want, "{got} vs {want}");
        let strided = t.t().unwrap();
        assert!((sum_of_squares(&strided).unwrap() - want).abs() <= 1e-12 * want);
        let empty = Tensor::zeros(0, candle_core::DType::F32, &Device::Cpu).unwrap();
        assert_eq!(sum_of_squares(&empty).unwrap(), 0.0);
    }
}
