//! The differentiable causal attention on CUDA: cuBLAS GEMMs reading q, k, v straight from the
//! packed [B, T, 3, H, hd] input and writing d(qkv) in that layout, around the two row kernels of
//! `kernels/attention_train.cu`. Each product is one strided-batched call per sequence over its
//! heads, or (`AttentionGemms::PointerArrays`) one pointer-array batched call over all of them.
//!
//! Row-major X [r, c] with leading dimension ld is column-major Xᵀ to cuBLAS, so each product is
//! issued transposed: S = Q Kᵀ as Sᵀ = K Qᵀ, O = P V as Oᵀ = Vᵀ Pᵀ, and so on.
use super::super::attention_train::{AttentionGemms, Dims};
use super::{address, alloc, blocks, drv, function};
use candle_core::backend::BackendStorage;
use candle_core::cuda::cudarc::cublas::{result as blas, sys};
use candle_core::cuda::cudarc::driver::{CudaSlice, DevicePtr, DeviceRepr, PushKernelArg};
use candle_core::{CudaStorage, DType, Layout, Result, Shape};
use runtime::cuda::Fatbin;
use std::ffi::c_void;

static FATBIN: Fatbin = runtime::fatbin!("attention_train");
/// Score rows per block of the row kernels (one warp each).
const ROWS_PER_BLOCK: usize = 8;
const F32_BYTES: usize = 4;
/// Operands the pointer kernel fills in one launch (`kernels/attention_train.cu`).
const MAX_OPERANDS: usize = 12;

/// A matrix operand of every (sequence, head) pair: address of the first block, leading dimension,
/// head stride and sequence stride (in elements).
#[derive(Clone, Copy)]
struct Operand {
    ptr: u64,
    ld: usize,
    head_stride: usize,
    seq_stride: usize,
}

impl Operand {
    /// Rows of `width` elements per token, one head every `hd` columns: the packed qkv ([b, t, 3d]:
    /// q, k, v are shifted by d) or the merged heads ([b, t, d]).
    fn token_rows(ptr: u64, t: usize, width: usize, hd: usize) -> Self {
        Self {
            ptr,
            ld: width,
            head_stride: hd,
            seq_stride: t * width,
        }
    }

    /// One t x t score matrix per (sequence, head): P, dP, dS ([b, h, t, t]).
    fn scores(ptr: u64, t: usize, h: usize) -> Self {
        Self {
            ptr,
            ld: t,
            head_stride: t * t,
            seq_stride: h * t * t,
        }
    }

    /// The operand of sequence `seq`.
    fn seq(self, seq: usize) -> Self {
        self.shifted(seq * self.seq_stride)
    }

    /// The operand `elems` elements further (q, k and v inside the packed rows).
    fn shifted(self, elems: usize) -> Self {
        Self {
            ptr: self.ptr + (elems * F32_BYTES) as u64,
            ..self
        }
    }
}

/// C = alpha op(A) op(B) for every (sequence, head) pair, column-major (m x n, inner size k).
#[derive(Clone, Copy)]
struct Product {
    trans: (bool, bool),
    mnk: (usize, usize, usize),
    alpha: f32,
    a: Operand,
    b: Operand,
    c: Operand,
}

impl Product {
    /// C = alpha op(A) op(B), with `trans` saying which of A and B are transposed.
    fn new(
        trans: (bool, bool),
        mnk: (usize, usize, usize),
        alpha: f32,
        [a, b, c]: [Operand; 3],
    ) -> Self {
        Self {
            trans,
            mnk,
            alpha,
            a,
            b,
            c,
        }
    }
}

/// The `PointerPlan` of `kernels/attention_train.cu`: block address = base + sequence x seq_stride
/// + head x head_stride, in bytes.
#[repr(C)]
#[derive(Clone, Copy)]
struct PointerPlan {
    base: [u64; MAX_OPERANDS],
    seq_stride: [u64; MAX_OPERANDS],
    head_stride: [u64; MAX_OPERANDS],
    operands: i32,
}

// SAFETY: a #[repr(C)] struct of plain integers, laid out as the kernel's struct.
unsafe impl DeviceRepr for PointerPlan {}

/// The products of one pass over the (sequence, head) pairs, issued in the chosen batching.
struct Gemms<'a> {
    storage: &'a CudaStorage,
    products: &'a [Product],
    seqs: usize,
    heads: usize,
    /// Pointer arrays (A, B, C of each product, `seqs * heads` entries each), freed in stream
    /// order after the GEMMs that read them.
    arrays: Option<(CudaSlice<u64>, u64)>,
}

impl<'a> Gemms<'a> {
    fn new(
        storage: &'a CudaStorage,
        products: &'a [Product],
        seqs: usize,
        heads: usize,
        gemms: AttentionGemms,
    ) -> Result<Self> {
        // cuBLAS cannot see the alignment of the blocks a pointer array names: take that route
        // only when every block and leading dimension is 16-byte aligned.
        let aligned = products.iter().flat_map(|p| [p.a, p.b, p.c]).all(|o| {
            o.ptr.is_multiple_of(16)
                && [o.ld, o.head_stride, o.seq_stride]
                    .iter()
                    .all(|e| (e * F32_BYTES).is_multiple_of(16))
        });
        let arrays = match gemms {
            AttentionGemms::PointerArrays if aligned => {
                Some(pointer_arrays(storage, products, seqs, heads)?)
            }
            _ => None,
        };
        Ok(Self {
            storage,
            products,
            seqs,
            heads,
            arrays,
        })
    }

    /// Issues product `k`.
    fn run(&self, k: usize) -> Result<()> {
        let p = &self.products[k];
        match &self.arrays {
            None => {
                for s in 0..self.seqs {
                    let (a, b, c) = (p.a.seq(s), p.b.seq(s), p.c.seq(s));
                    gemm(self.storage, p, a, b, c, Blocks::Strided(self.heads))?;
                }
                Ok(())
            }
            Some((_, base)) => {
                let per_array = (self.seqs * self.heads * std::mem::size_of::<u64>()) as u64;
                let array = |j: usize| base + (3 * k + j) as u64 * per_array;
                let blocks =
                    Blocks::Pointers([array(0), array(1), array(2)], self.seqs * self.heads);
                gemm(self.storage, p, p.a, p.b, p.c, blocks)
            }
        }
    }
}

/// One kernel launch filling the pointer arrays of `products`.
fn pointer_arrays(
    storage: &CudaStorage,
    products: &[Product],
    seqs: usize,
    heads: usize,
) -> Result<(CudaSlice<u64>, u64)> {
    let operands: Vec<Operand> = products.iter().flat_map(|p| [p.a, p.b, p.c]).collect();
    if operands.len() > MAX_OPERANDS {
        return Err(candle_core::Error::Msg(format!(
            "causal_attention_train: {} GEMM operands in one pass, at most {MAX_OPERANDS}",
            operands.len()
        )));
    }
    let mut plan = PointerPlan {
        base: [0; MAX_OPERANDS],
        seq_stride: [0; MAX_OPERANDS],
        head_stride: [0; MAX_OPERANDS],
        operands: operands.len() as i32,
    };
    for (i, o) in operands.iter().enumerate() {
        plan.base[i] = o.ptr;
        plan.seq_stride[i] = (o.seq_stride * F32_BYTES) as u64;
        plan.head_stride[i] = (o.head_stride * F32_BYTES) as u64;
    }
    let entries = operands.len() * seqs * heads;
    let (arrays, ptr) = alloc_u64(storage, entries)?;
    let f = function(storage, &FATBIN, "attn_train_pointers")?;
    let stream = storage.device.cuda_stream();
    let (b, h) = (seqs as i32, heads as i32);
    let cfg = blocks(entries.div_ceil(256), 256);
    let mut args = stream.launch_builder(&f);
    args.arg(&plan).arg(&ptr).arg(&b).arg(&h);
    // SAFETY: the arguments match the kernel's parameters; `arrays` holds `entries` u64 values.
    unsafe { args.launch(cfg) }.map_err(|e| drv("attention pointer kernel", e))?;
    Ok((arrays, ptr))
}

/// An uninitialised device buffer of `len` u64 values, and its address.
fn alloc_u64(storage: &CudaStorage, len: usize) -> Result<(CudaSlice<u64>, u64)> {
    let stream = storage.device.cuda_stream();
    // SAFETY: the pointer kernel writes all `len` values before any GEMM reads them.
    let slice: CudaSlice<u64> = unsafe { storage.device.alloc::<u64>(len)? };
    let ptr = slice.device_ptr(&stream).0;
    Ok((slice, ptr))
}

/// The blocks of one cuBLAS call: `heads` blocks at the operands' head strides, or the blocks
/// that the (A, B, C) pointer arrays of `count` entries name.
enum Blocks {
    Strided(usize),
    Pointers([u64; 3], usize),
}

/// One cuBLAS call of product `p`: f32 storage, TF32 tensor cores when candle's reduced-precision
/// flag is set.
fn gemm(
    storage: &CudaStorage,
    p: &Product,
    a: Operand,
    b: Operand,
    c: Operand,
    blocks: Blocks,
) -> Result<()> {
    let op = |t: bool| {
        if t {
            sys::cublasOperation_t::CUBLAS_OP_T
        } else {
            sys::cublasOperation_t::CUBLAS_OP_N
        }
    };
    let compute = if candle_core::cuda::gemm_reduced_precision_f32() {
        sys::cublasComputeType_t::CUBLAS_COMPUTE_32F_FAST_TF32
    } else {
        sys::cublasComputeType_t::CUBLAS_COMPUTE_32F
    };
    let int = |v: usize, what: &str| {
        i32::try_from(v).map_err(|_| {
            candle_core::Error::Msg(format!("causal_attention_train: {what} {v} exceeds i32"))
        })
    };
    let (m, n, k) = (int(p.mnk.0, "m")?, int(p.mnk.1, "n")?, int(p.mnk.2, "k")?);
    let (lda, ldb, ldc) = (int(a.ld, "lda")?, int(b.ld, "ldb")?, int(c.ld, "ldc")?);
    let beta = 0f32;
    let alpha = &p.alpha as *const f32 as *const c_void;
    let beta = &beta as *const f32 as *const c_void;
    let handle = storage.device.cublas_handle();
    let f32_type = sys::cudaDataType_t::CUDA_R_32F;
    let algo = sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT_TENSOR_OP;
    let (ta, tb) = (op(p.trans.0), op(p.trans.1));
    match blocks {
        // SAFETY: the operands are device addresses of live f32 buffers holding every element
        // the strides and leading dimensions reach (the callers' shapes); the handle is bound to
        // candle's stream, so the call is ordered with the kernels before and after it.
        Blocks::Strided(heads) => unsafe {
            blas::gemm_strided_batched_ex(
                *handle.handle(),
                ta,
                tb,
                m,
                n,
                k,
                alpha,
                a.ptr as *const c_void,
                f32_type,
                lda,
                a.head_stride as i64,
                b.ptr as *const c_void,
                f32_type,
                ldb,
                b.head_stride as i64,
                beta,
                c.ptr as *mut c_void,
                f32_type,
                ldc,
                c.head_stride as i64,
                int(heads, "heads")?,
                compute,
                algo,
            )
        },
        // SAFETY: as above; each array holds `count` block addresses, written by the pointer
        // kernel earlier on the same stream.
        Blocks::Pointers([pa, pb, pc], count) => unsafe {
            sys::cublasGemmBatchedEx(
                *handle.handle(),
                ta,
                tb,
                m,
                n,
                k,
                alpha,
                pa as *const *const c_void,
                f32_type,
                lda,
                pb as *const *const c_void,
                f32_type,
                ldb,
                beta,
                pc as *const *mut c_void,
                f32_type,
                ldc,
                int(count, "blocks")?,
                compute,
                algo,
            )
            .result()
        },
    }
    .map_err(|e| drv("attention GEMM", e))
}

/// One launch of a row kernel over the B x H x T score rows.
fn rows_kernel(
    storage: &CudaStorage,
    name: &str,
    ptrs: &[u64],
    t: usize,
    rows: usize,
) -> Result<()> {
    let f = function(storage, &FATBIN, name)?;
    let stream = storage.device.cuda_stream();
    let (t_len, n_rows) = (t as i32, rows as i64);
    let cfg = blocks(rows.div_ceil(ROWS_PER_BLOCK), 32 * ROWS_PER_BLOCK as u32);
    let mut args = stream.launch_builder(&f);
    for p in ptrs {
        args.arg(p);
    }
    args.arg(&t_len).arg(&n_rows);
    // SAFETY: the arguments match the kernel's parameters; each buffer holds rows x t f32 values
    // and stays alive until the stream reaches the launch (candle frees in stream order).
    unsafe { args.launch(cfg) }.map_err(|e| drv(name, e))?;
    Ok(())
}

fn check_f32(storage: &CudaStorage, what: &str) -> Result<()> {
    match storage.dtype() {
        DType::F32 => Ok(()),
        other => Err(candle_core::Error::Msg(format!(
            "causal_attention_train: {what} must be f32, got {other:?}"
        ))),
    }
}

/// (out [B, T, H hd], P [B, H, T, T], out's shape) of the packed input.
pub fn forward(
    dims: Dims,
    storage: &CudaStorage,
    layout: &Layout,
) -> Result<(CudaStorage, CudaStorage, Shape)> {
    check_f32(storage, "qkv")?;
    let (b, t, h, hd) = dims.heads.of(layout.shape())?;
    let d = h * hd;
    let stream = storage.device.cuda_stream();
    let qkv = address(storage, layout, &stream)?;
    let (out, out_ptr) = alloc(storage, DType::F32, b * t * d)?;
    let (probs, p_ptr) = alloc(storage, DType::F32, b * h * t * t)?;
    let shape = Shape::from((b, t, d));
    let scale = 1.0 / (hd as f32).sqrt();
    let x = Operand::token_rows(qkv, t, 3 * d, hd);
    let (q, k, v) = (x, x.shifted(d), x.shifted(2 * d));
    let o = Operand::token_rows(out_ptr, t, d, hd);
    let p = Operand::scores(p_ptr, t, h);
    let products = [
        // Sᵀ [t_k, t_q] = K Qᵀ, scaled.
        Product::new((true, false), (t, t, hd), scale, [k, q, p]),
        // Oᵀ [hd, t_q] = Vᵀ Pᵀ.
        Product::new((false, false), (hd, t, t), 1.0, [v, p, o]),
    ];
    let gemms = Gemms::new(storage, &products, b, h, dims.gemms)?;
    gemms.run(0)?;
    rows_kernel(storage, "attn_train_softmax_f32", &[p_ptr], t, b * h * t)?;
    gemms.run(1)?;
    Ok((out, probs, shape))
}

/// d(qkv) [B, T, 3 H hd] from qkv, d(out) [B, T, H hd] and P [B, H, T, T].
pub fn backward(
    dims: Dims,
    s_qkv: &CudaStorage,
    l_qkv: &Layout,
    s_grad: &CudaStorage,
    l_grad: &Layout,
    s_probs: &CudaStorage,
    l_probs: &Layout,
) -> Result<(CudaStorage, Shape)> {
    check_f32(s_qkv, "qkv")?;
    check_f32(s_grad, "output gradient")?;
    check_f32(s_probs, "probabilities")?;
    let (b, t, h, hd) = dims.heads.of(l_qkv.shape())?;
    let d = h * hd;
    if l_grad.shape().dims() != [b, t, d] || l_probs.shape().dims() != [b, h, t, t] {
        return Err(candle_core::Error::Msg(format!(
            "causal_attention_train: backward got qkv {:?}, output gradient {:?}, probabilities {:?}",
            l_qkv.shape(),
            l_grad.shape(),
            l_probs.shape()
        )));
    }
    let stream = s_qkv.device.cuda_stream();
    let qkv = address(s_qkv, l_qkv, &stream)?;
    let grad = address(s_grad, l_grad, &stream)?;
    let p_ptr = address(s_probs, l_probs, &stream)?;
    let (dx, dx_ptr) = alloc(s_qkv, DType::F32, b * t * 3 * d)?;
    let shape = l_qkv.shape().clone();
    let (_ds_buf, ds_ptr) = alloc(s_qkv, DType::F32, b * h * t * t)?;
    let scale = 1.0 / (hd as f32).sqrt();
    let x = Operand::token_rows(qkv, t, 3 * d, hd);
    let (q, k, v) = (x, x.shifted(d), x.shifted(2 * d));
    let dxo = Operand::token_rows(dx_ptr, t, 3 * d, hd);
    let (dq, dk, dv) = (dxo, dxo.shifted(d), dxo.shifted(2 * d));
    let go = Operand::token_rows(grad, t, d, hd);
    let p = Operand::scores(p_ptr, t, h);
    let ds = Operand::scores(ds_ptr, t, h);
    let products = [
        // dPᵀ [t_k, t_q] = V dOᵀ.
        Product::new((true, false), (t, t, hd), 1.0, [v, go, ds]),
        // dVᵀ [hd, t_k] = dOᵀ P.
        Product::new((false, true), (hd, t, t), 1.0, [go, p, dv]),
        // dQᵀ [hd, t_q] = Kᵀ dSᵀ, scaled.
        Product::new((false, false), (hd, t, t), scale, [k, ds, dq]),
        // dKᵀ [hd, t_k] = Qᵀ dS, scaled.
        Product::new((false, true), (hd, t, t), scale, [q, ds, dk]),
    ];
    let gemms = Gemms::new(s_qkv, &products, b, h, dims.gemms)?;
    gemms.run(0)?;
    gemms.run(1)?;
    rows_kernel(
        s_qkv,
        "attn_train_softmax_bwd_f32",
        &[p_ptr, ds_ptr],
        t,
        b * h * t,
    )?;
    gemms.run(2)?;
    gemms.run(3)?;
    Ok((dx, shape))
}
